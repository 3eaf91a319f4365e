/**
 * @mesh/sdk/client: what a short-lived client of the mesh (the `mesh` command, a script) uses to ask
 * a provider's control socket and to show the answers, loading nothing else of the sdk: not the
 * harness, the provider process, the bus or the manifest parsers, so a command that only asks
 * starts quickly. Some are also on `@mesh/sdk` (an author's face) or `@mesh/sdk/provider`.
 *
 * ```ts
 * import { callControl, formatDuration, maskDeep } from "@mesh/sdk/client";
 * const status = maskDeep(await callControl("/run/mesh/postgres.sock", { tool: "status", args: [], who: "ops" }));
 * ```
 */

// A provider's control socket, from the asking side.
export {
  AnswerTooLargeError,
  BadControlRequestError,
  callControl,
  checkControlRequest,
  CONTROL_TOOLS,
  ControlAnswerError,
  ControlHungUpError,
  ControlTimeoutError,
  ControlUnreachableError,
  MalformedAnswerError,
  type ControlCallOptions,
  type ControlResults,
  type ControlTool,
} from "./control-socket.ts";
export { ToolError, type ToolErrorCode } from "./tools.ts";

// Words as people write them, and what may be shown of a URL.
export { formatDuration, InvalidDurationError, MAX_DURATION_MS, parseDuration } from "./duration.ts";
export { InvalidLoginError, isValidLogin, LOGIN_PATTERN } from "./login.ts";
export { maskDeep, maskUrls, redactSecrets, secretsOfUrl } from "./redact.ts";
