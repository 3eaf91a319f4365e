// The systemd units shipped in deploy/systemd: each runs the installed mesh (the path the tarball
// install in packages/cli/README.md gives) with a command and flags it really has, lets the mesh
// stop its own children (KillMode=mixed), waits long enough for a stop to finish, starts after the
// backends, and is hardened as far as the agent allows. `systemd-analyze verify` checks them in a
// root of their own holding systemd's units and the packed CLI installed where the units expect it.
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parseDuration } from "@mesh/sdk";
import { buildProgram } from "../src/cli.ts";
import type { CliIo } from "../src/io.ts";
import { DEFAULT_GRACE } from "../src/up-command.ts";

const UNITS = fileURLToPath(new URL("../../../deploy/systemd/", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
/** Where `npm install --global --offline --prefix /opt/mesh` puts the command (packages/cli/README.md). */
const INSTALLED_MESH = "/opt/mesh/bin/mesh";
const exec = promisify(execFile);
const quietIo: CliIo = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };

/** `Key=value` lines of a unit's [Service] section. */
function service(unit: string, name = "Service"): Map<string, string> {
  const text = readFileSync(`${UNITS}${unit}`, "utf8");
  const section = text.split(new RegExp(`^\\[${name}\\]$`, "m"))[1]?.split(/^\[/m)[0] ?? "";
  const keys = new Map<string, string>();
  for (const line of section.split("\n")) {
    const m = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) keys.set(m[1], m[2]);
  }
  return keys;
}

describe("the systemd units", () => {
  for (const [unit, command] of [
    ["mesh-up.service", "up"],
    ["mesh-agent.service", "agent"],
  ] as const) {
    it(`${unit} runs mesh ${command} with flags it has, KillMode=mixed and a stop timeout beyond --grace plus 5 s`, async () => {
      const keys = service(unit);
      assert.equal(keys.get("KillMode"), "mixed", "systemd signals mesh alone; mesh stops its children");
      assert.equal(keys.get("Delegate"), "yes", "the mesh makes each module a cgroup of its own");
      const exec = (keys.get("ExecStart") ?? "").split(/\s+/);
      const at = exec.indexOf(command);
      assert.equal(exec[0], INSTALLED_MESH, "the installed mesh, where the tarball install puts it");
      assert.equal(at, 1, `ExecStart runs mesh ${command}`);
      const program = await buildProgram(quietIo);
      const sub = program.commands.find((c) => c.name() === command);
      assert.ok(sub, `mesh ${command} exists`);
      const known = new Set(sub.options.map((o) => o.long));
      for (const word of exec.slice(at + 1)) {
        if (word.startsWith("--")) assert.ok(known.has(word), `mesh ${command} has ${word}`);
      }
      const grace = exec.includes("--grace") ? exec[exec.indexOf("--grace") + 1] : DEFAULT_GRACE;
      const timeout = parseDuration(keys.get("TimeoutStopSec") ?? "0s");
      assert.ok(
        timeout >= parseDuration(grace ?? DEFAULT_GRACE) + 5_000,
        `TimeoutStopSec ${keys.get("TimeoutStopSec")} covers --grace ${grace} and 5 s more`,
      );
    });
  }

  for (const unit of ["mesh-up.service", "mesh-agent.service"]) {
    it(`${unit} starts after the backends and is hardened as far as the agent allows`, () => {
      const after = (service(unit, "Unit").get("After") ?? "").split(/\s+/);
      for (const backend of ["postgresql.service", "redis-server.service", "mariadb.service"])
        assert.ok(after.includes(backend), `After= names ${backend}`);
      const keys = service(unit);
      assert.equal(keys.get("ProtectSystem"), "true", "/etc stays writable for useradd");
      assert.equal(keys.get("ProtectHome"), "read-only");
      assert.equal(keys.get("PrivateTmp"), "yes");
      // What cannot be on is said in the unit, and is not on.
      assert.equal(keys.get("NoNewPrivileges"), undefined);
      assert.equal(keys.get("ProtectControlGroups"), undefined, "the delegated cgroup is written");
      const text = readFileSync(`${UNITS}${unit}`, "utf8");
      for (const off of ["NoNewPrivileges=", "ProtectControlGroups=", "ProtectSystem=full", "User="])
        assert.match(text, new RegExp(`^# .*${off}`, "m"), `the unit says why ${off} is not on`);
    });
  }

  it("pass systemd-analyze verify with the packed mesh installed where they expect it", async (t) => {
    const which = spawnSync("sh", ["-c", "command -v systemd-analyze"]);
    if (which.status !== 0) {
      return t.skip("systemd-analyze is not installed here (Debian's systemd package; npm test installs it)");
    }
    const root = mkdtempSync(join(tmpdir(), "mesh-units-"));
    try {
      // The tarball install of packages/cli/README.md, under a root of its own.
      const { stdout } = await exec(
        process.execPath,
        [join(ROOT, "scripts", "pack.mjs"), "packages/cli", "--out", root, "--no-types"],
        { cwd: ROOT },
      );
      const prefix = join(root, "opt", "mesh");
      await exec(
        "npm",
        ["install", "--global", "--offline", "--no-audit", "--no-fund", "--prefix", prefix, stdout.trim()],
        { cwd: root },
      );
      // systemd's own units (sysinit.target, the backends' units where installed) and ours.
      cpSync("/usr/lib/systemd/system", join(root, "usr", "lib", "systemd", "system"), { recursive: true });
      const units = join(root, "etc", "systemd", "system");
      mkdirSync(units, { recursive: true });
      mkdirSync(join(root, "etc", "mesh"), { recursive: true });
      for (const unit of ["mesh-up.service", "mesh-agent.service"])
        cpSync(`${UNITS}${unit}`, join(units, unit));
      const run = spawnSync(
        "systemd-analyze",
        ["verify", "--man=no", `--root=${root}`, "mesh-up.service", "mesh-agent.service"],
        { encoding: "utf8" },
      );
      assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
      assert.equal(run.stderr.trim(), "", "systemd-analyze has nothing to say of them");

      // The same root without the install: verify does look for the command.
      rmSync(prefix, { recursive: true, force: true });
      const without = spawnSync(
        "systemd-analyze",
        ["verify", "--man=no", `--root=${root}`, "mesh-up.service"],
        {
          encoding: "utf8",
        },
      );
      assert.notEqual(without.status, 0, "a unit whose command is missing fails verify");
      assert.match(without.stderr, /\/opt\/mesh\/bin\/mesh/);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
