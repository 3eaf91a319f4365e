// What changed in the backend since the adapter's `afterChanges` last succeeded, and finishing it.

import type { GuardedAdapter } from "../adapter-guard.ts";
import type { Clock, Logger } from "../collaborators.ts";
import { withTimeout } from "../concurrency.ts";
import type { ConsumerBook } from "../consumer-book.ts";
import type { ReportStage } from "./report.ts";

/** What finishing the changes is given. */
export interface UnsavedChangesDeps {
  readonly adapter: Pick<GuardedAdapter, "afterChanges">;
  readonly clock: Clock;
  /** How long `afterChanges` may take (the create timeout). */
  readonly timeout: number;
  readonly book: ConsumerBook;
  readonly log: Logger;
  readonly report: Pick<ReportStage, "describe" | "passwords">;
}

/**
 * Counts the backend's changes until the adapter's `afterChanges` finishes them. When it fails,
 * what was created or re-applied since is taken as not applied: the next pass applies it again
 * (create is idempotent) and asks again.
 */
export class UnsavedChanges {
  /** Logins created or re-applied since `afterChanges` last succeeded. */
  readonly #applied = new Set<string>();
  /** Whether anything changed in the backend since `afterChanges` last succeeded. */
  #changed = false;

  constructor(private readonly deps: UnsavedChangesDeps) {}

  /** `login` was created or re-applied. */
  applied(login: string): void {
    this.#applied.add(login);
    this.#changed = true;
  }

  /** Something else changed in the backend (a retirement, a deletion). */
  changed(): void {
    this.#changed = true;
  }

  /** The adapter's `afterChanges`, once, when something changed since it last succeeded. */
  async finish(): Promise<void> {
    if (!this.#changed) return;
    const { adapter, clock, timeout, book, log, report } = this.deps;
    const after = adapter.afterChanges.bind(adapter);
    const { result } = withTimeout(clock, timeout, "finishing the changes", () => after());
    try {
      await result;
    } catch (err) {
      log.warn(
        `the backend did not finish this pass's changes (${report.describe(err, report.passwords())}); ` +
          `the ${this.#applied.size} consumer(s) applied since are applied again on the next pass`,
      );
      for (const login of this.#applied) book.notApplied(login);
      return;
    }
    this.#applied.clear();
    this.#changed = false;
  }
}
