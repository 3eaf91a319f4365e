// Asking the running controller from a person's shell (`mesh status`, `mesh rotate`, `mesh tool`):
// where the bus is and the operator's credentials come from the mesh's state directory, written by
// `mesh up` (or `--bus`); one request, its JSON answer, through whichever server reaches a
// controller.
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { CONTROLLERS_SUBJECT, inboxPrefix, OPERATOR_IDENTITY } from "@mesh/bus/subjects";
import type { Command } from "commander";
import { CliExit, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";
import { paintFor } from "./colour.ts";
import { withProgress } from "./progress.ts";

/** Where the embedded mesh keeps its state: --state, else $MESH_STATE_DIR, else ./.mesh-state. */
export function stateDirOf(flag: string | undefined, io: CliIo): string {
  return resolve(flag ?? io.env["MESH_STATE_DIR"] ?? ".mesh-state");
}

/** Where the controller's HTTP server answers, as `mesh up` and `mesh controller` write it at start. */
export interface ControllerHttpRecord {
  /** `http://HOST:PORT`, as it listens. */
  readonly url: string;
  /** The operator token's file (its path: the token is never written anywhere else). */
  readonly operatorTokenFile: string;
}

/** `<state>/http.json`: where the running controller's HTTP server answers, and its token file. */
export function controllerHttpPath(state: string): string {
  return join(state, "http.json");
}

/**
 * The controller's HTTP server of the mesh whose state is in `state`, as its last start wrote it.
 * @throws CliExit (EXIT_UNREACHABLE) when no mesh has run there (or one older than the file).
 */
export async function readControllerHttp(state: string): Promise<ControllerHttpRecord> {
  const path = controllerHttpPath(state);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliExit(
      code === "EACCES" ? EXIT_USAGE : EXIT_UNREACHABLE,
      code === "EACCES"
        ? `cannot read ${path}: run this as the user that runs mesh up (root)`
        : `no mesh has run with state in ${state} (no ${path}); start one with \`mesh up\`, or give --state`,
    );
  }
  try {
    const record = JSON.parse(text) as Partial<ControllerHttpRecord>;
    if (typeof record.url === "string" && typeof record.operatorTokenFile === "string")
      return { url: record.url, operatorTokenFile: record.operatorTokenFile };
  } catch {
    // Said below.
  }
  throw new CliExit(
    EXIT_UNREACHABLE,
    `${path} does not say where the controller answers: restart mesh up, which writes it again`,
  );
}

/**
 * `--bus URL[,URL…]` (the flag may also be repeated) as a list of URLs, or undefined without it.
 * @throws CliExit (usage) for a URL that is not nats:// or tls://.
 */
export function busOf(values: readonly string[] | string | undefined): string[] | undefined {
  if (values === undefined) return undefined;
  const urls = (typeof values === "string" ? [values] : values)
    .flatMap((v) => v.split(","))
    .map((v) => v.trim())
    .filter((v) => v !== "");
  const bad = urls.find((u) => !/^(nats|tls):\/\/[^\s/]+$/.test(u));
  if (urls.length === 0 || bad !== undefined)
    throw new CliExit(
      EXIT_USAGE,
      `--bus ${JSON.stringify(bad ?? "")} is not a bus URL: give nats://HOST:PORT (or tls://), comma-separated`,
    );
  return urls;
}

/** `--bus` (each use of the flag, each maybe comma-separated) and `--bus-ca`, as Commander collects them. */
export interface BusFlags {
  bus?: string[];
  busCa?: string;
}

/** `--bus-ca FILE`'s flag and help, for every command that connects to the bus. */
export const BUS_CA_OPTION = [
  "--bus-ca <file>",
  "the mesh's bus CA (ca.pem in mesh bus-config's --tls-dir) when the bus uses TLS (tls:// URLs)",
] as const;

/** `--state DIR`'s flag and help, for every command that reads the mesh's state directory. */
export const STATE_OPTION = [
  "--state <dir>",
  "the mesh's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)",
] as const;

/**
 * Adds `--state DIR`, `--bus URL[,URL…]` and `--bus-ca FILE` to a command that asks the controller:
 * where the operator's credential and the bus's servers are, servers to ask first, and the CA the
 * bus is trusted by. One helper for every such command, so each finds the controller the same way.
 */
export function withAskFlags(command: Command): Command {
  return command
    .option(...STATE_OPTION)
    .option(
      "--bus <url,...>",
      "bus URLs to ask through first, before the ones the state directory names (e.g. a server this machine reaches)",
      (value: string, before: string[] | undefined) => [...(before ?? []), value],
    )
    .option(...BUS_CA_OPTION);
}

/**
 * The `AskOptions` part that `--bus` and `--bus-ca` set.
 * @throws CliExit (usage) for a URL that is not nats:// or tls://.
 */
export function busOverride(flags: BusFlags): { servers?: readonly string[]; caFile?: string } {
  const servers = busOf(flags.bus);
  return {
    ...(servers === undefined ? {} : { servers }),
    ...(flags.busCa === undefined ? {} : { caFile: resolve(flags.busCa) }),
  };
}

/**
 * The bus CA in `file` (`--bus-ca`), as PEM text, or undefined without the flag.
 * @throws CliExit (usage) when the file cannot be read or holds no PEM certificate.
 */
export async function busCaOf(file: string | undefined): Promise<string | undefined> {
  if (file === undefined) return undefined;
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new CliExit(
      EXIT_USAGE,
      `--bus-ca: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
  if (!text.includes("-----BEGIN CERTIFICATE-----"))
    throw new CliExit(
      EXIT_USAGE,
      `--bus-ca: ${file} holds no PEM certificate: give the ca.pem that mesh bus-config made in its --tls-dir`,
    );
  return text;
}

/** How to ask. */
export interface AskOptions {
  /** How long to wait for the request to be taken, and then for each part of the answer (default 30 s). */
  readonly timeoutMs?: number;
  /** Names the connection in the server's logs (`mesh status`). */
  readonly name?: string;
  /** What to say when the answer does not come in time (default: the bus's own words). */
  readonly timedOut?: string;
  /** Where to say, on a terminal, that the answer is awaited when it takes more than a second. */
  readonly io?: CliIo;
  /** What is awaited, for that line (default: "waiting for the mesh in <state>"). */
  readonly waiting?: string;
  /** The bus's URLs, in place of `<state>/bus.json`'s (`--bus`). */
  readonly servers?: readonly string[];
  /** The bus CA's file, in place of the one `<state>/bus.json` keeps (`--bus-ca`). */
  readonly caFile?: string;
}

/** An answer, with every controller's word on who leads (`askControllers`). */
export interface ControllersAnswer<T> {
  readonly answer: T;
  /** What each controller that answered within `CONTROLLERS_WITHIN_MS` said of itself and the leader. */
  readonly controllers: readonly ControllerSeen[];
}

/** One controller's word on itself and on who leads, as it answers on `CONTROLLERS_SUBJECT`. */
export interface ControllerSeen {
  readonly self: string;
  readonly leading: boolean;
  readonly leader: string | null;
  readonly term: number | null;
}

/** How long `mesh status` listens for the controllers' words on who leads, beside its answer. */
export const CONTROLLERS_WITHIN_MS = 500;

/**
 * Sends `body` on `subject` to the controller of the mesh whose state is in `state`, with the
 * operator's credentials (`<state>/operator.creds`, the bus's address and CA from `<state>/bus.json`
 * unless `options.servers` and `options.caFile` name them), and returns its JSON answer. The
 * servers are asked one at a time: one through which no controller takes the request within 2 s is
 * left for the next (then for those the cluster names), and that is said on standard error.
 * @throws CliExit (EXIT_UNREACHABLE) when no mesh ran there, the bus refuses or does not answer, or
 * the controller does not answer in time.
 */
export async function askController<T>(
  state: string,
  subject: string,
  body: string,
  options: AskOptions = {},
): Promise<T> {
  return (await ask<T>(state, subject, body, options, false)).answer;
}

/**
 * As `askController`, and also hears every controller (leading or standing by) say who it is and
 * who leads, for `mesh status`.
 * @throws as `askController` does.
 */
export function askControllers<T>(
  state: string,
  subject: string,
  body: string,
  options: AskOptions = {},
): Promise<ControllersAnswer<T>> {
  return ask<T>(state, subject, body, options, true);
}

function ask<T>(
  state: string,
  subject: string,
  body: string,
  options: AskOptions,
  controllers: boolean,
): Promise<ControllersAnswer<T>> {
  const io = options.io;
  if (io === undefined) return askOnce<T>(state, subject, body, options, controllers, () => {});
  return withProgress(io, options.waiting ?? `waiting for the mesh in ${state}`, (say) =>
    askOnce<T>(state, subject, body, options, controllers, say),
  );
}

async function askOnce<T>(
  state: string,
  subject: string,
  body: string,
  options: AskOptions,
  withControllers: boolean,
  say: (line: string) => void,
): Promise<ControllersAnswer<T>> {
  let servers: string[];
  let creds: Uint8Array;
  let ca = await busCaOf(options.caFile);
  try {
    creds = await readFile(join(state, "operator.creds"));
    // With --bus, bus.json is read only for its CA, and may be missing (a state copied without it).
    const bus = await readFile(join(state, "bus.json"), "utf8").then(
      (text) => JSON.parse(text) as { servers: string[]; ca?: string },
      (err: unknown) => {
        if (options.servers !== undefined) return undefined;
        throw err;
      },
    );
    // --bus first; the state's servers after them, as more to try when those do not answer.
    servers = [...new Set([...(options.servers ?? []), ...(bus?.servers ?? [])])];
    ca ??= bus?.ca;
  } catch (err) {
    if (err instanceof CliExit) throw err;
    throw new CliExit(EXIT_UNREACHABLE, `no mesh has run with state in ${state}; start one with \`mesh up\``);
  }
  // Loaded here, not at the top, and once there is a mesh to ask: only the commands that ask it pay
  // for the NATS client, and they load nothing else of the bus (see @mesh/bus/connect).
  const { askThroughServers, ASK_RECEIPT_MS } = await import("@mesh/bus/connect");
  const timeoutMs = options.timeoutMs ?? 30_000;
  const note = options.io !== undefined ? paintFor(options.io, "err").yellow("note:") : "note:";
  let asked;
  try {
    asked = await askThroughServers({
      servers,
      creds,
      name: options.name ?? "mesh",
      inboxPrefix: inboxPrefix(OPERATOR_IDENTITY),
      ...(ca !== undefined ? { ca } : {}),
      subject,
      body,
      timeoutMs,
      ...(withControllers
        ? { gather: { subject: CONTROLLERS_SUBJECT, withinMs: CONTROLLERS_WITHIN_MS } }
        : {}),
      onNext: (server, why) =>
        say(`${note} no controller answered through ${server} (${why}); asking through the next server`),
      onWaitForListener: (withinMs) =>
        say(
          `${note} nothing answers through any server yet (a controller between terms answers again in ` +
            `a moment); asking again for up to ${withinMs / 1000} s`,
        ),
    });
  } catch (err) {
    if (
      options.timedOut !== undefined &&
      (isNamed(err, "TimeoutError") || isNamed(err, "AskUnansweredError"))
    ) {
      throw new CliExit(EXIT_UNREACHABLE, options.timedOut);
    }
    if (isNamed(err, "NoRespondersError")) {
      throw new CliExit(
        EXIT_UNREACHABLE,
        `no controller answers on the bus of the mesh in ${state}: is \`mesh up\` still running?`,
      );
    }
    if (isNamed(err, "AskUnansweredError")) {
      throw new CliExit(
        EXIT_UNREACHABLE,
        `no controller of the mesh in ${state} answered within ${Math.round(timeoutMs / 1000)} s through ` +
          `${servers.join(", ")} (each asked until none took the request within ${ASK_RECEIPT_MS / 1000} s): ` +
          `check that a controller runs (\`mesh up\` or \`mesh controller\`) and that this machine reaches ` +
          `a server of its cluster; --bus names servers to ask first`,
      );
    }
    if (isNamed(err, "TimeoutError")) {
      throw new CliExit(EXIT_UNREACHABLE, `the controller does not answer: ${(err as Error).message}`);
    }
    throw new CliExit(EXIT_UNREACHABLE, `the mesh in ${state} does not answer: ${(err as Error).message}`);
  }
  return {
    answer: JSON.parse(asked.text) as T,
    controllers: asked.gathered.flatMap((text) => {
      const seen = controllerSeen(text);
      return seen === undefined ? [] : [seen];
    }),
  };
}

// A controller's word on who leads, parsed loosely: anything else is not one.
function controllerSeen(text: string): ControllerSeen | undefined {
  try {
    const v = JSON.parse(text) as Partial<Record<keyof ControllerSeen, unknown>>;
    if (typeof v.self !== "string" || typeof v.leading !== "boolean") return undefined;
    return {
      self: v.self,
      leading: v.leading,
      leader: typeof v.leader === "string" ? v.leader : null,
      term: typeof v.term === "number" ? v.term : null,
    };
  } catch {
    return undefined;
  }
}

// The bus client's errors, by name (or the name of what they wrap): the CLI does not depend on it.
function isNamed(err: unknown, name: string): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e.name === name || e.constructor.name === name) return true;
  }
  return false;
}
