// What a standby controller needs from the leader's state directory: the mesh's authority (its
// seeds, to issue credentials), the controller's keys (to open the sealed passwords and join
// secrets), and the HTTP tokens (so the operator's scripts and the Prometheus scraping the leader
// are answered the same by the standby once it leads). Everything else it reads from the bus.
// `mesh controller --standby-of STATE` copies them.
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "@mesh/bus";
import { AUTHORITY_FILE } from "./authority-file.ts";
import { CONTROLLER_KEYS_FILE } from "./controller-keys.ts";
import { OPERATOR_TOKEN_FILE, SCRAPE_TOKEN_FILE } from "./secret-token.ts";

/** The files of `<state>/controller` a standby needs, by name; each holds seeds (0600). */
export const STANDBY_FILES: readonly string[] = [AUTHORITY_FILE, CONTROLLER_KEYS_FILE];

/**
 * The files of `<state>/controller` a standby takes when the leader has them: its operator and
 * scrape tokens (a leader whose operator token is elsewhere, by `--operator-token-file`, has none
 * here: the standby is given the same file with the same flag).
 */
export const STANDBY_TOKEN_FILES: readonly string[] = [OPERATOR_TOKEN_FILE, SCRAPE_TOKEN_FILE];

/** The leader's state directory lacks a file the standby needs, or the standby's already differs. */
export class StandbyStateError extends Error {
  override name = "StandbyStateError";
  constructor(
    readonly path: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`${path} ${why}`, options);
  }
}

/**
 * Copies `STANDBY_FILES`, and the `STANDBY_TOKEN_FILES` it has, from the leader's controller state
 * directory `from` (`<state>/controller`, or a copy of it brought over from the leader's machine)
 * into the standby's `to` (0700; each file 0600, written atomically). A file the standby already has
 * is left when it is the same.
 * @throws StandbyStateError when a file is missing from `from`, or `to` holds a different one (the
 * standby belongs to another mesh: remove its state directory first).
 */
export async function copyStandbyState(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true, mode: 0o700 });
  for (const name of [...STANDBY_FILES, ...STANDBY_TOKEN_FILES]) {
    const source = join(from, name);
    const target = join(to, name);
    let text: string;
    try {
      text = await readFile(source, "utf8");
    } catch (err) {
      if (STANDBY_TOKEN_FILES.includes(name) && (err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw new StandbyStateError(
        source,
        "cannot be read: --standby-of names the leader's state directory (its controller/ holds " +
          `${STANDBY_FILES.join(" and ")}); copy them from the leader's machine first`,
        { cause: err },
      );
    }
    const existing = await readFile(target, "utf8").catch(() => undefined);
    // The same authority with other revocations is the same mesh: the revocations come from the bus.
    if (existing === text || (name === AUTHORITY_FILE && sameSeeds(existing, text))) continue;
    if (existing !== undefined && STANDBY_TOKEN_FILES.includes(name)) {
      throw new StandbyStateError(
        target,
        `differs from ${source}: this controller made a token of its own before it stood by; ` +
          `remove ${target} and it takes the leader's`,
      );
    }
    if (existing !== undefined) {
      throw new StandbyStateError(
        target,
        `differs from ${source}: this state directory belongs to another controller's mesh; ` +
          `remove it, or give the standby a state directory of its own`,
      );
    }
    await writeFileAtomic(target, text, 0o600);
  }
}

function sameSeeds(a: string | undefined, b: string): boolean {
  try {
    const seeds = (text: string): string => JSON.stringify((JSON.parse(text) as { seeds?: unknown }).seeds);
    return a !== undefined && seeds(a) === seeds(b) && seeds(b) !== undefined;
  } catch {
    return false;
  }
}
