import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeBus, connectBus, createAuthority, credsFor, newUserKeys, type BusPermissions } from "@mesh/bus";
import { TOOL_REQUEST_SUBJECT } from "@mesh/controller";
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import type { CleanupEntry, ProvisionerTools, RetireList, StatusReport } from "@mesh/sdk";
import type { ControlServer } from "@mesh/sdk/provider";
import { ToolError } from "@mesh/sdk";
import { serveControl } from "@mesh/sdk/provider";
import { MESH_BIN, cleanEnv, meshInProcess, writeOperatorState, type InProcessRun } from "./run-mesh.ts";

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
    if (/Type the (login|set's id) to confirm/.test(output)) {
      clearInterval(prompted);
      child.stdin.end(input);
    }
  }, 50);
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  clearInterval(prompted);
  return { code, output };
}

// In this process (a spawned mesh costs seconds to start), but for the confirmations typed on a
// terminal: those run the real mesh on a pseudo-terminal.
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
    const run = await meshInProcess(["tool", "--control", socket, "status"]);
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
    const run = await meshInProcess(["tool", "status", "--json", "--control", socket]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), STATUS);
  });

  it("takes the control socket from MESH_CONTROL when no flag gives it", async () => {
    const run = await meshInProcess(["tool", "status", "--json"], { env: { MESH_CONTROL: socket } });
    assert.equal(run.code, 0, run.stderr);
    assert.equal((JSON.parse(run.stdout) as StatusReport).instance, "postgres");
  });

  it("retire list shows the waiting set, its id and why it waits", async () => {
    fake.waiting = true;
    const run = await meshInProcess(["tool", "--control", socket, "retire", "list"]);
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
      const run = await meshInProcess(["tool", "--control", socket, "retire", "list"]);
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, /nothing waits for approval/);
    } finally {
      fake.waiting = true;
    }
  });

  it("retire approve sends the id and the person's user name, and says what was retired", async () => {
    const run = await meshInProcess(["tool", "--control", socket, "retire", "approve", "9f3a1c", "--yes"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /approved set 9f3a1c: retired app_a, app_b, app_c, app_d/);
    assert.deepEqual(fake.calls.at(-1), ["retireApprove", "9f3a1c", userInfo().username]);
  });

  it("exits 1 and prints the provider's code and message when it refuses", async () => {
    const run = await meshInProcess(["tool", "--control", socket, "retire", "approve", "000000", "--yes"]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /set-changed/);
    assert.match(run.stderr, /the waiting set is not 000000 any more/);
    assert.equal(run.stdout, "");
  });

  it("retire approve with no terminal and no --yes refuses (exit 2), says to pass --yes, and approves nothing", async () => {
    const before = fake.calls.length;
    const run = await meshInProcess(["tool", "--control", socket, "retire", "approve", "9f3a1c"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /no terminal to confirm on: pass --yes/);
    assert.equal(fake.calls.length, before);
  });

  it("cleanup list prints a table of LOGIN RETIRED-AT WHY", async () => {
    const run = await meshInProcess(["tool", "--control", socket, "cleanup", "list"]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /^LOGIN\s+RETIRED-AT\s+WHY$/);
    assert.match(lines[1] ?? "", /^app_old\s+2025-02-01T00:00:00Z\s+no longer asked for$/);
  });

  it("cleanup delete with no terminal and no --yes refuses (exit 2), says to pass --yes, and deletes nothing", async () => {
    const before = fake.calls.length;
    const run = await meshInProcess(["tool", "--control", socket, "cleanup", "delete", "app_old"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--yes/);
    assert.equal(fake.calls.length, before);
  });

  it("cleanup delete --yes deletes and prints the bytes freed, in human units and exactly", async () => {
    const run = await meshInProcess(["tool", "--control", socket, "cleanup", "delete", "app_old", "--yes"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /deleted app_old: freed 7\.5 MiB \(7864320 bytes\)/);
    assert.deepEqual(fake.calls.at(-1), ["cleanupDelete", "app_old", userInfo().username]);
  });

  it("cleanup delete --yes --json prints the raw answer", async () => {
    const run = await meshInProcess([
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
    const run = await meshInProcess(["tool", "--control", socket, "cleanup", "delete", "app_umami", "--yes"]);
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

  it(
    "retire approve on a terminal shows the waiting set and approves it only when its id is typed",
    { skip: hasScript() ? false : "needs `script` (util-linux) to give mesh a terminal" },
    async () => {
      fake.waiting = true;
      const typedWrong = await onTerminal(["tool", "--control", socket, "retire", "approve"], "abc\n");
      assert.equal(typedWrong.code, 2, typedWrong.output);
      assert.match(typedWrong.output, /set 9f3a1c waits for approval, 4 of the 6 held/);
      assert.match(typedWrong.output, /not approved: what was typed is not 9f3a1c/);
      assert.notEqual(fake.calls.at(-1)?.[0], "retireApprove");

      const typedRight = await onTerminal(["tool", "--control", socket, "retire", "approve"], "9f3a1c\n");
      assert.equal(typedRight.code, 0, typedRight.output);
      assert.match(typedRight.output, /approved set 9f3a1c: retired app_a, app_b, app_c, app_d/);
      assert.deepEqual(fake.calls.at(-1), ["retireApprove", "9f3a1c", userInfo().username]);
    },
  );

  it("cleanup delete refuses a login that cannot be one (exit 2) without asking the provider", async () => {
    const before = fake.calls.length;
    const run = await meshInProcess([
      "tool",
      "--control",
      socket,
      "cleanup",
      "delete",
      "Robert'; DROP",
      "--yes",
    ]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /not valid/);
    assert.equal(fake.calls.length, before);
  });
});

describe("mesh tool without a provider", () => {
  it("exits 3 and says no provider is listening at the path, and how to start one", async () => {
    const path = join(tmpdir(), `mesh-cli-nobody-${process.pid}.sock`);
    const run = await meshInProcess(["tool", "--control", path, "status"]);
    assert.equal(run.code, 3);
    assert.ok(run.stderr.includes(`no provider is listening at ${path}`), run.stderr);
    assert.match(run.stderr, /mesh provider/);
  });

  it("exits 2 naming the module form, --control and MESH_CONTROL when a tool is named with no module or socket", async () => {
    const run = await meshInProcess(["tool", "status"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /mesh tool MODULE TOOL/);
    assert.match(run.stderr, /--control/);
    assert.match(run.stderr, /MESH_CONTROL/);
  });

  it("exits 2 on an unknown tool", async () => {
    const run = await meshInProcess(["tool", "--control", "/nonexistent.sock", "drop-everything"]);
    assert.equal(run.code, 2);
  });

  it("shows an example and the exit codes in its help", async () => {
    for (const args of [
      ["tool", "--help"],
      ["tool", "cleanup", "delete", "--help"],
      ["tool", "retire", "approve", "--help"],
      ["--help"],
    ]) {
      const run = await meshInProcess(args);
      assert.equal(run.code, 0, args.join(" "));
      assert.match(run.stdout, /Example/);
      assert.match(run.stdout, /Exit codes:/);
    }
  });
});

// Through the mesh: the CLI asks the controller on `mesh.tool` with `<state>/operator.creds`, as an
// operator's shell does. A real nats-server; the controller is stood in for, answering as told and
// keeping what it was asked (the real relay is tested in the controller's package and end to end).
describe("mesh tool MODULE TOOL, through the mesh", () => {
  let dir: string;
  let state: string;
  let nats: NatsServer;
  let controller: NatsConnection;
  const asked: { module: string; tool: string; args: string[]; who: string }[] = [];
  let answer: (call: { module: string; tool: string; args: string[] }) => unknown = () => ({
    ok: true,
    answer: STATUS,
  });

  // In this process: a spawned mesh costs seconds to start. No terminal on standard input; standard
  // error a terminal when `errIsTTY` says so, `onErr` told of everything said there.
  async function mesh(
    args: readonly string[],
    options: { errIsTTY?: boolean; onErr?: (said: string) => void } = {},
  ): Promise<InProcessRun> {
    let stderr = "";
    return meshInProcess([...args, "--state", state], {
      err: (text) => {
        stderr += text;
        options.onErr?.(stderr);
      },
      errIsTTY: options.errIsTTY ?? false,
    });
  }

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-cli-tool-mesh-"));
    state = join(dir, "state");
    await mkdir(state);
    const issue = async (name: string, permissions: BusPermissions) => {
      const keys = newUserKeys();
      const jwt = await authority.issueUser({ name, publicKey: keys.publicKey, permissions });
      return credsFor(jwt, keys.seed);
    };
    await writeOperatorState(authority, state, nats.url);
    controller = await connectBus({
      servers: nats.url,
      creds: await issue("controller", { pub: { allow: [">"] }, sub: { allow: [">"] } }),
      name: "controller",
    });
    const sub = controller.subscribe(TOOL_REQUEST_SUBJECT);
    void (async () => {
      for await (const msg of sub) {
        const call = msg.json<(typeof asked)[number]>();
        asked.push(call);
        const reply: unknown = await answer(call);
        if (reply !== undefined) msg.respond(JSON.stringify(reply));
      }
    })();
    await controller.flush();
  });
  after(async () => {
    if (controller) await closeBus(controller);
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("asks the controller for the module's tool, saying who asks, and prints the answer as the local path does", async () => {
    answer = () => ({ ok: true, answer: STATUS });
    const run = await mesh(["tool", "postgres", "status"]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(asked.at(-1), {
      module: "postgres",
      tool: "status",
      args: [],
      who: userInfo().username,
    });
    const lines = run.stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /postgres-database \(instance postgres\)/);
    assert.match(lines[1] ?? "", /^LOGIN\s+STATE\s+CLASS\s+SINCE\s+WHY$/);
    assert.match(lines[2] ?? "", /^app_umami\s+active\s+-\s+2025-03-04T05:00:00Z\s+created$/);

    const json = await mesh(["tool", "postgres", "status", "--json"]);
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), STATUS);
  });

  it("sends a tool's arguments, and says how to approve through the mesh", async () => {
    answer = () => ({ ok: true, answer: { id: "9f3a1c", logins: ["app_a"], held: 2, reason: "waits" } });
    const run = await mesh(["tool", "postgres", "retire", "list"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /approve exactly this set with: mesh tool postgres retire approve 9f3a1c/);

    answer = (call) => ({ ok: true, answer: { login: call.args[0], freedBytes: 7_864_320 } });
    const deleted = await mesh(["tool", "postgres", "cleanup", "delete", "umami_db", "--yes"]);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.deepEqual(asked.at(-1)?.args, ["umami_db"]);
    assert.equal(asked.at(-1)?.tool, "cleanup delete");
    assert.match(deleted.stdout, /deleted umami_db: freed 7\.5 MiB \(7864320 bytes\)/);
  });

  it("refuses a deletion or an approval with no terminal and no --yes (exit 2), sending nothing", async () => {
    const before = asked.length;
    for (const args of [
      ["tool", "postgres", "cleanup", "delete", "umami_db"],
      ["tool", "postgres", "retire", "approve", "9f3a1c"],
    ]) {
      const run = await mesh(args);
      assert.equal(run.code, 2, args.join(" "));
      assert.match(run.stderr, /no terminal to confirm on: pass --yes/);
    }
    assert.equal(asked.length, before);
  });

  it("checks the arguments before sending anything (exit 2)", async () => {
    const before = asked.length;
    const cases: [string[], RegExp][] = [
      [["tool", "postgres", "cleanup", "delete", "Robert'; DROP", "--yes"], /not valid/],
      [["tool", "postgres", "cleanup", "delete", "--yes"], /takes 1 argument/],
      [["tool", "postgres", "status", "extra"], /takes 0 argument/],
      [
        ["tool", "postgres", "drop", "everything"],
        /unknown tool "drop everything" for postgres: the tools are/,
      ],
      [["tool", "postgres"], /no tool for postgres/],
      [["tool", "Postgres!", "status"], /cannot be a module/],
      [["tool"], /which module and which tool/],
    ];
    for (const [args, why] of cases) {
      const run = await mesh(args);
      assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
      assert.match(run.stderr, why);
    }
    assert.equal(asked.length, before);
  });

  it("exits 1 with the code and the words of a refusal, from the controller or the provider", async () => {
    answer = () => ({
      ok: false,
      code: "unknown-module",
      error: "mysql is not a module of the fleet being served; its modules are: notes, postgres",
    });
    const unknown = await mesh(["tool", "mysql", "status"]);
    assert.equal(unknown.code, 1);
    assert.match(
      unknown.stderr,
      /mysql did not run status \(unknown-module\): .*its modules are: notes, postgres/,
    );
    assert.equal(unknown.stdout, "");

    answer = () => ({
      ok: false,
      code: "still-asked",
      error: "umami_db is still asked for; it is not deleted",
    });
    const refused = await mesh(["tool", "postgres", "cleanup", "delete", "umami_db", "--yes"]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /still-asked/);
  });

  it("exits 3 when nothing answers behind the controller: the node's agent or the provider", async () => {
    for (const code of [
      "agent-not-answering",
      "agent-timeout",
      "provider-not-listening",
      "provider-unreachable",
    ]) {
      answer = () => ({ ok: false, code, error: `node node-a: ${code}` });
      const run = await mesh(["tool", "postgres", "status"]);
      assert.equal(run.code, 3, code);
      assert.match(run.stderr, new RegExp(code));
    }
  });

  it("warns when the call's ledger entry was not written, and still prints the answer", async () => {
    answer = () => ({
      ok: true,
      answer: [],
      ledger: "the ledger entry for this call was not written: no credential",
    });
    const run = await mesh(["tool", "postgres", "cleanup", "list"]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /nothing retired/);
    assert.match(run.stderr, /warning: the ledger entry for this call was not written: no credential/);
  });

  it("gives scripts retire list and cleanup list as JSON, as the provider answered them", async () => {
    const list = { id: "9f3a1c", logins: ["app_a"], held: 2, reason: "waits" };
    answer = () => ({ ok: true, answer: list });
    const waiting = await mesh(["tool", "postgres", "retire", "list", "--json"]);
    assert.equal(waiting.code, 0, waiting.stderr);
    assert.deepEqual(JSON.parse(waiting.stdout), list);

    const retired = [
      { login: "app_old", retiredAt: "2025-02-01T00:00:00.000Z", why: "unasked", derived: {} },
    ];
    answer = () => ({ ok: true, answer: retired });
    const cleanup = await mesh(["tool", "postgres", "cleanup", "list", "--json"]);
    assert.equal(cleanup.code, 0, cleanup.stderr);
    assert.deepEqual(JSON.parse(cleanup.stdout), retired);

    answer = () => ({ ok: false, code: "provider-unreachable", error: "no provider" });
    const failed = await mesh(["tool", "postgres", "cleanup", "list", "--json"]);
    assert.equal(failed.code, 3, "the exit code says what went wrong, with --json too");
    assert.equal(failed.stdout, "", "nothing on standard output for a script to mistake for an answer");
    assert.match(failed.stderr, /^error: postgres did not run cleanup list \(provider-unreachable\)/);
  });

  it("says on a terminal that it waits for the module while the answer takes more than a second", async () => {
    let progressed!: () => void;
    const said = new Promise<void>((resolve) => (progressed = resolve));
    // The controller answers only once the progress line has been said.
    answer = async () => {
      await said;
      return { ok: true, answer: STATUS };
    };
    const run = await mesh(["tool", "postgres", "status", "--json"], {
      errIsTTY: true,
      onErr: (stderr) => {
        if (/waiting for postgres to answer status through the mesh… \d+ s/.test(stderr)) progressed();
      },
    });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), STATUS, "standard output stays clean for --json");
    assert.match(run.stderr, /^\rwaiting for postgres to answer status through the mesh… \d+ s/);
    assert.match(run.stderr, /\r +\r$/, "the line is wiped once the answer has come");

    // Not a terminal: a wait of the same length says nothing.
    let late!: () => void;
    const later = new Promise<void>((resolve) => (late = resolve));
    answer = async () => {
      await later;
      return { ok: true, answer: STATUS };
    };
    const timer = setTimeout(() => late(), 1500);
    const piped = await mesh(["tool", "postgres", "status", "--json"]);
    clearTimeout(timer);
    assert.equal(piped.code, 0, piped.stderr);
    assert.equal(piped.stderr, "");
  });

  it("exits 3 when the controller does not answer in time, saying where the result will be", async () => {
    answer = () => undefined;
    const run = await mesh(["tool", "postgres", "status", "--timeout", "300ms"]);
    assert.equal(run.code, 3);
    assert.match(run.stderr, /no answer to status for postgres within 300ms/);
    assert.match(run.stderr, /mesh ledger postgres/);
  });

  it("exits 3 when no mesh ran with that state, or no controller is on its bus", async () => {
    const none = await meshInProcess(["tool", "postgres", "status", "--state", join(dir, "nowhere")]);
    assert.equal(none.code, 3);
    assert.match(none.stderr, /no mesh has run with state in/);

    await closeBus(controller);
    const run = await mesh(["tool", "postgres", "status"]);
    assert.equal(run.code, 3);
    assert.match(run.stderr, /no controller answers on the bus/);
  });
});
