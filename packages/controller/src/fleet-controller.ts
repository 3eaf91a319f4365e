// The controller's state and what it does with it: the fleet being served, the enrolled nodes,
// their reports, and each change (a reload, a rotation, an enrollment) made one at a time, so two
// of them never publish interleaved halves. `startController` opens what it needs and hands it here.
//
// A controller leads or stands by, as its lease says (`ControllerLease`). Both answer status, the
// ledger and the served fleet. Only the leader mints, seals, delivers, revokes, enrolls, relays
// tools and answers rotations and join tokens, and it checks its lease before each of them; a
// standby serves the fleet stored in KV and follows it, and serves it when it takes over.
import {
  allReportsSubject,
  enrollSubject,
  type BusAuthority,
  type BusLogger,
  type BusState,
} from "@mesh/bus";
import { heldMintOf, OLDER_THAN_BACKEND, planEntries, rotateMinimumMs } from "@mesh/manifest";
import { ApplyUploadError, ApplyUploads } from "./apply-uploads.ts";
import { parseDuration } from "@mesh/sdk";
import { passwordTag } from "@mesh/sdk/provider";
import type { NatsConnection } from "@nats-io/transport-node";
import { BusAnswers, CONTROLLER_QUEUE } from "./bus-answers.ts";
import {
  dueKey,
  nextDue,
  parseDueRecord,
  periodOf,
  scheduleStep,
  scheduleTickMs,
  SCHEDULE_WHO,
  type ConsumerNow,
  type DueRecord,
} from "./rotation-schedule.ts";
import { readBusHealth, type BusHealth } from "./bus-health.ts";
import type { ControllerObserver } from "./controller-metrics.ts";
import {
  controllerStatus,
  nodeVersion,
  rotationOf,
  type ControllerStatus,
  type LeaderStatus,
  type RotationStatus,
} from "./controller-status.ts";
import type { CredentialSync } from "./credential-sync.ts";
import { answerEnrollment, type EnrolledNode } from "./enrollment.ts";
import {
  FleetRefusedError,
  fleetPlanOf,
  loadFleetPlan,
  type FleetPlan,
  type FleetSource,
} from "./fleet-plan.ts";
import {
  DEFAULT_FLEET_HISTORY,
  readFleetHistory,
  readFleetRevision,
  recordFleetRevision,
  type FleetRevision,
} from "./fleet-history.ts";
import { diffFleetPlans, EMPTY_FLEET } from "./plan-diff.ts";
import type { JoinSecrets } from "./join-secrets.ts";
import { answerJoinTokenRequest } from "./join-token-request.ts";
import { answerLedgerRead, readLedgerFor, type LedgerReadReply } from "./ledger-reader.ts";
import { LedgerRecorder } from "./ledger-recorder.ts";
import type { ModuleCredentials } from "./module-credentials.ts";
import type { ModuleLedgers } from "./module-ledgers.ts";
import type { NodeDeliveries, Published } from "./node-deliveries.ts";
import {
  CONTROLLERS_SUBJECT,
  FLEET_APPLY_SUBJECT,
  FLEET_HISTORY_SUBJECT,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
} from "./node-permissions.ts";
import { parseReport, reportingNode, type NodeReport } from "./node-reports.ts";
import { ServedEndpoints } from "./served-endpoints.ts";
import { BusCannotStoreError, type PasswordStore } from "./password-store.ts";
import { PendingWrites, WriteWaitsError, type WaitingWrite } from "./pending-writes.ts";
import {
  answerRotateRequest,
  ROTATE_SURFACE,
  type RotateOptions,
  type RotatedPassword,
  type RotationRecord,
} from "./rotate-request.ts";
import { STANDINGS_SUBJECT, type StandingsBook } from "./standings-book.ts";
import type { ControllerLease, LeaseTimings } from "./controller-lease.ts";
import { LeaseDriver } from "./lease-driver.ts";
import { loadStoredFleet, loadStoredFleetHead, readStoredFleet, storeFleet } from "./stored-fleet.ts";
import {
  relayToolCall,
  serveToolRelay,
  type ToolCall,
  type ToolRelay,
  type ToolRelaySources,
  type ToolReply,
} from "./tool-relay.ts";
import { watchFleetFile, type FleetFileWatch } from "./watch-fleet-file.ts";
import { linesOf, problemsOf } from "./fleet-problems.ts";

/** What a reload did. */
export interface ReloadOutcome {
  /** The nodes whose delivery changed (and their new generation). */
  readonly published: readonly Published[];
  /** Passwords minted for consumers the fleet names for the first time. */
  readonly minted: number;
}

/** What an apply did. */
export interface ApplyOutcome extends ReloadOutcome {
  /** The revision served now. */
  readonly revision: number;
  /** The revision served before. */
  readonly previous: number;
  /** Whether the fleet applied was the one served already (no new revision). */
  readonly unchanged: boolean;
}

/** An apply: a fleet with its manifests, and the revision its plan was made against. */
export interface ApplyRequest {
  readonly source: FleetSource;
  /** Refused when the stored revision is another (unless `force`); undefined: not checked. */
  readonly expectRevision?: number;
  readonly force?: boolean;
  /** Who applies it (a Unix user, the dashboard's operator). */
  readonly who: string;
  /** Through what (`mesh apply`, `rollback`, `fleet file`). */
  readonly via: string;
}

/** An apply made against a revision that is no longer the stored one. */
export class StaleRevisionError extends Error {
  override name = "StaleRevisionError";
  constructor(
    readonly expected: number,
    readonly stored: number,
    readonly storedBy?: FleetRevision,
  ) {
    super(
      `the fleet was planned against revision ${expected}, but the mesh stores revision ${stored} since` +
        (storedBy !== undefined
          ? ` (applied by ${storedBy.who} via ${storedBy.via} at ${storedBy.at})`
          : "") +
        `: nothing was applied; see what changed with mesh fleet history, then plan and apply again ` +
        `(mesh apply FILE), or apply over it with --force`,
    );
  }
}

/** A running controller. */
export interface Controller {
  /** Absolute path of the fleet file this machine applies from (`mesh up FILE`), if any. */
  readonly fleetFile: string | undefined;
  /** The fleet being served: the last one that was read whole and held together. */
  current(): FleetPlan;
  /**
   * Reads the fleet file again and publishes what changed.
   * @throws FleetRefusedError listing every problem; the last good fleet keeps being served.
   */
  reload(): Promise<ReloadOutcome>;
  /**
   * Applies a fleet (`mesh apply`): checked, stored as a new revision with who and when, and
   * published; the fleet served already is not stored again.
   * @throws FleetRefusedError listing every problem; StaleRevisionError when the stored revision
   * is not the expected one; NotLeaderError on a standby.
   */
  apply(request: ApplyRequest): Promise<ApplyOutcome>;
  /**
   * The kept revisions, oldest first.
   * @throws the bus's error when they cannot be read now.
   */
  history(): Promise<readonly FleetRevision[]>;
  /** The revision served now (0: none applied yet). */
  revision(): number;
  /**
   * Mints a new password for `consumer`'s `iface`, asked by `who` (default `unknown`), and publishes
   * it to the nodes that need it. The rotation, or its failure, is recorded (who, when; never the
   * password) in the consumer's ledger and in its provider's; `ledger` in the answer says why a
   * record is missing. A rotation of the same consumer still under way refuses it, unless `now`
   * (a leaked password: no overlap, the provider ends the login's sessions once it took the new one).
   * @throws UnknownConsumerError when the fleet being served has no such consumer;
   *   RotationUnderWayError, naming the phase, when one is under way and not `now`.
   */
  rotate(
    consumer: string,
    iface: string,
    who?: string,
    options?: RotateOptions,
  ): Promise<{ readonly ledger?: string } & Partial<RotatedPassword>>;
  /**
   * `node`'s join token (the same one each time until renewed). It holds a secret: show it only
   * to the person adding the node.
   * @throws UnknownNodeError when the fleet being served has no such node.
   */
  joinToken(node: string): Promise<string>;
  /**
   * A new join token for `node`; the old one is no longer accepted.
   * @throws UnknownNodeError when the fleet being served has no such node.
   */
  renewJoinToken(node: string): Promise<string>;
  /**
   * Whether `node`'s join token has been claimed by a node key (so only that key may enroll with it).
   * @throws UnknownNodeError when the fleet being served has no such node.
   */
  joinTokenClaimed(node: string): Promise<boolean>;
  /** What `mesh status` shows. */
  status(): ControllerStatus;
  /** The bus as this controller's connection sees it: its servers and each stream's copies; never throws. */
  bus(): Promise<BusHealth>;
  /**
   * Whether this controller leads now (holds the lease). A standby answers status, the ledger
   * and the served fleet; its writes (rotate, join tokens, reload) throw NotLeaderError.
   */
  leading(): boolean;
  /** Which controller leads, as this one last saw the lease. */
  leader(): LeaderStatus;
  /**
   * The dashboard's tool call: relayed (`parseToolCall`'s checks) to the module's node as `mesh
   * tool`'s are, and recorded as asked through the dashboard. Never throws.
   */
  tool(call: ToolCall): Promise<ToolReply>;
  /** A module's newest ledger entries, as `mesh ledger` reads them; never throws. */
  ledger(module: string, limit: number): Promise<LedgerReadReply>;
  /** Stops watching, answering and publishing, and closes the bus connection. Idempotent. */
  stop(): Promise<void>;
}

/** How long a rotation waits for the provider's own word on a rotation under way before judging by reports. */
const ROTATION_CHECK_TIMEOUT_MS = 5_000;
/** Who the ledger names for a rotation of a password its backend holds a newer one of. */
const VOUCH_WHO = "mesh (its state is older than the backend)";

/** How long a clean stop listens for standbys before saying whether one takes over. */
const STANDBYS_WITHIN_MS = 500;

/** A rotation asked for a consumer the fleet does not have. */
export class UnknownConsumerError extends Error {
  override name = "UnknownConsumerError";
  constructor(
    readonly consumer: string,
    readonly iface: string,
  ) {
    super(
      `${consumer} has no ${iface} in the fleet being served: nothing was rotated; ` +
        `mesh status lists each consumer and its interface`,
    );
  }
}

/** A rotation asked while another of the same consumer is under way. */
export class RotationUnderWayError extends Error {
  override name = "RotationUnderWayError";
  constructor(
    readonly consumer: string,
    readonly iface: string,
    readonly rotation: RotationStatus,
  ) {
    const until = rotation.until === undefined ? "" : `, the old password goes at ${rotation.until}`;
    super(
      `${consumer}'s ${iface} is being rotated (phase ${rotation.phase} since ${rotation.since}${until}): ` +
        `nothing was rotated; ask again once it has ended (mesh status shows where it is), or ` +
        `mesh rotate --now for a leaked password`,
    );
  }
}

/** A join token asked for a node the fleet does not have. */
export class UnknownNodeError extends Error {
  override name = "UnknownNodeError";
  constructor(readonly node: string) {
    super(
      `${JSON.stringify(node)} is not a node of the fleet being served: add it under nodes: in mesh.yaml first`,
    );
  }
}

/** Asked of a controller that stands by: another one leads. */
export class NotLeaderError extends Error {
  override name = "NotLeaderError";
  constructor(
    readonly what: string,
    readonly leader: string | null,
    readonly term: number | null,
  ) {
    super(
      `this controller stands by and does not ${what}: ` +
        (leader !== null
          ? `controller ${leader} leads (term ${term}); ask it`
          : "no controller leads yet; try again") +
        `, or wait for this one to take over (mesh status names the leader)`,
    );
  }
}

/** What the leader writes through, each keeping some of what it read from the bus in memory. */
export interface LeaderStores {
  readonly passwords: PasswordStore;
  readonly deliveries: NodeDeliveries;
  readonly joinSecrets: JoinSecrets;
  readonly credentials: ModuleCredentials;
  readonly credentialSync: CredentialSync;
  /** The modules' ledgers, made apart from the queue (a closed one makes nothing more). */
  readonly ledgers: ModuleLedgers;
}

/** What a `FleetController` works with, opened by `startController`. */
export interface FleetControllerParts {
  readonly nc: NatsConnection;
  /** Absolute path of the fleet file this machine applies from, if any. */
  readonly fleetFile: string | undefined;
  /**
   * The revision this machine last applied from its fleet file (kept in its state directory), so
   * a save of a file that was not brought up to date with a newer revision is refused.
   */
  readonly applied?: {
    read(): Promise<number | undefined>;
    write(revision: number): Promise<void>;
  };
  /** Who runs this controller (its Unix user), named as who applied a save of the fleet file. */
  readonly who?: string;
  /** How many applied revisions are kept (default 100). */
  readonly historyKeep?: number;
  /** The fleet to serve first, and the problems of the fleet file when it was refused (the stored fleet is served). */
  readonly first: { readonly fleet: FleetPlan; readonly refused: readonly string[] | null };
  readonly authority: BusAuthority;
  readonly desired: BusState<unknown>;
  readonly nodesState: BusState<EnrolledNode>;
  /** The enrolled nodes, by name, as read from the nodes bucket (shared with the module credentials' reserved keys). */
  readonly enrolled: Map<string, EnrolledNode>;
  /** The stores only a leader writes, as opened at start. */
  readonly stores: LeaderStores;
  /**
   * Opens the leader's stores again from the bus, and reads the enrolled nodes again into
   * `enrolled`: a controller that takes over must not act on what it remembers from before it
   * stood by (another leader minted, rotated, enrolled and issued meanwhile).
   */
  readonly openStores: () => Promise<LeaderStores>;
  readonly standings: StandingsBook;
  readonly logger: BusLogger;
  readonly observer?: ControllerObserver;
  /** Watch the fleet file and reload when it changes. */
  readonly watch: boolean;
  /** Closes what was opened for it (the account updates' connection, the bus), after it stops. */
  readonly close: () => Promise<void>;
  /** The lease that says whether it leads, and the bucket it is kept in. */
  readonly lease: ControllerLease;
  readonly leaseBucket: BusState<unknown>;
  readonly leaseTimings: LeaseTimings;
  /** The monotonic clock the lease is measured on (ms). */
  readonly now: () => number;
  /**
   * Started as a standby (`mesh controller --standby-of`): when it takes over it serves the stored
   * fleet, and applies its fleet file only when the file changes next. Otherwise a controller that
   * leads from its start applies its fleet file when it differs from the stored fleet's.
   */
  readonly standby: boolean;
}

/** The controller at work: it serves one fleet, and changes it one step at a time. */
export class FleetController implements Controller {
  readonly fleetFile: string | undefined;
  readonly #p: FleetControllerParts;
  readonly #log: BusLogger;
  #current: FleetPlan;
  #refused: readonly string[] | null;
  readonly #reports = new Map<string, NodeReport>();
  // The last rotation this controller made of each consumer (`consumer interface`): when, and the
  // tag of its password (never the password), until its provider is heard having applied it.
  readonly #rotated = new Map<string, { readonly at: string; readonly tag: string }>();
  // Where each provider serves, as its node reports it: given to consumers the fleet names no endpoint: for.
  readonly #served: ServedEndpoints;
  // Nodes whose credentials wait to be synced: one sync however many reports arrive meanwhile.
  readonly #syncing = new Set<string>();
  #queue: Promise<unknown> = Promise.resolve();
  readonly #answers: BusAnswers;
  #tools: ToolRelay | undefined;
  #watcher: FleetFileWatch | undefined;
  #stopped: Promise<void> | undefined;
  readonly #relaySources: ToolRelaySources;
  // What the controller records in module ledgers itself: rotations, and calls no agent recorded.
  readonly #records: LedgerRecorder;
  readonly #driver: LeaseDriver;
  #s: LeaderStores;
  // Nothing accepted is dropped: what the bus cannot store now is tried again until it is (while
  // this controller leads: a standby drops what waited, the new leader publishes it all again).
  #pending: PendingWrites;
  // Whether the stores may hold what another leader changed since (this one stood by).
  #stale = false;
  // The restores resumed from the password store and not settled yet, by key (tried in `#pending`).
  readonly #restoring = new Set<string>();
  /** Consumers being rotated because their backend holds a newer password (`#vouchFor`). */
  readonly #vouching = new Set<string>();
  // What only the leader answers, while it leads.
  #leaderAnswers: BusAnswers | undefined;
  // The parts of applies too large for one message, until their apply comes.
  readonly #uploads = new ApplyUploads();
  // Whether the fleet file is applied when this controller first leads (see `standby`).
  #applyFileFirst: boolean;
  // A fleet this controller accepted and the bus has not stored yet (since when, on the wall
  // clock): kept across a lapse of its own lease, and applied again when it leads again in the
  // same term (nobody else led meanwhile).
  #unstored: { readonly readAt: string; readonly since: number } | undefined;
  // When the fleet file changed while this controller's own lease had lapsed (applied when it leads again).
  #fileChangedAt: number | undefined;
  // The term this controller last led in.
  #ledTerm: number | undefined;
  #fleetTerm: number | null = null;
  #storedSha: string | undefined;
  // The revision of the fleet served (as stored; 0 before any).
  #revision = 0;
  #answeredOnce = false;
  #failedFirst: unknown;
  // Scheduled rotation: each consumer's next due time as read from (or written to) the bus in
  // this lead; emptied when it stands by, so a take-over reads what the other leader kept.
  readonly #dues = new Map<string, DueRecord>();
  #scheduleTimer: NodeJS.Timeout | undefined;
  #scheduling = false;

  constructor(parts: FleetControllerParts) {
    this.#p = parts;
    this.#s = this.#use(parts.stores);
    this.#pending = this.#newPending();
    this.#log = parts.logger;
    this.#served = new ServedEndpoints(parts.desired, parts.logger);
    this.fleetFile = parts.fleetFile;
    this.#current = parts.first.fleet;
    this.#refused = parts.first.refused;
    this.#answers = new BusAnswers(parts.nc, parts.logger);
    this.#records = new LedgerRecorder(parts.nc, parts.logger);
    this.#relaySources = {
      fleet: () => this.#current,
      isEnrolled: (node) => parts.enrolled.has(node),
      records: this.#records,
    };
    this.#applyFileFirst = !parts.standby;
    this.#driver = new LeaseDriver({
      bucket: parts.leaseBucket,
      lease: parts.lease,
      timings: parts.leaseTimings,
      now: parts.now,
      logger: parts.logger,
      changed: (leading) => (leading ? this.#lead() : this.#standBy()),
      idle: () => this.#follow(),
      standbys: () => this.#otherControllers(),
    });
  }

  /**
   * Reads the lease and, when this controller leads, stores and publishes its fleet; then answers
   * on the bus, keeps the lease, and watches the fleet file. The first reading is published before
   * anything is answered, so an enrolling node finds a complete delivery.
   * @throws the bus's error when the fleet cannot be stored or published.
   */
  async start(): Promise<void> {
    await this.#driver.tick();
    if (this.#failedFirst !== undefined) {
      await this.#driver.stop();
      throw this.#failedFirst;
    }
    if (!this.#p.lease.leading()) {
      // Another controller leads: when this one takes over it serves what was last applied, and
      // never its own file (which may be stale).
      this.#applyFileFirst = false;
      this.#stale = true;
      await this.#follow();
    }
    this.#answer();
    this.#driver.start();
    if (this.#p.watch) this.#watch();
    this.#scheduleTimer = setInterval(() => void this.#scheduleTick(), scheduleTickMs(rotateMinimumMs()));
    this.#scheduleTimer.unref();
  }

  // The leader rotates each consumer whose rotation is due (as the fleet's `rotate:` sets it), one
  // at a time, through the same path as `mesh rotate`; its next due time is kept in the bus before
  // the next is looked at. A standby, and a tick while the last one runs, does nothing.
  async #scheduleTick(): Promise<void> {
    if (this.#scheduling || this.#stopped !== undefined || !this.leading()) return;
    this.#scheduling = true;
    try {
      const periods = this.#current.rotation;
      const consumers = planEntries(this.#current.plan).filter((c) => periodOf(periods, c) !== undefined);
      if (consumers.length === 0) return;
      // Due times not read in this lead are read first (one key each; what another leader kept stands).
      const unread = consumers.filter((c) => !this.#dues.has(dueKey(c)));
      const read = await Promise.all(
        unread.map(async (c) => [dueKey(c), parseDueRecord(await this.#p.desired.get(dueKey(c)))] as const),
      );
      if (!this.leading()) return;
      for (const [key, record] of read) if (record !== undefined) this.#dues.set(key, record);
      let status: ControllerStatus | undefined;
      const state = (c: (typeof consumers)[number]): ConsumerNow => {
        status ??= this.status();
        const s = status;
        return {
          rotating: s.consumers.some(
            (x) => x.consumer === c.consumer && x.interface === c.interface && x.rotation !== undefined,
          ),
          failing: s.failing.some((f) => f.provider === c.provider && f.login === c.login),
        };
      };
      const step = scheduleStep(consumers, periods, this.#dues, Date.now(), state);
      for (const { consumer, record } of step.set) await this.#keepDue(dueKey(consumer), record);
      for (const { consumer: c, why } of step.held) {
        this.#log.info(
          `the scheduled rotation of ${c.consumer}'s ${c.interface} waits: ` +
            (why === "rotating" ? "a rotation of it is under way" : `${c.provider} says it fails for it`),
        );
      }
      for (const c of step.start) {
        if (!this.leading() || this.#stopped !== undefined) return;
        const every = periodOf(periods, c) ?? 0;
        try {
          await this.rotate(c.consumer, c.interface, SCHEDULE_WHO);
          await this.#keepDue(dueKey(c), nextDue(every, Date.now()));
          this.#log.info(`rotated ${c.consumer}'s ${c.interface} as scheduled (every ${every} ms)`);
        } catch (err) {
          if (err instanceof RotationUnderWayError || err instanceof NotLeaderError) continue;
          // Tried again a tenth of its period later (at most 10 minutes), not at every tick.
          const retry = Math.min(600_000, Math.max(1000, Math.floor(every / 10)));
          this.#log.warn(
            `the scheduled rotation of ${c.consumer}'s ${c.interface} failed (${(err as Error).message}); ` +
              `tried again in ${Math.round(retry / 1000)} s`,
          );
          await this.#keepDue(dueKey(c), { due: new Date(Date.now() + retry).toISOString(), every });
        }
      }
    } catch (err) {
      this.#log.warn(`the rotation schedule could not be read or kept now: ${(err as Error).message}`);
    } finally {
      this.#scheduling = false;
    }
  }

  // A due time kept in the bus first, then here: one the bus did not take is not acted on.
  async #keepDue(key: string, record: DueRecord): Promise<void> {
    this.#mustLead("keep the rotation schedule");
    await this.#p.desired.put(key, record);
    this.#dues.set(key, record);
  }

  leading(): boolean {
    return this.#p.lease.leading();
  }

  leader(): LeaderStatus {
    const seen = this.#p.lease.seen();
    return {
      self: this.#p.lease.self,
      leading: this.leading(),
      leader: seen?.holder ?? null,
      term: seen?.term ?? null,
      fleetTerm: this.#fleetTerm,
    };
  }

  /**
   * A test's way to pause this controller as SIGSTOP would its lease: its renewals stop (the
   * lease runs out on its own clock, and a standby takes over); the returned function resumes.
   */
  pause(): () => void {
    return this.#driver.pause();
  }

  current(): FleetPlan {
    return this.#current;
  }

  reload(): Promise<ReloadOutcome> {
    return this.#exclusive(async () => {
      this.#mustLead("apply the fleet file");
      return this.#applyFile();
    });
  }

  apply(request: ApplyRequest): Promise<ApplyOutcome> {
    return this.#exclusive(async () => {
      this.#mustLead("apply a fleet");
      let next: FleetPlan;
      try {
        next = await fleetPlanOf(request.source);
      } catch (err) {
        throw new FleetRefusedError(
          request.source.fleetFile,
          problemsOf(err),
          `the mesh keeps serving revision ${this.#revision}`,
          { cause: err },
        );
      }
      return this.#applyNext(next, {
        ...(request.expectRevision !== undefined ? { expect: request.expectRevision } : {}),
        force: request.force === true,
        who: request.who,
        via: request.via,
        fromFile: false,
      });
    });
  }

  history(): Promise<readonly FleetRevision[]> {
    return readFleetHistory(this.#p.desired);
  }

  revision(): number {
    return this.#revision;
  }

  // Reads the fleet file (and the manifests it names) and applies it, expecting the revision this
  // machine last applied from it.
  async #applyFile(counted = true): Promise<ApplyOutcome> {
    const file = this.fleetFile;
    if (file === undefined) throw new Error("this controller was started without a fleet file");
    let next: FleetPlan;
    try {
      next = await loadFleetPlan(file);
    } catch (err) {
      const problems = problemsOf(err);
      this.#refused = linesOf(err, problems);
      if (counted) this.#p.observer?.reloaded("refused");
      throw new FleetRefusedError(
        file,
        problems,
        `the mesh keeps serving the last good fleet (read at ${this.#current.readAt})`,
        { cause: err },
      );
    }
    this.#refused = null;
    if (counted) this.#p.observer?.reloaded("applied");
    const expect = await this.#p.applied?.read();
    try {
      return await this.#applyNext(next, {
        ...(expect !== undefined ? { expect } : {}),
        force: false,
        who: this.#p.who ?? "unknown",
        via: "fleet file",
        fromFile: true,
      });
    } catch (err) {
      if (err instanceof StaleRevisionError)
        this.#refused = [`the fleet file ${file} was not applied: ${err.message}`];
      throw err;
    }
  }

  // When `next` differs from the fleet stored, serves and stores it as a new revision; then
  // publishes what changed.
  async #applyNext(
    next: FleetPlan,
    o: {
      readonly expect?: number;
      readonly force: boolean;
      readonly who: string;
      readonly via: string;
      readonly fromFile: boolean;
    },
  ): Promise<ApplyOutcome> {
    const previous = this.#revision;
    // The same fleet as the one stored is not stored again: the stored one (and its term) stands.
    // One accepted and not stored yet is served, not stored: it is stored now.
    if (this.#storedSha !== undefined && this.#unstored === undefined && sameFleet(next, this.#current)) {
      // The stored fleet is this one already (a write the bus did not confirm may have landed late).
      if (o.fromFile) await this.#p.applied?.write(previous);
      return { ...(await this.#publishAll()), revision: previous, previous, unchanged: true };
    }
    if (!o.force && o.expect !== undefined && o.expect !== previous && this.#storedSha !== undefined) {
      const by = await readFleetHistory(this.#p.desired).then(
        (h) => h.find((e) => e.revision === previous),
        () => undefined,
      );
      throw new StaleRevisionError(o.expect, previous, by);
    }
    const summary = summarizeChange(this.#current, next);
    this.#current = next;
    // Standings of consumers the fleet no longer has would name failures nobody can fix.
    this.#p.standings.retainPlan(next.plan);
    const stored = next;
    this.#unstored = { readAt: next.readAt, since: this.#unstored?.since ?? Date.now() };
    return this.#pending.attempt("fleet", `the fleet read at ${next.readAt}`, async () => {
      const revision = await this.#store(stored, { who: o.who, via: o.via, summary });
      if (o.fromFile) await this.#p.applied?.write(revision);
      return { ...(await this.#publishAll()), revision, previous, unchanged: false };
    });
  }

  // Stores the fleet being served, in this leader's term, as the next revision, and keeps it in
  // the history with who applied it.
  async #store(
    fleet: FleetPlan,
    by: { readonly who: string; readonly via: string; readonly summary: string },
  ): Promise<number> {
    const term = this.#mustLead("store the fleet");
    const revision = this.#revision + 1;
    if (fleet.source !== undefined) {
      await recordFleetRevision(
        this.#p.desired,
        {
          revision,
          who: by.who,
          via: by.via,
          at: new Date().toISOString(),
          summary: by.summary,
          fleetFile: fleet.fleetFile,
        },
        fleet.source,
        this.#p.historyKeep ?? DEFAULT_FLEET_HISTORY,
      );
    }
    this.#mustLead("store the fleet");
    this.#storedSha = (await storeFleet(this.#p.desired, fleet, { term, revision })).sha256;
    this.#revision = revision;
    if (this.#unstored?.readAt === fleet.readAt) this.#unstored = undefined;
    this.#fleetTerm = term;
    return revision;
  }

  /**
   * Rotates `consumer`'s password for `iface`, as `mesh rotate` asks. The mesh's own rotations say
   * `why` (kept in the ledger) and, for one that must outdate a password a backend holds, `after`:
   * the new one is minted later than that (ISO 8601).
   */
  async rotate(
    consumer: string,
    iface: string,
    who = "unknown",
    options: RotateOptions & { readonly after?: string; readonly why?: string } = {},
  ): Promise<{ readonly ledger?: string } & Partial<RotatedPassword>> {
    const at = new Date().toISOString();
    let rotated: RotatedPassword | undefined;
    const why = options.why === undefined ? {} : { why: options.why };
    try {
      if (options.now !== true) await this.#refuseDuringRotation(consumer, iface);
      rotated = await this.#rotate(consumer, iface, options.now === true, options.after);
    } catch (err) {
      // A standby carried nothing: only a rotation this controller tried is its to record. Not
      // waited for: a bus that could not store the password may not take the record either, and
      // the refusal is answered at once (a record that fails is said in the log).
      if (!(err instanceof NotLeaderError)) {
        void this.#recordRotation(
          {
            consumer,
            interface: iface,
            who,
            at,
            ...(options.now === true ? { now: true as const } : {}),
            ...why,
          },
          (err as Error).message,
        ).catch(() => undefined);
      }
      throw err;
    }
    const ledger = await this.#recordRotation({
      consumer,
      interface: iface,
      who,
      at,
      ...(options.now === true ? { now: true as const } : {}),
      ...why,
    });
    return { ...(rotated ?? {}), ...(ledger === undefined ? {} : { ledger }) };
  }

  // A provider that will not put back a password older than the one its backend holds (the mesh's
  // state is older than the backend: a restore of a backup taken before a rotation) says so in its
  // node's report. The leader rotates that consumer to a password minted after the held one, through
  // the path `mesh rotate` takes. Once: a kept password minted after the held one is not rotated
  // again, however many reports still name the failure, so a controller killed at any point, or a
  // standby that leads next, rotates it at most once more.
  #vouchFor(report: NodeReport): void {
    for (const provider of report.providers ?? []) {
      for (const f of provider.failing) {
        if (f.class !== OLDER_THAN_BACKEND) continue;
        const held = heldMintOf(f.error);
        const entry = planEntries(this.#current.plan).find(
          (e) => e.provider === provider.module && e.login === f.login,
        );
        if (held === undefined || entry === undefined) continue;
        const key = `${entry.consumer} ${entry.interface}`;
        if (this.#vouching.has(key)) continue;
        this.#vouching.add(key);
        void (async () => {
          const kept = await this.#s.passwords.ensure(entry.consumer, entry.interface);
          if (kept.mintedAt !== undefined && Date.parse(kept.mintedAt) > Date.parse(held)) return;
          const why =
            `${entry.provider}'s backend holds a password for ${entry.login} minted at ${held}, newer ` +
            "than the mesh's (its state is older than the backend, as after a restore of an older " +
            "backup): rotated to a newer one rather than put the older one back";
          this.#log.warn(`${entry.consumer}'s ${entry.interface}: ${why}`);
          // A cut-over: an overlap would make the older password valid again beside the new one
          // for the drain, the very thing refused.
          await this.rotate(entry.consumer, entry.interface, VOUCH_WHO, { after: held, why, now: true });
        })()
          .catch((err: unknown) => {
            this.#log.warn(
              `${entry.consumer}'s ${entry.interface} could not be rotated after its backend was found ` +
                `newer (${(err as Error).message}); tried again at the next report`,
            );
          })
          .finally(() => this.#vouching.delete(key));
      }
    }
  }

  // The rotation in the consumer's ledger and its provider's, as far as the fleet names them;
  // answers why a record is missing (undefined when each was written).
  async #recordRotation(
    asked: Omit<RotationRecord, "via" | "ok" | "provider" | "login">,
    error?: string,
  ): Promise<string | undefined> {
    const entry = planEntries(this.#current.plan).find(
      (e) => e.consumer === asked.consumer && e.interface === asked.interface,
    );
    const record: RotationRecord = {
      ...asked,
      ...(entry === undefined ? {} : { provider: entry.provider, login: entry.login }),
      via: ROTATE_SURFACE,
      ...(error === undefined ? { ok: true } : { ok: false, error }),
    };
    const modules = [asked.consumer, entry?.provider].filter(
      (m, i, all): m is string => m !== undefined && all.indexOf(m) === i && this.#isFleetModule(m),
    );
    const problems = await Promise.all(modules.map((m) => this.#records.record(m, "rotate", record)));
    const missing = problems.filter((p) => p !== undefined);
    return missing.length === 0 ? undefined : missing.join("; ");
  }

  // Refuses a rotation while one of the same consumer is under way: the provider's own status (asked
  // through its node, as mesh rotate --wait does) names its phase; a provider not heard in time is
  // judged by its node's last report and this controller's own last rotation.
  async #refuseDuringRotation(consumer: string, iface: string): Promise<void> {
    this.#mustLead("rotate passwords");
    const entry = planEntries(this.#current.plan).find(
      (e) => e.consumer === consumer && e.interface === iface,
    );
    if (entry === undefined) throw new UnknownConsumerError(consumer, iface);
    const key = `${consumer} ${iface}`;
    const last = this.#rotated.get(key);
    const reply = await relayToolCall(
      this.#p.nc,
      { module: entry.provider, tool: "status", args: [], who: "controller", record: false },
      this.#relaySources,
      ROTATION_CHECK_TIMEOUT_MS,
    ).catch(() => undefined);
    let rotation: RotationStatus | undefined;
    const consumers = reply?.ok === true ? (reply.answer as { consumers?: unknown }).consumers : undefined;
    if (Array.isArray(consumers)) {
      const c = (consumers as { login?: unknown; applied?: unknown; rotation?: unknown }[]).find(
        (x) => x.login === entry.login,
      );
      const r = c?.rotation as { phase?: unknown; since?: unknown; until?: unknown } | undefined;
      if ((r?.phase === "add" || r?.phase === "drain") && typeof r.since === "string") {
        rotation = {
          phase: r.phase,
          since: r.since,
          ...(typeof r.until === "string" ? { until: r.until } : {}),
        };
      } else if (last !== undefined && c?.applied !== last.tag) {
        rotation = { phase: "asked", since: last.at };
      }
    } else {
      const node = this.#current.plan.instances.find((i) => i.provider === entry.provider)?.node;
      rotation =
        node === undefined
          ? undefined
          : rotationOf({ reports: this.#reports, rotated: this.#rotatedAt() }, node, entry);
    }
    if (rotation !== undefined) throw new RotationUnderWayError(consumer, iface, rotation);
  }

  // When this controller last rotated each consumer, as the status shows it.
  #rotatedAt(): ReadonlyMap<string, string> {
    return new Map([...this.#rotated].map(([key, r]) => [key, r.at]));
  }

  #rotate(consumer: string, iface: string, cut: boolean, after?: string): Promise<RotatedPassword> {
    return this.#exclusive(async () => {
      this.#mustLead("rotate passwords");
      const entry = planEntries(this.#current.plan).find(
        (e) => e.consumer === consumer && e.interface === iface,
      );
      if (entry === undefined) throw new UnknownConsumerError(consumer, iface);
      let tag: string;
      try {
        const options = after === undefined ? { cut } : { cut, after };
        tag = passwordTag((await this.#s.passwords.rotate(consumer, iface, options)).password);
      } catch (err) {
        if (err instanceof BusCannotStoreError) this.#restoreLater(err.what, err.restore);
        throw err;
      }
      this.#p.observer?.rotated();
      this.#rotated.set(`${consumer} ${iface}`, { at: new Date().toISOString(), tag });
      await this.#pending
        .attempt("deliveries", "the deliveries of a rotation", () => this.#publishAll())
        .catch((err: unknown) => {
          if (!(err instanceof WriteWaitsError)) throw err;
          this.#log.warn(err.message);
        });
      return { provider: entry.provider, login: entry.login, tag };
    });
  }

  // A rotation the bus did not confirm: the old password is put back until the bus stores it (run
  // in the queue, after this rotation's answer), so that a new one committed late never stands.
  // `since` (wall clock, ms) is when it was refused, for a restore resumed from the restores file.
  #restoreLater(refused: string, restore: () => Promise<void>, since?: number): void {
    const what = `the settling of ${refused}'s rotation the bus did not confirm (the password before it is put back, unless a later one is stored)`;
    queueMicrotask(() => {
      // Only the leader writes: a retry that finds this controller standing by writes nothing.
      const leading = (): Promise<void> => {
        this.#mustLead("restore passwords");
        return restore();
      };
      void this.#exclusive(() => this.#pending.attempt(`restore ${refused}`, what, leading, since)).catch(
        (err: unknown) => {
          if (!(err instanceof WriteWaitsError)) this.#log.warn(`${what}: ${(err as Error).message}`);
        },
      );
    });
  }

  // What the restores file says is still to undo (a rotation refused before this controller was
  // killed, or before it stood by), or a rotation nobody confirmed found in the bus: resumed when
  // this controller leads, since only the leader writes. Each once until it is settled.
  #resumeRestores(): void {
    const passwords = this.#s.passwords;
    for (const r of passwords.pendingRestores()) {
      if (this.#restoring.has(r.key)) continue;
      this.#restoring.add(r.key);
      const since = Date.parse(r.since);
      this.#restoreLater(
        `${r.consumer}'s ${r.interface}`,
        async () => {
          await passwords.restore(r.key);
          this.#restoring.delete(r.key);
        },
        Number.isNaN(since) ? undefined : since,
      );
    }
  }

  async joinToken(node: string): Promise<string> {
    this.#mustLead("give join tokens");
    this.#knownNode(node);
    return this.#exclusive(() => this.#s.joinSecrets.tokenFor(node));
  }

  async joinTokenClaimed(node: string): Promise<boolean> {
    this.#knownNode(node);
    return this.#s.joinSecrets.claimed(node);
  }

  async renewJoinToken(node: string): Promise<string> {
    this.#mustLead("make join tokens");
    this.#knownNode(node);
    return this.#exclusive(() => this.#s.joinSecrets.renew(node));
  }

  status(): ControllerStatus {
    return controllerStatus({
      plan: this.#current.plan,
      fleetFile: this.#current.fleetFile,
      readAt: this.#current.readAt,
      refused: this.#refused,
      fleetNodes: this.#current.nodes,
      enrolled: new Set(this.#p.enrolled.keys()),
      reports: this.#reports,
      failing: this.#p.standings.failing(),
      leader: this.leader(),
      waiting: [...this.#pending.waiting(), ...this.#s.ledgers.waiting(), ...this.#waitsToLead()].sort(
        (a, b) => a.since.localeCompare(b.since),
      ),
      ...(this.#neverSeenAfterMs === undefined ? {} : { neverSeenAfterMs: this.#neverSeenAfterMs }),
      rotated: this.#rotatedAt(),
      rotationDue: this.#rotationDue(),
    });
  }

  // When each consumer's scheduled rotation is due, as this controller keeps it (a standby knows none).
  #rotationDue(): ReadonlyMap<string, string> {
    const due = new Map<string, string>();
    for (const c of planEntries(this.#current.plan)) {
      const record = this.#dues.get(dueKey(c));
      if (record !== undefined && periodOf(this.#current.rotation, c) !== undefined) {
        due.set(`${c.consumer} ${c.interface}`, record.due);
      }
    }
    return due;
  }

  // MESH_NEVER_SEEN_AFTER (a duration like 10m) in the controller's environment: how long a
  // consumer may go unseen after its password was applied before the status says so.
  readonly #neverSeenAfterMs: number | undefined = ((): number | undefined => {
    const text = process.env["MESH_NEVER_SEEN_AFTER"];
    if (text === undefined || text.trim() === "") return undefined;
    try {
      return parseDuration(text);
    } catch {
      return undefined;
    }
  })();

  bus(): Promise<BusHealth> {
    return readBusHealth(this.#p.nc);
  }

  // The dashboard's way in: the same relay and ledger read as the operator's requests on the bus.
  tool(call: ToolCall): Promise<ToolReply> {
    if (!this.leading()) {
      return Promise.resolve({
        ok: false,
        error: this.#notLeader("relay tools").message,
        code: "not-leader",
      });
    }
    return relayToolCall(this.#p.nc, { ...call, via: "dashboard" }, this.#relaySources);
  }

  ledger(module: string, limit: number): Promise<LedgerReadReply> {
    return readLedgerFor(this.#p.nc, { module, limit }, (m) => this.#isFleetModule(m));
  }

  // The other controllers that answer now (each answers CONTROLLERS_SUBJECT, this one too).
  async #otherControllers(): Promise<string[]> {
    const self = this.#p.lease.self;
    const others: string[] = [];
    const replies = await this.#p.nc.requestMany(CONTROLLERS_SUBJECT, "{}", {
      strategy: "timer",
      maxWait: STANDBYS_WITHIN_MS,
    });
    for await (const msg of replies) {
      try {
        const v = JSON.parse(msg.string()) as { self?: unknown };
        if (typeof v.self === "string" && v.self !== self) others.push(v.self);
      } catch {
        // Not a controller's word: nobody to name.
      }
    }
    return others.sort();
  }

  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#watcher?.close();
      clearInterval(this.#scheduleTimer);
      this.#pending.close();
      this.#s.ledgers.close();
      await this.#driver.stop();
      await this.#queue;
      await this.#answers.stop();
      await this.#leaderAnswers?.stop();
      await this.#tools?.stop();
      await this.#p.close();
    })();
    return this.#stopped;
  }

  // An accepted fleet that waits for this controller to lead again (its lease lapsed while the
  // bus could not store it) and to store it then, as `mesh status` lists it.
  #waitsToLead(): WaitingWrite[] {
    if (this.#unstored === undefined) return [];
    const what = `the fleet read at ${this.#unstored.readAt}`;
    // Still tried (the lease lapsed on the clock, and this controller is told at its next reading).
    if (this.#pending.waiting().some((w) => w.what === what)) return [];
    const since = new Date(this.#unstored.since).toISOString();
    return [
      {
        what,
        since,
        attempts: 0,
        error: this.leading()
          ? "this controller leads again and stores it next"
          : "this controller stands by until the bus renews its lease; it stores the fleet then",
        nextAt: new Date().toISOString(),
      },
    ];
  }

  // A module's ledger made in the background: the nodes that run it are issued its credentials.
  #use(stores: LeaderStores): LeaderStores {
    stores.ledgers.whenMade((module) => {
      const node = this.#current.modules.find((m) => m.name === module)?.node;
      if (node !== undefined) this.#syncNode(node);
    });
    return stores;
  }

  #newPending(): PendingWrites {
    return new PendingWrites({ logger: this.#p.logger, run: (fn) => this.#exclusive(fn) });
  }

  // One change at a time: a reload, a rotation and an enrollment each see the others whole.
  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  // The term this controller leads in; it throws when it does not lead now (checked before each
  // write, so a leader whose lease ran out stops at once, even halfway through a change).
  #mustLead(what: string): number {
    const term = this.#p.lease.term();
    if (term === undefined) throw this.#notLeader(what);
    return term;
  }

  #notLeader(what: string): NotLeaderError {
    const seen = this.#p.lease.seen();
    const other = seen !== undefined && seen.holder !== this.#p.lease.self;
    return new NotLeaderError(what, other ? seen.holder : null, other ? seen.term : null);
  }

  // This controller leads now: it serves the stored fleet (or, at its own start, its fleet file
  // when that differs), publishes it in its term, and answers what only the leader answers.
  async #lead(): Promise<void> {
    const term = this.#p.lease.term();
    this.#log.info(`controller ${this.#p.lease.self} leads the mesh in term ${term}`);
    const ledBefore = this.#ledTerm;
    this.#ledTerm = term;
    const serve = async (): Promise<void> => {
      if (this.#stale) {
        // Its own lease lapsed and it took it back in the same term: nobody led meanwhile, so
        // what it holds is what the bus holds. Opened again, the stores would list buckets'
        // keys, which waits for JetStream to place a consumer (tens of seconds when it places
        // it on a server that has just gone down, as after one is killed).
        if (term !== undefined && ledBefore === term) this.#s.ledgers.reopen();
        else {
          this.#s.ledgers.close();
          this.#s = this.#use(await this.#p.openStores());
        }
        this.#stale = false;
      }
      this.#resumeRestores();
      // Read, or this serving is tried again: a fleet that cannot be read now is not "none stored".
      const stored = await readStoredFleet(this.#p.desired);
      const head = await loadStoredFleetHead(this.#p.desired);
      // What was last applied is served, whichever machine applied it: never a file of its own.
      if (stored !== undefined && head !== undefined) {
        this.#current = stored;
        this.#storedSha = head.sha256;
        this.#fleetTerm = head.term;
        this.#revision = head.revision;
        this.#p.standings.retainPlan(stored.plan);
      }
      // It led before, accepted a fleet the bus did not store, and its lease lapsed: when no
      // other leader stored a fleet since, the accepted one is applied again, not dropped.
      if (this.#fileChangedAt !== undefined) {
        this.#fileChangedAt = undefined;
        if (ledBefore !== undefined && (head?.term ?? 0) <= ledBefore) this.#applyFileFirst = true;
      }
      if (this.#unstored !== undefined) {
        if (ledBefore !== undefined && (head?.term ?? 0) <= ledBefore) this.#applyFileFirst = true;
        else {
          this.#log.warn(
            `the fleet read at ${this.#unstored.readAt} was not stored before another controller ` +
              `stored its own: that one is served; save the fleet file again to apply it`,
          );
          this.#unstored = undefined;
        }
      }
      if (
        this.fleetFile !== undefined &&
        (this.#applyFileFirst || (stored === undefined && !this.#p.standby))
      ) {
        this.#applyFileFirst = false;
        // When the file is refused now, the fleet stored (or read at start, its last good one) is served.
        await this.#applyFile(false).catch(async (err: unknown) => {
          if (err instanceof StaleRevisionError) {
            this.#log.error(`the fleet file ${this.fleetFile} was not applied: ${err.message}`);
            await this.#publishAll();
            return;
          }
          // Not applied (the bus failed halfway): the next try of this serving applies it again.
          if (!(err instanceof FleetRefusedError)) {
            this.#applyFileFirst = true;
            throw err;
          }
          if (stored === undefined)
            await this.#store(this.#current, {
              who: this.#p.who ?? "unknown",
              via: "fleet file",
              summary: "the first fleet",
            });
          await this.#publishAll();
        });
      } else {
        await this.#publishAll();
      }
    };
    try {
      // At its start, a failure fails the start; later (the lease taken again while the bus is
      // slow), serving waits and is tried again, and this controller answers as leader meanwhile:
      // a leader that answers nothing would stop every rotation and join token.
      await this.#exclusive(() =>
        this.#answeredOnce
          ? this.#pending.attempt("lead", `the fleet served in term ${term}`, serve)
          : serve(),
      );
    } catch (err) {
      if (!this.#answeredOnce) {
        this.#failedFirst = err;
        return;
      }
      this.#log.warn(`controller ${this.#p.lease.self} leads, but ${(err as Error).message}`);
    }
    this.#answerAsLeader();
  }

  // This controller no longer leads: it stops answering what only the leader answers.
  async #standBy(): Promise<void> {
    const seen = this.#p.lease.seen();
    this.#log.warn(
      `controller ${this.#p.lease.self} stands by` +
        (seen !== undefined && seen.holder !== this.#p.lease.self
          ? `: controller ${seen.holder} leads in term ${seen.term}`
          : ": its lease was not renewed in time"),
    );
    this.#stale = true;
    this.#dues.clear();
    this.#pending.close();
    this.#s.ledgers.close();
    this.#pending = this.#newPending();
    // Dropped with what waited; resumed when it leads again.
    this.#restoring.clear();
    const answers = this.#leaderAnswers;
    const tools = this.#tools;
    this.#leaderAnswers = undefined;
    this.#tools = undefined;
    await answers?.stop();
    await tools?.stop();
  }

  // A standby follows the fleet stored by the leader, so its status and `mesh plan` show it.
  async #follow(): Promise<void> {
    const head = await loadStoredFleetHead(this.#p.desired);
    if (head === undefined || head.sha256 === this.#storedSha) return;
    const stored = await loadStoredFleet(this.#p.desired);
    if (stored === undefined) return;
    // It may have taken up the lead while it read (following runs beside the lease's readings):
    // then what it serves is what leading read or stored, never this older reading.
    if (this.leading()) return;
    this.#current = stored;
    this.#storedSha = head.sha256;
    this.#fleetTerm = head.term;
    this.#revision = head.revision;
    this.#p.standings.retainPlan(stored.plan);
  }

  #knownNode(node: string): void {
    if (!this.#current.nodes.includes(node) && !this.#p.enrolled.has(node)) throw new UnknownNodeError(node);
  }

  #isFleetModule(module: string): boolean {
    return this.#current.modules.some((m) => m.name === module);
  }

  // Publishes `node`'s delivery from the fleet being served, saying so when it changed.
  async #publishNode(node: string): Promise<Published> {
    const term = this.#mustLead("publish deliveries");
    // Consumers of a provider with no endpoint: in the fleet are sent where it reports it serves.
    const fleet = this.#current;
    const plan = await this.#served.plan(fleet);
    const result = await this.#s.deliveries.publish(
      node,
      plan === fleet.plan ? fleet : { ...fleet, plan },
      this.#p.enrolled.get(node),
      this.#s.credentials.forNode(node, this.#current),
      term,
      // Again right before the write, in this same term: every await since may have outlasted the lease.
      () => {
        if (this.#mustLead("publish deliveries") !== term) throw this.#notLeader("publish deliveries");
      },
    );
    if (result.changed)
      this.#log.info(`published generation ${result.generation} of node ${node}'s delivery`);
    return result;
  }

  async #publishAll(): Promise<ReloadOutcome> {
    const { passwords, credentials, credentialSync } = this.#s;
    const { enrolled } = this.#p;
    this.#mustLead("mint passwords");
    const before = passwords.minted;
    await passwords.ensureAll(planEntries(this.#current.plan));
    // Reading them may have found a rotation nobody confirmed (its controller killed meanwhile).
    this.#resumeRestores();
    const minted = passwords.minted - before;
    if (minted > 0)
      this.#log.info(`minted ${minted} password(s) for consumers new to the fleet, kept sealed`);
    this.#p.observer?.minted(minted);
    const published: Published[] = [];
    const nodes = [...new Set([...this.#current.nodes, ...enrolled.keys()])].sort();
    // A node gone from the fleet and never enrolled may still hold credentials: they are revoked.
    for (const node of new Set([...nodes, ...credentials.nodes()])) {
      await credentialSync.sync(node, this.#current, enrolled.has(node));
    }
    for (const node of nodes) {
      if (!enrolled.has(node)) {
        // Its bucket is made apart: a node that has not enrolled is nothing to wait for.
        this.#s.ledgers.nodeBucket(node, () => this.#s.deliveries.bucket(node));
        continue;
      }
      try {
        const result = await this.#publishNode(node);
        if (result.changed) published.push(result);
      } catch (err) {
        if (err instanceof NotLeaderError) throw err;
        this.#deliverLater(node, err);
      }
    }
    await credentialSync.revokeRetired();
    return { published, minted };
  }

  // The fleet file changed while the lease waited to be renewed: applied once this controller
  // leads again (tried again until then; if it stands by meanwhile, `#lead` applies it).
  #applyWhenLeading(): void {
    const what = `the fleet file as saved at ${new Date().toISOString()}`;
    void this.#exclusive(() =>
      this.#pending.attempt("fleet file", what, async () => {
        this.#mustLead("apply the fleet file");
        this.#fileChangedAt = undefined;
        await this.#applyFile().catch((err: unknown) => {
          // A refused file is said; it is not tried again until it changes.
          if (!(err instanceof FleetRefusedError)) throw err;
          this.#log.error(err.message);
        });
      }),
    ).catch((err: unknown) => {
      if (!(err instanceof WriteWaitsError)) this.#log.warn(`${what}: ${(err as Error).message}`);
    });
  }

  // One node's delivery the bus did not take (its bucket's server is being replaced, say): it waits
  // and is tried again on its own, so that the other nodes' deliveries, and the change that made
  // them, do not wait for it.
  #deliverLater(node: string, refused: unknown): void {
    this.#log.warn(
      `node ${node}'s delivery waits: the bus did not take it (${(refused as Error).message}); it is tried again until stored`,
    );
    let first: unknown = refused;
    this.#pending
      .attempt(`delivery ${node}`, `node ${node}'s delivery`, async () => {
        if (first !== undefined) {
          const err = first;
          first = undefined;
          throw err;
        }
        await this.#publishNode(node);
      })
      .catch((err: unknown) => {
        if (!(err instanceof WriteWaitsError)) this.#log.warn((err as Error).message);
      });
  }

  // A node reported module keys not issued for: issue them and publish its delivery.
  #syncNode(node: string): void {
    if (this.#syncing.has(node) || !this.leading()) return;
    this.#syncing.add(node);
    this.#exclusive(async () => {
      this.#syncing.delete(node);
      await this.#pending.attempt(`delivery ${node}`, `node ${node}'s delivery`, async () => {
        await this.#s.credentialSync.sync(node, this.#current, this.#p.enrolled.has(node));
        await this.#publishNode(node);
      });
      await this.#s.credentialSync.revokeRetired();
    }).catch((err: unknown) =>
      this.#log.error(`node ${node}'s delivery could not be published: ${(err as Error).message}`),
    );
  }

  #enroll(record: EnrolledNode): Promise<void> {
    return this.#exclusive(async () => {
      this.#mustLead("enroll nodes");
      await this.#p.nodesState.put(record.node, record);
      this.#p.enrolled.set(record.node, record);
      this.#log.info(`node ${record.node} enrolled (NATS key ${record.natsPublicKey})`);
      await this.#publishNode(record.node);
    });
  }

  // What only the leader answers (every write), from when it leads until it stands by.
  #answerAsLeader(): void {
    if (this.#leaderAnswers !== undefined || this.#stopped !== undefined) return;
    const { nc, authority } = this.#p;
    const { joinSecrets } = this.#s;
    const answers = (this.#leaderAnswers = new BusAnswers(nc, this.#log));
    answers.answer(enrollSubject(), true, async (data) => {
      const reply = await answerEnrollment({ joinSecrets, authority, enroll: (r) => this.#enroll(r) }, data);
      if (!reply.ok) this.#log.warn(`an enrollment was refused: ${reply.error}`);
      return reply;
    });
    // Apart from the answers, which go one at a time: a slow delete must not hold up the next tool.
    this.#tools = serveToolRelay({ nc, logger: this.#log, queue: CONTROLLER_QUEUE, ...this.#relaySources });
    answers.answer(JOIN_TOKEN_SUBJECT, true, (data) =>
      answerJoinTokenRequest(data, (node, renew) =>
        renew ? this.renewJoinToken(node) : this.joinToken(node),
      ),
    );
    answers.answer(ROTATE_SUBJECT, true, (data) =>
      answerRotateRequest(data, (c, i, who, options) => this.rotate(c, i, who, options)),
    );
    answers.answer(FLEET_APPLY_SUBJECT, true, (data) => this.#answerApply(data));
  }

  // `mesh apply` and `mesh fleet rollback`: `{source | rollback | upload, expectRevision?, force?, who}`;
  // a larger fleet's parts first, each `{upload, part, parts, text}` (see apply-uploads).
  async #answerApply(data: Uint8Array): Promise<unknown> {
    let asked: Record<string, unknown>;
    try {
      asked = JSON.parse(new TextDecoder().decode(data)) as Record<string, unknown>;
      if (typeof asked !== "object" || asked === null) throw new Error("not an object");
    } catch {
      return { ok: false, code: "bad-request", error: "an apply request must be a JSON object" };
    }
    const who = typeof asked["who"] === "string" ? asked["who"].slice(0, 200) : "unknown";
    const expect = asked["expectRevision"];
    // A part of a fleet larger than one message: kept until its apply names the upload.
    if (asked["upload"] !== undefined && asked["part"] !== undefined) {
      try {
        this.#uploads.take(asked["upload"], asked["part"], asked["parts"], asked["text"]);
        return { ok: true, upload: asked["upload"], part: asked["part"] };
      } catch (err) {
        if (!(err instanceof ApplyUploadError)) throw err;
        return { ok: false, code: "bad-request", error: err.message };
      }
    }
    if (asked["upload"] !== undefined) {
      try {
        asked = {
          ...asked,
          source: JSON.parse(
            this.#uploads.finish(asked["upload"], asked["parts"], asked["sha256"]),
          ) as unknown,
        };
      } catch (err) {
        if (err instanceof ApplyUploadError) return { ok: false, code: "bad-request", error: err.message };
        return { ok: false, code: "bad-request", error: "an apply's upload is not a fleet's source (JSON)" };
      }
    }
    try {
      let source: FleetSource;
      let via = "mesh apply";
      if (typeof asked["rollback"] === "number") {
        const got = await readFleetRevision(this.#p.desired, asked["rollback"]);
        if (got === undefined)
          return {
            ok: false,
            code: "unknown-revision",
            error: `revision ${asked["rollback"]} is not kept: mesh fleet history lists those kept`,
          };
        source = got.source;
        via = `rollback to ${asked["rollback"]}`;
      } else {
        const s = asked["source"] as Partial<FleetSource> | undefined;
        if (
          typeof s?.fleetFile !== "string" ||
          typeof s.fleetText !== "string" ||
          typeof s.manifests !== "object" ||
          s.manifests === null ||
          !Object.values(s.manifests).every((t) => typeof t === "string")
        )
          return { ok: false, code: "bad-request", error: "an apply request must carry the fleet's source" };
        source = { fleetFile: s.fleetFile, fleetText: s.fleetText, manifests: s.manifests };
      }
      const outcome = await this.apply({
        source,
        ...(typeof expect === "number" ? { expectRevision: expect } : {}),
        force: asked["force"] === true,
        who,
        via,
      });
      return { ok: true, ...outcome, published: outcome.published.length };
    } catch (err) {
      if (err instanceof StaleRevisionError)
        return {
          ok: false,
          code: "stale-revision",
          error: err.message,
          expected: err.expected,
          stored: err.stored,
        };
      if (err instanceof FleetRefusedError)
        return { ok: false, code: "refused", error: err.message, problems: err.problems };
      if (err instanceof NotLeaderError) return { ok: false, code: "not-leader", error: err.message };
      if (err instanceof WriteWaitsError) return { ok: false, code: "waits", error: err.message };
      return { ok: false, code: "failed", error: (err as Error).message };
    }
  }

  // What every controller answers on the bus, leading or standing by.
  #answer(): void {
    this.#answeredOnce = true;
    const { nc } = this.#p;
    const answers = this.#answers;
    answers.answer(STATUS_SUBJECT, true, () => Promise.resolve(this.status()));
    // Every controller, not one of the queue: a person's CLI names the leader and the standbys.
    answers.answer(CONTROLLERS_SUBJECT, false, () => Promise.resolve(this.leader()));
    answers.answer(LEDGER_READ_SUBJECT, true, (data) =>
      answerLedgerRead(nc, data, (m) => this.#isFleetModule(m)),
    );
    // `mesh plan` compares a fleet file with what is served; it reads, never changes. Answered
    // between changes, never in the middle of one: a fleet accepted and its passwords not minted
    // yet would be said to need passwords that are being minted.
    answers.answer(SERVED_FLEET_SUBJECT, true, () =>
      this.#exclusive(async () => ({
        ok: true,
        fleet: this.#current,
        revision: this.#revision,
        keptPasswords: await this.#s.passwords.keys(),
      })),
    );
    // `mesh fleet history` and `mesh fleet show REV`: read from the bus, as every controller can.
    answers.answer(FLEET_HISTORY_SUBJECT, true, async (data) => {
      try {
        const asked = JSON.parse(new TextDecoder().decode(data)) as { revision?: unknown };
        if (typeof asked.revision === "number") {
          const got = await readFleetRevision(this.#p.desired, asked.revision);
          if (got === undefined)
            return {
              ok: false,
              error: `revision ${asked.revision} is not kept (mesh fleet history lists those kept)`,
            };
          return { ok: true, revision: this.#revision, entry: got.entry, source: got.source };
        }
        return { ok: true, revision: this.#revision, history: await this.history() };
      } catch (err) {
        return { ok: false, error: (err as Error).message };
      }
    });
    answers.answer(allReportsSubject(), false, (data, subject) => {
      const node = reportingNode(subject);
      const report = node !== undefined ? parseReport(node, data, new Date()) : undefined;
      if (node !== undefined && report !== undefined) {
        const before = this.#reports.get(node);
        if (before?.protocol !== report.protocol || before?.release !== report.release) {
          // Said once per change of the node's mesh (an upgrade of it), never per report.
          const version = nodeVersion(report);
          if (!version.compatible) this.#log.error(`node ${node}: ${version.problem ?? ""}`);
          else if (before !== undefined)
            this.#log.info(
              `node ${node} now runs mesh ${report.release ?? "0.1.0"} (protocol ${report.protocol})`,
            );
        }
        this.#reports.set(node, report);
        if (this.leading()) this.#vouchFor(report);
        if (this.#s.credentials.report(node, report.moduleKeys, this.#current)) this.#syncNode(node);
        const moved = this.#served.learn(report, this.#current);
        if (moved.length > 0 && this.leading()) {
          void this.#served.keep(moved);
          for (const n of ServedEndpoints.consumerNodes(this.#current, moved)) this.#syncNode(n);
        }
      }
      return Promise.resolve(undefined);
    });
    // Not queued: every controller keeps its own book of what the providers say.
    answers.answer(STANDINGS_SUBJECT, false, (data, subject) => {
      this.#p.standings.take(subject, data);
      return Promise.resolve(undefined);
    });
  }

  #watch(): void {
    const file = this.fleetFile;
    if (file === undefined) return;
    this.#watcher = watchFleetFile(
      file,
      () => {
        if (!this.leading()) {
          // Its own lease lapsed (the bus slow to renew it), and no other controller holds it:
          // the change is applied when it leads again, unless another leader stores a fleet first.
          const seen = this.#p.lease.seen();
          if (this.#ledTerm !== undefined && (seen === undefined || seen.holder === this.#p.lease.self)) {
            this.#fileChangedAt = this.#fileChangedAt ?? Date.now();
            this.#log.warn(
              `the fleet file ${file} changed while this controller's lease waits to be renewed: ` +
                `it is applied when the bus renews it`,
            );
            this.#applyWhenLeading();
            return;
          }
          this.#log.warn(
            `the fleet file ${file} changed, but this controller stands by: the fleet stored in the mesh is ` +
              `served; apply the file with mesh apply ${file}`,
          );
          return;
        }
        this.reload().then(
          (outcome) =>
            this.#log.info(
              `read the fleet file ${file} again: ${outcome.published.length} node(s) got a new delivery` +
                (outcome.minted > 0 ? `, ${outcome.minted} password(s) minted` : ""),
            ),
          (err: unknown) => this.#log.error((err as Error).message),
        );
      },
      this.#log,
    );
  }
}

// A fleet as JSON, without when it was read: two readings of the same files give the same text.
function fleetText(fleet: FleetPlan): string {
  return JSON.stringify({ ...fleet, readAt: undefined });
}

// Whether two fleets are the same but for when they were read. A fleet read again unchanged is the
// last reading itself with a new `readAt` (every other field the same object): that is seen
// without writing out ten thousand modules twice.
function sameFleet(a: FleetPlan, b: FleetPlan): boolean {
  const fields = new Set<string>([...Object.keys(a), ...Object.keys(b)]);
  fields.delete("readAt");
  const field = (f: FleetPlan, key: string): unknown => (f as unknown as Record<string, unknown>)[key];
  if ([...fields].every((key) => field(a, key) === field(b, key))) return true;
  return fleetText(a) === fleetText(b);
}

// One line saying what an apply changes, for the history.
function summarizeChange(before: FleetPlan, next: FleetPlan): string {
  const s = diffFleetPlans(
    before.plan.instances.length === 0 && before.modules.length === 0 ? EMPTY_FLEET : before,
    next,
  ).summary;
  const parts = [
    s.create > 0 ? `${s.create} consumer(s) added` : "",
    s.retire > 0 ? `${s.retire} consumer(s) no longer asked for` : "",
    s.change > 0 ? `${s.change} consumer(s) changed` : "",
    s.moduleStart > 0 ? `${s.moduleStart} module(s) started` : "",
    s.moduleStop > 0 ? `${s.moduleStop} module(s) stopped` : "",
    s.moduleMove > 0 ? `${s.moduleMove} module(s) moved` : "",
    s.moduleRestart > 0 ? `${s.moduleRestart} module(s) restarted` : "",
    s.moduleLimits > 0 ? `${s.moduleLimits} module(s) with new limits` : "",
    s.nodesAdded > 0 ? `${s.nodesAdded} node(s) added` : "",
    s.nodesRemoved > 0 ? `${s.nodesRemoved} node(s) removed` : "",
    JSON.stringify(before.rotation ?? {}) === JSON.stringify(next.rotation ?? {})
      ? ""
      : "the rotation schedule changed",
  ].filter((p) => p !== "");
  return parts.length > 0 ? parts.join(", ") : "no change to consumers, modules or nodes";
}
