import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { CleanupEntry, ControlServer, ProvisionerTools, RetireList, StatusReport } from "@mesh/sdk";
import { ToolError, serveControl } from "@mesh/sdk";
import { MESH_BIN, cleanEnv, runMesh } from "./run-mesh.ts";

const STATUS: StatusReport = {
  interface: "postgres-database",
  instance: "postgres",
  receives: "/run/mesh/postgres-database.json",
  lastPassAt: "2025-03-04T05:06:07.890Z",
  contributionsProblem: null,
  consumers: [
    { login: "app_umami", state: "active", class: null, since: "2025-03-04T05:00:00.000Z", why: "created" },
    {
      login: "app_gitea",
      state: "failing",
      class: "credentials-rejected",
      since: "2025-03-04T05:01:00.000Z",
      why: 'password authentication failed for user "mesh_admin"',
    },
  ],
};

interface Fake extends ProvisionerTools {
  calls: unknown[][];
  waiting: boolean;
}

function fakeTools(): Fake {
  const fake: Fake = {
    calls: [],
    waiting: true,
    status: () => STATUS,
    retireList(): RetireList {
      return fake.waiting
        ? {
            id: "9f3a1c",
            logins: ["app_a", "app_b", "app_c", "app_d"],
            held: 6,
            reason: "4 at once is more than 3",
          }
        : { id: null, logins: [], held: 6, reason: "" };
    },
    async retireApprove(id, who) {
      fake.calls.push(["retireApprove", id, who]);
      if (id !== "9f3a1c")
        throw new ToolError("set-changed", `the waiting set is not ${id} any more; see retire list`);
      return { id, retired: ["app_a", "app_b", "app_c", "app_d"] };
    },
    cleanupList(): CleanupEntry[] {
      return [
        { login: "app_old", retiredAt: "2025-02-01T00:00:00.000Z", why: "no longer asked for", derived: {} },
      ];
    },
    async cleanupDelete(login, who) {
      fake.calls.push(["cleanupDelete", login, who]);
      if (login !== "app_old")
        throw new ToolError("still-asked", `${login} is still asked for; it is not deleted`);
      return { login, freedBytes: 7_864_320 };
    },
  };
  return fake;
}

function hasScript(): boolean {
  return spawnSync("script", ["--version"]).status === 0;
}

/** Runs `mesh args…` on a pseudo-terminal (through `script`), typing `input` into it. */
async function onTerminal(
  args: readonly string[],
  input: string,
): Promise<{ code: number | null; output: string }> {
  const quote = (word: string): string => `'${word.replaceAll("'", "'\\''")}'`;
  const command = [process.execPath, MESH_BIN, ...args].map(quote).join(" ");
  const child = spawn("script", ["-qec", command, "/dev/null"], {
    env: cleanEnv(),
    stdio: ["pipe", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  // Typed once the prompt shows, as a person would.
  const prompted = setInterval(() => {
    if (output.includes("Type the login to confirm")) {
      clearInterval(prompted);
      child.stdin.end(input);
    }
  }, 50);
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  clearInterval(prompted);
  return { code, output };
}

describe("mesh tool", () => {
  let dir: string;
  let socket: string;
  let fake: Fake;
  let server: ControlServer;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-cli-tool-"));
    socket = join(dir, "p.sock");
    fake = fakeTools();
    server = await serveControl(fake, socket);
  });
  after(async () => {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("status prints a table of LOGIN STATE CLASS SINCE WHY", async () => {
    const run = await runMesh(["tool", "--control", socket, "status"]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /postgres-database \(instance postgres\).*last pass 2025-03-04T05:06:07Z/);
    assert.match(lines[1] ?? "", /^LOGIN\s+STATE\s+CLASS\s+SINCE\s+WHY$/);
    assert.match(lines[2] ?? "", /^app_umami\s+active\s+-\s+2025-03-04T05:00:00Z\s+created$/);
    assert.match(
      lines[3] ?? "",
      /^app_gitea\s+failing\s+credentials-rejected\s+2025-03-04T05:01:00Z\s+password/,
    );
  });

  it("status --json prints the provider's answer as it is, wherever the flags stand", async () => {
    const run = await runMesh(["tool", "status", "--json", "--control", socket]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), STATUS);
  });

  it("takes the control socket from MESH_CONTROL when no flag gives it", async () => {
    const run = await runMesh(["tool", "status", "--json"], { MESH_CONTROL: socket });
    assert.equal(run.code, 0, run.stderr);
    assert.equal((JSON.parse(run.stdout) as StatusReport).instance, "postgres");
  });

  it("retire list shows the waiting set, its id and why it waits", async () => {
    fake.waiting = true;
    const run = await runMesh(["tool", "--control", socket, "retire", "list"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /set 9f3a1c, 4 of the 6 held/);
    assert.match(run.stdout, /4 at once is more than 3/);
    for (const login of ["app_a", "app_b", "app_c", "app_d"])
      assert.match(run.stdout, new RegExp(`^  ${login}$`, "m"));
    assert.match(run.stdout, /retire approve 9f3a1c/);
  });

  it("retire list says nothing waits for approval when nothing does", async () => {
    fake.waiting = false;
    try {
      const run = await runMesh(["tool", "--control", socket, "retire", "list"]);
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, /nothing waits for approval/);
    } finally {
      fake.waiting = true;
    }
  });

  it("retire approve sends the id and the person's user name, and says what was retired", async () => {
    const run = await runMesh(["tool", "--control", socket, "retire", "approve", "9f3a1c"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /approved set 9f3a1c: retired app_a, app_b, app_c, app_d/);
    assert.deepEqual(fake.calls.at(-1), ["retireApprove", "9f3a1c", userInfo().username]);
  });

  it("exits 1 and prints the provider's code and message when it refuses", async () => {
    const run = await runMesh(["tool", "--control", socket, "retire", "approve", "000000"]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /set-changed/);
    assert.match(run.stderr, /the waiting set is not 000000 any more/);
    assert.equal(run.stdout, "");
  });

  it("cleanup list prints a table of LOGIN RETIRED-AT WHY", async () => {
    const run = await runMesh(["tool", "--control", socket, "cleanup", "list"]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /^LOGIN\s+RETIRED-AT\s+WHY$/);
    assert.match(lines[1] ?? "", /^app_old\s+2025-02-01T00:00:00Z\s+no longer asked for$/);
  });

  it("cleanup delete with no terminal and no --yes refuses (exit 2), says to pass --yes, and deletes nothing", async () => {
    const before = fake.calls.length;
    const run = await runMesh(["tool", "--control", socket, "cleanup", "delete", "app_old"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--yes/);
    assert.equal(fake.calls.length, before);
  });

  it("cleanup delete --yes deletes and prints the bytes freed, in human units and exactly", async () => {
    const run = await runMesh(["tool", "--control", socket, "cleanup", "delete", "app_old", "--yes"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /deleted app_old: freed 7\.5 MiB \(7864320 bytes\)/);
    assert.deepEqual(fake.calls.at(-1), ["cleanupDelete", "app_old", userInfo().username]);
  });

  it("cleanup delete --yes --json prints the raw answer", async () => {
    const run = await runMesh([
      "tool",
      "--control",
      socket,
      "--json",
      "cleanup",
      "delete",
      "--yes",
      "app_old",
    ]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), { login: "app_old", freedBytes: 7_864_320 });
  });

  it("cleanup delete of a consumer still asked for exits 1 with the provider's code", async () => {
    const run = await runMesh(["tool", "--control", socket, "cleanup", "delete", "app_umami", "--yes"]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /still-asked/);
  });

  it(
    "cleanup delete on a terminal deletes only when the person types the login again",
    { skip: hasScript() ? false : "needs `script` (util-linux) to give mesh a terminal" },
    async () => {
      const typedWrong = await onTerminal(
        ["tool", "--control", socket, "cleanup", "delete", "app_old"],
        "app_new\n",
      );
      assert.equal(typedWrong.code, 2, typedWrong.output);
      assert.match(typedWrong.output, /Type the login to confirm/);
      assert.match(typedWrong.output, /not deleted/);
      assert.notDeepEqual(fake.calls.at(-1)?.slice(0, 2), ["cleanupDelete", "app_old"]);

      const interrupted = await onTerminal(
        ["tool", "--control", socket, "cleanup", "delete", "app_old"],
        "\u0003",
      );
      assert.equal(interrupted.code, 2, interrupted.output);
      assert.notDeepEqual(fake.calls.at(-1)?.slice(0, 2), ["cleanupDelete", "app_old"]);

      const typedRight = await onTerminal(
        ["tool", "--control", socket, "cleanup", "delete", "app_old"],
        "app_old\n",
      );
      assert.equal(typedRight.code, 0, typedRight.output);
      assert.match(typedRight.output, /deleted app_old: freed 7\.5 MiB \(7864320 bytes\)/);
      assert.deepEqual(fake.calls.at(-1), ["cleanupDelete", "app_old", userInfo().username]);
    },
  );

  it("cleanup delete refuses a login that cannot be one (exit 2) without asking the provider", async () => {
    const before = fake.calls.length;
    const run = await runMesh(["tool", "--control", socket, "cleanup", "delete", "Robert'; DROP", "--yes"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /not valid/);
    assert.equal(fake.calls.length, before);
  });
});

describe("mesh tool without a provider", () => {
  it("exits 3 and says no provider is listening at the path, and how to start one", async () => {
    const path = join(tmpdir(), `mesh-cli-nobody-${process.pid}.sock`);
    const run = await runMesh(["tool", "--control", path, "status"]);
    assert.equal(run.code, 3);
    assert.ok(run.stderr.includes(`no provider is listening at ${path}`), run.stderr);
    assert.match(run.stderr, /mesh provider/);
  });

  it("exits 2 naming --control and MESH_CONTROL when neither is given", async () => {
    const run = await runMesh(["tool", "status"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--control/);
    assert.match(run.stderr, /MESH_CONTROL/);
  });

  it("exits 2 on an unknown tool", async () => {
    const run = await runMesh(["tool", "--control", "/nonexistent.sock", "drop-everything"]);
    assert.equal(run.code, 2);
  });

  it("shows an example and the exit codes in its help", async () => {
    for (const args of [["tool", "--help"], ["tool", "cleanup", "delete", "--help"], ["--help"]]) {
      const run = await runMesh(args);
      assert.equal(run.code, 0, args.join(" "));
      assert.match(run.stdout, /Example/);
      assert.match(run.stdout, /Exit codes:/);
    }
  });
});
