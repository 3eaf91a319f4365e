// A provider's Prometheus metrics: what its harness did (passes, creates, failures by class, verify
// round trips, retirements, deletions) and its consumers by state, kept on a registry of its own
// (never prom-client's global one, so several can live in one process), and the small HTTP server
// that serves them on /metrics.

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { parseListenAddress } from "@mesh/manifest";
import type { FailureClass } from "./adapter.ts";
import type { ConsumerState, StatusReport } from "./tools.ts";

/** The work a failure interrupted, as `mesh_provider_failures_total{operation}` says it. */
export type FailedOperation = "create" | "verify" | "read-secret" | "validate";

/** What a successful create was for: a new (or re-enabled) consumer, a change or loss, or a restart. */
export type CreateKind = "created" | "re-applied" | "re-asserted";

/** What one verification found of one consumer. */
export type VerifyResult = "held" | "not-held" | "unknown";

/**
 * What the harness tells whoever counts its work (`ProvisionerOptions.metrics`). Called inside the
 * loop: an implementation must be quick and must not throw.
 */
export interface ProvisionerObserver {
  /** A pass finished, after `seconds` of wall time. */
  passed(kind: "periodic" | "watch", seconds: number): void;
  /** A create succeeded. */
  created(kind: CreateKind): void;
  /** One attempt at something for one consumer failed, with this class. */
  failed(operation: FailedOperation, cls: FailureClass): void;
  /** One question went to the backend to verify `consumers` consumers (a `holds` or a `holdsMany` call). */
  roundTrip(consumers: number): void;
  /** What one consumer's verification found; `unknown` when the backend could not be asked. */
  verified(result: VerifyResult): void;
  /** A consumer was retired, by the loop itself or on a person's approval. */
  retired(by: "provisioner" | "approval"): void;
  /** A retired consumer was deleted by a person. */
  deleted(): void;
}

/** Counts nothing. */
export const silentObserver: ProvisionerObserver = {
  passed: () => {},
  created: () => {},
  failed: () => {},
  roundTrip: () => {},
  verified: () => {},
  retired: () => {},
  deleted: () => {},
};

/** Every state `mesh_provider_consumers{state}` reports, zero included, so no series vanishes. */
const CONSUMER_STATES: readonly ConsumerState[] = [
  "active",
  "failing",
  "awaiting-approval",
  "unasked",
  "retired",
];

/** Pass durations, in seconds: from a pass with nothing to do to one held up by a slow backend. */
const PASS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** What a provider process's metrics are made with. */
export interface ProviderMetricsOptions {
  /** Also the process's own metrics (CPU, memory, event loop, file descriptors). Default true. */
  readonly processMetrics?: boolean;
}

/**
 * One provider process's metrics, on a registry of its own:
 *
 * ```ts
 * const metrics = new ProviderMetrics();
 * const handle = runProvisioner(iface, adapter, { receives, metrics: metrics.observer(iface, "default") });
 * metrics.follow(handle); // consumers by state, read at each scrape
 * const server = await serveMetrics(metrics.registry, "127.0.0.1:9464");
 * ```
 *
 * Every series is labelled with the provider's `interface` and `instance`, so one registry can carry
 * several provisioners.
 */
export class ProviderMetrics {
  readonly registry = new Registry();
  readonly #sources: { status(): StatusReport }[] = [];
  readonly #passes: Counter<"interface" | "instance" | "kind">;
  readonly #passSeconds: Histogram<"interface" | "instance" | "kind">;
  readonly #creates: Counter<"interface" | "instance" | "kind">;
  readonly #failures: Counter<"interface" | "instance" | "operation" | "class">;
  readonly #roundTrips: Counter<"interface" | "instance">;
  readonly #verifications: Counter<"interface" | "instance" | "result">;
  readonly #retirements: Counter<"interface" | "instance" | "by">;
  readonly #deletions: Counter<"interface" | "instance">;

  constructor(options: ProviderMetricsOptions = {}) {
    const registers = [this.registry];
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    const sources = this.#sources;
    new Gauge({
      name: "mesh_provider_consumers",
      help: "Consumers this provider knows, by state (active, failing, awaiting-approval, unasked, retired).",
      labelNames: ["interface", "instance", "state"],
      registers,
      collect() {
        this.reset();
        for (const source of sources) {
          const report = source.status();
          const labels = { interface: report.interface, instance: report.instance };
          const counts = new Map<string, number>(CONSUMER_STATES.map((s) => [s, 0]));
          for (const c of report.consumers) counts.set(c.state, (counts.get(c.state) ?? 0) + 1);
          for (const [state, n] of counts) this.set({ ...labels, state }, n);
        }
      },
    });
    new Gauge({
      name: "mesh_provider_last_pass_timestamp_seconds",
      help: "When the last pass finished, in seconds since the epoch; absent before the first pass.",
      labelNames: ["interface", "instance"],
      registers,
      collect() {
        this.reset();
        for (const source of sources) {
          const report = source.status();
          if (report.lastPassAt === null) continue;
          this.set(
            { interface: report.interface, instance: report.instance },
            Date.parse(report.lastPassAt) / 1000,
          );
        }
      },
    });
    new Gauge({
      name: "mesh_provider_contributions_unreadable",
      help: "1 while the contributions file cannot be read (nothing is applied or retired), else 0.",
      labelNames: ["interface", "instance"],
      registers,
      collect() {
        this.reset();
        for (const source of sources) {
          const report = source.status();
          this.set(
            { interface: report.interface, instance: report.instance },
            report.contributionsProblem === null ? 0 : 1,
          );
        }
      },
    });
    this.#passes = new Counter({
      name: "mesh_provider_passes_total",
      help: "Reconcile passes finished, periodic or set off by a watched file.",
      labelNames: ["interface", "instance", "kind"],
      registers,
    });
    this.#passSeconds = new Histogram({
      name: "mesh_provider_pass_duration_seconds",
      help: "Wall time of one reconcile pass.",
      labelNames: ["interface", "instance", "kind"],
      buckets: PASS_BUCKETS,
      registers,
    });
    this.#creates = new Counter({
      name: "mesh_provider_creates_total",
      help: "Successful creates: created (new or re-enabled), re-applied (changed or lost), re-asserted (after a start).",
      labelNames: ["interface", "instance", "kind"],
      registers,
    });
    this.#failures = new Counter({
      name: "mesh_provider_failures_total",
      help: "Failed attempts for one consumer, by class and by what was being done (create, verify, read-secret, validate).",
      labelNames: ["interface", "instance", "operation", "class"],
      registers,
    });
    this.#roundTrips = new Counter({
      name: "mesh_provider_verify_round_trips_total",
      help: "Questions sent to the backend to verify consumers (one per holds or holdsMany call).",
      labelNames: ["interface", "instance"],
      registers,
    });
    this.#verifications = new Counter({
      name: "mesh_provider_verifications_total",
      help: "Consumers verified, by what was found: held, not-held (applied again), unknown (could not ask).",
      labelNames: ["interface", "instance", "result"],
      registers,
    });
    this.#retirements = new Counter({
      name: "mesh_provider_retirements_total",
      help: "Consumers retired (access disabled, data kept), by the loop or on a person's approval.",
      labelNames: ["interface", "instance", "by"],
      registers,
    });
    this.#deletions = new Counter({
      name: "mesh_provider_deletions_total",
      help: "Retired consumers deleted for good by a person.",
      labelNames: ["interface", "instance"],
      registers,
    });
  }

  /** The observer to hand the harness for the provisioner of `iface` named `instance`. */
  observer(iface: string, instance: string): ProvisionerObserver {
    const l = { interface: iface, instance };
    // Counters start at zero on the first scrape rather than at their first event, so a rate over
    // the first event is right.
    for (const kind of ["periodic", "watch"]) this.#passes.inc({ ...l, kind }, 0);
    for (const kind of ["created", "re-applied", "re-asserted"]) this.#creates.inc({ ...l, kind }, 0);
    this.#roundTrips.inc(l, 0);
    for (const result of ["held", "not-held", "unknown"]) this.#verifications.inc({ ...l, result }, 0);
    for (const by of ["provisioner", "approval"]) this.#retirements.inc({ ...l, by }, 0);
    this.#deletions.inc(l, 0);
    return {
      passed: (kind, seconds) => {
        this.#passes.inc({ ...l, kind });
        this.#passSeconds.observe({ ...l, kind }, seconds);
      },
      created: (kind) => this.#creates.inc({ ...l, kind }),
      failed: (operation, cls) => this.#failures.inc({ ...l, operation, class: cls }),
      roundTrip: () => this.#roundTrips.inc(l),
      verified: (result) => this.#verifications.inc({ ...l, result }),
      retired: (by) => this.#retirements.inc({ ...l, by }),
      deleted: () => this.#deletions.inc(l),
    };
  }

  /** Reads consumers by state (and the last pass) from `source.status()` at every scrape. */
  follow(source: { status(): StatusReport }): void {
    this.#sources.push(source);
  }

  /** The Prometheus text exposition of everything on the registry. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}

// Read where the fleet file is read too; exported here as well, where servers are made.
export { isLoopbackHost, ListenAddressError, parseListenAddress, type ListenAddress } from "@mesh/manifest";

/** A server could not listen where it was told (the port is taken, the address is not this machine's). */
export class ListenError extends Error {
  override name = "ListenError";
  constructor(
    readonly what: string,
    readonly host: string,
    readonly port: number,
    cause: NodeJS.ErrnoException,
  ) {
    const why =
      cause.code === "EADDRINUSE"
        ? "the port is taken"
        : cause.code === "EADDRNOTAVAIL"
          ? "the address is not one of this machine's"
          : cause.code === "EACCES"
            ? "a port below 1024 needs privileges"
            : cause.message;
    super(`cannot serve ${what} on ${host}:${port}: ${why}; give another address (port 0 for any free one)`, {
      cause,
    });
  }
}

/** A running /metrics server. */
export interface MetricsServer {
  /** `http://HOST:PORT/metrics`, with the port it was given. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** Stops listening and ends open connections. Idempotent. */
  close(): Promise<void>;
}

/**
 * Serves `registry` on `http://<listen>/metrics` (GET and HEAD; 405 for another method, 404 for
 * another path). `listen` is HOST:PORT, default 127.0.0.1 and a free port. Metrics carry counts and
 * names, never a login's password, so another host may be given for a scraper elsewhere.
 * @throws ListenAddressError for an address that is not HOST:PORT; ListenError when it cannot listen there.
 */
export async function serveMetrics(registry: Registry, listen = "127.0.0.1:0"): Promise<MetricsServer> {
  const { host, port } = parseListenAddress(listen);
  const server = createServer((req, res) => {
    void answerMetrics(registry, req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err) => reject(new ListenError("metrics", host, port, err)));
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const bound = typeof address === "object" && address !== null ? address.port : port;
  const shown = host.includes(":") ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${shown}:${bound}/metrics`,
    host,
    port: bound,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

async function answerMetrics(registry: Registry, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? "/", "http://metrics").pathname;
  if (path !== "/metrics") {
    res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found: ask /metrics\n");
    return;
  }
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
    res.end("only GET and HEAD\n");
    return;
  }
  try {
    const text = await registry.metrics();
    res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
    res.end(req.method === "HEAD" ? undefined : text);
  } catch (err) {
    res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
    res.end(`the metrics could not be gathered: ${err instanceof Error ? err.message : String(err)}\n`);
  }
}
