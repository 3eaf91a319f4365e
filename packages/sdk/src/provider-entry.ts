/**
 * @mesh/sdk/provider: the provider process around the harness. A provider's main is one call:
 *
 * ```ts
 * import { runProviderMain } from "@mesh/sdk/provider";
 * import { provider } from "./index.ts";
 * await runProviderMain(provider);
 * ```
 *
 * A provider author needs the first block only (docs/writing-a-provider.md names each); the adapter
 * itself is written against `@mesh/sdk`. The blocks after it are the mesh's own side, what the
 * agent, the controller and the CLI use to speak to a provider: not for authors, and free to change.
 */

// For a provider author: run the process (its main, or in a test), and its settings from the
// environment and flags.
export {
  ProviderStartError,
  runProviderMain,
  startProviderProcess,
  untilStopSignal,
  type ProviderProcess,
  type ProviderProcessOptions,
} from "./provider-process.ts";
export {
  ProviderSettingsError,
  resolveProviderSettings,
  type ProviderFlags,
  type ProviderSettings,
} from "./provider-settings.ts";

// The mesh's own side, from here on.
// The control socket the tools are asked on.
export {
  AnswerTooLargeError,
  BadControlRequestError,
  callControl,
  checkControlRequest,
  ControlAnswerError,
  ControlHungUpError,
  ControlSocketInUseError,
  ControlTimeoutError,
  ControlUnreachableError,
  MalformedAnswerError,
  NoProviderListeningError,
  READ_ONLY_TOOLS,
  serveControl,
  type ControlServer,
  type ControlTool,
  type ToolCallReply,
} from "./control-socket.ts";
export { passwordTag } from "./tools.ts";

// Metrics, and where the provider says it serves them.
export { ListenAddressError, ListenError, parseListenAddress } from "./metrics.ts";
export { METRICS_URL_MAX_LENGTH, metricsUrlOf, metricsUrlPath } from "./metrics-url.ts";

// The action journal the agent follows into the ledger.
export {
  ActionJournal,
  actionJournalPath,
  JournalLineError,
  MAX_JOURNAL_LINE_BYTES,
  parseJournalLine,
} from "./action-journal.ts";

// The files the agent writes for the provider, and how the harness reads them.
export { FileWatcher } from "./watcher.ts";

// The retirement rule's count and bound.
export { approvalReason, DEFAULT_RETIREMENT_LIMITS, type RetirementBound } from "./retirement.ts";

// Passwords out of URLs, logs and errors.
export {
  isServerUrl,
  maskDeep,
  maskUrls,
  redactingLogger,
  redactSecrets,
  redactUrl,
  secretsOfUrl,
  UNREADABLE_URL,
} from "./redact.ts";
