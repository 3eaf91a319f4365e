/**
 * @mesh/sdk/provider: what the provider process needs around the harness, and what the agent, the
 * controller and the CLI use to speak to it. A provider's main is one call:
 *
 * ```ts
 * import { runProviderMain } from "@mesh/sdk/provider";
 * import provider from "./index.ts";
 * await runProviderMain(provider);
 * ```
 *
 * An adapter or module author needs only `@mesh/sdk`.
 */

// The process: settings from the environment and flags, start, stop.
export {
  ProviderStartError,
  runProviderMain,
  startProviderProcess,
  untilStopSignal,
  type ProviderProcess,
  type ProviderProcessOptions,
} from "./provider-process.ts";
export {
  busEnvOf,
  ProviderSettingsError,
  resolveProviderSettings,
  type ProviderFlags,
  type ProviderSettings,
} from "./provider-settings.ts";
export { BusAnnouncer, type BusAnnouncerOptions, type StandingsBus } from "./bus-announcer.ts";
export { DEFAULT_EVERY_MS, DEFAULT_VERIFY_EVERY_MS, PROVISIONER_DEFAULTS } from "./defaults.ts";

// The control socket the tools are asked on.
export {
  AnswerTooLargeError,
  BadControlRequestError,
  callControl,
  checkControlRequest,
  CONTROL_TOOLS,
  ControlAnswerError,
  ControlHungUpError,
  ControlSocketInUseError,
  ControlSocketPathError,
  ControlTimeoutError,
  ControlUnreachableError,
  DEFAULT_CONTROL_ANSWER_BYTES,
  DEFAULT_CONTROL_TIMEOUT_MS,
  MalformedAnswerError,
  MAX_REQUEST_BYTES,
  MAX_SOCKET_PATH_BYTES,
  NoProviderListeningError,
  READ_ONLY_TOOLS,
  serveControl,
  type ControlCallOptions,
  type ControlRequest,
  type ControlResponse,
  type ControlResults,
  type ControlServer,
  type ControlTool,
  type ToolCallReply,
} from "./control-socket.ts";
export { passwordTag } from "./tools.ts";

// Metrics, and where the provider says it serves them.
export {
  isLoopbackHost,
  ListenAddressError,
  ListenError,
  parseListenAddress,
  ProviderMetrics,
  serveMetrics,
  silentObserver,
  type CreateKind,
  type FailedOperation,
  type ListenAddress,
  type MetricsServer,
  type ProviderMetricsOptions,
  type VerifyResult,
} from "./metrics.ts";
export {
  METRICS_URL_MAX_LENGTH,
  metricsUrlOf,
  metricsUrlPath,
  removeMetricsUrl,
  writeMetricsUrl,
} from "./metrics-url.ts";

// The action journal the agent follows into the ledger.
export {
  ACTION_KINDS,
  ActionJournal,
  actionJournalPath,
  JournalLineError,
  MAX_JOURNAL_LINE_BYTES,
  MAX_JOURNAL_WHY_CHARS,
  parseJournalLine,
} from "./action-journal.ts";

// The files the agent writes for the provider, and how the harness reads them.
export {
  MAX_VALUE_BYTES,
  MAX_VALUE_DEPTH,
  parseContributions,
  readContributions,
  type Contribution,
  type ContributionsRead,
} from "./contributions-file.ts";
export { MAX_SECRET_BYTES, readSecret, SecretsDirectory, SecretUnreadableError } from "./secret-file.ts";
export { FileWatcher } from "./watcher.ts";

// The retirement rule's count and bound.
export {
  approvalReason,
  DEFAULT_RETIREMENT_LIMITS,
  needsApproval,
  RetirementCounter,
  setId,
  type RetirementBound,
  type RetirementStep,
  type WaitingSet,
} from "./retirement.ts";

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
export { classOf } from "./scrub.ts";
