// Event subjects and the NATS permissions derived from manifests. Every subject the mesh uses is
// built here, by the same functions the permission compiler calls, so what a module may publish and
// where the SDK publishes can never drift apart.
//
// Two namespaces, so a seat and a module never share a subject even when they share a name:
//   mesh.events.<module>.<local event>   what a module says under its own (fleet) name
//   mesh.seats.<seat>.<local event>      what the module holding a seat says in the seat's name
// A subscription names a source (`<source>.<event>`); the source is a seat when the fleet has that
// seat, else a module. A fleet where a seat and a module share a name is refused by `seatHolders`,
// because a subscription to that name could mean either.

import type { Manifest } from "./manifest.ts";
import {
  assertModuleName,
  eventNameProblem,
  isModuleName,
  MODULE_NAME_RULE,
  subscriptionProblem,
} from "./names.ts";
import { nearestLine } from "./source-positions.ts";

/** Where every module's own events live: `mesh.events.<module>.<local event>`. */
export const EVENTS_PREFIX = "mesh.events";
/** Where every seat's events live: `mesh.seats.<seat>.<local event>`. */
export const SEATS_PREFIX = "mesh.seats";
/**
 * The standings events: every module that receives contributions (provides an interface) may
 * announce them under its own name, and no manifest lists them.
 */
export const STANDINGS_EVENTS: readonly string[] = ["provisioner.failing", "provisioner.recovered"];

/** A name that would widen or break a subject (a `.`, `*`, `>`, whitespace, uppercase) was handed to a subject derivation. */
export class InvalidEventNameError extends Error {
  override name = "InvalidEventNameError";
  constructor(
    /** What the name was meant to be. */
    readonly kind: "event" | "seat" | "subscription",
    readonly value: string,
    why: string,
  ) {
    super(
      `${kind} ${JSON.stringify(value)} is not valid: ${why}; refused before it becomes a NATS subject (fix the manifest or the caller)`,
    );
  }
}

/** A module was said to hold a seat that its manifest does not declare in `seats`. */
export class SeatNotDeclaredError extends Error {
  override name = "SeatNotDeclaredError";
  constructor(
    readonly module: string,
    readonly seat: string,
    readonly file: string,
  ) {
    super(
      `module ${module} was given the seat ${JSON.stringify(seat)}, which its manifest ${file} does not declare; add it to "seats" there, or give the seat to a module that declares it`,
    );
  }
}

/** Two modules declare one seat, or a seat has a module's name: a subscription to it would be ambiguous. */
export class SeatConflictError extends Error {
  override name = "SeatConflictError";
  constructor(
    readonly seat: string,
    /** The modules involved: both declarers, or the declarer and the module of the same name. */
    readonly modules: readonly string[],
    message: string,
  ) {
    super(message);
  }
}

function assertEventName(localName: string): string {
  const why = typeof localName === "string" ? eventNameProblem(localName) : "is not a string";
  if (why !== undefined) throw new InvalidEventNameError("event", String(localName), why);
  return localName;
}

function assertSeatName(seat: string): string {
  if (!isModuleName(seat))
    throw new InvalidEventNameError("seat", String(seat), `must be ${MODULE_NAME_RULE}`);
  return seat;
}

/**
 * The subject of `localName` emitted by `module` under its own name: `mesh.events.<module>.<localName>`.
 * @throws InvalidNameError when `module` is not a module name; InvalidEventNameError when
 *   `localName` is not a local event name (so no name can smuggle a `.`, `*` or `>` into another's subject).
 */
export function eventSubject(module: string, localName: string): string {
  return `${EVENTS_PREFIX}.${assertModuleName(module)}.${assertEventName(localName)}`;
}

/**
 * The subject of `localName` emitted in the name of `seat`: `mesh.seats.<seat>.<localName>`.
 * @throws InvalidEventNameError when `seat` is not a seat name or `localName` not a local event name.
 */
export function seatSubject(seat: string, localName: string): string {
  return `${SEATS_PREFIX}.${assertSeatName(seat)}.${assertEventName(localName)}`;
}

/**
 * The NATS subjects a manifest subscription (`**`, `<source>.<event>`, `<source>.**`) covers.
 * `seats` is every seat of the fleet: a source in it is a seat, any other a module. When `seats`
 * is not known (undefined) a source could be either, and both subjects are returned; they cannot
 * overlap anything of another source.
 * @throws InvalidEventNameError when `pattern` is not a valid subscription.
 */
export function subscriptionSubjects(pattern: string, seats?: ReadonlySet<string>): string[] {
  const why = typeof pattern === "string" ? subscriptionProblem(pattern) : "is not a string";
  if (why !== undefined) throw new InvalidEventNameError("subscription", String(pattern), why);
  if (pattern === "**") return [`${EVENTS_PREFIX}.>`, `${SEATS_PREFIX}.>`];
  const dot = pattern.indexOf(".");
  const source = pattern.slice(0, dot);
  const event = pattern.slice(dot + 1);
  const asModule = event === "**" ? `${EVENTS_PREFIX}.${source}.>` : eventSubject(source, event);
  const asSeat = event === "**" ? `${SEATS_PREFIX}.${source}.>` : seatSubject(source, event);
  if (seats === undefined) return [asModule, asSeat];
  return [seats.has(source) ? asSeat : asModule];
}

/**
 * Whether a subscription or publish permission `pattern` covers `subject` the way NATS decides it:
 * `*` is one token, `>` one or more at the end; a wildcard in `subject` is covered only by a
 * wildcard at least as wide.
 */
export function subjectCovers(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    const pt = p[i];
    const st = s[i];
    if (pt === ">") return i < s.length;
    if (st === undefined) return false;
    if (pt === "*") {
      if (st === ">") return false;
      continue;
    }
    if (pt !== st) return false;
  }
  return p.length === s.length;
}

/**
 * Every seat of the fleet and the module that holds it, from the manifests' `seats`.
 * @throws SeatConflictError when two modules declare one seat, or a seat has a module's name.
 */
export function seatHolders(manifests: ReadonlyMap<string, Manifest>): Map<string, string> {
  const holders = new Map<string, string>();
  for (const [module, manifest] of manifests) {
    for (const seat of manifest.seats) {
      const other = holders.get(seat);
      if (other !== undefined && other !== module) {
        throw new SeatConflictError(
          seat,
          [other, module],
          `seat ${seat} is declared by both ${other} and ${module}: a seat has one holder, so subscribers know whom they follow; remove it from one of the manifests`,
        );
      }
      if (manifests.has(seat)) {
        throw new SeatConflictError(
          seat,
          [module, seat],
          `seat ${seat} (declared by ${module}) has the name of the module ${seat}: a subscription to "${seat}.<event>" could mean either; rename the seat or the module`,
        );
      }
      holders.set(seat, module);
    }
  }
  return holders;
}

/** One permission a module gets, and the manifest field that grants it. */
export interface PermissionGrant {
  readonly action: "publish" | "subscribe";
  /** A NATS subject, `>` possibly at its end for a subscription. */
  readonly subject: string;
  /** Why, in words: `notes emits note.created`. */
  readonly because: string;
  /** The manifest it comes from. */
  readonly file: string;
  /** The field that grants it, as a problem names fields: `emits[0]`. */
  readonly field: string;
  readonly line?: number | undefined;
}

function lineOf(manifest: Manifest, field: string, ...path: (string | number)[]): number | undefined {
  return manifest.lines.get(field) ?? nearestLine(manifest.lines, path);
}

/**
 * Every permission `moduleName` (its fleet name, its namespace) gets from `manifest`, each with
 * the line that grants it: its declared events under its own name and under each seat it holds,
 * the standings events when it provides an interface, and its subscriptions.
 * `seats`, when given, is every seat of the fleet (see `subscriptionSubjects`).
 * @throws InvalidNameError / InvalidEventNameError for a name that is not valid;
 *   SeatNotDeclaredError when `seatsHeld` names a seat the manifest does not declare.
 */
export function permissionGrants(
  manifest: Manifest,
  moduleName: string,
  seatsHeld: readonly string[],
  seats?: ReadonlySet<string>,
): PermissionGrant[] {
  assertModuleName(moduleName);
  const file = manifest.file;
  const grants: PermissionGrant[] = [];
  manifest.emits.forEach((event, i) => {
    const field = `emits[${i}]`;
    grants.push({
      action: "publish",
      subject: eventSubject(moduleName, event),
      because: `${moduleName} emits ${event}`,
      file,
      field,
      line: lineOf(manifest, field, "emits", i),
    });
  });
  for (const seat of seatsHeld) {
    assertSeatName(seat);
    const s = manifest.seats.indexOf(seat);
    if (s < 0) throw new SeatNotDeclaredError(moduleName, seat, file);
    manifest.emits.forEach((event, i) => {
      grants.push({
        action: "publish",
        subject: seatSubject(seat, event),
        because: `${moduleName} holds the seat ${seat} (seats[${s}]) and emits ${event}`,
        file,
        field: `emits[${i}]`,
        line: lineOf(manifest, `emits[${i}]`, "emits", i),
      });
    });
  }
  const [iface] = manifest.provides.keys();
  if (iface !== undefined) {
    const field = `provides.${iface}`;
    for (const event of STANDINGS_EVENTS) {
      grants.push({
        action: "publish",
        subject: eventSubject(moduleName, event),
        because: `${moduleName} provides ${iface}, and every module that receives contributions may announce ${event}`,
        file,
        field,
        line: lineOf(manifest, field, "provides", iface),
      });
    }
  }
  manifest.subscribes.forEach((pattern, i) => {
    const field = `subscribes[${i}]`;
    for (const subject of subscriptionSubjects(pattern, seats)) {
      grants.push({
        action: "subscribe",
        subject,
        because: `${moduleName} subscribes to ${pattern}`,
        file,
        field,
        line: lineOf(manifest, field, "subscribes", i),
      });
    }
  });
  return grants;
}

/** A module's NATS permissions, in the shape a NATS user JWT or `authorization` block takes them. */
export interface ModulePermissions {
  readonly pub: { readonly allow: string[] };
  readonly sub: { readonly allow: string[] };
}

/**
 * Compiles `moduleName`'s NATS permissions from its manifest: it may publish only its declared
 * events, under its own name and the names of the seats it holds (plus the standings events when it
 * provides an interface), and subscribe only to what it declares. Each list is free of repeats.
 * @throws as `permissionGrants`.
 */
export function compilePermissions(
  manifest: Manifest,
  moduleName: string,
  seatsHeld: readonly string[],
  seats?: ReadonlySet<string>,
): ModulePermissions {
  const grants = permissionGrants(manifest, moduleName, seatsHeld, seats);
  const of = (action: PermissionGrant["action"]): string[] => [
    ...new Set(grants.filter((g) => g.action === action).map((g) => g.subject)),
  ];
  return { pub: { allow: of("publish") }, sub: { allow: of("subscribe") } };
}

/** What `explain` decided, and which manifest line decides it. */
export interface Explanation {
  readonly allowed: boolean;
  /** A sentence for a person: what allows it, or what is missing and how to change it. */
  readonly because: string;
  readonly file?: string | undefined;
  /** The manifest field that decides it (`emits[0]`, `subscribes`), when one does. */
  readonly field?: string | undefined;
  readonly line?: number | undefined;
}

// A NATS subject token: anything but dots and whitespace; empty tokens are invalid.
const SUBJECT_TOKEN = /^[^\s.]+$/;

/**
 * Whether `module` may `action` on `subject` under the permissions compiled from `manifests` (by
 * fleet module name) and `seats` (seat to holder), and which manifest line decides it. Never
 * throws for data: an unknown module, a malformed subject or a manifest that cannot be compiled
 * is a denial that says so.
 */
export function explain(
  manifests: ReadonlyMap<string, Manifest>,
  seats: ReadonlyMap<string, string>,
  module: string,
  action: "publish" | "subscribe",
  subject: string,
): Explanation {
  const manifest = manifests.get(module);
  if (manifest === undefined) {
    const known = [...manifests.keys()].join(", ");
    return {
      allowed: false,
      because: `there is no module ${JSON.stringify(module)} in the fleet (it has: ${known})`,
    };
  }
  const file = manifest.file;
  const at = (field: string, ...path: (string | number)[]) => ({
    file,
    field,
    line: lineOf(manifest, field, ...path) ?? manifest.lines.get("name"),
  });
  const tokens = subject.split(".");
  if (!tokens.every((t) => SUBJECT_TOKEN.test(t))) {
    return {
      allowed: false,
      because: `${JSON.stringify(subject)} is not a NATS subject (dot-separated tokens, none empty, no whitespace)`,
    };
  }
  const wild = tokens.findIndex((t) => t === "*" || t === ">");
  if (wild >= 0 && (action === "publish" || (tokens[wild] === ">" && wild !== tokens.length - 1))) {
    return {
      allowed: false,
      because:
        action === "publish"
          ? `a publish names one subject, and ${subject} holds a wildcard (wildcards only subscribe)`
          : `${subject} holds ">" before its end, which NATS refuses`,
    };
  }
  const held = [...seats].filter(([, holder]) => holder === module).map(([seat]) => seat);
  let grants: PermissionGrant[];
  try {
    grants = permissionGrants(
      manifest,
      module,
      held.filter((seat) => manifest.seats.includes(seat)),
      new Set(seats.keys()),
    );
  } catch (err) {
    return {
      allowed: false,
      because: `its permissions cannot be compiled: ${(err as Error).message}`,
      ...at("name", "name"),
    };
  }
  const granted = grants.find((g) => g.action === action && subjectCovers(g.subject, subject));
  if (granted) {
    return {
      allowed: true,
      because: `${granted.because}, which grants ${granted.subject}`,
      file: granted.file,
      field: granted.field,
      line: granted.line,
    };
  }
  if (action === "subscribe") {
    return {
      allowed: false,
      because: `${module} subscribes to nothing that covers ${subject}; add the source and event ("<module>.<event>", "<module>.**" or "**") to "subscribes"`,
      ...at("subscribes", "subscribes"),
    };
  }
  const [root, space, owner, ...rest] = tokens;
  const local = rest.join(".");
  if (`${root}.${space}` === EVENTS_PREFIX && owner !== undefined && rest.length > 0) {
    if (owner !== module) {
      return {
        allowed: false,
        because: `${subject} is in ${owner}'s namespace, and ${module} publishes only under ${EVENTS_PREFIX}.${module} and the seats it holds`,
        ...at("name", "name"),
      };
    }
    return {
      allowed: false,
      because: `${module} does not declare ${local} in "emits"; add it there to publish it`,
      ...at("emits", "emits"),
    };
  }
  if (`${root}.${space}` === SEATS_PREFIX && owner !== undefined && rest.length > 0) {
    if (!held.includes(owner) || !manifest.seats.includes(owner)) {
      const holder = seats.get(owner);
      return {
        allowed: false,
        because: `${module} does not hold the seat ${owner}${holder === undefined ? " (nobody does)" : ` (${holder} does)`}`,
        ...at("seats", "seats"),
      };
    }
    return {
      allowed: false,
      because: `${module} holds the seat ${owner} but does not declare ${local} in "emits"; add it there to publish it`,
      ...at("emits", "emits"),
    };
  }
  return {
    allowed: false,
    because: `${subject} is not an event subject; ${module} publishes only under ${EVENTS_PREFIX}.${module}.<event> and ${SEATS_PREFIX}.<seat it holds>.<event>`,
    ...at("emits", "emits"),
  };
}
