// The nodes' reports, as the controller last heard them: what `mesh status` shows. Reports are
// trusted only as far as the bus vouches: the node is read from the subject (which the server lets
// only that node publish to), never from the body.
import { isValidNodeName, MESH_SUBJECT_PREFIX } from "@mesh/bus";
import { isModuleName } from "@mesh/manifest";
import { metricsUrlOf } from "@mesh/sdk";

/** How a module of a node is doing, as its agent reports it. */
export interface ModuleReport {
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
}

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
  /** ISO 8601, the controller's clock: when the report arrived. */
  readonly receivedAt: string;
  readonly modules: readonly ModuleReport[];
  readonly files?: { readonly written: number; readonly unchanged: number };
  /** The public keys (`U…`) of each module's bus and ledger key pairs, as the node made them. */
  readonly moduleKeys?: Readonly<Record<string, ReportedModuleKeys>>;
}

/** A module's public keys as its node reports them. */
export interface ReportedModuleKeys {
  readonly bus: string;
  readonly ledger: string;
}

const STATES = new Set(["starting", "running", "crashing", "stopped"]);
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
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(data));
  } catch {
    return undefined;
  }
  const b = body as { generation?: unknown; modules?: unknown; files?: unknown; moduleKeys?: unknown } | null;
  if (b === null || typeof b !== "object" || !Array.isArray(b.modules)) return undefined;
  const modules: ModuleReport[] = [];
  for (const m of b.modules as unknown[]) {
    const e = m as Partial<Record<keyof ModuleReport, unknown>> | null;
    if (typeof e?.name !== "string" || typeof e.state !== "string" || !STATES.has(e.state)) continue;
    // Shown as a link on the dashboard: only ever a web address, whatever a node sends.
    const metrics = metricsUrlOf(e.metrics);
    const isolation = isolationOf(e.isolation);
    modules.push({
      name: e.name,
      state: e.state as ModuleReport["state"],
      ...(typeof e.pid === "number" ? { pid: e.pid } : {}),
      restarts: typeof e.restarts === "number" ? e.restarts : 0,
      ...(e.lastExit !== undefined ? { lastExit: e.lastExit } : {}),
      log: typeof e.log === "string" ? e.log : "",
      ...(metrics !== undefined ? { metrics } : {}),
      ...(isolation !== undefined ? { isolation } : {}),
    });
  }
  const f = b.files as { written?: unknown; unchanged?: unknown } | undefined;
  const files =
    typeof f?.written === "number" && typeof f.unchanged === "number"
      ? { written: f.written, unchanged: f.unchanged }
      : undefined;
  const moduleKeys = parseModuleKeys(b.moduleKeys);
  return {
    node,
    generation: typeof b.generation === "number" ? b.generation : 0,
    receivedAt: receivedAt.toISOString(),
    modules,
    ...(files !== undefined ? { files } : {}),
    ...(moduleKeys !== undefined ? { moduleKeys } : {}),
  };
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
