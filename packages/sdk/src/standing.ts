import type { FailureClass } from "./adapter.ts";
import type { Announcer, Clock, StandingEvent } from "./collaborators.ts";

/** One consumer's unbroken run of failures. */
export interface Trouble {
  readonly since: number;
  readonly attempts: number;
  readonly class: FailureClass;
  readonly text: string;
  readonly node: string | undefined;
  /** When it was last announced failing; undefined while it has not been. */
  readonly saidAt: number | undefined;
}

/** Who the standings name as the provider. */
export interface StandingSource {
  readonly iface: string;
  readonly instance: string;
  readonly node: string | undefined;
}

/**
 * Keeps each consumer's run of failures and announces it (DESIGN §3 rule 6): failing once it has
 * lasted `failingAfter` without a success, again every `sayAgainEvery` while it lasts, and recovered
 * at the first success after. The first success since this process started is announced too, so a
 * controller never keeps a failure that a restarted provider has forgotten.
 */
export class Standings {
  readonly #runs = new Map<string, Trouble>();
  readonly #heard = new Set<string>();

  constructor(
    private readonly source: StandingSource,
    private readonly clock: Clock,
    private readonly announcer: Announcer,
    private readonly timing: { readonly failingAfter: number; readonly sayAgainEvery: number },
    private readonly onFirstFailing: (login: string, trouble: Trouble) => void,
  ) {}

  /** The run of failures of `login`, if it is failing. */
  get(login: string): Trouble | undefined {
    return this.#runs.get(login);
  }

  /** Every login with a run of failures. */
  logins(): string[] {
    return [...this.#runs.keys()];
  }

  /** Counts one more failure, and announces the run when it is due. */
  failed(login: string, node: string | undefined, cls: FailureClass, text: string): void {
    const now = this.clock.now();
    const was = this.#runs.get(login);
    const run: Trouble = {
      since: was?.since ?? now,
      attempts: (was?.attempts ?? 0) + 1,
      class: cls,
      text,
      node,
      saidAt: was?.saidAt,
    };
    this.#runs.set(login, run);
    if (now - run.since < this.timing.failingAfter) return;
    if (run.saidAt !== undefined && now - run.saidAt < this.timing.sayAgainEvery) return;
    this.#runs.set(login, { ...run, saidAt: now });
    if (run.saidAt === undefined) this.onFirstFailing(login, run);
    this.#announce("provisioner.failing", {
      consumer: login,
      node: node ?? null,
      class: cls,
      error: text,
      since: new Date(run.since).toISOString(),
      attempts: run.attempts,
    });
  }

  /** Ends a run of failures; announces recovery (or the first success since start). */
  succeeded(login: string): void {
    const first = !this.#heard.has(login);
    this.#heard.add(login);
    const run = this.#runs.get(login);
    this.#runs.delete(login);
    if (run?.saidAt !== undefined) this.#recovered(login, run, undefined);
    else if (first) this.#announce("provisioner.recovered", { consumer: login, why: "first-success" });
  }

  /** Ends a run for a consumer no longer asked for and not held: nobody fails it any more. */
  clear(login: string, why: string): void {
    const run = this.#runs.get(login);
    this.#runs.delete(login);
    // A run never announced has nothing to take back.
    if (run?.saidAt !== undefined) this.#recovered(login, run, why);
  }

  #recovered(login: string, run: Trouble, why: string | undefined): void {
    this.#announce("provisioner.recovered", {
      consumer: login,
      node: run.node ?? null,
      since: new Date(run.since).toISOString(),
      attempts: run.attempts,
      ...(why ? { why } : {}),
    });
  }

  #announce(event: StandingEvent, body: Record<string, unknown>): void {
    try {
      this.announcer.announce(event, {
        provider: this.source.iface,
        instance: this.source.instance,
        "provider-node": this.source.node ?? null,
        ...body,
      });
    } catch {
      // An announcer that throws must not stop the loop; the bus says its own troubles.
    }
  }
}
