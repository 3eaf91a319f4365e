// A module can harm only itself, tried as an attacker on one real mesh: `mesh up` started with no
// security flag (as `npm start` and an operator's first run have it: the operator token made in the
// state directory, each module its own user) runs a real Postgres provider with two consumers, a
// hostile provider (test/fixtures/hostile-provider, copied beside the fleet) and a hostile consumer,
// `intruder`, that forks past its pids limit, leaves a `setsid` child with an empty environment,
// and on a word from the test starts a child that eats memory. As the intruder's own Unix user the
// dashboard's API refuses every request without the token and the retired consumer's database stays;
// the hostile provider's malformed answers leave mesh up running and named; the cgroup holds the
// intruder's processes, memory and leftovers; the bus holds its subscriptions; and what a module
// writes in its own journal is shown as its claim, flagged, never as an operator's action.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectBus, type LedgerView } from "@mesh/bus";
import { credentialPath } from "@mesh/manifest";
import { actionJournalPath } from "@mesh/sdk/provider";
import { removeStaleModuleUsers, startPostgres, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const IS_ROOT = process.getuid?.() === 0;
const HAS_CGROUPS = ["pids", "memory"].every((c) => {
  try {
    readFileSync(`/sys/fs/cgroup/${c}/cgroup.procs`);
    return true;
  } catch {
    return false;
  }
});
const SKIP = !IS_ROOT
  ? "needs root: only root runs each module as its own user, in its own cgroup"
  : !HAS_CGROUPS
    ? "needs the cgroup v1 pids and memory hierarchies under /sys/fs/cgroup"
    : false;

// The hostile consumer. First a child that leaves its process group with an empty environment,
// ignoring TERM and HUP (no record of the mesh and no marker in its environment finds it); then 300
// forks at once, counted, and ended again; then, once `$HOME/hog` exists, a child that takes 16 MiB
// more every 10 ms. Synchronous file calls only: at its pids limit no thread could be started.
const INTRUDER = `import { spawn } from "node:child_process";
import { existsSync, renameSync, writeFileSync } from "node:fs";
const home = process.env.HOME;
const put = (name, text) => {
  writeFileSync(home + "/." + name + ".tmp", text);
  renameSync(home + "/." + name + ".tmp", home + "/" + name);
};
spawn("setsid", ["env", "-i", "/bin/sh", "-c",
  'trap "" TERM HUP; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100000', "sh", home + "/escaped.pid"],
  { stdio: "ignore" }).unref();
const fork = () => {
  let started = 0, refused = 0;
  const children = [];
  const done = () => {
    if (started + refused < 300) return;
    put("forked", JSON.stringify({ started, refused }));
    for (const child of children) child.kill("SIGKILL");
  };
  for (let i = 0; i < 300; i++) {
    const child = spawn("sleep", ["600"], { stdio: "ignore" });
    child.once("spawn", () => { started++; children.push(child); done(); });
    child.once("error", () => { refused++; done(); });
  }
};
let waited = 0;
const escaped = setInterval(() => {
  if (!existsSync(home + "/escaped.pid") && ++waited < 100) return;
  clearInterval(escaped);
  fork();
}, 100);
let hog;
setInterval(() => {
  if (hog !== undefined || !existsSync(home + "/hog")) return;
  hog = spawn(process.execPath, ["-e",
    "const held = []; setInterval(() => { for (let i = 0; i < 16; i++) held.push(Buffer.alloc(1 << 20, 1)); }, 10);"],
    { stdio: "ignore" });
  hog.once("exit", (code, signal) => put("hog-ended", String(signal ?? code)));
}, 200);
process.on("SIGTERM", () => process.exit(0));
`;

// The password the credential file names: Postgres moves a consumer to its other login, and that
// login's own password file, at each rotation.
async function namedPassword(stateDir: string, consumer: string, iface: string): Promise<string> {
  const credential = JSON.parse(await readFile(credentialPath(stateDir, consumer, iface), "utf8")) as {
    passwordFile: string;
  };
  return (await readFile(credential.passwordFile, "utf8")).trim();
}

// An app that does not know the mesh: it is restarted with a new password.
const REPORT = {
  name: "report",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "sh",
    args: ["-c", 'echo $$ > "$HOME/pid"; exec sleep 100000'],
    env: { DATABASE_URL: "{postgres-database.url}" },
  },
};

/** The line a module could write in its own journal: backdated, in an operator's name. */
const FORGED = {
  action: "deleted",
  login: "victim_hostile",
  interface: "hostile-store",
  who: "operator alice via mesh tool",
  at: "2020-01-01T00:00:00.000Z",
  why: "cleanup delete by operator alice via mesh tool",
  freedBytes: 7_800_000,
};

interface StatusModule {
  readonly name: string;
  readonly state: string;
  readonly pid?: number;
  readonly limitEvent?: { kind: string; text: string; at: string };
  readonly isolation?: { isolated: boolean; user: string };
}

interface StatusJson {
  nodes: { name: string; modules?: StatusModule[] }[];
  misbehaving?: { node: string; module: string; answer: string; fault: string; since: string }[];
}

const alive = (pid: number): boolean => {
  try {
    return !/^\d+ \(.*\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe(
  "a hostile consumer and a hostile provider under one mesh up",
  { timeout: 600_000, skip: SKIP },
  () => {
    let server: PostgresServer;
    let dir: string;
    let up: MeshProcess;
    let base: string;
    const state = (): string => join(dir, "state");
    const nodeState = (): string => join(state(), "nodes", "node-a");
    const home = (m: string): string => join(nodeState(), "modules", m, "home");
    const read = async (path: string): Promise<string> =>
      (await readFile(path, "utf8").catch(() => "")).trim();
    const mesh = (...args: string[]) => runMesh([...args, "--state", state()]);
    const statusJson = async (): Promise<StatusJson> => {
      const run = await mesh("status", "--json");
      assert.equal(run.code, 0, `mesh status failed:\n${run.stdout}${run.stderr}`);
      return JSON.parse(run.stdout) as StatusJson;
    };
    const moduleStatus = async (name: string): Promise<StatusModule | undefined> =>
      (await statusJson()).nodes.flatMap((n) => n.modules ?? []).find((m) => m.name === name);
    /** The Unix user `module` runs as, once it runs as its own. */
    const userOf = async (module: string): Promise<string> =>
      up.until(
        `${module} to run as its own user`,
        async () => {
          const m = await moduleStatus(module);
          return m?.state === "running" && m.isolation?.isolated === true ? m.isolation.user : undefined;
        },
        180,
      );
    /** The value of `name` in the environment of the process `pid` (root reads any). */
    const envOf = async (pid: number | string, name: string): Promise<string | undefined> =>
      (await readFile(`/proc/${pid}/environ`, "utf8").catch(() => ""))
        .split("\0")
        .find((e) => e.startsWith(`${name}=`))
        ?.slice(name.length + 1);
    const fleetYaml = (consumers: readonly string[]): string =>
      `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  hostile:
    manifest: ./hostile/module.json
    node: node-a
    endpoint: { host: 127.0.0.1, port: 1 }
  report: { manifest: ./report/module.json, node: node-a }
${consumers
  .map((c) =>
    c === "intruder"
      ? "  intruder: { manifest: ./intruder/module.json, node: node-a, limits: { pids: 100, memory: 256M } }"
      : `  ${c}: { manifest: ./${c}/module.json, node: node-a }`,
  )
  .join("\n")}
`;
    const writeFleet = async (consumers: readonly string[]): Promise<void> => {
      await writeFile(join(dir, "mesh.yaml.next"), fleetYaml(consumers), { mode: 0o644 });
      await rename(join(dir, "mesh.yaml.next"), join(dir, "mesh.yaml"));
    };

    before(async () => {
      server = await startPostgres();
      const adminUrl = await server.createAdmin("mesh_admin");
      dir = await mkdtemp(join(tmpdir(), "mesh-hostile-"));
      // Readable by the modules' own users: each runs as its own, from here.
      await chmod(dir, 0o755);
      const write = async (module: string, file: string, text: string): Promise<void> => {
        await mkdir(join(dir, module), { recursive: true, mode: 0o755 });
        await writeFile(join(dir, module, file), text, { mode: 0o644 });
      };
      await write(
        "intruder",
        "module.json",
        JSON.stringify({
          name: "intruder",
          needs: { "postgres-database": { values: {} } },
          subscribes: ["**"],
          run: { command: "/usr/bin/node", args: ["./intruder.mjs"] },
        }),
      );
      await write("intruder", "intruder.mjs", INTRUDER);
      await write("report", "module.json", JSON.stringify(REPORT));
      await write(
        "notes",
        "module.json",
        JSON.stringify({ name: "notes", needs: { "postgres-database": { values: {} } } }),
      );
      for (const file of ["module.json", "main.mjs"]) {
        await mkdir(join(dir, "hostile"), { recursive: true, mode: 0o755 });
        await copyFile(join(root, "test", "fixtures", "hostile-provider", file), join(dir, "hostile", file));
        await chmod(join(dir, "hostile", file), 0o644);
      }
      await writeFleet(["notes", "intruder"]);
      // No security flag: no --operator-token-file, no --isolation.
      up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--grace", "3s"], {
        MESH_POSTGRES_URL: adminUrl,
        MESH_EVERY: "1s",
      });
      up.child.stdin?.end();
      await up.waitFor(/the dashboard: http:\/\/127\.0\.0\.1:\d+\//);
      base = /the dashboard: (http:\/\/127\.0\.0\.1:\d+)\//.exec(up.output())?.[1] ?? "";
    });

    after(async () => {
      if (up && up.child.exitCode === null && up.child.signalCode === null) {
        up.child.kill("SIGINT");
        await up.done;
      }
      if (process.env["MESH_TEST_LOG"]) console.log(up?.output());
      await server?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
      removeStaleModuleUsers();
    });

    it("as the intruder's own user, the dashboard API without the token refuses approve, delete, state and ledger (401), and the retired consumer's data is still there", async () => {
      await up.until(
        "notes' database",
        async () => {
          const rows = await server.query("SELECT 1 FROM pg_database WHERE datname = 'notes_postgres'");
          return rows.length === 1;
        },
        180,
      );
      await server.query("CREATE TABLE kept (note text)", [], "notes_postgres");
      await server.query("INSERT INTO kept VALUES ('written before it retired')", [], "notes_postgres");
      await writeFleet(["intruder"]);
      await up.until(
        "notes_postgres to be retired",
        async () => {
          const run = await mesh("tool", "postgres", "cleanup", "list", "--json");
          if (run.code !== 0) return undefined;
          return (JSON.parse(run.stdout) as { login: string }[]).some((e) => e.login === "notes_postgres");
        },
        180,
      );

      const user = await userOf("intruder");
      assert.match(user, /^mesh-[a-z2-7]{6}-intruder$/);
      /** curl run as the intruder's user (its uid and group, no other): the HTTP status it got. */
      const asIntruder = (method: string, path: string, body?: unknown): string =>
        execFileSync(
          "runuser",
          [
            ...["-u", user, "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method],
            ...(body === undefined
              ? []
              : ["-H", "content-type: application/json", "-d", JSON.stringify(body)]),
            `${base}${path}`,
          ],
          { encoding: "utf8" },
        );
      const asked = {
        delete: asIntruder("POST", "/api/delete", {
          module: "postgres",
          login: "notes_postgres",
          typed: "notes_postgres",
        }),
        approve: asIntruder("POST", "/api/approve", { module: "postgres", id: "0123456789abcdef" }),
        state: asIntruder("GET", "/api/state"),
        ledger: asIntruder("GET", "/api/ledger?module=postgres&limit=1000"),
      };
      assert.deepEqual(asked, { delete: "401", approve: "401", state: "401", ledger: "401" });
      // The first refusal is said at once, naming the Unix user that asked.
      await up.waitFor(new RegExp(`refused POST /api/delete from 127\\.0\\.0\\.1 \\(uid \\d+, ${user}\\)`));

      const kept = await server.query<{ note: string }>("SELECT note FROM kept", [], "notes_postgres");
      assert.deepEqual(kept, [{ note: "written before it retired" }], "notes' data is still there");
      const list = await mesh("tool", "postgres", "cleanup", "list", "--json");
      assert.ok(
        (JSON.parse(list.stdout) as { login: string }[]).some((e) => e.login === "notes_postgres"),
        "still retired, waiting for a person",
      );
      const ledger = await mesh("ledger", "postgres", "--json", "--limit", "1000");
      const entries = (JSON.parse(ledger.stdout) as { entries: LedgerView[] }).entries;
      assert.ok(
        !entries.some((v) => v.entry["tool"] === "cleanup delete" || v.entry["tool"] === "retire approve"),
        "nothing refused reached the provider",
      );
    });

    it("malformed status and retire answers (nulls, wrong types, a login whose toString throws) leave mesh up running, mesh status names the misbehaving module, and a rotation of another consumer still applies", async () => {
      await userOf("hostile");
      // A good status with a consumer awaiting approval: the agent asks which set waits, and is
      // answered with logins that are not a list.
      await writeFile(join(home("hostile"), "mode"), "awaiting\n");
      const waiting = await up.until(
        "mesh status to name hostile's answer to retire list",
        async () =>
          (await statusJson()).misbehaving?.find((m) => m.module === "hostile" && m.answer === "retire list"),
        180,
      );
      assert.equal(waiting.fault, "malformed");
      // Then every status answer is malformed in turn.
      await writeFile(join(home("hostile"), "mode"), "hostile\n");
      const bad = await up.until(
        "mesh status to name hostile as misbehaving",
        async () =>
          (await statusJson()).misbehaving?.find((m) => m.module === "hostile" && m.answer === "status"),
        180,
      );
      assert.equal(bad.fault, "malformed");
      const retire = await mesh("tool", "hostile", "retire", "list");
      assert.notEqual(retire.code, 0, retire.stdout);
      assert.match(retire.stderr, /\(module-misbehaving\): hostile on node node-a misbehaves/);
      // Asked every 2 s, it gives each of its four malformed status answers in turn.
      await new Promise((resolve) => setTimeout(resolve, 10_000));
      assert.equal(up.child.exitCode, null, `mesh up ended:\n${up.output().slice(-6000)}`);
      assert.doesNotMatch(up.output(), /TypeError|Cannot read properties|Cannot convert object/);
      const text = (await mesh("status")).stdout;
      assert.match(
        text,
        /\n {2}hostile +running[^\n]*\n(?: {4}[^\n]*\n)*? {4}misbehaving since \S+ \([^)]*\): its answer to status is malformed: /,
      );
      assert.match(text, / {4}misbehaving since \S+ \([^)]*\): its answer to retire list is malformed: /);

      const reportPid = await up.until(
        "report to start",
        async () => (await read(join(home("report"), "pid"))) || undefined,
        180,
      );
      const oldPassword = await namedPassword(nodeState(), "report", "postgres-database");
      const rotated = await mesh("rotate", "report", "postgres-database");
      assert.equal(rotated.code, 0, rotated.stdout + rotated.stderr);
      const newPid = await up.until(
        "report to be restarted with its new password",
        async () => {
          const pid = await read(join(home("report"), "pid"));
          return pid !== reportPid && pid !== "" ? pid : undefined;
        },
        180,
      );
      const url = new URL(
        (await up.until("report's environment", () => envOf(newPid, "DATABASE_URL"), 180)) ?? "",
      );
      const runsWith = decodeURIComponent(url.password);
      // The credential file moves to the new password with the delivery's next apply, a moment
      // after the restart (where the login alternates, with the login): waited for, bounded.
      // Compared, never printed: a failure names no password.
      await up.until(
        "report's credential file to name the password it was restarted with",
        async () =>
          (await namedPassword(nodeState(), "report", "postgres-database")) === runsWith ? true : undefined,
        60,
      );
      assert.ok(runsWith !== oldPassword, "report runs with a new password, not the one before the rotation");
      assert.equal(up.child.exitCode, null);
    });

    it("with pids: 100, of the 300 children the intruder forks fewer than 100 start, and mesh status says the limit was reached", async () => {
      const forked = await up.until(
        "the intruder to count its children",
        async () => {
          const text = await read(join(home("intruder"), "forked"));
          return text === "" ? undefined : (JSON.parse(text) as { started: number; refused: number });
        },
        180,
      );
      assert.ok(forked.started > 0 && forked.started < 100, JSON.stringify(forked));
      assert.equal(forked.started + forked.refused, 300);
      const shown = await up.until(
        "mesh status to say the pids limit",
        async () => {
          const event = (await moduleStatus("intruder"))?.limitEvent;
          return event?.kind === "pids" ? event : undefined;
        },
        180,
      );
      assert.match(shown.text, /^pids limit 100 reached/);
    });

    it("a memory hog over the intruder's limits.memory is killed, and mesh status and its log say out of memory", async () => {
      await writeFile(join(home("intruder"), "hog"), "now\n");
      const ended = await up.until(
        "the hog to be ended",
        async () => (await read(join(home("intruder"), "hog-ended"))) || undefined,
        180,
      );
      assert.equal(ended, "SIGKILL", "the kernel killed it");
      const shown = await up.until(
        "mesh status to say out of memory",
        async () => {
          const event = (await moduleStatus("intruder"))?.limitEvent;
          return event?.kind === "out-of-memory" ? event : undefined;
        },
        180,
      );
      assert.match(shown.text, /killed: out of memory \(limit 256M\)$/);
      const text = (await mesh("status")).stdout;
      assert.match(text, / {4}[^\n]*killed: out of memory \(limit 256M\) at /);
      const log = await readFile(join(nodeState(), "modules", "intruder", "log"), "utf8");
      assert.match(log, /mesh *\| mesh agent: intruder [^\n]*killed: out of memory \(limit 256M\)/);
    });

    it("the intruder's subscription past its credential's 1,000 is refused by the bus", async () => {
      const pid = (await moduleStatus("intruder"))?.pid;
      assert.ok(pid !== undefined);
      const servers = await envOf(pid, "MESH_BUS_SERVERS");
      const credsFile = await envOf(pid, "MESH_BUS_CREDS");
      assert.ok(servers !== undefined && credsFile !== undefined, "the intruder holds a bus credential");
      // What the intruder holds, used as it would: its own credential file.
      const nc: NatsConnection = await connectBus({
        servers: servers.split(","),
        creds: await readFile(credsFile),
        name: "intruder",
      });
      try {
        const errors: string[] = [];
        void (async () => {
          for await (const s of nc.status()) if (s.type === "error") errors.push(s.error.message);
        })();
        for (let i = 0; i < 1_000; i++) nc.subscribe("mesh.events.>");
        await nc.flush();
        assert.deepEqual(errors, [], "every subscription up to its limit is taken");
        nc.subscribe("mesh.events.>");
        await nc.flush();
        await up.until("the bus's refusal", async () => errors.length > 0, 30);
        assert.match(errors[0] ?? "", /maximum subscriptions exceeded/i);
      } finally {
        await nc.close();
      }
    });

    it("a forged journal line, written as the hostile provider's own user, is shown as its claim and flagged, never as an operator's action", async () => {
      const user = await userOf("hostile");
      execFileSync(
        "runuser",
        ["-u", user, "--", "/bin/sh", "-c", 'cat >> "$0"', actionJournalPath(nodeState(), "hostile")],
        {
          input: `${JSON.stringify(FORGED)}\n`,
        },
      );
      const ledger = async (): Promise<LedgerView[]> => {
        const run = await mesh("ledger", "hostile", "--json", "--limit", "1000");
        assert.equal(run.code, 0, run.stderr);
        return (JSON.parse(run.stdout) as { entries: LedgerView[] }).entries;
      };
      const forged = await up.until(
        "the forged line in hostile's ledger",
        async () => (await ledger()).find((v) => v.claim?.who === FORGED.who),
        180,
      );
      assert.equal(forged.recorded, undefined, "not a record of the mesh");
      assert.equal(forged.entry["who"], undefined, "nothing the module says is at the entry's top level");
      assert.deepEqual(forged.entry["by"], { module: "hostile", claim: true });
      assert.match(forged.flagged ?? "", /^no cleanup delete victim_hostile was asked through the mesh/);
      const run = await mesh("ledger", "hostile", "--limit", "1000");
      const row = run.stdout.split("\n").find((l) => l.startsWith(`#${forged.seq} `)) ?? run.stdout;
      assert.match(row, /^#\d+\s+\S+\s+hostile says:\s+deleted victim_hostile \(hostile-store\)/);
      assert.match(row, /FLAGGED: no cleanup delete victim_hostile was asked through the mesh/);
      assert.doesNotMatch(run.stdout, /^#\d+\s+\S+\s+(operator )?alice/m, "no row is alice's");
    });

    it("the setsid child the intruder left with an empty environment is gone once the intruder stops", async () => {
      const child = await up.until(
        "the intruder's escaped child to say its PID",
        async () => Number(await read(join(home("intruder"), "escaped.pid"))) || undefined,
        180,
      );
      assert.ok(alive(child), "it runs");
      assert.doesNotMatch(
        readFileSync(`/proc/${child}/environ`, "latin1"),
        /MESH_/,
        "nothing says it is the mesh's",
      );
      const sid = (pid: number): string =>
        readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[3] ?? "";
      assert.equal(sid(child), String(child), "it leads a session of its own");
      await writeFleet([]);
      await up.until(
        "the intruder to leave the status",
        async () => (await moduleStatus("intruder")) === undefined,
        180,
      );
      await up.until("its child to be gone", async () => !alive(child), 60);
      assert.equal(up.child.exitCode, null, `mesh up ended:\n${up.output().slice(-6000)}`);
    });
  },
);
