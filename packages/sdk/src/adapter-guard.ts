// The guard every adapter runs inside, in the harness and in the conformance kit alike, so that no
// adapter repeats a rule the mesh holds for all of them (as kysely wraps every driver once, so that
// none repeats "initialise once, destroy once"): every login is checked before any call reaches the
// adapter, `holds` and `holdsMany` are each made from the other when only one is written, `close`
// runs once, and `delete` reaches the adapter only for a retired consumer this instance made.
// What an adapter hands back is held to one shape too: a retirement's `why` is clipped before it
// is written into a mark, and an inventory entry's when and why are kept only for a retired one.

import type {
  Adapter,
  Deleted,
  FailureClass,
  InventoryEntry,
  Provision,
  ProviderAdapter,
  Retired,
  RotationMark,
} from "./adapter.ts";
import { assertInstance } from "./admin-settings.ts";
import type { Logger } from "./collaborators.ts";
import { forEachLimited } from "./concurrency.ts";
import { readMinted, readRotation } from "./consumer-mark.ts";
import { assertLogin, InvalidLoginError, isValidLogin, secondLogin } from "./login.ts";
import { classifyBackendFailure } from "./backend-failures.ts";
import { isRefusal, NotMadeHereError, NotRetiredError } from "./refusals.ts";

/** The longest `why` an adapter is asked to write into a mark; a longer one is clipped. */
export const WHY_MOST = 500;

/** What the guard knows of the provider it guards. */
export interface GuardOptions {
  /** The provider instance the adapter was made for: named in the refusals the guard makes. */
  readonly instance: string;
  /** Where an inventory entry with a login the mesh could not have made is said (nowhere). */
  readonly logger?: Logger | undefined;
  /** How many `holds` run at once when `holdsMany` is made from them (8). */
  readonly concurrency?: number | undefined;
}

/**
 * Wraps `adapter` in the guard, once: an adapter already guarded for the same instance is returned
 * as it is.
 * @throws AdminSettingError when `options.instance` is not a usable instance name.
 */
export function guardAdapter(adapter: ProviderAdapter, options: GuardOptions): GuardedAdapter {
  if (adapter instanceof GuardedAdapter && adapter.instance === options.instance) return adapter;
  return new GuardedAdapter(adapter, options);
}

/**
 * An adapter with the mesh's rules around it. It has both `holds` and `holdsMany`; `batched` says
 * whether the adapter itself answers many at once (when not, `holdsMany` asks `holds` for each).
 */
export class GuardedAdapter implements Adapter {
  readonly instance: string;
  readonly #adapter: ProviderAdapter;
  readonly #logger: Logger | undefined;
  readonly #concurrency: number;
  #closing: Promise<void> | undefined;

  constructor(adapter: ProviderAdapter, options: GuardOptions) {
    this.#adapter = adapter;
    this.instance = assertInstance(options.instance);
    this.#logger = options.logger;
    this.#concurrency = options.concurrency ?? 8;
  }

  /** Whether the guarded adapter has a `holdsMany` of its own, asking a constant number of questions. */
  get batched(): boolean {
    return this.#adapter.holdsMany !== undefined;
  }

  /** How many consumers the guarded adapter answers in one `holdsMany`; undefined when it does not say. */
  get verifyBatch(): number | undefined {
    const size = this.#adapter.verifyBatch;
    return typeof size === "number" && size >= 1 ? size : undefined;
  }

  /** Whether the guarded adapter can tell which logins are connected (`seenConnected`). */
  get seesSessions(): boolean {
    return this.#adapter.seenConnected !== undefined;
  }

  /**
   * The guarded adapter's `seenConnected`, keeping only logins it was asked about; an empty set
   * when it has none.
   */
  async seenConnected(logins: readonly string[], signal: AbortSignal): Promise<ReadonlySet<string>> {
    if (this.#adapter.seenConnected === undefined || logins.length === 0) return new Set();
    const asked = new Set(logins);
    const said = await this.#adapter.seenConnected(logins, signal);
    return new Set([...said].filter((l) => asked.has(l)));
  }

  /** The guarded adapter's `afterChanges`; nothing to do when it has none. */
  async afterChanges(): Promise<void> {
    await this.#adapter.afterChanges?.();
  }

  /** The guarded adapter's `exists`, login checked first; undefined when it has none. */
  get exists(): ((as: string) => Promise<boolean>) | undefined {
    const exists = this.#adapter.exists?.bind(this.#adapter);
    return exists === undefined ? undefined : async (as) => exists(assertLogin(as));
  }

  /** Whether the guarded adapter can end a login's sessions (it has `endSessions`). */
  get endsSessions(): boolean {
    return this.#adapter.endSessions !== undefined;
  }

  /**
   * The adapter's `endSessions`, login checked first; undefined when it has none.
   * @throws InvalidLoginError before the adapter is asked; then whatever its `endSessions` throws.
   */
  async endSessions(as: string, signal: AbortSignal): Promise<number | undefined> {
    assertLogin(as);
    signal.throwIfAborted();
    if (this.#adapter.endSessions === undefined) return undefined;
    return this.#adapter.endSessions(as, signal);
  }

  /** Whether the guarded adapter can hold two passwords on one login (it has `overlap`). */
  get overlaps(): boolean {
    return this.#adapter.overlap !== undefined;
  }

  /** Whether the guarded adapter alternates two logins per consumer at each rotation (`alternates`). */
  get alternates(): boolean {
    return this.#adapter.overlap !== undefined && this.#adapter.alternates === true;
  }

  /** Whether the guarded adapter can tell when no session is left on a retiring password (`drained`). */
  get tellsDrained(): boolean {
    return this.#adapter.drained !== undefined;
  }

  /**
   * The adapter's `drained`, login checked first; false (the drain lasts its grace bound) when it
   * has none.
   * @throws InvalidLoginError before the adapter is asked; then whatever its `drained` throws.
   */
  async drained(p: Provision & { readonly retiring: string }, signal: AbortSignal): Promise<boolean> {
    this.#assertLogins(p);
    signal.throwIfAborted();
    if (this.#adapter.drained === undefined) return false;
    return this.#adapter.drained(p, signal);
  }

  // The consumer's login, and the login that takes its password: `as`, or (for an adapter that
  // alternates) its second login; anything else is refused before the adapter is asked.
  #assertLogins(p: Provision): void {
    assertLogin(p.as);
    if (p.login === undefined || p.login === p.as) return;
    if (this.alternates && p.login === secondLogin(p.as)) return;
    throw new InvalidLoginError(p.login);
  }

  /**
   * The adapter's `overlap`, login checked first.
   * @throws InvalidLoginError before the adapter is asked; Error when the adapter has no `overlap`
   *   or the two passwords are the same; then whatever its `overlap` throws.
   */
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void> {
    this.#assertLogins(p);
    signal.throwIfAborted();
    if (this.#adapter.overlap === undefined)
      throw new Error("this provider's adapter holds one password per login: it has no overlap");
    if (p.retiring === p.password)
      throw new Error(`the password being retired for ${p.as} is the new one: nothing to overlap`);
    await this.#adapter.overlap(p, rotation, signal);
  }

  /** @throws InvalidLoginError before the adapter is asked; then whatever its `create` throws. */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    this.#assertLogins(p);
    signal.throwIfAborted();
    await this.#adapter.create(p, signal);
  }

  /**
   * The adapter's `holds`, or its `holdsMany` for this one consumer.
   * @throws InvalidLoginError before the adapter is asked; the adapter's error when it cannot tell.
   */
  async holds(p: Provision, signal: AbortSignal): Promise<boolean> {
    this.#assertLogins(p);
    signal.throwIfAborted();
    if (this.#adapter.holds !== undefined) return this.#adapter.holds(p, signal);
    const answer = (await this.#adapter.holdsMany!([p], signal)).get(p.as);
    if (answer instanceof Error) throw answer;
    if (answer === undefined) {
      throw new Error(
        `the adapter's holdsMany gave no answer for ${JSON.stringify(p.as)}; it was not checked`,
      );
    }
    return answer;
  }

  /**
   * One answer per consumer asked: an invalid login is answered with its InvalidLoginError without
   * reaching the adapter, and nothing is answered for a login that was not asked.
   */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    signal.throwIfAborted();
    const answers = new Map<string, boolean | Error>();
    const valid: Provision[] = [];
    for (const p of ps) {
      try {
        this.#assertLogins(p);
        valid.push(p);
      } catch (err) {
        answers.set(String(p.as), err instanceof Error ? err : new InvalidLoginError(String(p.as)));
      }
    }
    if (valid.length === 0) return answers;
    const many = this.#adapter.holdsMany?.bind(this.#adapter);
    if (many !== undefined) {
      const got = await many(valid, signal);
      for (const p of valid) {
        const answer = got.get(p.as);
        if (answer !== undefined) answers.set(p.as, answer);
      }
      return answers;
    }
    const holds = this.#adapter.holds!.bind(this.#adapter);
    await forEachLimited(valid, this.#concurrency, async (p) => {
      try {
        answers.set(p.as, await holds(p, signal));
      } catch (err) {
        answers.set(p.as, err instanceof Error ? err : new Error(String(err)));
      }
    });
    return answers;
  }

  /**
   * The adapter's `retire`, with `why` clipped to `WHY_MOST` characters.
   * @throws InvalidLoginError before the adapter is asked; then whatever its `retire` throws.
   */
  async retire(as: string, derived: Readonly<Record<string, unknown>>, why: string, at: Date): Promise<void> {
    const clipped = why.length > WHY_MOST ? `${why.slice(0, WHY_MOST - 1)}…` : why;
    await this.#adapter.retire(assertLogin(as), derived, clipped, at);
  }

  /**
   * The adapter's inventory, without an entry whose login the mesh could not have made; an active
   * entry carries no when or why, and a retired one no date that is not one.
   */
  async inventory(): Promise<InventoryEntry[]> {
    const entries: InventoryEntry[] = [];
    for (const e of await this.#adapter.inventory()) {
      if (!isValidLogin(e.as)) {
        this.#logger?.warn(
          `the backend holds a mark of instance ${this.instance} for ${JSON.stringify(e.as)}, which is not ` +
            "a login the mesh makes; it is left out of the inventory and never touched",
        );
      } else if (e.state === "active") {
        const rotation = readRotation(e.rotation);
        const minted = readMinted(e.minted);
        entries.push({
          as: e.as,
          state: "active",
          derived: e.derived,
          ...(rotation === undefined ? {} : { rotation }),
          ...(minted === undefined ? {} : { minted }),
        });
      } else {
        const at =
          e.retiredAt instanceof Date && !Number.isNaN(e.retiredAt.getTime()) ? e.retiredAt : undefined;
        entries.push({ as: e.as, state: "retired", derived: e.derived, retiredAt: at, why: e.why });
      }
    }
    return entries;
  }

  /**
   * Deletes a consumer this instance made and retired, as the backend's own marks say (read with
   * `inventory` first), handing the adapter what the mark recorded.
   * @throws InvalidLoginError, NotMadeHereError or NotRetiredError, having asked the adapter to delete nothing.
   */
  async delete(r: Retired): Promise<Deleted> {
    const login = assertLogin(r.as);
    const entry = (await this.inventory()).find((e) => e.as === login);
    if (entry === undefined) {
      throw new NotMadeHereError(login, this.instance, {
        madeBy: "this instance holds no mark of it",
        fix: "nothing is deleted; `cleanup list` shows the retired consumers this instance can delete",
      });
    }
    if (entry.state !== "retired") throw new NotRetiredError(login, "its mark says active");
    return this.#adapter.delete({
      as: login,
      derived: entry.derived,
      retiredAt: entry.retiredAt,
      why: entry.why,
    });
  }

  /**
   * `refused` for every refusal, whatever the adapter says; else the adapter's own word; else
   * `credentials-rejected` for an AdminLoginRefusedError, and `unreachable` for the network failing
   * (the operating system's codes) or a BackendUnreachableError, anywhere in the cause chain: what no
   * adapter need say again.
   */
  classify(err: unknown): FailureClass | undefined {
    if (isRefusal(err)) return "refused";
    let said: FailureClass | undefined;
    try {
      said = this.#adapter.classify?.(err);
    } catch {
      said = undefined;
    }
    return said ?? classifyBackendFailure(err);
  }

  /** Closes the adapter, once however often it is asked; every later call waits for the same close. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#adapter.close?.();
    })();
    return this.#closing;
  }
}
