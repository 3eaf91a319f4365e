// Scheduled rotation: the fleet says how often each consumer's password is rotated (`rotate: {
// every: 30d }`, over which a module's entry may say more for one interface), and the leader
// rotates each when it is due, through the same path as `mesh rotate` (recorded as `who:
// schedule`). The next due time of each consumer is kept in the desired-state bucket, so a
// restarted controller, or one that takes over, keeps it. This file is the pure part: what is due
// now and what is kept next, under any clock.
import { createHash } from "node:crypto";

/** Who the ledger says asked a rotation the schedule started. */
export const SCHEDULE_WHO = "schedule";

/** The fleet's rotation periods, as the stored fleet keeps them (ms). */
export interface RotationPeriods {
  /** Every consumer's period, unless its module says otherwise. */
  readonly every?: number;
  /** A module's period for one interface it needs, by module then interface. */
  readonly modules?: Readonly<Record<string, Readonly<Record<string, number>>>>;
}

/** One consumer's password the schedule may rotate. */
export interface ScheduledConsumer {
  readonly consumer: string;
  readonly interface: string;
  readonly login: string;
  readonly provider: string;
}

/** What is kept in the bus for one consumer: when it is due next, and the period that was set from. */
export interface DueRecord {
  /** ISO 8601. */
  readonly due: string;
  /** The period (ms) `due` was set from: a new period sets a new due time. */
  readonly every: number;
}

/** The key of a consumer's due time in the desired-state bucket. */
export function dueKey(c: Pick<ScheduledConsumer, "consumer" | "interface">): string {
  return `rotation-due.${c.consumer}.${c.interface}`;
}

/** The period of `c`'s rotation, or undefined when the fleet sets none for it. */
export function periodOf(periods: RotationPeriods | undefined, c: ScheduledConsumer): number | undefined {
  const own = periods?.modules?.[c.consumer];
  const mine = own !== undefined && Object.hasOwn(own, c.interface) ? own[c.interface] : undefined;
  return mine ?? periods?.every;
}

/**
 * The offset of `login`'s first due time within the first tenth of `every`: the same for a login
 * each time (a hash of it), and spread over the tenth, so that a fleet's consumers are not rotated
 * together when the schedule is first set.
 */
export function spreadOffset(login: string, every: number): number {
  const tenth = Math.floor(every / 10);
  if (tenth <= 0) return 0;
  const hash = createHash("sha256").update(login).digest();
  return hash.readUInt32BE(0) % tenth;
}

/** What the schedule knows of a consumer now, besides its due time. */
export interface ConsumerNow {
  /** A rotation of it is under way (any phase). */
  readonly rotating: boolean;
  /** Its provider says it fails for it. */
  readonly failing: boolean;
}

/** What to do now. */
export interface ScheduleStep<C extends ScheduledConsumer = ScheduledConsumer> {
  /** The consumers to rotate now. */
  readonly start: readonly C[];
  /** Due times to keep (a first one, or one a new period set), by consumer. */
  readonly set: readonly { readonly consumer: C; readonly record: DueRecord }[];
  /** Consumers due now and not started, and why (a rotation under way, its provider failing). */
  readonly held: readonly { readonly consumer: C; readonly why: "rotating" | "failing" }[];
}

/**
 * What is due at `now` (ms): each consumer with a period and no due time (or one set from another
 * period) gets one within the period's first tenth; each one due is started, unless a rotation of
 * it is under way or its provider fails for it (then it stays due, and is looked at again later).
 * Starting one does not set its next due time: that is `nextDue`, once the rotation was asked.
 */
export function scheduleStep<C extends ScheduledConsumer>(
  consumers: readonly C[],
  periods: RotationPeriods | undefined,
  kept: ReadonlyMap<string, DueRecord>,
  now: number,
  state: (c: C) => ConsumerNow,
): ScheduleStep<C> {
  const start: C[] = [];
  const set: { consumer: C; record: DueRecord }[] = [];
  const held: { consumer: C; why: "rotating" | "failing" }[] = [];
  for (const c of consumers) {
    const every = periodOf(periods, c);
    if (every === undefined) continue;
    const record = kept.get(dueKey(c));
    const due = record === undefined ? Number.NaN : Date.parse(record.due);
    if (record === undefined || record.every !== every || Number.isNaN(due)) {
      // A shorter period than the one the due time was set from brings it nearer; a longer one
      // keeps the nearer due time it had.
      let next = now + spreadOffset(c.login, every);
      if (!Number.isNaN(due) && record !== undefined && record.every < every) next = Math.min(next, due);
      set.push({ consumer: c, record: { due: new Date(next).toISOString(), every } });
      continue;
    }
    if (due > now) continue;
    const s = state(c);
    if (s.rotating) held.push({ consumer: c, why: "rotating" });
    else if (s.failing) held.push({ consumer: c, why: "failing" });
    else start.push(c);
  }
  return { start, set, held };
}

/** The due time kept after a rotation of a consumer asked at `now`: a whole period later. */
export function nextDue(every: number, now: number): DueRecord {
  return { due: new Date(now + every).toISOString(), every };
}

/** Reads a kept due time, or undefined when the value is not one. */
export function parseDueRecord(value: unknown): DueRecord | undefined {
  const v = value as Partial<DueRecord> | null | undefined;
  if (typeof v?.due !== "string" || Number.isNaN(Date.parse(v.due))) return undefined;
  if (typeof v.every !== "number" || !Number.isFinite(v.every) || v.every <= 0) return undefined;
  return { due: v.due, every: v.every };
}

/** How often the leader looks at the schedule: a tenth of the shortest period, between 250 ms and 30 s. */
export function scheduleTickMs(shortest: number | undefined): number {
  if (shortest === undefined) return 30_000;
  return Math.min(30_000, Math.max(250, Math.floor(shortest / 10)));
}
