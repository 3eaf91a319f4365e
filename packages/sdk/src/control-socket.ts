// The tools of a running provider, offered over a Unix socket so a person can ask them from another
// shell (`mesh tool --control <path> status`). One JSON line in, one JSON line out. The socket is
// 0600: whoever may connect may delete consumers, so only the provider's own user may.

import { chmod, lstat, mkdtemp, rename, rm, stat, unlink } from "node:fs/promises";
import { type Server, type Socket, connect, createServer } from "node:net";
import { basename, dirname, join } from "node:path";
import type { AnswerFault, ToolAnswerInputs, ToolAnswers } from "@mesh/manifest/tool-answers";
import {
  isToolName,
  READ_ONLY_TOOL_NAMES,
  TOOL_NAMES,
  toolArity,
  toolDefinition,
  toolUsage,
  type ToolName,
} from "@mesh/manifest/tools";
import { jsonBytes } from "./cached-json.ts";
import type { Logger } from "./collaborators.ts";
import { writingAnswer } from "./concurrency.ts";
import { isValidLogin } from "./login.ts";
import type { ProvisionerTools, ToolErrorCode } from "./tools.ts";
import { ToolError } from "./tools.ts";

/** The tools a control socket answers, as a request names them (the table in @mesh/manifest). */
export type ControlTool = ToolName;

/** Every tool a control socket answers, in the order help texts list them. */
export const CONTROL_TOOLS: readonly ControlTool[] = TOOL_NAMES;

/**
 * The tools that only read: a page refreshing itself may ask them without leaving an entry in the
 * module's ledger each time. Every other call is always recorded.
 */
export const READ_ONLY_TOOLS: ReadonlySet<ControlTool> = READ_ONLY_TOOL_NAMES;

/** One request line: the tool, its arguments, and who asks (said in the action log). */
export interface ControlRequest {
  readonly tool: ControlTool;
  readonly args?: readonly string[];
  readonly who?: string;
}

/**
 * What each tool answers on success, as `callControl` hands it back: checked against the tool's
 * schema in @mesh/manifest, which the answers the socket writes are checked against too.
 */
export type ControlResults = ToolAnswers;

/** One response line. */
export type ControlResponse =
  | { readonly ok: true; readonly result: unknown }
  | { readonly ok: false; readonly error: { readonly code: ToolErrorCode; readonly message: string } };

/**
 * The answer to a tool call through the mesh, from a node's agent and from the controller's relay
 * alike. `ledger`, when present, says the call's ledger entry was not written and why: the tool
 * ran (or refused) all the same. `ledgerWaits`: the entry is not written yet, but its node keeps it
 * and appends it once the module's ledger takes it (no one else is to record the call).
 */
export type ToolCallReply =
  | { readonly ok: true; readonly answer: unknown; readonly ledger?: string; readonly ledgerWaits?: true }
  | {
      readonly ok: false;
      readonly error: string;
      readonly code?: string;
      readonly ledger?: string;
      readonly ledgerWaits?: true;
    };

/** The largest request line a control socket reads; a longer one is answered `bad-request`. */
export const MAX_REQUEST_BYTES = 64 * 1024;

/** The longest path a Unix socket can be bound to on Linux (`sun_path` less its terminating NUL). */
export const MAX_SOCKET_PATH_BYTES = 107;

const MAX_MESSAGE_CHARS = 2000;
const ERROR_CODE = /^[a-z][a-z0-9-]{0,63}$/;
const WHO_PATTERN = /^[^\p{Cc}]{1,128}$/u;
const PROBE_TIMEOUT_MS = 2000;

/** A serving control socket. */
export interface ControlServer {
  /** Where it listens. */
  readonly path: string;
  /** Stops answering, ends open connections and removes the socket file (when it is still ours). */
  close(): Promise<void>;
}

/** Another provider already answers on the control socket path. */
export class ControlSocketInUseError extends Error {
  override name = "ControlSocketInUseError";
  constructor(readonly path: string) {
    super(
      `another provider already answers on the control socket ${path}: stop it first, or give this one ` +
        `another path (--control or MESH_CONTROL)`,
    );
  }
}

/** The control socket path cannot be used (missing directory, too long, not a socket, no access). */
export class ControlSocketPathError extends Error {
  override name = "ControlSocketPathError";
  constructor(
    readonly path: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`cannot serve the control socket at ${path}: ${why}`, options);
  }
}

/** Nothing at the path answered as a provider: it timed out, hung up, was not allowed, or spoke nonsense. */
export class ControlUnreachableError extends Error {
  override name = "ControlUnreachableError";
  constructor(
    readonly path: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** No provider listens at the path: no socket file, or one nobody answers on. */
export class NoProviderListeningError extends ControlUnreachableError {
  override name = "NoProviderListeningError";
  constructor(path: string, options?: { cause?: unknown }) {
    super(
      path,
      `no provider is listening at ${path}: start one with ` +
        `\`mesh provider <postgres|redis|mariadb> --control ${path} --receives FILE --admin-url URL\`, ` +
        `or pass the control socket path a running provider printed at start`,
      options,
    );
  }
}

/**
 * The provider answered, but not with an answer the asker may use: base of the four ways an answer
 * goes wrong. `fault` says which; an agent counts each against the module (it "misbehaves").
 */
export class ControlAnswerError extends ControlUnreachableError {
  override name = "ControlAnswerError";
  constructor(
    path: string,
    readonly tool: ControlTool,
    readonly fault: AnswerFault,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(path, message, options);
  }
}

/** The answer is not one line of UTF-8 JSON in the shape the tool answers. */
export class MalformedAnswerError extends ControlAnswerError {
  override name = "MalformedAnswerError";
  constructor(
    path: string,
    tool: ControlTool,
    /** What is wrong, in words that quote nothing of the answer. */
    readonly problem: string,
  ) {
    super(
      path,
      tool,
      "malformed",
      `the answer to ${tool} from ${path} is malformed: ${problem}; is it a mesh provider of this version?`,
    );
  }
}

/** The answer grew past the most the asker reads. */
export class AnswerTooLargeError extends ControlAnswerError {
  override name = "AnswerTooLargeError";
  constructor(
    path: string,
    tool: ControlTool,
    readonly maxBytes: number,
  ) {
    super(
      path,
      tool,
      "too-large",
      `the answer to ${tool} from ${path} is larger than the ${maxBytes} bytes read of it; nothing of it was used`,
    );
  }
}

/** No whole answer came within the time the asker waits. */
export class ControlTimeoutError extends ControlAnswerError {
  override name = "ControlTimeoutError";
  constructor(
    path: string,
    tool: ControlTool,
    readonly timeoutMs: number,
  ) {
    super(path, tool, "slow", `the provider at ${path} did not answer ${tool} within ${timeoutMs} ms`);
  }
}

/** The provider hung up (or half-closed its end) before a whole answer line. */
export class ControlHungUpError extends ControlAnswerError {
  override name = "ControlHungUpError";
  constructor(
    path: string,
    tool: ControlTool,
    /** How many bytes of an answer came before it hung up. */
    readonly received: number,
    options?: { cause?: unknown },
  ) {
    super(
      path,
      tool,
      "hung-up",
      received === 0
        ? `the provider at ${path} hung up before answering ${tool}; its log may say why`
        : `the provider at ${path} hung up ${received} bytes into its answer to ${tool}, before the end of it`,
      options,
    );
  }
}

/**
 * Serves `tools` on a Unix socket at `path` until `close()`. The socket is mode 0600 from the moment
 * it appears at `path`: it is bound inside a fresh 0700 directory beside it, made 0600, then renamed
 * into place. A stale socket there (nobody answering) is replaced.
 * @throws ControlSocketInUseError when another provider answers at `path`.
 * @throws ControlSocketPathError when the path is too long, is something other than a socket, or its
 *   directory is missing or not writable.
 */
export async function serveControl(
  tools: ProvisionerTools,
  path: string,
  logger?: Logger,
): Promise<ControlServer> {
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
    throw new ControlSocketPathError(
      path,
      `the path is ${Buffer.byteLength(path)} bytes and a Unix socket path can be at most ` +
        `${MAX_SOCKET_PATH_BYTES}; choose a shorter one`,
    );
  }
  await refuseLiveOrForeign(path);

  const connections = new Set<Socket>();
  // Half-open, so an asker that sends its request and ends its side still gets the answer.
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    connections.add(socket);
    socket.on("close", () => connections.delete(socket));
    answerConnection(socket, tools, logger);
  });
  server.on("error", (err) => logger?.error(`control socket ${path}: ${err.message}`));

  const privateDir = await makePrivateDir(path);
  const bindPath = join(privateDir, "s");
  try {
    if (Buffer.byteLength(bindPath) <= MAX_SOCKET_PATH_BYTES) {
      await listen(server, bindPath);
      await chmod(bindPath, 0o600);
      // Atomic: a stale socket at `path` is replaced without a moment where neither exists.
      await rename(bindPath, path);
    } else {
      // The private directory's name would make the path too long: bind in place, with a umask that
      // makes the socket 0600 as it is created.
      await unlink(path).catch(ignoreMissing);
      const previous = process.umask(0o177);
      try {
        await listen(server, path);
      } finally {
        process.umask(previous);
      }
      await chmod(path, 0o600);
    }
  } catch (err) {
    server.close();
    await rm(privateDir, { recursive: true, force: true });
    throw new ControlSocketPathError(path, describeFsError(err), { cause: err });
  }
  await rm(privateDir, { recursive: true, force: true });
  const { ino, dev } = await stat(path);

  let closing: Promise<void> | undefined;
  return {
    path,
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const socket of connections) socket.destroy();
        await closed;
        // Only our own socket: another provider may have replaced it since.
        const now = await stat(path).catch(() => undefined);
        if (now !== undefined && now.ino === ino && now.dev === dev) await unlink(path).catch(ignoreMissing);
      })();
      return closing;
    },
  };
}

async function refuseLiveOrForeign(path: string): Promise<void> {
  let found;
  try {
    found = await lstat(path);
  } catch (err) {
    if (isCode(err, "ENOENT")) return;
    throw new ControlSocketPathError(path, describeFsError(err), { cause: err });
  }
  if (!found.isSocket()) {
    throw new ControlSocketPathError(
      path,
      "something other than a socket is there and it is not replaced; remove it or choose another path",
    );
  }
  const answer = await probe(path);
  if (answer === "live") throw new ControlSocketInUseError(path);
  if (answer === "forbidden") {
    throw new ControlSocketPathError(
      path,
      "a socket there belongs to another user (permission denied); choose another path or remove it",
    );
  }
}

function probe(path: string): Promise<"live" | "stale" | "forbidden"> {
  return new Promise((resolve) => {
    const socket = connect(path);
    const done = (answer: "live" | "stale" | "forbidden"): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    // Something that accepts but is slow to is still something: do not take its path.
    const timer = setTimeout(() => done("live"), PROBE_TIMEOUT_MS);
    socket.on("connect", () => done("live"));
    socket.on("error", (err) => done(isCode(err, "EACCES") || isCode(err, "EPERM") ? "forbidden" : "stale"));
  });
}

async function makePrivateDir(path: string): Promise<string> {
  try {
    // mkdtemp makes the directory 0700.
    return await mkdtemp(join(dirname(path), `.${basename(path).slice(0, 16)}.`));
  } catch (err) {
    throw new ControlSocketPathError(path, describeFsError(err), { cause: err });
  }
}

function listen(server: Server, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const fail = (err: Error): void => reject(err);
    server.once("error", fail);
    server.listen(path, () => {
      server.off("error", fail);
      resolve();
    });
  });
}

function answerConnection(socket: Socket, tools: ProvisionerTools, logger: Logger | undefined): void {
  let buffered = Buffer.alloc(0);
  let queue = Promise.resolve();
  let refused = false;
  socket.on("error", () => {
    // The asker hung up; nothing to answer.
  });
  socket.on("end", () => {
    queue = queue.then(() => {
      socket.end();
    });
  });
  socket.on("data", (chunk: Buffer) => {
    if (refused) return;
    buffered = Buffer.concat([buffered, chunk]);
    let newline: number;
    while ((newline = buffered.indexOf(0x0a)) !== -1) {
      const line = buffered.subarray(0, newline);
      buffered = buffered.subarray(newline + 1);
      if (line.length > MAX_REQUEST_BYTES) {
        refuseOversized(socket, logger);
        refused = true;
        return;
      }
      const text = line.toString("utf8");
      if (text.trim() === "") continue;
      queue = queue.then(async () => {
        const response = await answer(text, tools, logger);
        if (socket.destroyed) return;
        writeResponse(socket, response);
        // Most of a big answer waits in the socket until the kernel takes it, one buffer per turn.
        if (socket.writableLength > 0) {
          const written = writingAnswer();
          const done = (): void => {
            socket.off("drain", done);
            socket.off("close", done);
            written();
          };
          socket.on("drain", done);
          socket.on("close", done);
        }
      });
    }
    if (buffered.length > MAX_REQUEST_BYTES) {
      refuseOversized(socket, logger);
      refused = true;
    }
  });
}

function refuseOversized(socket: Socket, logger: Logger | undefined): void {
  const message = `request larger than ${MAX_REQUEST_BYTES} bytes; a request is one JSON line`;
  logger?.warn(`control socket: refused a request: ${message}`);
  socket.end(`${JSON.stringify(failure("bad-request", message))}\n`);
}

function failure(code: ToolErrorCode, message: string): ControlResponse {
  return { ok: false, error: { code, message: clip(message) } };
}

function clip(message: string): string {
  return message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS)}…` : message;
}

/** A tool request that is not one a control socket answers; the socket answers it `bad-request`. */
export class BadControlRequestError extends Error {
  override name = "BadControlRequestError";
}

function parseRequest(text: string): { tool: ControlTool; args: string[]; who: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new BadControlRequestError(
      'a request is one line of JSON like {"tool":"status","args":[],"who":"alice"}',
    );
  }
  return checkControlRequest(raw);
}

/**
 * The tool, arguments and asker of a request already read from JSON, checked exactly as a control
 * socket checks them (known tool, its number of arguments, a valid login for `cleanup delete`, a
 * printable `who`), so whoever relays a request can refuse a bad one before it travels.
 * @throws BadControlRequestError naming what is wrong and what a request looks like.
 */
export function checkControlRequest(raw: unknown): { tool: ControlTool; args: string[]; who: string } {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new BadControlRequestError(
      'a request is a JSON object like {"tool":"status","args":[],"who":"alice"}',
    );
  }
  const { tool, args = [], who = "unknown" } = raw as Record<string, unknown>;
  if (!isToolName(tool)) {
    throw new BadControlRequestError(
      `unknown tool ${JSON.stringify(tool)}: the tools are ${CONTROL_TOOLS.join(", ")}`,
    );
  }
  if (!Array.isArray(args) || !args.every((a): a is string => typeof a === "string")) {
    throw new BadControlRequestError(`"args" must be a list of strings`);
  }
  if (typeof who !== "string" || !WHO_PATTERN.test(who)) {
    throw new BadControlRequestError(`"who" must be a name of 1 to 128 printable characters`);
  }
  const { least, most } = toolArity(tool);
  if (args.length < least || args.length > most) {
    throw new BadControlRequestError(
      `${tool} takes ${least === most ? least : `${least} to ${most}`} argument(s): ${toolUsage(tool)}`,
    );
  }
  const badLogin = toolDefinition(tool).args.findIndex(
    (a, i) => a.name === "login" && !isValidLogin(args[i]),
  );
  if (badLogin !== -1) {
    throw new BadControlRequestError(
      `${JSON.stringify(args[badLogin])} is not a login: a login is 1–32 characters of a-z, 0-9 and _, starting with a letter`,
    );
  }
  return { tool, args, who };
}

/**
 * Writes one answer line. A snapshot's JSON is made once (by the harness, or at its first request),
 * and so are its bytes: copying and encoding 15 MB for each request would hold the event loop.
 */
function writeResponse(socket: Socket, response: ControlResponse): void {
  if (!response.ok) {
    socket.write(`${JSON.stringify(response)}\n`);
    return;
  }
  socket.write('{"ok":true,"result":');
  socket.write(jsonBytes(response.result));
  socket.write("}\n");
}

async function answer(
  text: string,
  tools: ProvisionerTools,
  logger: Logger | undefined,
): Promise<ControlResponse> {
  let request;
  try {
    request = parseRequest(text);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    logger?.warn(`control socket: refused a bad request: ${message}`);
    return failure("bad-request", message);
  }
  const { tool, args, who } = request;
  const changes = !READ_ONLY_TOOLS.has(tool);
  if (changes) logger?.info(`control socket: ${who} asks ${[tool, ...args].join(" ")}`);
  try {
    const result = await run(tools, tool, args, who);
    return { ok: true, result };
  } catch (err) {
    if (err instanceof ToolError) {
      if (changes) logger?.info(`control socket: ${tool} refused (${err.code}): ${err.message}`);
      return failure(err.code, err.message);
    }
    const message = err instanceof Error ? err.message : String(err);
    logger?.error(`control socket: ${tool} failed: ${message}`);
    return failure("backend-failed", message);
  }
}

async function run(
  tools: ProvisionerTools,
  tool: ControlTool,
  args: readonly string[],
  who: string,
): Promise<unknown> {
  switch (tool) {
    case "status":
      return answerOf("status", tools.status());
    case "retire list":
      return answerOf("retire list", tools.retireList());
    case "retire approve":
      return answerOf("retire approve", await tools.retireApprove(args[0], who));
    case "cleanup list":
      return answerOf("cleanup list", tools.cleanupList());
    case "cleanup delete":
      return answerOf("cleanup delete", await tools.cleanupDelete(args[0] ?? "", who));
  }
}

// Where the answers are written, their types are checked against the schemas every reader parses
// them with (@mesh/manifest/tool-answers): the two ends cannot drift apart unseen.
function answerOf<T extends ControlTool>(_tool: T, answer: ToolAnswerInputs[T]): ToolAnswerInputs[T] {
  return answer;
}

/**
 * How long `callControl` waits for an answer to a read-only tool unless told otherwise; a tool that
 * changes something gets its own bound from the tool table (`toolDefinition(tool).answer`).
 */
export const DEFAULT_CONTROL_TIMEOUT_MS = 5_000;

/** The largest answer `callControl` reads unless told otherwise: 1 MiB. */
export const DEFAULT_CONTROL_ANSWER_BYTES = 1024 * 1024;

/** How long `callControl` waits and how much it reads; each defaults to the tool's own bound. */
export interface ControlCallOptions {
  /** How long the whole answer may take, in milliseconds. */
  readonly timeoutMs?: number;
  /** The largest answer read, in bytes; a longer one is refused unread. */
  readonly maxBytes?: number;
}

/**
 * Asks the provider serving at `path` one tool and returns what it answers, checked: one line of
 * UTF-8 JSON, no larger than `maxBytes`, whole within `timeoutMs` (both by default the tool's
 * bounds: 1 MiB, and 5 s for a read), whose result has the shape the tool answers (the schemas of
 * @mesh/manifest/tool-answers, loaded only when an answer comes). Never hangs and never hands back
 * what it did not check.
 * @throws ToolError with the provider's code and message when it refused.
 * @throws NoProviderListeningError when no socket is there or nobody answers on it.
 * @throws MalformedAnswerError, AnswerTooLargeError, ControlTimeoutError or ControlHungUpError (each a
 *   ControlAnswerError, naming its `fault`) when the answer cannot be used.
 * @throws ControlUnreachableError when the socket may not be opened or cannot be reached.
 * @throws BadControlRequestError when `request.tool` is not a tool.
 */
export function callControl<T extends ControlTool>(
  path: string,
  request: ControlRequest & { readonly tool: T },
  options: ControlCallOptions = {},
): Promise<ControlResults[T]> {
  const { tool } = request;
  if (!isToolName(tool)) {
    return Promise.reject(
      new BadControlRequestError(
        `unknown tool ${JSON.stringify(tool)}: the tools are ${CONTROL_TOOLS.join(", ")}`,
      ),
    );
  }
  const bounds = toolDefinition(tool).answer;
  const timeoutMs = options.timeoutMs ?? bounds.timeoutMs;
  const maxBytes = options.maxBytes ?? bounds.bytes;
  return readAnswerLine(path, request, timeoutMs, maxBytes).then((line) => checkAnswer(path, tool, line));
}

// The first line the provider writes, as bytes; every way of not getting one is a named error.
function readAnswerLine(
  path: string,
  request: ControlRequest,
  timeoutMs: number,
  maxBytes: number,
): Promise<Buffer> {
  const { tool } = request;
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    const chunks: Buffer[] = [];
    let received = 0;
    let connected = false;
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      fn();
    };
    const fail = (err: Error): void => settle(() => reject(err));
    const timer = setTimeout(() => fail(new ControlTimeoutError(path, tool, timeoutMs)), timeoutMs);
    socket.on("connect", () => {
      connected = true;
      const line = { tool, args: request.args ?? [], who: request.who ?? "unknown" };
      socket.write(`${JSON.stringify(line)}\n`);
    });
    socket.on("error", (err) => {
      if (isCode(err, "ENOENT") || isCode(err, "ECONNREFUSED") || isCode(err, "ENOTSOCK")) {
        fail(new NoProviderListeningError(path, { cause: err }));
      } else if (isCode(err, "EACCES") || isCode(err, "EPERM")) {
        fail(
          new ControlUnreachableError(
            path,
            `may not open the control socket ${path} (permission denied): it is 0600, so ask as the user the provider runs as`,
            { cause: err },
          ),
        );
      } else if (connected && (isCode(err, "ECONNRESET") || isCode(err, "EPIPE"))) {
        fail(new ControlHungUpError(path, tool, received, { cause: err }));
      } else {
        fail(
          new ControlUnreachableError(path, `cannot reach the provider at ${path}: ${err.message}`, {
            cause: err,
          }),
        );
      }
    });
    // Its end, half-closed or whole, before a newline: what came is not an answer.
    socket.on("end", () => fail(new ControlHungUpError(path, tool, received)));
    socket.on("close", () => fail(new ControlHungUpError(path, tool, received)));
    socket.on("data", (chunk: Buffer) => {
      if (settled) return;
      // Kept as chunks and joined once: a status of 100,000 consumers is many megabytes, and joining
      // at every chunk would copy it hundreds of times.
      const newline = chunk.indexOf(0x0a);
      const part = newline === -1 ? chunk : chunk.subarray(0, newline);
      received += part.length;
      if (received > maxBytes) {
        fail(new AnswerTooLargeError(path, tool, maxBytes));
        return;
      }
      chunks.push(part);
      if (newline !== -1) settle(() => resolve(Buffer.concat(chunks, received)));
    });
  });
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

// One answer line, checked: the envelope here, the result against the tool's schema.
async function checkAnswer<T extends ControlTool>(
  path: string,
  tool: T,
  line: Buffer,
): Promise<ControlResults[T]> {
  const malformed = (problem: string) => new MalformedAnswerError(path, tool, problem);
  let text: string;
  try {
    text = UTF8.decode(line);
  } catch {
    throw malformed("it is not UTF-8");
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw malformed("it is not JSON");
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw malformed('it is not a JSON object like {"ok":true,"result":…}');
  }
  const r = raw as Record<string, unknown>;
  if (r["ok"] === false) {
    const error = r["error"];
    const e = (typeof error === "object" && error !== null ? error : {}) as Record<string, unknown>;
    const code = e["code"];
    const message = e["message"];
    if (typeof code !== "string" || !ERROR_CODE.test(code) || typeof message !== "string") {
      throw malformed('a refusal must say {"code":"a-code","message":"…"}');
    }
    throw new ToolError(code as ToolErrorCode, clip(message));
  }
  if (r["ok"] !== true || !Object.hasOwn(r, "result")) {
    throw malformed('"ok" must be true with a "result", or false with an "error"');
  }
  const { parseToolAnswer } = await import("@mesh/manifest/tool-answers");
  const parsed = parseToolAnswer(tool, r["result"]);
  if (!parsed.ok) throw malformed(parsed.problem);
  return parsed.answer;
}

function isCode(err: unknown, code: string): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === code;
}

function ignoreMissing(err: unknown): void {
  if (!isCode(err, "ENOENT")) throw err;
}

function describeFsError(err: unknown): string {
  if (isCode(err, "ENOENT"))
    return "its directory does not exist; create it (0700 is a good mode) or choose another path";
  if (isCode(err, "EACCES") || isCode(err, "EPERM")) {
    return "permission denied in its directory; choose a directory this user may write to";
  }
  if (isCode(err, "EADDRINUSE")) return "another socket took the path meanwhile; try again";
  return err instanceof Error ? err.message : String(err);
}
