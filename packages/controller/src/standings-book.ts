// The providers' standings as the controller last heard them (DESIGN §2, §3 rule 6): which consumer
// each provider module says is failing, since when, how often and why. Who is speaking is read from
// the subject, which the server lets only that module publish to, never from the body; the body only
// says what is said. Newest wins, so a message that arrives late never undoes a newer one.
import { EVENTS_PREFIX, isModuleName, type Plan } from "@mesh/manifest";
import type { BusLogger } from "@mesh/bus";
import { maskUrls } from "@mesh/sdk/provider";
import { z } from "zod";

/** What the controller subscribes to for standings: every module's `provisioner.*` events. */
export const STANDINGS_SUBJECT = `${EVENTS_PREFIX}.*.provisioner.*`;

/** How many (provider, consumer) pairs the book keeps at most, when not told. */
export const DEFAULT_MAX_STANDINGS = 10_000;

/** The most of an error's text kept and shown; the sdk clips to less, so this only stops abuse. */
const MOST_ERROR = 1_000;

/** One consumer a provider module says is failing. */
export interface FailingStanding {
  /** The provider module (its fleet name), read from the subject. */
  readonly provider: string;
  /** The interface it provides to this consumer. */
  readonly interface: string;
  /** The instance name the provider marks its consumers with. */
  readonly instance: string;
  /** The node the provider runs on, as it says; null when it does not know. */
  readonly providerNode: string | null;
  /** The consumer's login. */
  readonly login: string;
  /** The consumer's node, as the provider says; null when it does not know. */
  readonly node: string | null;
  /** The failure's class: `credentials-rejected`, `unreachable`, `secret-unreadable`, `refused`, or the adapter's own. */
  readonly class: string;
  /** The last error, as the provider scrubbed it of passwords; one line. */
  readonly error: string;
  /** ISO 8601: when the run of failures began. */
  readonly since: string;
  readonly attempts: number;
  /** ISO 8601: when it was said (the provider's time, never later than when it was heard). */
  readonly at: string;
}

/** A consumer whose run of failures a provider module said is over. */
export interface Recovery {
  readonly provider: string;
  readonly login: string;
  /** ISO 8601: when it was said. */
  readonly at: string;
  /** Why it ended when not by a success: `no longer asked for`; `first-success` after a restart. */
  readonly why: string | null;
}

/** What became of one message handed to the book. */
export type StandingOutcome =
  /** Kept: the consumer is failing. */
  | "failing"
  /** Kept: the consumer is not failing (any more). */
  | "recovered"
  /** Older than what the book holds for that consumer: nothing changed. */
  | "stale"
  /** Not a standing: bad subject or body. Counted, said once per sender. */
  | "refused";

/** Counters of what the book did not keep. */
export interface StandingsStats {
  /** Malformed messages refused. */
  readonly refused: number;
  /** Messages older than what was held. */
  readonly stale: number;
  /** Entries dropped to stay within the bound. */
  readonly dropped: number;
}

/** How to keep the book. */
export interface StandingsBookOptions {
  /** Where it says what it refuses and what it drops (once each); never given a password. */
  readonly logger: BusLogger;
  /** At most this many (provider, consumer) pairs (DEFAULT_MAX_STANDINGS). */
  readonly maxEntries?: number;
  /** The clock, in ms since the epoch (Date.now). */
  readonly now?: () => number;
}

const isoTime = z.iso.datetime({ offset: true });
const nodeName = z.string().min(1).max(64).nullable().optional();
const common = {
  provider: z.string().min(1).max(128),
  instance: z.string().min(1).max(128).optional(),
  "provider-node": nodeName,
  consumer: z.string().min(1).max(128),
  node: nodeName,
  at: isoTime.optional(),
};
const failingBody = z.object({
  ...common,
  instance: z.string().min(1).max(128),
  class: z.string().regex(/^[a-z][a-z0-9-]{0,63}$/, "a class is a word like unreachable"),
  error: z.string(),
  since: isoTime,
  attempts: z.number().int().min(1),
});
const recoveredBody = z.object({
  ...common,
  since: isoTime.optional(),
  attempts: z.number().int().min(0).optional(),
  why: z.string().max(200).optional(),
});

type Entry =
  | { readonly kind: "failing"; readonly time: number; readonly standing: FailingStanding }
  | { readonly kind: "recovered"; readonly time: number; readonly recovery: Recovery };

/** The sender a standings subject names, and its event; undefined when it is not a standings subject. */
export function standingsSender(
  subject: string,
): { readonly module: string; readonly event: "failing" | "recovered" } | undefined {
  const parts = subject.split(".");
  if (parts.length !== 5 || `${parts[0]}.${parts[1]}` !== EVENTS_PREFIX || parts[3] !== "provisioner")
    return undefined;
  const [, , module, , event] = parts;
  if (!isModuleName(module) || (event !== "failing" && event !== "recovered")) return undefined;
  return { module, event };
}

/**
 * The newest standing of each (provider module, consumer login), from the `provisioner.failing` /
 * `provisioner.recovered` events the providers publish. Bounded: past `maxEntries` pairs, recovered
 * pairs go first (oldest first), then the oldest failing ones; what is dropped is counted and said
 * once. Never throws for what a message holds.
 */
export class StandingsBook {
  readonly #entries = new Map<string, Entry>();
  readonly #log: BusLogger;
  readonly #max: number;
  readonly #now: () => number;
  readonly #warned = new Set<string>();
  #refused = 0;
  #stale = 0;
  #dropped = 0;

  constructor(options: StandingsBookOptions) {
    this.#log = options.logger;
    this.#max = Math.max(1, options.maxEntries ?? DEFAULT_MAX_STANDINGS);
    this.#now = options.now ?? Date.now;
  }

  /**
   * Takes one message as it came off the bus: `subject` says who sent it and what it is, `data` is
   * its JSON body.
   */
  take(subject: string, data: Uint8Array): StandingOutcome {
    const sender = standingsSender(subject);
    if (sender === undefined) {
      return this.#refuse("?", `${JSON.stringify(subject.slice(0, 200))} is not a standings subject`);
    }
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder().decode(data));
    } catch {
      return this.#refuse(sender.module, "its body is not JSON");
    }
    const heard = this.#now();
    if (sender.event === "failing") {
      const parsed = failingBody.safeParse(json);
      if (!parsed.success) return this.#refuse(sender.module, problemOf(parsed.error));
      const b = parsed.data;
      const time = timeOf(b.at, heard);
      const standing: FailingStanding = {
        provider: sender.module,
        interface: b.provider,
        instance: b.instance,
        providerNode: b["provider-node"] ?? null,
        login: b.consumer,
        node: b.node ?? null,
        class: b.class,
        // Providers scrub their own secrets; a URL a driver wrote into the error is masked here,
        // once, so no reader (status, dashboard, metrics) shows it whole.
        error: maskUrls(oneLine(b.error)),
        since: new Date(Date.parse(b.since)).toISOString(),
        attempts: b.attempts,
        at: new Date(time).toISOString(),
      };
      return this.#keep(sender.module, b.consumer, { kind: "failing", time, standing });
    }
    const parsed = recoveredBody.safeParse(json);
    if (!parsed.success) return this.#refuse(sender.module, problemOf(parsed.error));
    const b = parsed.data;
    const time = timeOf(b.at, heard);
    const recovery: Recovery = {
      provider: sender.module,
      login: b.consumer,
      at: new Date(time).toISOString(),
      why: b.why ?? null,
    };
    return this.#keep(sender.module, b.consumer, { kind: "recovered", time, recovery });
  }

  /** Every failing consumer, by provider then login. */
  failing(): FailingStanding[] {
    const out: FailingStanding[] = [];
    for (const e of this.#entries.values()) if (e.kind === "failing") out.push(e.standing);
    return out.sort((a, b) => compare(a.provider, b.provider) || compare(a.login, b.login));
  }

  /** The last recovery said for `login` by the provider module `provider`, if the book holds one. */
  recovery(provider: string, login: string): Recovery | undefined {
    const e = this.#entries.get(keyOf(provider, login));
    return e?.kind === "recovered" ? e.recovery : undefined;
  }

  /**
   * Forgets every pair `keep` says no (a consumer the fleet no longer has, a provider it no longer
   * runs); returns how many were forgotten.
   */
  retain(keep: (provider: string, login: string) => boolean): number {
    let gone = 0;
    for (const [key, e] of this.#entries) {
      const [provider, login] =
        e.kind === "failing"
          ? [e.standing.provider, e.standing.login]
          : [e.recovery.provider, e.recovery.login];
      if (!keep(provider, login)) {
        this.#entries.delete(key);
        gone += 1;
      }
    }
    return gone;
  }

  /** Forgets every pair that is not a consumer of its provider in `plan`; returns how many. */
  retainPlan(plan: Plan): number {
    const served = new Set(plan.instances.flatMap((i) => i.consumers.map((c) => keyOf(i.provider, c.login))));
    return this.retain((provider, login) => served.has(keyOf(provider, login)));
  }

  /** How many pairs it holds. */
  get size(): number {
    return this.#entries.size;
  }

  stats(): StandingsStats {
    return { refused: this.#refused, stale: this.#stale, dropped: this.#dropped };
  }

  #keep(provider: string, login: string, entry: Entry): StandingOutcome {
    const key = keyOf(provider, login);
    const held = this.#entries.get(key);
    if (held !== undefined && held.time > entry.time) {
      this.#stale += 1;
      return "stale";
    }
    if (held === undefined) this.#makeRoom();
    // Re-inserted, so the map's order is the order of the latest word on each pair.
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    if (entry.kind === "failing" && held?.kind !== "failing") {
      const s = entry.standing;
      this.#log.warn(
        `${provider} says ${login} (${s.interface}) is failing since ${s.since}: ${s.class}, ${s.attempts} attempt(s); mesh status shows it`,
      );
    } else if (entry.kind === "recovered" && held?.kind === "failing") {
      const why = entry.recovery.why;
      this.#log.info(`${provider} says ${login} is no longer failing${why ? ` (${why})` : ""}`);
    }
    return entry.kind;
  }

  #makeRoom(): void {
    while (this.#entries.size >= this.#max) {
      let victim: string | undefined;
      for (const [key, e] of this.#entries) {
        if (e.kind === "recovered") {
          victim = key;
          break;
        }
      }
      let oldest = Infinity;
      if (victim === undefined) {
        for (const [key, e] of this.#entries) {
          if (e.time < oldest) {
            oldest = e.time;
            victim = key;
          }
        }
      }
      if (victim === undefined) return;
      const dropped = this.#entries.get(victim);
      this.#entries.delete(victim);
      if (this.#dropped === 0) {
        this.#log.warn(
          `the controller keeps at most ${this.#max} standings; ${dropped?.kind === "failing" ? "the oldest failing one" : "the oldest recovered one"} was dropped ` +
            `to make room (recovered ones go first, then the oldest failing); further drops are counted, not said`,
        );
      }
      this.#dropped += 1;
    }
  }

  #refuse(sender: string, why: string): StandingOutcome {
    this.#refused += 1;
    if (!this.#warned.has(sender)) {
      // Bounded like the book: past it, every sender counts as already told.
      if (this.#warned.size < this.#max) this.#warned.add(sender);
      else return "refused";
      this.#log.warn(
        `a standings message from ${sender === "?" ? "an unknown sender" : `module ${sender}`} was refused: ${why}; ` +
          `a standing is the JSON the sdk's harness announces (provider, instance, consumer, class, error, since, attempts); ` +
          `further malformed ones from it are counted, not said`,
      );
    }
    return "refused";
  }
}

function keyOf(provider: string, login: string): string {
  return `${provider}\u0000${login}`;
}

/** The message's time: when it says it was said, never later than when it was heard (a clock ahead cannot pin a standing). */
function timeOf(at: string | undefined, heard: number): number {
  if (at === undefined) return heard;
  const said = Date.parse(at);
  return Number.isNaN(said) ? heard : Math.min(said, heard);
}

function oneLine(text: string): string {
  const line = text.replace(/\s*[\r\n]+\s*/g, " ");
  return line.length <= MOST_ERROR ? line : `${line.slice(0, MOST_ERROR)}…`;
}

function problemOf(error: z.ZodError): string {
  const first = error.issues[0];
  if (first === undefined) return "its body is not a standing";
  const path = first.path.length > 0 ? first.path.join(".") : "the body";
  return `${path}: ${first.message}`;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
