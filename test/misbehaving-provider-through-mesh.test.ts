// A provider that lies cannot stop the node: `mesh up` runs a real Postgres provider with an app
// that does not know the mesh (`report`, restarted on a new password), and a hostile provider
// (test/fixtures/hostile-provider) with an app of its own (`victim`). The hostile provider answers
// well at first, so the victim starts with its password; then it answers every question with
// something malformed (a null consumer, wrong types, a login whose toString throws, NaN-ish
// strings, 10 MB, an answer that never ends). `mesh up` keeps running, and again after a restart;
// `mesh status` names the misbehaving module, what was wrong and since when; the victim keeps its
// process and its password; and `mesh rotate` of the Postgres app still applies: it runs with
// its new password.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { credentialPath, secretPath } from "@mesh/manifest";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

// The password the credential file names: Postgres moves a consumer to its other login, and that
// login's own password file, at each rotation.
async function namedPassword(stateDir: string, consumer: string, iface: string): Promise<string> {
  const credential = JSON.parse(await readFile(credentialPath(stateDir, consumer, iface), "utf8")) as {
    passwordFile: string;
  };
  return (await readFile(credential.passwordFile, "utf8")).trim();
}

const root = fileURLToPath(new URL("..", import.meta.url));
const hostileManifest = join(root, "test", "fixtures", "hostile-provider", "module.json");

interface StatusJson {
  nodes: { name: string; modules: { name: string; state: string }[] }[];
  misbehaving?: {
    node: string;
    module: string;
    answer: string;
    fault: string;
    what: string;
    since: string;
  }[];
}

describe("a provider whose answers are malformed, through mesh up", { timeout: 400_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  let adminUrl: string;
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", "node-a");
  const home = (m: string) => join(nodeState(), "modules", m, "home");
  const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();
  const statusJson = async (): Promise<StatusJson> => {
    const run = await runMesh(["status", "--state", state(), "--json"]);
    assert.equal(run.code, 0, `mesh status failed:\n${run.stdout}${run.stderr}`);
    return JSON.parse(run.stdout) as StatusJson;
  };
  /** The value of `name` in the environment of the process `pid` (root reads any). */
  const envOf = async (pid: string, name: string): Promise<string | undefined> => {
    const environ = await readFile(`/proc/${pid}/environ`, "utf8").catch(() => "");
    return environ
      .split("\0")
      .find((e) => e.startsWith(`${name}=`))
      ?.slice(name.length + 1);
  };
  const alive = async (pid: string) => (await read(`/proc/${pid}/stat`)) !== "";
  const startUp = () =>
    startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
      MESH_EVERY: "1s",
    });

  before(async () => {
    server = await startPostgres();
    adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-misbehaving-"));
    // Readable by the modules' own users, so that --isolation auto runs each as its own user.
    await chmod(dir, 0o755);
    const apps = {
      report: {
        name: "report",
        needs: { "postgres-database": { values: {} } },
        run: {
          command: "sh",
          args: ["-c", 'echo $$ > "$HOME/pid"; exec sleep 100000'],
          env: { DATABASE_URL: "{postgres-database.url}" },
        },
      },
      victim: {
        name: "victim",
        needs: { "hostile-store": { values: {} } },
        run: {
          command: "sh",
          args: ["-c", 'echo $$ > "$HOME/pid"; exec sleep 100000'],
          env: { HOSTILE_PASSWORD: "{hostile-store.password}" },
        },
      },
    };
    for (const [name, manifest] of Object.entries(apps)) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest, null, 2));
    }
    await writeFile(
      join(dir, "mesh.yaml"),
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
    manifest: ${JSON.stringify(hostileManifest)}
    node: node-a
    endpoint: { host: 127.0.0.1, port: 1 }
  report: { manifest: ./report/module.json, node: node-a }
  victim: { manifest: ./victim/module.json, node: node-a }
`,
    );
    up = startUp();
    await up.waitFor(/the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  let victimPid = "";

  it("while the provider answers well, its app starts with the password it applied", async () => {
    victimPid = await up.until(
      "the victim to start",
      async () => (await read(join(home("victim"), "pid"))) || undefined,
    );
    const password = await read(secretPath(nodeState(), "victim", "hostile-store"));
    assert.ok(password.length >= 32);
    assert.equal(await envOf(victimPid, "HOSTILE_PASSWORD"), password);
    await up.until("report to start", async () => (await read(join(home("report"), "pid"))) || undefined);
  });

  it("once it answers malformed status and retire answers, mesh up keeps running and mesh status names it, what was wrong and since when", async () => {
    await writeFile(join(home("hostile"), "mode"), "hostile\n");
    const bad = await up.until("mesh status to name hostile as misbehaving", async () =>
      (await statusJson()).misbehaving?.find((m) => m.module === "hostile" && m.answer === "status"),
    );
    assert.equal(bad.node, "node-a");
    assert.equal(bad.fault, "malformed");
    assert.ok(!Number.isNaN(Date.parse(bad.since)));
    // Several asks later (every 2 s), every hostile answer in turn: still running.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    assert.equal(up.child.exitCode, null, `mesh up ended:\n${up.output().slice(-6000)}`);
    assert.doesNotMatch(up.output(), /TypeError|Cannot read properties/);
    const text = (await runMesh(["status", "--state", state()])).stdout;
    assert.match(
      text,
      /\n {2}hostile +running[^\n]*\n {4}misbehaving since \S+ \([^)]*\): its answer to status is malformed: /,
    );
    // Said once when it started, not at every ask.
    assert.equal(up.output().match(/module hostile misbehaves/g)?.length, 1, up.output().slice(-6000));

    // Through the mesh, a tool's malformed, huge or endless answer is refused as the module's.
    for (const tool of [
      ["retire", "list"],
      ["cleanup", "list"],
      ["retire", "approve", "abc"],
    ]) {
      const run = await runMesh(["tool", "hostile", ...tool, "--yes", "--state", state()]);
      assert.notEqual(run.code, 0, run.stdout);
      assert.match(
        run.stderr,
        /\(module-misbehaving\): hostile on node node-a misbehaves/,
        `${tool.join(" ")}: ${run.stderr}`,
      );
    }
    const faults = (await statusJson()).misbehaving
      ?.filter((m) => m.module === "hostile")
      .map((m) => [m.answer, m.fault]);
    assert.deepEqual(faults, [
      ["cleanup list", "too-large"],
      ["retire approve", "too-large"],
      ["retire list", "malformed"],
      ["status", "malformed"],
    ]);
  });

  it("its app keeps its process and password, and a rotation of another provider's consumer still applies", async () => {
    const victimPassword = await read(secretPath(nodeState(), "victim", "hostile-store"));
    const reportPid = await read(join(home("report"), "pid"));
    const oldUrl = await envOf(reportPid, "DATABASE_URL");
    const rotated = await runMesh(["rotate", "report", "postgres-database", "--state", state()]);
    assert.equal(rotated.code, 0, rotated.stdout + rotated.stderr);
    // The victim's own rotation waits for a provider that cannot say it applied it.
    // (--wait 0: the hostile provider never says it applied anything.)
    const waits = await runMesh(["rotate", "victim", "hostile-store", "--wait", "0", "--state", state()]);
    assert.equal(waits.code, 0, waits.stdout + waits.stderr);
    const newPid = await up.until("report to be restarted with its new password", async () => {
      const pid = await read(join(home("report"), "pid"));
      return pid !== reportPid && pid !== "" ? pid : undefined;
    });
    const newPassword = await namedPassword(nodeState(), "report", "postgres-database");
    const url = new URL((await up.until("report's environment", () => envOf(newPid, "DATABASE_URL"))) ?? "");
    assert.equal(decodeURIComponent(url.password), newPassword, "report runs with its new password");
    assert.notEqual(url.toString(), oldUrl);

    // Its new password reaches the node; the agent asks the provider whether it applied it (every
    // 200 ms at first) and never gets an answer it can use: the victim is left as it is.
    await up.until(
      "the victim's new password to be delivered",
      async () => (await read(secretPath(nodeState(), "victim", "hostile-store"))) !== victimPassword,
    );
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    assert.ok(await alive(victimPid), "the victim still runs");
    assert.equal(await read(join(home("victim"), "pid")), victimPid, "the victim was not restarted");
    assert.equal(
      await envOf(victimPid, "HOSTILE_PASSWORD"),
      victimPassword,
      "it keeps the password it runs with",
    );
    assert.equal(up.child.exitCode, null);
  });

  it("mesh up started again with the provider still hostile keeps running", async () => {
    up.child.kill("SIGINT");
    const stopped = await up.done;
    assert.equal(stopped.code, 0, stopped.stdout + stopped.stderr);
    up = startUp();
    await up.waitFor(/the modules start/);
    await up.until("mesh status to name hostile as misbehaving again", async () =>
      (await statusJson()).misbehaving?.some((m) => m.module === "hostile"),
    );
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    assert.equal(up.child.exitCode, null, `mesh up ended:\n${up.output().slice(-6000)}`);
  });
});
