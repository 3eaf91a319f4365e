// What `mesh status` prints: the controller's answer, as text for a person or as JSON for a script.
// A failing consumer is named with its class, since when, how many attempts and the last error.
import { formatDuration } from "@mesh/sdk";
import { NO_PAINT, type Paint } from "./colour.ts";
import { formatTime, maskUrls } from "./format.ts";

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
}

/** The controller's answer to `mesh status`, read loosely: an older controller may lack fields. */
export interface StatusAnswer {
  nodes?: {
    name: string;
    enrolled?: boolean;
    lastReportAt?: string | null;
    /** `metrics`: where the module serves Prometheus metrics, while it runs and serves them. */
    modules?: { name: string; state: string; restarts?: number; metrics?: string }[];
  }[];
  consumers?: { consumer: string; interface: string; login: string; provider: string; node?: string }[];
  failing?: FailingAnswer[];
  fleet?: { file: string; readAt: string; refused: string[] | null };
}

/** The answer with every failing consumer's error masked (see `maskUrls`), for printing either way. */
export function maskedAnswer(answer: StatusAnswer): StatusAnswer {
  if (answer.failing === undefined) return answer;
  return { ...answer, failing: answer.failing.map((f) => ({ ...f, error: maskUrls(String(f.error)) })) };
}

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
  const lines: string[] = [];
  if (s.fleet) lines.push(`fleet ${s.fleet.file}, read ${s.fleet.readAt}`);
  for (const problem of s.fleet?.refused ?? [])
    lines.push(`  ${paint.red("REFUSED")} (the last good fleet is served): ${problem}`);
  lines.push("", "NODE / MODULE            STATE       RESTARTS  METRICS");
  for (const n of s.nodes ?? []) {
    lines.push(
      `${n.name.padEnd(24)} ${n.enrolled ? "enrolled" : paint.yellow("not enrolled")}${n.lastReportAt ? `, reported ${n.lastReportAt}` : ""}`,
    );
    for (const m of n.modules ?? []) {
      const restarts = String(m.restarts ?? 0);
      lines.push(
        `  ${m.name.padEnd(22)} ${moduleState(m.state, paint)} ` +
          (m.metrics ? `${restarts.padEnd(9)} ${m.metrics}` : restarts),
      );
    }
  }
  lines.push("", "CONSUMER         INTERFACE            LOGIN                PROVIDER");
  for (const c of s.consumers ?? []) {
    lines.push(`${c.consumer.padEnd(16)} ${c.interface.padEnd(20)} ${c.login.padEnd(20)} ${c.provider}`);
  }
  if (s.failing !== undefined) {
    lines.push("");
    if (s.failing.length === 0) {
      lines.push(
        "FAILING: none announced (a provider announces a consumer after 5 minutes of failures without a success)",
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
            (f.at ? `, last said ${formatTime(f.at)}` : ""),
          `    last error: ${f.error.replace(/\s*[\r\n]+\s*/g, " ")}`,
        );
      }
    }
  }
  return `${lines.join("\n")}\n`;
}
