import type { Adapter, Deleted, InventoryEntry, Provision, Retired, RotationMark } from "@mesh/sdk";
import { assertLogin } from "@mesh/sdk";

/** One consumer as the in-memory backend holds it. */
export interface MemoryConsumer {
  password: string;
  values: Readonly<Record<string, unknown>>;
  instance: string;
  state: "active" | "retired";
  retiredAt?: Date | undefined;
  why?: string | undefined;
  /** Bytes of "data", reported freed on delete. */
  bytes: number;
  /** The second password it takes while a rotation overlaps (only an `OverlapMemoryAdapter` sets it). */
  old?: string | undefined;
  /** The rotation its mark records. */
  rotation?: RotationMark | undefined;
  /** When its password was minted, as its mark records it (`Provision.minted`). */
  minted?: string | undefined;
}

/** A call the adapter received, for tests that check what the harness asked and in what order. */
export interface MemoryCall {
  readonly method:
    | "create"
    | "holds"
    | "holdsMany"
    | "retire"
    | "inventory"
    | "delete"
    | "exists"
    | "overlap"
    | "endSessions";
  readonly login?: string;
}

/**
 * An adapter over a Map, for the harness's own logic under a fake clock and for the pass-cost
 * benchmark. Faults are injected per login: `failCreate`, `hang`, `down`. Several adapters may share
 * one `backend` map, as several provider instances share one server.
 */
export class MemoryAdapter implements Adapter {
  readonly calls: MemoryCall[] = [];
  /** Logins whose create throws this error. */
  readonly failCreate = new Map<string, Error>();
  /** Logins whose calls never answer (until `release`). */
  readonly hang = new Set<string>();
  /** When set, every call throws it (the backend is down). */
  down: Error | undefined;
  /** When true, create "succeeds" without storing anything (a create that does not produce what holds checks). */
  createIsNoop = false;
  /** Records calls in `calls` (off for benchmarks). */
  recordCalls = true;
  readonly #hung: (() => void)[] = [];

  constructor(
    readonly instance = "default",
    readonly backend = new Map<string, MemoryConsumer>(),
  ) {}

  async create(p: Provision): Promise<void> {
    await this.#enter("create", p.as);
    assertLogin(p.as);
    const failure = this.failCreate.get(p.as);
    if (failure) throw failure;
    const was = this.backend.get(p.as);
    if (was && was.instance !== this.instance) {
      throw new Error(`${p.as} exists and was not made by instance ${this.instance}; not altered`);
    }
    if (this.createIsNoop) return;
    this.backend.set(p.as, {
      password: p.password,
      values: p.values,
      instance: this.instance,
      state: "active",
      bytes: was?.bytes ?? 8192,
      ...(p.minted === undefined ? {} : { minted: p.minted }),
    });
  }

  async holds(p: Provision): Promise<boolean> {
    await this.#enter("holds", p.as);
    return this.#holds(p);
  }

  #holds(p: Provision): boolean {
    const c = this.backend.get(p.as);
    return (
      c !== undefined &&
      c.instance === this.instance &&
      c.state === "active" &&
      c.password === p.password &&
      c.old === p.retiring
    );
  }

  /** Whether the backend lets `as` log in with `password` (either of two while a rotation overlaps). */
  accepts(as: string, password: string): boolean {
    const c = this.backend.get(as);
    return c !== undefined && c.state === "active" && (c.password === password || c.old === password);
  }

  async retire(
    as: string,
    _derived: Readonly<Record<string, unknown>>,
    why: string,
    at: Date,
  ): Promise<void> {
    await this.#enter("retire", as);
    const c = this.backend.get(as);
    if (!c || c.instance !== this.instance)
      throw new Error(`${as} was not made by instance ${this.instance}`);
    c.state = "retired";
    c.retiredAt = at;
    c.why = why;
  }

  async inventory(): Promise<InventoryEntry[]> {
    await this.#enter("inventory");
    return [...this.backend]
      .filter(([, c]) => c.instance === this.instance)
      .map(([as, c]) => ({
        as,
        state: c.state,
        derived: {},
        retiredAt: c.retiredAt,
        why: c.why,
        ...(c.rotation === undefined ? {} : { rotation: c.rotation }),
        ...(c.state === "active" && c.minted !== undefined ? { minted: c.minted } : {}),
      }));
  }

  async delete(r: Retired): Promise<Deleted> {
    await this.#enter("delete", r.as);
    const c = this.backend.get(r.as);
    if (!c || c.instance !== this.instance || c.state !== "retired")
      throw new Error(`${r.as} is not retired here`);
    this.backend.delete(r.as);
    return { freedBytes: c.bytes };
  }

  async exists(as: string): Promise<boolean> {
    await this.#enter("exists", as);
    return this.backend.has(as);
  }

  /** Ends the login's sessions (`mesh rotate --now`): a map has none, so the call is only counted. */
  async endSessions(as: string): Promise<number> {
    await this.#enter("endSessions", as);
    return 0;
  }

  /** Lets every hung call go on. */
  release(): void {
    this.hang.clear();
    for (const go of this.#hung.splice(0)) go();
  }

  /** How many calls of `method` (for `login`, when given) were made. */
  count(method: MemoryCall["method"], login?: string): number {
    return this.calls.filter((c) => c.method === method && (login === undefined || c.login === login)).length;
  }

  /** For a subclass: counts the call and injects the faults, as every method does. */
  protected enter(method: MemoryCall["method"], login?: string): Promise<void> {
    return this.#enter(method, login);
  }

  async #enter(method: MemoryCall["method"], login?: string): Promise<void> {
    if (this.recordCalls) this.calls.push(login === undefined ? { method } : { method, login });
    if (this.down) throw this.down;
    if (login !== undefined && this.hang.has(login)) {
      await new Promise<void>((resolve) => this.#hung.push(resolve));
    }
  }
}

/**
 * A `MemoryAdapter` whose backend holds two passwords on one login while a rotation overlaps, as
 * Redis and MariaDB do: for the harness's rotation phases under a fake clock.
 */
export class OverlapMemoryAdapter extends MemoryAdapter {
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    _signal?: AbortSignal,
  ): Promise<void> {
    await this.enter("overlap", p.as);
    assertLogin(p.as);
    const failure = this.failCreate.get(p.as);
    if (failure) throw failure;
    const was = this.backend.get(p.as);
    if (was && was.instance !== this.instance) {
      throw new Error(`${p.as} exists and was not made by instance ${this.instance}; not altered`);
    }
    this.backend.set(p.as, {
      password: p.password,
      old: p.retiring,
      rotation,
      values: p.values,
      instance: this.instance,
      state: "active",
      bytes: was?.bytes ?? 8192,
      ...(p.minted === undefined ? {} : { minted: p.minted }),
    });
  }
}
