// Events for a module: it emits what its manifest declares and hears what it subscribes to, on the
// bus credential the controller compiled from that same manifest. Subjects come from the functions
// the permission compiler uses, so where the SDK publishes and what the server allows cannot drift.
// The SDK checks first, locally, so a mistake is said with the manifest to change; the server
// enforces regardless, and a publish it refuses is said in the same words.
import { readFileSync } from "node:fs";
import { closeBus, connectBus, type BusLogger } from "@mesh/bus/connect";
import {
  EVENTS_PREFIX,
  eventNameProblem,
  eventSubject,
  isModuleName,
  loadManifest,
  permissionGrants,
  SEATS_PREFIX,
  seatSubject,
  STANDINGS_EVENTS,
  subjectCovers,
  subscriptionSubjects,
  type Manifest,
} from "@mesh/manifest";
import {
  PermissionViolationError,
  type Msg,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import { consoleLogger, type Logger } from "./collaborators.ts";
import { clip } from "./scrub.ts";

/** The most an event's body may hold, encoded, unless `maxEventBytes` says otherwise: 64 KiB. */
export const MAX_EVENT_BYTES = 64 * 1024;

/** How to open a module's bus; each field left out is read from the variable the agent sets. */
export interface ModuleBusOptions {
  /** `nats://` URLs; else MESH_BUS_SERVERS (comma-separated). */
  readonly servers?: string | readonly string[];
  /** The creds file's text; else the file MESH_BUS_CREDS names, read again at each reconnect. */
  readonly creds?: string | Uint8Array;
  /** The bus CA's file when the bus uses TLS; else MESH_BUS_CA when set (optional: absent, no TLS CA). */
  readonly caFile?: string;
  /** The module's fleet name, its namespace; else MESH_MODULE. */
  readonly module?: string;
  /** The module's manifest, as a path or loaded; else the path in MESH_MANIFEST. */
  readonly manifest?: string | Manifest;
  /** The seats the module holds; else MESH_SEATS (comma-separated, empty for none). */
  readonly seats?: readonly string[];
  /**
   * Every seat of the fleet, when known: a subscription's source is then a seat or a module, not
   * either. When unknown, a subscription covers both, and the one its credential does not allow is
   * refused by the server without a word.
   */
  readonly fleetSeats?: ReadonlySet<string>;
  /** Where refusals and failures are said; standard error when absent. */
  readonly logger?: Logger;
  /** The largest body emitted or accepted, encoded: 64 KiB when absent. */
  readonly maxEventBytes?: number;
  /**
   * Check each emit and subscription against the manifest before the server sees it (default
   * true). Off only to prove, in a test, that the server refuses by itself.
   */
  readonly checkLocally?: boolean;
  /** Keep trying until a bus server answers, instead of failing at once when none does. */
  readonly waitForServer?: boolean;
  /** Where the variables are read from; `process.env` when absent. */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** One event delivered to a handler. */
export interface ModuleEvent<Body = unknown> {
  /** The NATS subject it came on. */
  readonly subject: string;
  /** The module, or the seat, in whose name it was said. */
  readonly source: string;
  /** Whether `source` is a module (`mesh.events`) or a seat (`mesh.seats`). */
  readonly via: "module" | "seat";
  /** The local event name: `note.created`. */
  readonly event: string;
  /** The JSON body, parsed. */
  readonly body: Body;
}

/** Called once per event, one at a time per subscription; a throw or a rejection is counted and said. */
export type EventHandler = (event: ModuleEvent) => void | Promise<void>;

/** A subscription made by `ModuleBus.on`. */
export interface EventSubscription {
  /** The pattern as given: `**`, `<source>.<event>`, `<source>.**`. */
  readonly pattern: string;
  /** The NATS subjects it listens on. */
  readonly subjects: readonly string[];
  /** Stops listening, after the events already received have been handed over. Safe to call twice. */
  stop(): Promise<void>;
}

/** What a module bus has done so far. */
export interface ModuleBusStats {
  /** Events emitted (each once, whatever the number of seats it went to). */
  readonly emitted: number;
  /** Events handed to a handler. */
  readonly delivered: number;
  /** Messages refused on arrival, by why. */
  readonly refused: { readonly notJson: number; readonly tooLarge: number; readonly wrongSubject: number };
  /** Handlers that threw or rejected. */
  readonly handlerErrors: number;
  /** Publishes the server refused (the credential does not allow them). */
  readonly denied: number;
}

const ENV_VARIABLES = {
  MESH_BUS_SERVERS: { option: "servers", what: "the bus's nats:// addresses, comma-separated" },
  MESH_BUS_CREDS: { option: "creds", what: "the path of this module's bus credential file" },
  MESH_MANIFEST: { option: "manifest", what: "the path of this module's module.json" },
  MESH_SEATS: { option: "seats", what: "the seats this module holds, comma-separated, empty for none" },
  MESH_MODULE: { option: "module", what: "this module's name in the fleet" },
} as const;

/** The variables the agent sets for every module it runs, and `connectModuleBus` reads. */
export const MODULE_BUS_VARIABLES = Object.keys(ENV_VARIABLES) as readonly (keyof typeof ENV_VARIABLES)[];

/** A variable the agent sets for every module it runs is missing, and no option stands in for it. */
export class ModuleBusNotConfiguredError extends Error {
  override name = "ModuleBusNotConfiguredError";
  constructor(readonly variable: keyof typeof ENV_VARIABLES) {
    const { option, what } = ENV_VARIABLES[variable];
    super(
      `${variable} is not set: the mesh agent sets it (${what}) for every module it runs; start the module ` +
        `with \`mesh up\`, or set ${variable} (or pass \`${option}\` to connectModuleBus) by hand`,
    );
  }
}

/** The bus credential file cannot be read. */
export class ModuleBusCredentialsError extends Error {
  override name = "ModuleBusCredentialsError";
  constructor(
    readonly file: string,
    options?: { cause?: unknown },
  ) {
    const code = (options?.cause as NodeJS.ErrnoException | undefined)?.code;
    super(
      `the bus credential file ${file} (MESH_BUS_CREDS) ${code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? "unknown error"})`}: ` +
        `the agent writes it once the controller has issued this module's credential; wait for it, or check the path`,
      options,
    );
  }
}

/** A module emitted an event its manifest does not declare; refused before it reached the bus. */
export class EventNotDeclaredError extends Error {
  override name = "EventNotDeclaredError";
  constructor(
    readonly module: string,
    readonly event: string,
    /** The manifest to change. */
    readonly file: string,
  ) {
    super(
      `${module} may not emit ${JSON.stringify(event)}: its manifest ${file} does not declare it; add ` +
        `${JSON.stringify(event)} to "emits" there (the controller then issues a credential that allows it)`,
    );
  }
}

/** The server refused a module's publish: the credential it was issued does not allow the subject. */
export class EventRefusedError extends Error {
  override name = "EventRefusedError";
  constructor(
    readonly module: string,
    readonly event: string,
    readonly subject: string,
    /** The manifest to change. */
    readonly file: string,
  ) {
    super(
      `the bus refused ${module}'s event ${JSON.stringify(event)} (subject ${subject}): the credential the ` +
        `controller issued for ${module} does not allow it; add ${JSON.stringify(event)} to "emits" in ${file}, ` +
        `and the controller issues ${module} a credential that does`,
    );
  }
}

/** A subscription the manifest does not declare; refused before it reached the bus. */
export class SubscriptionNotDeclaredError extends Error {
  override name = "SubscriptionNotDeclaredError";
  constructor(
    readonly module: string,
    readonly pattern: string,
    readonly file: string,
  ) {
    super(
      `${module} may not subscribe to ${JSON.stringify(pattern)}: nothing in "subscribes" of its manifest ${file} ` +
        `covers it; add ${JSON.stringify(pattern)} (or "<source>.**", or "**") there`,
    );
  }
}

/** An event's body cannot be sent: not JSON-serialisable, or too large. */
export class EventBodyError extends Error {
  override name = "EventBodyError";
  constructor(
    readonly event: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`event ${JSON.stringify(event)} was not emitted: its body ${why}`, options);
  }
}

/** The module bus was closed; nothing more can be emitted on it. */
export class ModuleBusClosedError extends Error {
  override name = "ModuleBusClosedError";
  constructor(
    readonly module: string,
    readonly event: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${module} emitted ${JSON.stringify(event)} after its bus was closed: emit before close()`,
      options,
    );
  }
}

type RefusalKind = "notJson" | "tooLarge" | "wrongSubject";

interface ParsedSubject {
  readonly source: string;
  readonly via: "module" | "seat";
  readonly event: string;
}

const SUBJECT_CACHE_MAX = 4096;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * A module's connection to the bus, for its events. Made by `connectModuleBus`.
 */
export class ModuleBus {
  readonly #nc: NatsConnection;
  readonly #log: Logger;
  readonly #maxBytes: number;
  readonly #check: boolean;
  readonly #fleetSeats: ReadonlySet<string> | undefined;
  // Per local name, the subjects one emit goes to: checked and derived once, then only looked up.
  readonly #routes = new Map<string, readonly string[]>();
  readonly #mayPublish: ReadonlySet<string>;
  readonly #maySubscribe: readonly string[];
  readonly #subjects = new Map<string, ParsedSubject>();
  readonly #subscriptions = new Set<EventSubscription>();
  readonly #said = new Set<string>();
  #refusal: EventRefusedError | undefined;
  #emitted = 0;
  #delivered = 0;
  #refused = { notJson: 0, tooLarge: 0, wrongSubject: 0 };
  #handlerErrors = 0;
  #denied = 0;

  /** @internal use connectModuleBus. */
  constructor(
    nc: NatsConnection,
    /** The module's fleet name: its events are under `mesh.events.<module>`. */
    readonly module: string,
    /** The manifest its permissions come from, and which errors name. */
    readonly manifest: Manifest,
    /** The seats it holds. */
    readonly seats: readonly string[],
    options: {
      logger: Logger;
      maxEventBytes: number;
      checkLocally: boolean;
      fleetSeats: ReadonlySet<string> | undefined;
    },
  ) {
    this.#nc = nc;
    this.#log = options.logger;
    this.#maxBytes = options.maxEventBytes;
    this.#check = options.checkLocally;
    this.#fleetSeats = options.fleetSeats;
    const grants = permissionGrants(manifest, module, seats, options.fleetSeats);
    this.#mayPublish = new Set(grants.filter((g) => g.action === "publish").map((g) => g.subject));
    this.#maySubscribe = grants.filter((g) => g.action === "subscribe").map((g) => g.subject);
    const declared = manifest.provides.size > 0 ? [...manifest.emits, ...STANDINGS_EVENTS] : manifest.emits;
    for (const event of declared) {
      this.#routes.set(
        event,
        this.#derive(event).filter((s) => this.#mayPublish.has(s)),
      );
    }
    void this.#watchRefusals();
  }

  /**
   * Publishes `body` (as JSON) as the module's event `localName`, under its own name and under
   * each seat it holds. It does not wait: a publish the server refuses is counted, said, and
   * reported by the next `flush()`.
   * @throws EventNotDeclaredError when the manifest does not declare it (unless the local check is
   *   off); InvalidEventNameError for a name that is not a local event name; EventBodyError when the
   *   body is not JSON-serialisable or is larger than `maxEventBytes`; ModuleBusClosedError after close().
   */
  emit(localName: string, body: unknown): void {
    const subjects = this.#routes.get(localName) ?? this.#route(localName);
    const data = this.#encode(localName, body);
    try {
      for (const subject of subjects) this.#nc.publish(subject, data);
    } catch (err) {
      if (this.#nc.isClosed() || this.#nc.isDraining())
        throw new ModuleBusClosedError(this.module, localName, { cause: err });
      throw err;
    }
    this.#emitted++;
  }

  /**
   * Calls `handler` with each event `pattern` (as a manifest writes it: `**`, `<source>.<event>`,
   * `<source>.**`) covers. A message that is not JSON, too large, or not on an event subject is
   * refused, counted and said once per kind and source; a handler that throws is counted and said,
   * and the subscription goes on.
   * @throws SubscriptionNotDeclaredError when the manifest's `subscribes` does not cover it (unless
   *   the local check is off); InvalidEventNameError when it is not a valid pattern.
   */
  on(pattern: string, handler: EventHandler): EventSubscription {
    const subjects = subscriptionSubjects(pattern, this.#fleetSeats);
    if (this.#check && !subjects.every((s) => this.#maySubscribe.some((g) => subjectCovers(g, s)))) {
      throw new SubscriptionNotDeclaredError(this.module, pattern, this.manifest.file);
    }
    const queue: ModuleEvent[] = [];
    let busy = false;
    let idle: (() => void) | undefined;
    const pump = (): void => {
      while (!busy) {
        const event = queue.shift();
        if (event === undefined) break;
        this.#delivered++;
        let result: unknown;
        try {
          result = handler(event);
        } catch (err) {
          this.#handlerFailed(pattern, event, err);
          continue;
        }
        if (isPromiseLike(result)) {
          busy = true;
          result.then(
            () => {
              busy = false;
              pump();
            },
            (err: unknown) => {
              this.#handlerFailed(pattern, event, err);
              busy = false;
              pump();
            },
          );
        }
      }
      if (!busy && queue.length === 0) idle?.();
    };
    // When a source could be a seat or a module, the credential allows one of the two subjects;
    // the server refusing the other is expected and not worth a word.
    const alternatives = this.#fleetSeats === undefined && pattern !== "**";
    const refused = new Set<string>();
    const subs: Subscription[] = subjects.map((subject) =>
      this.#nc.subscribe(subject, {
        callback: (err, msg) => {
          if (err !== null) {
            refused.add(subject);
            if (!alternatives || refused.size === subjects.length)
              this.#subscriptionRefused(pattern, subject, err);
            return;
          }
          const event = this.#accept(msg);
          if (event === undefined) return;
          queue.push(event);
          if (!busy) pump();
        },
      }),
    );
    let stopping: Promise<void> | undefined;
    const subscription: EventSubscription = {
      pattern,
      subjects,
      stop: () => {
        stopping ??= (async () => {
          await Promise.all(subs.map((s) => (s.isClosed() ? undefined : s.drain().catch(() => undefined))));
          if (busy || queue.length > 0) await new Promise<void>((done) => (idle = done));
          this.#subscriptions.delete(subscription);
        })();
        return stopping;
      },
    };
    this.#subscriptions.add(subscription);
    return subscription;
  }

  /**
   * Waits until the server has seen everything emitted so far.
   * @throws EventRefusedError for the first publish the server refused since the last flush.
   */
  async flush(): Promise<void> {
    await this.#nc.flush();
    // The server's refusal arrives before its answer to the flush; its status event reaches us a
    // few promise turns later, all done by the next macrotask.
    await new Promise((resolve) => setImmediate(resolve));
    const refusal = this.#refusal;
    this.#refusal = undefined;
    if (refusal !== undefined) throw refusal;
  }

  /** What has been emitted, delivered, refused and denied so far. */
  stats(): ModuleBusStats {
    return {
      emitted: this.#emitted,
      delivered: this.#delivered,
      refused: { ...this.#refused },
      handlerErrors: this.#handlerErrors,
      denied: this.#denied,
    };
  }

  /** Stops every subscription (handing over what was received), sends what is buffered and closes. Safe to call twice. */
  async close(): Promise<void> {
    await Promise.all([...this.#subscriptions].map((s) => s.stop()));
    await closeBus(this.#nc);
  }

  #derive(localName: string): string[] {
    return [eventSubject(this.module, localName), ...this.seats.map((seat) => seatSubject(seat, localName))];
  }

  #route(localName: string): readonly string[] {
    const subjects = this.#derive(localName);
    if (this.#check) throw new EventNotDeclaredError(this.module, localName, this.manifest.file);
    this.#routes.set(localName, subjects);
    return subjects;
  }

  #encode(localName: string, body: unknown): Uint8Array {
    let text: string | undefined;
    try {
      text = JSON.stringify(body);
    } catch (err) {
      throw new EventBodyError(localName, `is not JSON-serialisable (${(err as Error).message})`, {
        cause: err,
      });
    }
    if (text === undefined) {
      throw new EventBodyError(localName, `is ${typeof body}, which JSON cannot hold: emit a JSON value`);
    }
    // Buffer.from is a view on node's pooled memory for small strings: cheaper than a TextEncoder.
    const data = Buffer.from(text, "utf8");
    if (data.length > this.#maxBytes) {
      throw new EventBodyError(
        localName,
        `is ${data.length} bytes of JSON, more than the ${this.#maxBytes} an event may hold: send a reference to the data, not the data`,
      );
    }
    return data;
  }

  #accept(msg: Msg): ModuleEvent | undefined {
    const subject = msg.subject;
    const parsed = this.#parse(subject);
    if (parsed === undefined) {
      this.#refuse(
        "wrongSubject",
        subject.split(".")[2] ?? subject,
        `a message on ${subject}, which is not an event subject (${EVENTS_PREFIX}.<module>.<event> or ` +
          `${SEATS_PREFIX}.<seat>.<event>, in lowercase names): something publishes there without the SDK; find it and have it emit`,
      );
      return undefined;
    }
    const from = `${parsed.source}.${parsed.event}`;
    if (msg.data.length > this.#maxBytes) {
      this.#refuse(
        "tooLarge",
        parsed.source,
        `${from}: its body is ${msg.data.length} bytes, more than the ${this.#maxBytes} an event may hold; ` +
          `${parsed.source} must send less (a reference to the data, not the data)`,
      );
      return undefined;
    }
    let body: unknown;
    try {
      body = JSON.parse(decoder.decode(msg.data));
    } catch (err) {
      this.#refuse(
        "notJson",
        parsed.source,
        `${from}: its body is not JSON (${clip((err as Error).message)}); ${parsed.source} must emit a JSON body`,
      );
      return undefined;
    }
    return { subject, source: parsed.source, via: parsed.via, event: parsed.event, body };
  }

  #parse(subject: string): ParsedSubject | undefined {
    const known = this.#subjects.get(subject);
    if (known !== undefined) return known;
    const tokens = subject.split(".");
    const [root, space, source] = tokens;
    const event = tokens.slice(3).join(".");
    const prefix = `${root}.${space}`;
    const via = prefix === EVENTS_PREFIX ? "module" : prefix === SEATS_PREFIX ? "seat" : undefined;
    if (
      via === undefined ||
      !isModuleName(source) ||
      tokens.length < 4 ||
      eventNameProblem(event) !== undefined
    )
      return undefined;
    const parsed: ParsedSubject = { source, via, event };
    if (this.#subjects.size >= SUBJECT_CACHE_MAX) this.#subjects.clear();
    this.#subjects.set(subject, parsed);
    return parsed;
  }

  #refuse(kind: RefusalKind, source: string, what: string): void {
    this.#refused[kind]++;
    this.#sayOnce(
      `refused:${kind}:${source}`,
      `${this.module} refused ${what} (said once for ${source}; later ones are only counted, in stats().refused.${kind})`,
    );
  }

  #handlerFailed(pattern: string, event: ModuleEvent, err: unknown): void {
    this.#handlerErrors++;
    const why = clip(err instanceof Error ? err.message : String(err));
    this.#sayOnce(
      `handler:${pattern}:${event.source}.${event.event}`,
      `${this.module}'s handler for ${JSON.stringify(pattern)} failed on ${event.source}.${event.event}: ${why}; ` +
        `the subscription goes on (later failures on this event are only counted, in stats().handlerErrors)`,
    );
  }

  #subscriptionRefused(pattern: string, subject: string, err: Error): void {
    this.#sayOnce(
      `subscription:${subject}`,
      `the bus refused ${this.module}'s subscription to ${JSON.stringify(pattern)} (subject ${subject}): the ` +
        `credential the controller issued for ${this.module} does not allow it; add ${JSON.stringify(pattern)} to ` +
        `"subscribes" in ${this.manifest.file}, and the controller issues a credential that does (${clip(err.message)})`,
    );
  }

  #sayOnce(key: string, message: string): void {
    if (this.#said.has(key)) return;
    this.#said.add(key);
    this.#log.error(message);
  }

  async #watchRefusals(): Promise<void> {
    try {
      for await (const status of this.#nc.status()) {
        if (status.type !== "error") continue;
        const err = status.error;
        if (!(err instanceof PermissionViolationError) || err.operation !== "publish") continue;
        this.#denied++;
        const refusal = new EventRefusedError(
          this.module,
          localNameOf(err.subject),
          err.subject,
          this.manifest.file,
        );
        this.#refusal ??= refusal;
        this.#sayOnce(`denied:${err.subject}`, refusal.message);
      }
    } catch {
      // The connection closed under the iterator: nothing more will be refused.
    }
  }
}

/** The local event name in an event subject, or the subject itself when it is not one. */
function localNameOf(subject: string): string {
  const tokens = subject.split(".");
  const prefix = `${tokens[0]}.${tokens[1]}`;
  return (prefix === EVENTS_PREFIX || prefix === SEATS_PREFIX) && tokens.length >= 4
    ? tokens.slice(3).join(".")
    : subject;
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof (value as PromiseLike<unknown>).then === "function"
  );
}

function required(
  env: Readonly<Record<string, string | undefined>>,
  variable: keyof typeof ENV_VARIABLES,
): string {
  const value = env[variable];
  if (value === undefined || (value.trim() === "" && variable !== "MESH_SEATS"))
    throw new ModuleBusNotConfiguredError(variable);
  return value;
}

function list(text: string): string[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

function readCreds(file: string): Uint8Array {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ModuleBusCredentialsError(file, { cause: err });
  }
}

/**
 * Connects a module to the bus for its events, with what the agent hands every module it runs
 * (MESH_BUS_SERVERS, MESH_BUS_CREDS, MESH_MANIFEST, MESH_SEATS, MESH_MODULE, and MESH_BUS_CA when
 * the bus uses TLS) unless `options` gives it. Every variable is checked before anything connects.
 * @throws ModuleBusNotConfiguredError naming a missing variable; ModuleBusCredentialsError when the
 *   credential file cannot be read; ManifestError for a manifest that cannot be used;
 *   SeatNotDeclaredError when a seat held is not in the manifest; BusCredentialsRefusedError /
 *   BusUnreachableError (from @mesh/bus) when the bus refuses the credential or does not answer
 *   (and `waitForServer` is not set).
 */
export async function connectModuleBus(options: ModuleBusOptions = {}): Promise<ModuleBus> {
  const env = options.env ?? process.env;
  const servers = options.servers ?? list(required(env, "MESH_BUS_SERVERS"));
  const credsFile = options.creds === undefined ? required(env, "MESH_BUS_CREDS") : undefined;
  const manifestGiven = options.manifest ?? required(env, "MESH_MANIFEST");
  const seats = options.seats ?? list(required(env, "MESH_SEATS"));
  const module = options.module ?? required(env, "MESH_MODULE").trim();
  const logger = options.logger ?? consoleLogger;
  const maxEventBytes = options.maxEventBytes ?? MAX_EVENT_BYTES;
  if (!Number.isInteger(maxEventBytes) || maxEventBytes <= 0) {
    throw new RangeError(`maxEventBytes ${maxEventBytes} is not a positive whole number of bytes`);
  }

  let creds: Uint8Array | (() => Uint8Array);
  if (credsFile !== undefined) {
    // Read again at each reconnect, so a credential the agent rewrites is used without a restart;
    // one that cannot be read then is replaced by the last that could.
    let last = readCreds(credsFile);
    creds = () => {
      try {
        last = readFileSync(credsFile);
      } catch {
        // keep the last one read
      }
      return last;
    };
  } else {
    creds = typeof options.creds === "string" ? encoder.encode(options.creds) : (options.creds as Uint8Array);
  }
  const manifest = typeof manifestGiven === "string" ? await loadManifest(manifestGiven) : manifestGiven;
  // Fails here, before connecting, for a module name or a seat the manifest cannot grant.
  permissionGrants(manifest, module, seats, options.fleetSeats);

  // connectBus says disconnections in its own words; a refused publish or subscription the module
  // bus says itself, naming the manifest, so the generic line is left out.
  const busLog: BusLogger = {
    info: (m) => logger.info(m),
    warn: (m) => {
      if (!m.startsWith("the bus refused to let ")) logger.warn(m);
    },
    error: (m) => logger.error(m),
  };
  const caFile = options.caFile ?? (env["MESH_BUS_CA"] || undefined);
  const nc = await connectBus({
    servers,
    creds,
    name: module,
    log: busLog,
    waitForServer: options.waitForServer === true,
    ...(caFile !== undefined ? { caFile } : {}),
  });
  return new ModuleBus(nc, module, manifest, seats, {
    logger,
    maxEventBytes,
    checkLocally: options.checkLocally !== false,
    fleetSeats: options.fleetSeats,
  });
}
