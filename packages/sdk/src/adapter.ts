// The per-service half of a provider. The harness (harness.ts) owns every rule: ordering, locking,
// backoff, brakes, scrubbing, announcing. An adapter only speaks to its backend.

/** One consumer's resource to bring into being: everything the mesh derived and delivered. */
export interface Provision {
  /** The login the mesh derived. The adapter creates exactly this name. Already validated. */
  readonly as: string;
  /** The password the mesh minted, read from the consumer's secret file. Never logged. */
  readonly password: string;
  /** What the consumer contributed (for example `{ name: "umami", extensions: ["pgcrypto"] }`). */
  readonly values: Readonly<Record<string, unknown>>;
  /** What the provider's definition derives for the consumer. */
  readonly derived: Readonly<Record<string, unknown>>;
  /** Where the consumer is, for a provider that must reach back to it. Usually unused. */
  readonly at?: string | undefined;
  /** The consumer's node, for messages and standings. */
  readonly node?: string | undefined;
  /**
   * The password being retired, while a rotation overlaps (only ever set for an adapter with
   * `overlap`): `holds` then answers whether both passwords log in. Never logged.
   */
  readonly retiring?: string | undefined;
  /**
   * Where the backend's logins alternate (an adapter with `alternates`): the login that takes
   * `password`, `as` or `secondLogin(as)`; `retiring`, while a rotation overlaps, lives on the
   * other one. Undefined: `as`. Whatever either login makes belongs to `as`, which keeps owning the
   * consumer's resource; the mark, the inventory and every tool name `as` alone.
   */
  readonly login?: string | undefined;
  /**
   * ISO 8601: when the mesh minted `password` (absent from a mesh of 0.1.0). An adapter records it
   * in the consumer's mark (`ConsumerMark.minted`) and reads it back in `inventory`, so the harness
   * never puts back a password older than the one the backend holds. Never a hash of the password.
   */
  readonly minted?: string | undefined;
}

/**
 * Where a rotation stands, as a provider records it in its mark (no secret in it): `add` while the
 * new password is being made valid beside the old one, `drain` once both log in, until `until`.
 */
export interface RotationMark {
  readonly phase: "add" | "drain";
  /** ISO 8601: when the rotation began. */
  readonly since: string;
  /** ISO 8601: when the old password goes (the grace bound). */
  readonly until: string;
}

/** A consumer as the backend remembers it, read back from the provider's own mark. */
export interface InventoryEntry {
  readonly as: string;
  /** `retired` when the backend carries the "to delete" mark. */
  readonly state: "active" | "retired";
  /** What the provider recorded when it made the consumer (for example the database name). */
  readonly derived: Readonly<Record<string, unknown>>;
  /** When and why it was marked to delete; only for a retired one. */
  readonly retiredAt?: Date | undefined;
  readonly why?: string | undefined;
  /** The rotation under way, as the mark records it; only for an active one. */
  readonly rotation?: RotationMark | undefined;
  /**
   * ISO 8601: when the password the backend holds was minted (`Provision.minted` of the last
   * create), as the mark records it; only for an active one, absent from a mark that has none.
   */
  readonly minted?: string | undefined;
}

/** A retired consumer handed to `delete`. */
export interface Retired {
  readonly as: string;
  readonly derived: Readonly<Record<string, unknown>>;
  readonly retiredAt?: Date | undefined;
  readonly why?: string | undefined;
}

/** What `delete` reports back to the person who asked. */
export interface Deleted {
  readonly freedBytes: number;
}

/** The classes a failure is reported with: what a person reading `status` needs first. */
export type FailureClass =
  "credentials-rejected" | "unreachable" | "secret-unreadable" | "refused" | (string & {});

/**
 * The only code a provider module writes. Every method may throw; the harness classifies, scrubs
 * and retries. `signal` is aborted when the harness stops waiting (timeout or shutdown).
 */
export interface Adapter {
  /**
   * Brings the consumer into being under exactly `p.as` and `p.password`. Idempotent. For a
   * retired consumer it re-enables access as it was, with its data, and clears the mark.
   */
  create(p: Provision, signal: AbortSignal): Promise<void>;
  /** Whether the backend still holds the consumer exactly as `p` says. Read-only. */
  holds(p: Provision, signal: AbortSignal): Promise<boolean>;
  /**
   * Optional batched `holds`: one answer per login, asking the backend a constant number of
   * questions. A login missing from the answer, or answered with an Error, was not checked.
   */
  holdsMany?(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>>;
  /**
   * Optional: which of these logins the backend shows connected now (read-only and cheap: a
   * sessions view, a client list), sampled at each verify pass. An app that never connects is
   * then said "never seen connected". Absent: the provider cannot tell.
   */
  seenConnected?(logins: readonly string[], signal: AbortSignal): Promise<ReadonlySet<string>>;
  /**
   * Optional: how many consumers one `holdsMany` covers in a verify pass (the harness's default is
   * 100, each batch with its own timeout). `Infinity` where the backend answers for all of them in
   * one or two queries, so a pass asks once however many consumers there are. Read at every pass, so
   * a getter may answer once the adapter knows its backend.
   */
  readonly verifyBatch?: number | undefined;
  /**
   * Disables the consumer's access reversibly, ends its open sessions, and marks its login and data
   * "to delete" with `at` and `why` in the backend itself. Deletes nothing.
   */
  retire(as: string, derived: Readonly<Record<string, unknown>>, why: string, at: Date): Promise<void>;
  /** What this provider instance made, active and retired, read from the backend's own marks. */
  inventory(): Promise<InventoryEntry[]>;
  /** Removes one retired consumer, login and data, for good. Only ever asked by a person. */
  delete(r: Retired): Promise<Deleted>;
  /**
   * Optional: whether a login of this name exists in the backend at all, made by anyone. Lets
   * `cleanup delete` tell "not made by this provider" from "unknown". Read-only.
   */
  exists?(as: string): Promise<boolean>;
  /**
   * Optional: called once at the end of a pass (or a tool) that created, re-applied or retired
   * something, after all of it, for what a backend does best once for many changes (Redis saves its
   * ACL file here). When it throws, the harness takes what that pass created or re-applied as not
   * applied, so the next pass applies it again, and calls it again at the end of that pass.
   */
  afterChanges?(): Promise<void>;
  /**
   * Optional: the backend holds two passwords on one login, so a rotation need not cut over. Makes
   * `p.password` valid beside `p.retiring` (both log in), with everything else as `create` makes
   * it, and records `rotation` in the consumer's mark. Idempotent. Where the backend cannot change
   * the password and the mark at once, the mark is written first with phase `add`, then `drain` once
   * both log in. A later `create` (without `retiring`) leaves `p.password` the only one and clears
   * the rotation from the mark. `holds` and `holdsMany` are then also asked with `p.retiring` set.
   * Without it, a rotation is a cut-over: `create` with the new password.
   */
  overlap?(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void>;
  /**
   * Optional, with `overlap`: the backend holds one password per login, so a rotation alternates
   * between two logins, `as` and `secondLogin(as)` (`p.login` names the one that takes the new
   * password). `overlap` makes `p.password` valid on `p.login` beside `p.retiring` on the other,
   * and `create` leaves `p.login` the only one that logs in (the other disabled, its password
   * gone). `retire` disables both and `delete` removes both.
   */
  readonly alternates?: boolean | undefined;
  /**
   * Optional, where the backend shows sessions per login: whether no session is open any more on
   * the login `p.retiring` lives on (for an adapter that `alternates`, the login that is not
   * `p.login`), so the drain may end before its grace bound. Read-only. Absent: the drain lasts the
   * grace bound.
   */
  drained?(p: Provision & { readonly retiring: string }, signal: AbortSignal): Promise<boolean>;
  /**
   * Optional: ends every open session of login `as` (a leaked password replaced by `mesh rotate
   * --now`: the sessions opened with it must not outlive it). Asked only for a login this provider
   * made, right after `create` made the new password its only one; apps reconnect with the new
   * one. Answers how many sessions were ended (where the backend says). Idempotent. Identifiers
   * quoted or parameterised, as everywhere.
   */
  endSessions?(as: string, signal: AbortSignal): Promise<number | undefined>;
  /** An adapter's own word on what class an error of its own is; undefined to let the harness guess. */
  classify?(err: unknown): FailureClass | undefined;
  /** Releases connections. Called once by `stop()`. */
  close?(): Promise<void>;
}

/**
 * An adapter that only answers in batches: the guard (adapter-guard.ts) supplies its `holds` from
 * `holdsMany`, so a backend read for many is written once.
 */
export type BatchedAdapter = Omit<Adapter, "holds" | "holdsMany"> &
  Partial<Pick<Adapter, "holds">> &
  Required<Pick<Adapter, "holdsMany">>;

/** What a provider writes and `runProvisioner` takes: a plain or a batched adapter. */
export type ProviderAdapter = Adapter | BatchedAdapter;
