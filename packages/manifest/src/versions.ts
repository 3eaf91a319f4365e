// The versions a mesh carries: its release (the packages' version, a git tag vX.Y.Z), the format of
// what it stores (the state directory and the bus's buckets), and the protocol its agents and
// controllers speak. Light on purpose: `mesh --version` loads this and nothing else of the mesh.
import { readFileSync } from "node:fs";

/**
 * This mesh's release: the version of its packages (they move together), from this package's
 * package.json, which sits one level above src/ and dist/ alike.
 */
export const MESH_RELEASE: string = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/**
 * The format of what this mesh stores: the state directory (`<state>/format.json`) and the bus's
 * buckets (the `format` key of the controller's bucket). A mesh reads every older format (it
 * migrates it at start, after a backup) and refuses a newer one.
 */
export const STATE_FORMAT = 3;

/**
 * The protocol of what agents and controllers send each other (reports one way, deliveries the
 * other). Each side says its own; each works with a side one protocol apart, either way.
 */
export const PROTOCOL_VERSION = 2;

/** What a release stores and speaks. */
export interface ReleaseFormats {
  readonly release: string;
  readonly stateFormat: number;
  readonly protocol: number;
}

/**
 * Every release's formats, oldest first. 0.1.0 wrote no format and sent no protocol: what carries
 * none is theirs.
 */
export const RELEASES: readonly ReleaseFormats[] = [
  { release: "0.1.0", stateFormat: 1, protocol: 1 },
  // 0.2.0's first builds kept a stream and a bucket per module's ledger; 0.2.0 keeps one of each, shared.
  { release: "0.2.0-pre", stateFormat: 2, protocol: 2 },
  { release: "0.2.0", stateFormat: 3, protocol: 2 },
];

/** The state format of what carries none (written by 0.1.0). */
export const UNVERSIONED_FORMAT = 1;

/** The protocol of an agent or controller that says none (0.1.0). */
export const UNVERSIONED_PROTOCOL = 1;

/** The newest release known to write state format `format` (`0.1.0` for 1), or undefined for one newer than this mesh. */
export function releaseOfFormat(format: number): string | undefined {
  return RELEASES.filter((r) => r.stateFormat === format).at(-1)?.release;
}

/** The newest release known to speak protocol `protocol`, or undefined for one newer than this mesh. */
export function releaseOfProtocol(protocol: number): string | undefined {
  return RELEASES.filter((r) => r.protocol === protocol).at(-1)?.release;
}

/** Whether this mesh works with a peer speaking `protocol`: one apart, either way, works. */
export function worksWithProtocol(protocol: number): boolean {
  return Math.abs(protocol - PROTOCOL_VERSION) <= 1;
}

/**
 * The protocol a peer says, from a report's or a delivery's field: a whole number of 1 or more, or
 * `UNVERSIONED_PROTOCOL` when it says none (or something that is not one).
 */
export function protocolOf(value: unknown): number {
  return typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= 1_000_000
    ? value
    : UNVERSIONED_PROTOCOL;
}

/** A release as a peer says it, if it looks like one (`0.2.0`, `1.0.0-rc.1`); undefined otherwise. */
export function releaseOf(value: unknown): string | undefined {
  return typeof value === "string" && /^\d{1,6}\.\d{1,6}\.\d{1,6}(-[0-9A-Za-z.-]{1,40})?$/.test(value)
    ? value
    : undefined;
}

/** `mesh --version`'s second line: what this mesh stores and speaks, and what it works with. */
export function formatsLine(): string {
  return (
    `state format ${STATE_FORMAT} (reads ${UNVERSIONED_FORMAT}–${STATE_FORMAT}, migrating older ones at start), ` +
    `protocol ${PROTOCOL_VERSION} (works with agents and controllers of ${Math.max(1, PROTOCOL_VERSION - 1)}–${PROTOCOL_VERSION + 1})`
  );
}
