// The nodes' reports, as the controller last heard them: what `mesh status` shows. Reports are
// trusted only as far as the bus vouches: the node is read from the subject (which the server lets
// only that node publish to), never from the body.
import { isValidNodeName, MESH_SUBJECT_PREFIX } from "@mesh/bus";
import {
  boundedJson,
  isModuleName,
  protocolOf,
  releaseOf,
  reportedMisbehaviours,
  reportedRotationSchema,
  servedEndpointOf,
  type ReportedCounts,
  type ReportedFailure,
  type ReportedMisbehaviour,
  type ReportedProvider,
  type ReportedRotation,
  type ReportedWaiting,
} from "@mesh/manifest";

export type {
  ReportedCounts,
  ReportedFailure,
  ReportedMisbehaviour,
  ReportedProvider,
  ReportedRotation,
  ReportedWaiting,
};
import { maskUrls, metricsUrlOf } from "@mesh/sdk/provider";
import { goneModuleUsersOf, resourcesOf, type ReportedResources } from "./module-resources-report.ts";

/** How a module of a node is doing, as its agent reports it (with its cgroup, limits and home size). */
export interface ModuleReport extends ReportedResources {
  readonly name: string;
  readonly state: "starting" | "running" | "crashing" | "stopped";
  readonly pid?: number;
  readonly restarts: number;
  readonly lastExit?: unknown;
  /** The module's log file on its node. */
  readonly log: string;
  /**
   * Where it serves Prometheus metrics (`http://127.0.0.1:<port>/metrics` unless the fleet file
   * says otherwise), while it runs and serves them; always an http(s) URL without credentials.
   */
  readonly metrics?: string;
  /** Whether it runs as its own user, the user it runs as, and why it is not isolated. */
  readonly isolation?: ReportedIsolation;
  /** What it waits for before its first start (its bus credential), while it does. */
  readonly waiting?: string;
  /** Why its agent does not start it (its command is not on the node), when it does not. */
  readonly reason?: string;
  /** While it keeps crashing: the last few lines of its log, clipped and scrubbed by its agent. */
  readonly logTail?: readonly string[];
}

// A crashing module's log, as the status shows it: a few short lines, whatever a node sends.
const LOG_TAIL_MAX_LINES = 5;
const LOG_TAIL_LINE_MAX = 200;

/** How a module is kept apart from the others, as its node reports it. */
export interface ReportedIsolation {
  readonly isolated: boolean;
  readonly user: string;
  readonly reason?: string;
}

// A reason is said to an operator: a line, never a wall of text from a node.
const REASON_MAX = 500;

function isolationOf(value: unknown): ReportedIsolation | undefined {
  const v = value as { isolated?: unknown; user?: unknown; reason?: unknown } | null;
  if (typeof v !== "object" || v === null || typeof v.isolated !== "boolean" || typeof v.user !== "string") {
    return undefined;
  }
  return {
    isolated: v.isolated,
    user: v.user.slice(0, 64),
    ...(typeof v.reason === "string" ? { reason: v.reason.slice(0, REASON_MAX) } : {}),
  };
}

/** The last report of one node, and when the controller received it. */
export interface NodeReport {
  readonly node: string;
  readonly generation: number;
  /** The agent's release as it says it; null when it says none (0.1.0) or not one (`parseReport` always sets it). */
  readonly release?: string | null;
  /** The protocol the agent speaks (1 when it says none: 0.1.0; `parseReport` always sets it). */
  readonly protocol?: number;
  /** ISO 8601, the controller's clock: when the report arrived. */
  readonly receivedAt: string;
  readonly modules: readonly ModuleReport[];
  readonly files?: { readonly written: number; readonly unchanged: number };
  /** The public keys (`U…`) of each module's bus and ledger key pairs, as the node made them. */
  readonly moduleKeys?: Readonly<Record<string, ReportedModuleKeys>>;
  /** What each provider module of the node says of its consumers, from its own control socket. */
  readonly providers?: readonly ReportedProvider[];
  /** The modules of the node whose answers its agent did not use (malformed, too large, too slow, cut off). */
  readonly misbehaving?: readonly ReportedMisbehaviour[];
  /** Users of the node's mesh whose module no longer runs there (the mesh removes no user). */
  readonly goneModuleUsers?: readonly string[];
}

/** A module's public keys as its node reports them. */
export interface ReportedModuleKeys {
  readonly bus: string;
  readonly ledger: string;
}

const STATES = new Set(["starting", "running", "crashing", "stopped"]);
// Bounds on what a node may make the controller keep, whatever it sends (a node sends less).
/** The largest report read; a larger one is dropped whole (the bus's own bound is usually 1 MiB). */
export const MAX_REPORT_BYTES = 8 * 1024 * 1024;
const MOST_MODULES = 1_000;
const MOST_LOG_PATH = 4_096;
const MOST_PROVIDERS = 64;
const MOST_FAILING = 100;
const MOST_WAITING = 20;
const MOST_TEXT = 1_000;
const LOGIN = /^[a-z][a-z0-9_]{0,31}$/;
const CLASS = /^[a-z][a-z0-9-]{0,63}$/;
const USER_KEY = /^U[A-Z2-7]{55}$/;

/** The node a report subject (`mesh.report.<node>`) is from, or undefined for any other subject. */
export function reportingNode(subject: string): string | undefined {
  const parts = subject.split(".");
  if (parts.length !== 3 || parts[0] !== MESH_SUBJECT_PREFIX || parts[1] !== "report") return undefined;
  return isValidNodeName(parts[2]) ? parts[2] : undefined;
}

/**
 * Reads a report's body for `node`, keeping only well-formed module entries; undefined when the
 * body is not a report at all.
 */
export function parseReport(node: string, data: Uint8Array, receivedAt: Date): NodeReport | undefined {
  if (data.length > MAX_REPORT_BYTES) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch {
    return undefined;
  }
  const b = body as {
    generation?: unknown;
    modules?: unknown;
    files?: unknown;
    moduleKeys?: unknown;
    providers?: unknown;
    misbehaving?: unknown;
    goneModuleUsers?: unknown;
    release?: unknown;
    protocol?: unknown;
  } | null;
  if (b === null || typeof b !== "object" || !Array.isArray(b.modules)) return undefined;
  const modules: ModuleReport[] = [];
  for (const m of b.modules.slice(0, MOST_MODULES) as unknown[]) {
    const e = m as Partial<Record<keyof ModuleReport, unknown>> | null;
    if (!isModuleName(e?.name) || typeof e.state !== "string" || !STATES.has(e.state)) continue;
    // Shown as a link on the dashboard: only ever a web address, whatever a node sends.
    const metrics = metricsUrlOf(e.metrics);
    const isolation = isolationOf(e.isolation);
    modules.push({
      name: e.name,
      state: e.state as ModuleReport["state"],
      ...(typeof e.pid === "number" ? { pid: e.pid } : {}),
      restarts: typeof e.restarts === "number" ? e.restarts : 0,
      // Shown as it is, so never nested deeper than a printer can walk.
      ...(e.lastExit !== undefined && boundedJson.safeParse(e.lastExit).success
        ? { lastExit: e.lastExit }
        : {}),
      log: typeof e.log === "string" ? e.log.slice(0, MOST_LOG_PATH) : "",
      ...(metrics !== undefined ? { metrics } : {}),
      ...(isolation !== undefined ? { isolation } : {}),
      ...(typeof e.waiting === "string" ? { waiting: e.waiting.slice(0, REASON_MAX) } : {}),
      ...(typeof e.reason === "string" ? { reason: e.reason.slice(0, REASON_MAX) } : {}),
      ...(Array.isArray(e.logTail)
        ? {
            logTail: e.logTail
              .filter((l): l is string => typeof l === "string")
              .slice(-LOG_TAIL_MAX_LINES)
              .map((l) => maskUrls(l.slice(0, LOG_TAIL_LINE_MAX))),
          }
        : {}),
      ...resourcesOf(e as Record<string, unknown>),
    });
  }
  const f = b.files as { written?: unknown; unchanged?: unknown } | undefined;
  const files =
    typeof f?.written === "number" && typeof f.unchanged === "number"
      ? { written: f.written, unchanged: f.unchanged }
      : undefined;
  const moduleKeys = parseModuleKeys(b.moduleKeys);
  const providers = parseProviders(b.providers);
  // Only the modules the report itself names: a node speaks for what it supervises.
  const misbehaving = reportedMisbehaviours(b.misbehaving)
    .filter((m) => modules.some((r) => r.name === m.module))
    .map((m) => ({ ...m, what: maskUrls(m.what) }));
  const goneModuleUsers = goneModuleUsersOf(b.goneModuleUsers);
  return {
    node,
    generation: typeof b.generation === "number" ? b.generation : 0,
    release: releaseOf(b.release) ?? null,
    protocol: protocolOf(b.protocol),
    receivedAt: receivedAt.toISOString(),
    modules,
    ...(files !== undefined ? { files } : {}),
    ...(moduleKeys !== undefined ? { moduleKeys } : {}),
    ...(providers !== undefined ? { providers } : {}),
    ...(misbehaving.length > 0 ? { misbehaving } : {}),
    ...(goneModuleUsers !== undefined && goneModuleUsers.length > 0 ? { goneModuleUsers } : {}),
  };
}

// Only well-formed entries, each field checked and each text clipped and masked: what a node says
// of its providers is shown as it is, so it must be no more than a standing on the bus could be.
function parseProviders(value: unknown): ReportedProvider[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const out: ReportedProvider[] = [];
  for (const raw of value.slice(0, MOST_PROVIDERS) as unknown[]) {
    const p = raw as Record<string, unknown> | null;
    if (typeof p?.["module"] !== "string" || !isModuleName(p["module"])) continue;
    if (out.some((o) => o.module === p["module"])) continue;
    const counts = p["counts"] as Record<string, unknown> | undefined;
    const count = (key: keyof ReportedCounts): number => {
      const n = counts?.[key];
      return typeof n === "number" && Number.isInteger(n) && n >= 0 ? n : 0;
    };
    const failing: ReportedFailure[] = [];
    for (const f of (Array.isArray(p["failing"]) ? p["failing"] : []).slice(0, MOST_FAILING) as unknown[]) {
      const e = f as Record<string, unknown> | null;
      const login = e?.["login"];
      const cls = e?.["class"];
      const since = isoOrNull(e?.["since"]);
      if (typeof login !== "string" || !LOGIN.test(login) || typeof cls !== "string" || !CLASS.test(cls))
        continue;
      if (since === null) continue;
      const attempts = e?.["attempts"];
      failing.push({
        login,
        node: typeof e?.["node"] === "string" && isValidNodeName(e["node"]) ? e["node"] : null,
        class: cls,
        since,
        attempts: typeof attempts === "number" && Number.isInteger(attempts) && attempts >= 1 ? attempts : 1,
        error: textOf(e?.["error"]) ?? "",
      });
    }
    const w = p["waiting"] as Record<string, unknown> | null | undefined;
    let waiting: ReportedWaiting | null = null;
    if (typeof w === "object" && w !== null) {
      const logins = (Array.isArray(w["logins"]) ? w["logins"] : [])
        .filter((l): l is string => typeof l === "string" && LOGIN.test(l))
        .slice(0, MOST_WAITING);
      const id = w["id"];
      waiting = {
        id: typeof id === "string" && /^[A-Za-z0-9_-]{1,128}$/.test(id) ? id : null,
        logins,
        count:
          typeof w["count"] === "number" && Number.isInteger(w["count"])
            ? Math.max(w["count"], logins.length)
            : logins.length,
        held: typeof w["held"] === "number" && Number.isInteger(w["held"]) ? w["held"] : 0,
        reason: textOf(w["reason"]) ?? "",
      };
    }
    const unseen = (Array.isArray(p["unseen"]) ? p["unseen"] : [])
      .slice(0, MOST_FAILING)
      .flatMap((u: unknown) => {
        const e = u as Record<string, unknown> | null;
        const login = e?.["login"];
        const since = isoOrNull(e?.["since"]);
        return typeof login === "string" && LOGIN.test(login) && since !== null ? [{ login, since }] : [];
      });
    // Parsed against the one schema of a rotation (the provider's answer's), login checked as a login.
    const rotating = (Array.isArray(p["rotating"]) ? p["rotating"] : [])
      .slice(0, MOST_FAILING)
      .flatMap((r: unknown): ReportedRotation[] => {
        const parsed = reportedRotationSchema.safeParse(r);
        return parsed.success && LOGIN.test(parsed.data.login) ? [parsed.data] : [];
      });
    // Parsed against its schema at the boundary: only a host name or address and a port are kept.
    const serves = servedEndpointOf(p["serves"]);
    out.push({
      ...(unseen.length > 0 ? { unseen } : {}),
      ...(rotating.length > 0 ? { rotating } : {}),
      ...(serves === undefined ? {} : { serves }),
      module: p["module"],
      answered: p["answered"] === true,
      problem: textOf(p["problem"]),
      askedAt: isoOrNull(p["askedAt"]) ?? new Date(0).toISOString(),
      lastPassAt: isoOrNull(p["lastPassAt"]),
      contributionsProblem: textOf(p["contributionsProblem"]),
      counts: {
        active: count("active"),
        failing: Math.max(count("failing"), failing.length),
        unasked: count("unasked"),
        "awaiting-approval": count("awaiting-approval"),
        retired: count("retired"),
      },
      failing,
      waiting,
    });
  }
  return out;
}

function textOf(value: unknown): string | null {
  if (typeof value !== "string") return null;
  const line = value.replace(/\s*[\r\n]+\s*/g, " ");
  return maskUrls(line.length <= MOST_TEXT ? line : `${line.slice(0, MOST_TEXT)}…`);
}

function isoOrNull(value: unknown): string | null {
  if (typeof value !== "string") return null;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : new Date(at).toISOString();
}

// Only well-formed entries: a module name and two user public keys, distinct (one key pair must not
// hold both credentials, or the ledger's would carry the bus's permissions too).
function parseModuleKeys(value: unknown): Record<string, ReportedModuleKeys> | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const out: Record<string, ReportedModuleKeys> = {};
  for (const [module, keys] of Object.entries(value as Record<string, unknown>)) {
    const k = keys as { bus?: unknown; ledger?: unknown } | null;
    if (!isModuleName(module) || typeof k?.bus !== "string" || typeof k.ledger !== "string") continue;
    if (!USER_KEY.test(k.bus) || !USER_KEY.test(k.ledger) || k.bus === k.ledger) continue;
    out[module] = { bus: k.bus, ledger: k.ledger };
  }
  return out;
}
