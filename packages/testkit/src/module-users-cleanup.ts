// Module users a test's mesh made, removed once the test is done. The mesh itself never removes a
// user (a rollback must find a module's files owned as they were); a test suite that makes meshes in
// temporary directories, each with its own mesh id and so its own users, removes what it made, as
// an operator would, or system uids (100 to 999 on Debian) run out after some runs.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { sep } from "node:path";

// A module user's comment: `mesh module <module> of <state directory>`.
const COMMENT = /^mesh module [a-z0-9-]+ of (\/.*)$/;

/**
 * Removes (`userdel`, home and files left as they are) every module user whose comment names a
 * state directory under `root` (the system's temporary directory by default) that no longer
 * exists. A user still running a process is left (userdel refuses). Does nothing unless root.
 * @returns the users removed.
 */
export function removeStaleModuleUsers(root = tmpdir(), passwd = "/etc/passwd"): string[] {
  if (process.getuid?.() !== 0) return [];
  let text: string;
  try {
    text = readFileSync(passwd, "utf8");
  } catch {
    return [];
  }
  const under = root.endsWith(sep) ? root : `${root}${sep}`;
  const removed: string[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(":");
    const name = fields[0] ?? "";
    const state = COMMENT.exec(fields[4] ?? "")?.[1];
    if (!name.startsWith("mesh-") || state === undefined || !state.startsWith(under)) continue;
    if (existsSync(state)) continue;
    const run = spawnSync("userdel", [name], {
      stdio: "ignore",
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    });
    if (run.status === 0) removed.push(name);
  }
  return removed;
}
