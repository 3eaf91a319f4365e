// What `mesh status` prints: the controller's answer, as text for a person or as JSON for a script.
// A failing consumer is named with its class, since when, how many attempts and the last error.
import { formatDuration } from "@mesh/sdk/duration";
import { formatSize } from "@mesh/manifest/limit-values";
import { NO_PAINT, type Paint } from "./colour.ts";
import { formatTime, maskDeep, maskUrls } from "./format.ts";

/** How many scheduled rotations the text status lists (the soonest first). */
const ROTATIONS_DUE_SHOWN = 5;

/** One failing consumer as the controller's answer gives it. */
export interface FailingAnswer {
  provider: string;
  interface: string;
  consumer: string;
  login?: string;
  node?: string | null;
  class: string;
  since: string;
  attempts: number;
  error: string;
  at?: string;
  /** `report`: the provider's own status, from the first failure; `announcement`: on the bus after 5 minutes. */
  said?: string;
}

/** One provider module as the controller's answer gives it (from its node's report). */
export interface ProviderAnswer {
  provider: string;
  node: string;
  interfaces?: string[];
  answered: boolean;
  problem?: string | null;
  askedAt?: string | null;
  lastPassAt?: string | null;
  contributionsProblem?: string | null;
  counts?: Partial<Record<"active" | "failing" | "unasked" | "awaiting-approval" | "retired", number>> | null;
  waiting?: { id: string | null; logins: string[]; count: number; held?: number; reason?: string } | null;
  /** Where it says it serves (`host:port`, from its admin URL). */
  serves?: string;
  /** Where its consumers are sent, per interface, and whether the fleet's endpoint: disagrees. */
  endpoints?: {
    interface: string;
    given: string;
    from: "fleet" | "provider" | "manifest";
    serves: string | null;
    disagrees: boolean;
  }[];
}

/** A module whose answer its node's agent did not use, as the controller's answer gives it. */
export interface MisbehavingAnswer {
  node: string;
  module: string;
  /** What was asked (a tool: `status`, `retire list`, …). */
  answer: string;
  /** `malformed`, `too-large`, `slow` or `hung-up`. */
  fault: string;
  what: string;
  since: string;
}

/** The controller's answer to `mesh status`, read loosely: an older controller may lack fields. */
export interface StatusAnswer {
  nodes?: {
    name: string;
    enrolled?: boolean;
    lastReportAt?: string | null;
    /** `metrics`: where the module serves Prometheus metrics, while it runs and serves them. */
    /** `isolation`: the user it runs as, and why not its own; `waiting`: what holds its first start. */
    modules?: {
      name: string;
      state: string;
      restarts?: number;
      metrics?: string;
      isolation?: { isolated: boolean; user: string; reason?: string };
      waiting?: string;
      reason?: string;
      logTail?: string[];
      /** Its cgroup, the limits it runs under (null: none), the last it reached, its home's size. */
      cgroup?: string;
      limits?: { pids: number | null; memory: number | null; cpu: number | null; home: number | null };
      limitEvent?: { kind: string; text: string; at: string };
      home?: { bytes: number; at: string };
    }[];
    /** Users of this node's mesh whose module no longer runs there. */
    goneModuleUsers?: string[];
    /** The node's mesh as its agent says (release null: it says none, 0.1.0), and whether the controller works with it. */
    version?: { release: string | null; protocol: number; compatible: boolean; problem?: string };
  }[];
  consumers?: {
    consumer: string;
    interface: string;
    login: string;
    provider: string;
    node?: string;
    /** Its provider has not seen it connected since its password was applied, past the bound. */
    neverSeenConnected?: boolean;
    unusedSince?: string;
    /** The rotation of its password under way: its phase, since when, when the old one goes. */
    rotation?: { phase: string; since: string; until?: string };
    /** When the fleet's rotation schedule rotates its password next (ISO 8601). */
    rotationDue?: string;
  }[];
  failing?: FailingAnswer[];
  providers?: ProviderAnswer[];
  /** Every module whose answers its node's agent does not use, with what was wrong and since when. */
  misbehaving?: MisbehavingAnswer[];
  fleet?: { file: string; readAt: string; refused: string[] | null };
  /** Which controller leads, as the controller that answered sees it. */
  controller?: { self: string; leading: boolean; leader: string | null; term: number | null };
  /** What each controller that answered `mesh status`'s second question said of itself (the CLI adds this). */
  controllers?: { self: string; leading: boolean; leader: string | null; term: number | null }[];
  /** What the controller accepted and the bus could not store yet (retried until stored). */
  waiting?: { what: string; since: string; attempts: number; error: string; nextAt?: string }[];
  /** The answering controller's mesh: its release, protocol and state format. */
  mesh?: { release: string; protocol: number; stateFormat: number };
}

/** The answer with every failing consumer's error masked (see `maskUrls`), for printing either way. */
export function maskedAnswer(answer: StatusAnswer): StatusAnswer {
  const masked = { ...answer };
  if (answer.failing !== undefined)
    masked.failing = answer.failing.map((f) => ({ ...f, error: maskUrls(String(f.error)) }));
  if (answer.providers !== undefined) masked.providers = maskDeep(answer.providers);
  if (answer.waiting !== undefined)
    masked.waiting = answer.waiting.map((w) => ({ ...w, error: maskUrls(String(w.error)) }));
  if (answer.misbehaving !== undefined)
    masked.misbehaving = answer.misbehaving.map((m) => ({ ...m, what: maskUrls(String(m.what)) }));
  return masked;
}

/** How each way of misbehaving is said after "its answer to <tool>". */
const FAULT_WORDS: Readonly<Record<string, string>> = {
  malformed: "is malformed",
  "too-large": "is too large",
  slow: "does not come in time",
  "hung-up": "is cut off",
};

/** How long ago `iso` was at `now`, to the second: `12m30s ago`; empty when it does not parse. */
function ago(iso: string, now: number): string {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return "";
  const ms = Math.floor((now - at) / 1000) * 1000;
  return ms <= 0 ? " (just now)" : ` (${formatDuration(ms)} ago)`;
}

/** A module's state, coloured for a terminal: crashing in red, starting in yellow. */
function moduleState(state: string, paint: Paint): string {
  const padded = state.padEnd(11);
  if (state === "crashing") return paint.red(padded);
  if (state === "starting") return paint.yellow(padded);
  return padded;
}

/**
 * The answer as text for a person; `now` (ms) says how long ago things began; `paint` colours
 * what is wrong (see `paintFor`; none by default).
 */
export function formatStatus(
  answer: StatusAnswer,
  now: number = Date.now(),
  paint: Paint = NO_PAINT,
): string {
  const s = maskedAnswer(answer);
  const lines: string[] = [...controllerLines(s, paint)];
  if (s.mesh)
    lines.push(
      `version  mesh ${s.mesh.release} (protocol ${s.mesh.protocol}, state format ${s.mesh.stateFormat}), the controller that answered`,
    );
  if (s.fleet) lines.push(`fleet ${s.fleet.file}, read ${s.fleet.readAt}`);
  for (const problem of s.fleet?.refused ?? [])
    lines.push(`  ${paint.red("REFUSED")} (the last good fleet is served): ${problem}`);
  for (const w of s.waiting ?? [])
    lines.push(
      `  ${paint.yellow("WAITS")} ${w.what}: the bus cannot store it now, since ${formatTime(w.since)}` +
        `${ago(w.since, now)}, ${w.attempts} attempt(s); tried again until stored (last: ${w.error})`,
    );
  lines.push("", "NODE / MODULE            STATE       RESTARTS  METRICS");
  for (const n of s.nodes ?? []) {
    const v = n.version;
    const version =
      v === undefined
        ? ""
        : `, mesh ${v.release ?? "0.1.0"} (protocol ${v.protocol})` +
          (v.compatible ? "" : ` ${paint.red("INCOMPATIBLE")}`);
    lines.push(
      `${n.name.padEnd(24)} ${n.enrolled ? "enrolled" : paint.yellow("not enrolled")}${n.lastReportAt ? `, reported ${n.lastReportAt}` : ""}${version}`,
    );
    if (v !== undefined && !v.compatible && v.problem !== undefined) lines.push(`  ${paint.red(v.problem)}`);
    for (const m of n.modules ?? []) {
      const restarts = String(m.restarts ?? 0);
      lines.push(
        `  ${m.name.padEnd(22)} ${moduleState(m.state, paint)} ` +
          (m.metrics ? `${restarts.padEnd(9)} ${m.metrics}` : restarts),
      );
      for (const bad of (s.misbehaving ?? []).filter((b) => b.node === n.name && b.module === m.name)) {
        lines.push(
          `    ${paint.red("misbehaving")} since ${formatTime(bad.since)}${ago(bad.since, now)}: ` +
            `its answer to ${bad.answer} ${FAULT_WORDS[bad.fault] ?? `was not used (${bad.fault})`}: ${bad.what}`,
        );
      }
      if (m.waiting !== undefined) lines.push(`    ${paint.yellow("waits for")} ${m.waiting}`);
      if (m.limitEvent !== undefined && m.limitEvent.text !== m.reason) {
        lines.push(`    ${paint.red(m.limitEvent.text)} at ${formatTime(m.limitEvent.at)}`);
      }
      if (m.reason !== undefined) lines.push(`    ${paint.red("not started")}: ${m.reason}`);
      if (m.logTail !== undefined && m.logTail.length > 0) {
        lines.push(`    ${paint.red("last log lines")}:`);
        for (const line of m.logTail) lines.push(`      ${line}`);
      }
      if (m.isolation !== undefined && !m.isolation.isolated) {
        lines.push(
          `    ${paint.yellow("not isolated")}: runs as ${m.isolation.user}` +
            (m.isolation.reason !== undefined ? ` (${m.isolation.reason})` : ""),
        );
      }
      const uses = resourceWords(m);
      if (uses !== "") lines.push(`    ${uses}`);
    }
    if (n.goneModuleUsers !== undefined && n.goneModuleUsers.length > 0) {
      lines.push(
        `  users of modules gone from ${n.name} (kept for a rollback; \`userdel\` removes one, see docs/operating.md): ` +
          n.goneModuleUsers.join(", "),
      );
    }
  }
  lines.push("", "CONSUMER         INTERFACE            LOGIN                PROVIDER");
  for (const c of s.consumers ?? []) {
    lines.push(`${c.consumer.padEnd(16)} ${c.interface.padEnd(20)} ${c.login.padEnd(20)} ${c.provider}`);
  }
  const rotating = (s.consumers ?? []).filter((c) => c.rotation !== undefined);
  if (rotating.length > 0) {
    lines.push("", `ROTATIONS UNDER WAY: ${rotating.length}`);
    for (const c of rotating) {
      const r = c.rotation ?? { phase: "?", since: "?" };
      const until = r.until === undefined ? "" : `, the old password goes at ${r.until}`;
      lines.push(
        `  ${c.consumer} (${c.interface}, login ${c.login} at ${c.provider}): ${r.phase} since ${r.since}${until}`,
      );
    }
  }
  const due = (s.consumers ?? [])
    .filter((c) => c.rotationDue !== undefined)
    .sort((a, b) => (a.rotationDue ?? "").localeCompare(b.rotationDue ?? ""));
  if (due.length > 0) {
    const shown = due.slice(0, ROTATIONS_DUE_SHOWN);
    const more = due.length - shown.length;
    lines.push(
      "",
      `ROTATIONS DUE NEXT: ${due.length} scheduled${more > 0 ? `, the first ${shown.length}:` : ""}`,
    );
    for (const c of shown) {
      lines.push(
        `  ${c.consumer} (${c.interface}, login ${c.login} at ${c.provider}): rotation due ${c.rotationDue}`,
      );
    }
    if (more > 0) lines.push(`  … and ${more} more (mesh status --json lists each consumer's rotationDue)`);
  }
  const unseen = (s.consumers ?? []).filter((c) => c.neverSeenConnected === true);
  if (unseen.length > 0) {
    lines.push(
      "",
      `${paint.yellow("warning:")} NEVER SEEN CONNECTED: ${unseen.length} consumer(s) whose provider has not seen ` +
        "their login in use since their password was applied (an app pointed at another server, misconfigured, or not running)",
    );
    for (const c of unseen) {
      lines.push(
        `  ${c.consumer} (${c.interface}, login ${c.login} at ${c.provider}) since ${c.unusedSince ?? "?"}`,
      );
    }
  }
  if (s.providers !== undefined && s.providers.length > 0)
    lines.push("", ...providerLines(s.providers, paint));
  if (s.failing !== undefined) {
    lines.push("");
    const silent = (s.providers ?? []).filter((p) => !p.answered).map((p) => p.provider);
    if (s.failing.length === 0 && s.providers === undefined) {
      lines.push(
        "FAILING: none announced (a provider announces a consumer after 5 minutes of failures without a success)",
      );
    } else if (s.failing.length === 0) {
      lines.push(
        silent.length === 0
          ? "FAILING: none (as each provider's own status says)"
          : `FAILING: none known; ${silent.join(", ")} not heard from (see PROVIDERS above)`,
      );
    } else {
      lines.push(
        `${paint.red(paint.bold("FAILING:"))} ${s.failing.length} consumer(s) their provider cannot serve`,
      );
      for (const f of s.failing) {
        const who = [
          f.login !== undefined && f.login !== f.consumer ? `login ${f.login}` : "",
          f.node ? `on ${f.node}` : "",
        ].filter((part) => part !== "");
        lines.push(
          `  ${f.consumer}${who.length > 0 ? ` (${who.join(", ")})` : ""}: ${f.interface} from ${f.provider}`,
          `    ${paint.red(f.class)} since ${formatTime(f.since)}${ago(f.since, now)}, ${f.attempts} attempt(s)` +
            (f.at ? `, last said ${formatTime(f.at)}` : "") +
            (f.said === "announcement" ? " on the bus" : ""),
          `    last error: ${f.error.replace(/\s*[\r\n]+\s*/g, " ")}`,
        );
      }
    }
  }
  return `${lines.join("\n")}\n`;
}

/**
 * Who leads, in which term, and who stands by: from the controllers' own words when they came (the
 * one that says it leads is believed first), else from the controller that answered. Nothing from a
 * controller too old to say.
 */
function controllerLines(s: StatusAnswer, paint: Paint): string[] {
  const heard = s.controllers ?? [];
  const answered = s.controller;
  if (answered === undefined && heard.length === 0) return [];
  const leading = heard.find((c) => c.leading) ?? (answered?.leading === true ? answered : undefined);
  const leader = leading?.self ?? answered?.leader ?? heard.find((c) => c.leader !== null)?.leader ?? null;
  const term = leading?.term ?? answered?.term ?? null;
  const standbys = [
    ...new Set(
      [...heard, ...(answered !== undefined ? [answered] : [])]
        .filter((c) => !c.leading && c.self !== leader)
        .map((c) => c.self),
    ),
  ].sort();
  const silent = leader !== null && heard.length > 0 && !heard.some((c) => c.self === leader);
  return [
    leader === null
      ? `leader   ${paint.yellow("none")}: no controller holds the lease now (a standby takes it over)`
      : `leader   ${leader}${term !== null ? `, term ${term}` : ""}` +
        (silent ? ` (${paint.yellow("did not answer")}: the others last saw it lead)` : ""),
    `standby  ${standbys.length > 0 ? standbys.join(", ") : "none answered"}`,
  ];
}

// What a module may use and uses: `limits pids 512, memory 64M; home 12M (limit 1G)`; empty when
// its node says nothing of it.
function resourceWords(
  m: NonNullable<NonNullable<StatusAnswer["nodes"]>[number]["modules"]>[number],
): string {
  const l = m.limits;
  const bounded =
    l === undefined
      ? []
      : [
          l.pids === null ? "" : `pids ${l.pids}`,
          l.memory === null ? "" : `memory ${formatSize(l.memory)}`,
          l.cpu === null ? "" : `cpu ${l.cpu}`,
        ].filter((p) => p !== "");
  const homeLimit = l?.home == null ? "" : ` (limit ${formatSize(l.home)})`;
  const home =
    m.home !== undefined
      ? `home ${formatSize(m.home.bytes)}${homeLimit}`
      : homeLimit === ""
        ? ""
        : `home limit ${formatSize(l?.home ?? 0)}`;
  const limits = l === undefined ? "" : bounded.length > 0 ? `limits ${bounded.join(", ")}` : "no limits";
  return [limits, home].filter((p) => p !== "").join("; ");
}

// Each provider's counts, its retirement waiting for a person and its retired consumers, with the
// command that acts on each, as the dashboard shows them.
// Where a provider's consumers are sent, when it is not simply the fleet's endpoint: agreed with:
// a disagreement names both addresses, and an address learnt from the provider says so.
function endpointLines(p: ProviderAnswer, paint: Paint): string[] {
  const lines: string[] = [];
  for (const e of p.endpoints ?? []) {
    if (e.disagrees) {
      lines.push(
        `  ${paint.yellow("ENDPOINT DISAGREES")}: its ${e.interface} consumers are sent to ${e.given} (the fleet's endpoint:), ` +
          `while ${p.provider} serves at ${e.serves ?? "?"} (its admin URL, where it makes their logins); ` +
          `correct endpoint: under modules.${p.provider} unless ${e.given} reaches the same server`,
      );
    } else if (e.from === "provider") {
      lines.push(
        `  ${e.interface} consumers are sent to ${e.given}, where it serves (the fleet names no endpoint:)`,
      );
    }
  }
  return lines;
}

function providerLines(providers: readonly ProviderAnswer[], paint: Paint): string[] {
  const lines = ["PROVIDER         NODE             ACTIVE  FAILING  UNASKED  WAITING  RETIRED  LAST PASS"];
  for (const p of providers) {
    const head = `${p.provider.padEnd(16)} ${p.node.padEnd(16)}`;
    const c = p.counts;
    if (!p.answered || c == null) {
      lines.push(
        `${head} ${paint.yellow("not heard from")}: ${p.problem ?? "its node has not reported on it"}`,
      );
      continue;
    }
    const n = (k: keyof NonNullable<ProviderAnswer["counts"]>): string => String(c[k] ?? 0);
    const failing = n("failing").padEnd(8);
    lines.push(
      `${head} ${n("active").padEnd(7)} ${c.failing ? paint.red(failing) : failing} ${n("unasked").padEnd(8)} ` +
        `${n("awaiting-approval").padEnd(8)} ${n("retired").padEnd(8)} ${p.lastPassAt ? formatTime(p.lastPassAt) : "none yet"}`,
    );
    if (p.contributionsProblem)
      lines.push(`  ${paint.red("nothing applied or retired")}: ${p.contributionsProblem}`);
    lines.push(...endpointLines(p, paint));
    const w = p.waiting;
    if (w && w.count > 0) {
      const more = w.count > w.logins.length ? ` and ${w.count - w.logins.length} more` : "";
      lines.push(
        `  ${paint.yellow("WAITS FOR A PERSON")}: retiring ${w.count} consumer(s): ${w.logins.join(", ")}${more}` +
          (w.reason ? ` (${w.reason})` : ""),
        `    approve with: mesh tool ${p.provider} retire approve${w.id ? ` ${w.id}` : ""}`,
      );
    }
    if (c.retired)
      lines.push(
        `  ${c.retired} retired: \`mesh tool ${p.provider} cleanup list\` lists them, \`cleanup delete LOGIN\` deletes one`,
      );
  }
  return lines;
}
