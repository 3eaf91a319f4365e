// Where nats-server is: what `mesh up` runs and what the tests start, found the same way.
import { access, constants } from "node:fs/promises";
import { delimiter, join } from "node:path";

// Debian installs nats-server in /usr/sbin, which a non-root PATH often lacks.
const EXTRA_DIRS = ["/usr/sbin", "/usr/local/sbin"];

/** nats-server is not installed where the mesh looks for it. */
export class NatsNotFoundError extends Error {
  override name = "NatsNotFoundError";
  constructor(readonly searched: string) {
    super("nats-server not found on PATH; install the Debian package nats-server");
  }
}

/**
 * The path of the nats-server binary: the first in `dirs` (by default PATH, then Debian's /usr/sbin).
 * @throws NatsNotFoundError when there is none.
 */
export async function findNatsServer(
  dirs: readonly string[] = [...(process.env["PATH"] ?? "").split(delimiter), ...EXTRA_DIRS],
): Promise<string> {
  for (const dir of dirs) {
    if (dir === "") continue;
    const candidate = join(dir, "nats-server");
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  throw new NatsNotFoundError(dirs.join(delimiter));
}
