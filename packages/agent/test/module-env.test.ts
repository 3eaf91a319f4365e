// A module's environment is built from nothing: PATH, LANG and TZ of the agent, the fleet entry's
// variables, the mesh's own, and, for a provider whose fleet entry names one, its admin URL (from a
// 0600 file or a variable of the agent's). A consumer never gets an admin URL.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { moduleHomePath, type DeliveredModule, type Delivery } from "@mesh/manifest";
import { decideLaunch, type LaunchDecision } from "../src/module-launch.ts";
import { ScrapeTargetsCopies } from "../src/scrape-targets-copies.ts";

const ADMIN = "kv://admin:sekrit-admin@127.0.0.1:1/";

void describe("a module's environment", () => {
  let dir: string;
  let delivery: Delivery;
  const ctx = (): Parameters<typeof decideLaunch>[2] => ({
    node: "n1",
    stateDir: join(dir, "state"),
    baseEnv: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8", KV_ADMIN_URL: ADMIN, SECRET_OF_AGENT: "x" },
  });
  const decide = (module: DeliveredModule): Promise<LaunchDecision> => decideLaunch(module, delivery, ctx());
  const envOf = (decision: LaunchDecision): Readonly<Record<string, string>> => {
    assert.equal(decision.kind, "run", JSON.stringify(decision));
    return decision.kind === "run" ? decision.launch.env : {};
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-module-env-"));
    for (const name of ["store", "app"]) {
      await mkdir(join(dir, name));
      await writeFile(
        join(dir, name, "module.json"),
        JSON.stringify({ name, run: { command: "/bin/true", args: [] } }),
      );
    }
    // An app that does not know the mesh: it binds where it is told and reads the scrape targets.
    await mkdir(join(dir, "exporter"));
    await writeFile(
      join(dir, "exporter", "module.json"),
      JSON.stringify({
        name: "exporter",
        run: { command: "/bin/true", args: ["--listen={module.metrics}", "--targets={mesh.targets}"] },
      }),
    );
    delivery = {
      node: "n1",
      generation: 1,
      fleetFile: join(dir, "mesh.yaml"),
      modules: [],
      plan: { instances: [{ provider: "store", node: "n1", interface: "kv-store", consumers: [] }] },
      secrets: {},
    };
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("refuses a module whose directory is not on this machine, saying where it must be", async () => {
    const decision = await decide({ name: "elsewhere", manifest: join(dir, "elsewhere", "module.json") });
    assert.equal(decision.kind, "unreadable", JSON.stringify(decision));
    const why = decision.kind === "unreadable" ? decision.why : "";
    assert.match(why, new RegExp(`its manifest ${join(dir, "elsewhere", "module.json")} is not on node n1`));
    assert.match(why, /nor its directory/);
    assert.match(why, /must be on its node at the path the fleet names/);
    assert.ok(why.includes(join(dir, "mesh.yaml")), "names the fleet file the path is relative to");
  });

  void it("starts a module from the manifest its delivery carries: only its directory must be on the node", async () => {
    await mkdir(join(dir, "code-only"));
    const text = JSON.stringify({ name: "code-only", run: { command: "/bin/true", args: ["x"] } });
    const decision = await decide({
      name: "code-only",
      manifest: join(dir, "code-only", "module.json"),
      manifestText: text,
    });
    assert.equal(decision.kind, "run", JSON.stringify(decision));
    const launch = decision.kind === "run" ? decision.launch : undefined;
    assert.deepEqual(launch?.args, ["x"]);
    assert.equal(launch?.cwd, join(dir, "code-only"));
    const kept = join(dir, "state", "modules", "code-only", "module.json");
    assert.equal(launch?.env["MESH_MANIFEST"], kept);
    assert.equal(await readFile(kept, "utf8"), text, "the agent keeps the delivered text for the module");
    assert.equal((await stat(kept)).mode & 0o777, 0o644);
  });

  void it("says which directory is not on the node when the manifest is delivered but the code is not", async () => {
    const decision = await decide({
      name: "nowhere",
      manifest: join(dir, "nowhere", "module.json"),
      manifestText: JSON.stringify({ name: "nowhere", run: { command: "/bin/true" } }),
    });
    assert.equal(decision.kind, "unreadable", JSON.stringify(decision));
    assert.match(
      decision.kind === "unreadable" ? decision.why : "",
      /its directory \S+nowhere is not on node n1/,
    );
  });

  void it("validates a delivered manifest as a file is, naming the field, and starts nothing of it", async () => {
    await mkdir(join(dir, "badly"), { recursive: true });
    const decision = await decide({
      name: "badly",
      manifest: join(dir, "badly", "module.json"),
      manifestText: JSON.stringify({ name: "badly", run: { command: 7 } }),
    });
    assert.equal(decision.kind, "unreadable", JSON.stringify(decision));
    const why = decision.kind === "unreadable" ? decision.why : "";
    assert.match(why, /run\.command/);
    assert.match(why, /as applied with the fleet/);
  });

  void it("holds PATH, LANG, the fleet entry's variables and the mesh's, and nothing else of the agent's", async () => {
    const env = envOf(
      await decide({ name: "app", manifest: join(dir, "app", "module.json"), env: { GREETING: "hi" } }),
    );
    assert.equal(env["PATH"], "/usr/bin:/bin");
    assert.equal(env["LANG"], "C.UTF-8");
    assert.equal(env["GREETING"], "hi");
    assert.equal(env["MESH_MODULE"], "app");
    assert.equal(env["HOME"], join(dir, "state", "modules", "app", "home"));
    assert.equal(env["SECRET_OF_AGENT"], undefined);
    assert.equal(env["KV_ADMIN_URL"], undefined);
  });

  void it("hands a provider the agent's variable its fleet entry names, under that name", async () => {
    const env = envOf(
      await decide({
        name: "store",
        manifest: join(dir, "store", "module.json"),
        admin: { env: "KV_ADMIN_URL" },
      }),
    );
    assert.equal(env["KV_ADMIN_URL"], ADMIN);
    assert.equal(env["MESH_SECRETS_DIR"], join(dir, "state", "modules", "store", "secrets"));
  });

  void it("hands a provider the URL in a 0600 file as MESH_ADMIN_URL, and refuses a file others can read", async () => {
    const file = join(dir, "admin.url");
    await writeFile(file, `${ADMIN}\n`, { mode: 0o600 });
    await chmod(file, 0o600);
    const store = { name: "store", manifest: join(dir, "store", "module.json"), admin: { file } };
    assert.equal(envOf(await decide(store))["MESH_ADMIN_URL"], ADMIN);
    await chmod(file, 0o644);
    const refused = await decide(store);
    assert.equal(refused.kind, "unreadable");
    assert.match(
      refused.kind === "unreadable" ? (refused.what ?? "") : "",
      /store.s admin URL cannot be read/,
    );
    assert.match(
      refused.kind === "unreadable" ? refused.why : "",
      /readable by others \(mode 644, not 600\)/,
    );
    assert.equal(JSON.stringify(refused).includes("sekrit-admin"), false, "the URL is never said");
  });

  void it("never hands an admin URL to a module that provides nothing here", async () => {
    const app = { name: "app", manifest: join(dir, "app", "module.json"), admin: { env: "KV_ADMIN_URL" } };
    const decision = await decide(app);
    assert.equal(decision.kind, "unreadable");
    assert.match(decision.kind === "unreadable" ? decision.why : "", /never reaches a consumer/);
  });

  void it("gives an app that names {module.metrics} a port picked once, or the fleet's, and reports it as serving there", async () => {
    const manifest = join(dir, "exporter", "module.json");
    const asked: string[] = [];
    // The mesh's own file, which no module reads: the module is given a copy in its own directory.
    const source = join(dir, "mesh-targets.json");
    await writeFile(source, '[{"targets":["127.0.0.1:1"]}]\n', { mode: 0o600 });
    const copies = new ScrapeTargetsCopies(source, 60_000);
    after(() => copies.stop());
    const copy = join(moduleHomePath(ctx().stateDir, "exporter"), "scrape-targets.json");
    const picking = {
      ...ctx(),
      scrapeTargets: copies,
      metricsPort: (module: string, host: string) => {
        asked.push(`${module}@${host}`);
        return Promise.resolve(40123);
      },
    };
    const picked = await decideLaunch({ name: "exporter", manifest }, delivery, picking);
    assert.equal(picked.kind, "run", JSON.stringify(picked));
    if (picked.kind !== "run") return;
    assert.deepEqual(picked.launch.args, ["--listen=127.0.0.1:40123", `--targets=${copy}`]);
    assert.equal(await readFile(copy, "utf8"), await readFile(source, "utf8"));
    assert.equal((await stat(copy)).mode & 0o777, 0o600);
    await writeFile(source, '[{"targets":["127.0.0.1:2"]}]\n');
    await copies.refresh();
    assert.match(await readFile(copy, "utf8"), /127\.0\.0\.1:2/, "the copy follows the file");
    assert.equal(picked.launch.metrics, "http://127.0.0.1:40123/metrics");
    assert.deepEqual(asked, ["exporter@127.0.0.1"]);

    const fixed = await decideLaunch(
      { name: "exporter", manifest, metrics: "127.0.0.1:9464" },
      delivery,
      picking,
    );
    assert.equal(fixed.kind, "run");
    if (fixed.kind !== "run") return;
    assert.equal(fixed.launch.args[0], "--listen=127.0.0.1:9464", "the fleet's port, as written");
    assert.equal(fixed.launch.metrics, "http://127.0.0.1:9464/metrics");
    assert.deepEqual(asked, ["exporter@127.0.0.1"], "no port picked for a fixed one");

    // A module that names nothing of it serves no metrics the agent knows of.
    const plain = await decide({ name: "app", manifest: join(dir, "app", "module.json") });
    assert.equal(plain.kind === "run" ? plain.launch.metrics : "not run", undefined);

    // Without the controller's file on this node, {mesh.targets} cannot be rendered: not started, and why.
    const noTargets = await decideLaunch({ name: "exporter", manifest }, delivery, {
      ...picking,
      scrapeTargets: undefined,
    });
    assert.equal(noTargets.kind, "unreadable");
    assert.match(
      noTargets.kind === "unreadable" ? noTargets.why : "",
      /\{mesh\.targets\} has no file on this node/,
    );
  });

  void it("writes the controller's scrape token into a 0600 file of the module's, never into its args, and does not start a module that names it where there is none", async () => {
    await mkdir(join(dir, "prom"));
    await writeFile(
      join(dir, "prom", "module.json"),
      JSON.stringify({
        name: "prom",
        run: {
          command: "/bin/true",
          args: ["--config.file={files.config}"],
          env: { SCRAPE_BEARER: "{mesh.scrape-token}" },
          files: {
            "scrape-token": "{mesh.scrape-token}",
            config: "authorization:\n  credentials_file: {files.scrape-token}\n",
          },
        },
      }),
    );
    const manifest = join(dir, "prom", "module.json");
    const token = "the-scrape-token-of-this-node";
    const decided = await decideLaunch({ name: "prom", manifest }, delivery, {
      ...ctx(),
      scrapeToken: token,
    });
    assert.equal(decided.kind, "run", JSON.stringify(decided));
    if (decided.kind !== "run") return;
    assert.equal(decided.launch.env["SCRAPE_BEARER"], token);
    assert.ok(!decided.launch.args.join(" ").includes(token), "never in argv");
    const files = join(ctx().stateDir, "modules", "prom", "files");
    assert.equal(await readFile(join(files, "scrape-token"), "utf8"), token);
    assert.equal((await stat(join(files, "scrape-token"))).mode & 0o777, 0o600);
    assert.match(await readFile(join(files, "config"), "utf8"), /credentials_file: .*files\/scrape-token\n/);

    const none = await decideLaunch({ name: "prom", manifest }, delivery, ctx());
    assert.equal(none.kind, "unreadable");
    const why = none.kind === "unreadable" ? none.why : "";
    assert.match(why, /\{mesh\.scrape-token\} has no value on this node/);
  });
});
