// `npm start`: a whole mesh on one machine, narrated for a person watching. It starts a private
// PostgreSQL, Redis, Ceph (an S3 RADOS Gateway) and Glewlwyd (OpenID Connect) for the providers to
// manage (or uses MESH_POSTGRES_URL / MESH_REDIS_URL / MESH_S3_URL / MESH_OIDC_URL), runs `mesh up`
// on the example fleet — nats-server, the controller, an agent, and nine modules: the four providers,
// four small apps that use what the mesh gives them and an audit logger — prints the dashboard's
// login link, then takes one app out of the fleet and shows its database retired, not deleted. On a
// terminal it then stays up until Ctrl-C, with the dashboard's link and commands to try; otherwise
// (CI, tests) it ends after the tour.
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  startCeph,
  startGlewlwyd,
  startPostgres,
  startRedis,
  stopOnSignalsYourself,
  type CephServer,
  type GlewlwydServer,
  type PostgresServer,
  type RedisServer,
  until,
} from "@mesh/testkit";
import { servedAt, TOUR_APPS, tourFleetYaml } from "./fleet.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const mesh = join(root, "packages", "cli", "bin", "mesh.js");
const tty = process.stdout.isTTY === true;
/** A person at a terminal: the mesh stays up after the tour for them to look around. */
const stays = process.stdin.isTTY === true;
// Ctrl-C (or a stop sent to the group, or the terminal closed) ends the tour, or the stay after it,
// and stops everything in order: the mesh, then its backends (not the testkit's exit at once).
stopOnSignalsYourself();
const interrupted = new Promise<"interrupted">((resolve) => {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const)
    process.on(signal, () => resolve("interrupted"));
});
const bold = (s: string): string => (tty ? `\x1b[1m${s}\x1b[0m` : s);
const dim = (s: string): string => (tty ? `\x1b[2m${s}\x1b[0m` : s);

let stepNo = 0;
const step = (title: string): void => console.log(`\n${bold(`${++stepNo}. ${title}`)}`);
const say = (text: string): void => console.log(`   ${text}`);

/** Runs a `mesh` command and shows what it prints. */
async function show(args: string[]): Promise<string> {
  const child = spawn(process.execPath, [mesh, ...args], { stdio: "pipe" });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (out += d.toString()));
  await new Promise((resolve) => child.on("close", resolve));
  console.log(dim(`   $ mesh ${args.join(" ")}`));
  for (const line of out.trimEnd().split("\n")) console.log(`     ${line}`);
  return out;
}

async function writeAtomic(path: string, text: string): Promise<void> {
  await writeFile(`${path}.tmp`, text);
  await rename(`${path}.tmp`, path);
}

async function lastLine(path: string, pattern: RegExp): Promise<string | undefined> {
  const text = await readFile(path, "utf8");
  return text
    .split("\n")
    .filter((l) => pattern.test(l))
    .at(-1);
}

async function main(): Promise<void> {
  console.log(bold("Mesh — a whole mesh on one machine"));
  say("A fleet file says which modules run where; the mesh derives each consumer's login, mints its");
  say("password, seals it to the machines that need it, and the providers make exactly that.");

  const dir = await mkdtemp(join(tmpdir(), "mesh-start-"));
  // mkdtemp makes it 0700; each module's own user must pass through it to reach its directory in
  // the state, or the agent runs every module as itself (--isolation auto) and says so.
  await chmod(dir, 0o711);
  const state = join(dir, "state");
  const fleet = join(dir, "mesh.yaml");
  let postgres: PostgresServer | undefined;
  let redis: RedisServer | undefined;
  let ceph: CephServer | undefined;
  let glewlwyd: GlewlwydServer | undefined;
  let up: ChildProcess | undefined;
  const tour = async (): Promise<"toured"> => {
    step("Backends for the providers to manage");
    let postgresUrl = process.env.MESH_POSTGRES_URL;
    if (!postgresUrl) {
      postgres = await startPostgres();
      postgresUrl = await postgres.createAdmin("mesh_admin");
      say(
        `a private PostgreSQL on ${postgres.host}:${postgres.port} (admin with CREATEROLE and CREATEDB only)`,
      );
    } else say("PostgreSQL: MESH_POSTGRES_URL");
    let redisUrl = process.env.MESH_REDIS_URL;
    if (!redisUrl) {
      redis = await startRedis();
      redisUrl = redis.adminUrl;
      say(`a private Redis on ${redis.host}:${redis.port} (ACLs on)`);
    } else say("Redis: MESH_REDIS_URL");
    let s3Url = process.env.MESH_S3_URL;
    if (!s3Url) {
      ceph = await startCeph();
      s3Url = ceph.adminUrl;
      say(`a private Ceph cluster with a RADOS Gateway (S3) on ${ceph.host}:${ceph.port}`);
    } else say("RADOS Gateway: MESH_S3_URL");
    let oidcUrl = process.env.MESH_OIDC_URL;
    if (!oidcUrl) {
      glewlwyd = await startGlewlwyd();
      oidcUrl = glewlwyd.adminUrl;
      say(
        `a private Glewlwyd (OpenID Connect) on ${glewlwyd.host}:${glewlwyd.port}, issuer ${glewlwyd.issuer}`,
      );
    } else say("Glewlwyd: MESH_OIDC_URL");

    step("The fleet file");
    const served = [servedAt(postgresUrl), servedAt(redisUrl), servedAt(s3Url), servedAt(oidcUrl)] as const;
    await writeAtomic(fleet, tourFleetYaml(true, ...served));
    say(`${fleet}: one node, four providers (postgres, redis, s3, oidc), four apps and an audit logger:`);
    say("notes needs a postgres-database and emits note.created; counter needs a redis-namespace and");
    say("counts the notes it hears of; files needs an s3-bucket; api-client needs an oidc-client and");
    say("checks each token it gets against the server's keys; audit-logger hears every event (**).");

    step("mesh up");
    say(dim("(the providers pass every second for this demonstration; the default is 5 s)"));
    // --isolation auto: each module runs as its own user where it can read its checkout, else as
    // this user (a checkout under /root), and `mesh status` says which.
    up = spawn(process.execPath, [mesh, "up", fleet, "--state", state, "--isolation", "auto"], {
      env: {
        ...process.env,
        MESH_POSTGRES_URL: postgresUrl,
        MESH_REDIS_URL: redisUrl,
        MESH_S3_URL: s3Url,
        MESH_OIDC_URL: oidcUrl,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const echo = (d: Buffer) => {
      for (const line of d.toString().trimEnd().split("\n")) console.log(dim(`   ${line}`));
    };
    up.stdout?.on("data", echo);
    up.stderr?.on("data", echo);
    const notesLog = join(state, "nodes", "node-1", "modules", "notes", "log");
    const counterLog = join(state, "nodes", "node-1", "modules", "counter", "log");
    const stored = await until("the notes app storing a note", () => lastLine(notesLog, TOUR_APPS.notes));
    const counted = await until("the counter app counting", () => lastLine(counterLog, TOUR_APPS.counter));
    const filesLog = join(state, "nodes", "node-1", "modules", "files", "log");
    const kept = await until("the files app storing a file", () => lastLine(filesLog, TOUR_APPS.files));
    const apiClientLog = join(state, "nodes", "node-1", "modules", "api-client", "log");
    const verified = await until("api-client verifying a token", () =>
      lastLine(apiClientLog, TOUR_APPS["api-client"]),
    );

    step("The apps use what the mesh gave them");
    say(`notes      │ ${stored}`);
    say(`counter    │ ${counted}`);
    say(`files      │ ${kept}`);
    say(`api-client │ ${verified}`);
    const credential = join(
      state,
      "nodes",
      "node-1",
      "modules",
      "notes",
      "credentials",
      "postgres-database.json",
    );
    const cred = JSON.parse(await readFile(credential, "utf8")) as {
      login: string;
      passwordFile: string;
      url?: string;
    };
    say(`notes' credential file: login ${cred.login}, url ${cred.url ?? "(none)"}`);
    const mode = ((await stat(cred.passwordFile)).mode & 0o777).toString(8);
    say(`its password is only in ${cred.passwordFile} (mode ${mode}), never in the credential or any log.`);
    // The node reports a provider's standing on its own beat: the apps can work a moment before
    // their providers' first answers reach the controller. Status is shown once they have (bounded).
    await until(
      "every provider heard by the controller",
      () =>
        new Promise<boolean | undefined>((resolve) => {
          const child = spawn(process.execPath, [mesh, "status", "--state", state, "--json"], {
            stdio: ["ignore", "pipe", "ignore"],
          });
          let out = "";
          child.stdout.on("data", (d: Buffer) => (out += d.toString()));
          child.on("close", () => {
            try {
              const s = JSON.parse(out) as { providers?: { answered?: boolean }[] };
              const all = s.providers ?? [];
              resolve(all.length > 0 && all.every((p) => p.answered === true) ? true : undefined);
            } catch {
              resolve(undefined);
            }
          });
        }),
      { seconds: 30, everyMs: 500 },
    ).catch(() => say("(a provider has not been heard yet: status says which)"));
    await show(["status", "--state", state]);

    step("The dashboard");
    say(
      "Only the operator opens it: mesh dashboard reads the operator token (root's, 0600, made by mesh up)",
    );
    say("and prints a link whose code logs one browser in, once, within two minutes. Open it here:");
    await show(["dashboard", "--state", state]);
    say("Every approval or deletion made there is kept in the provider's ledger as that session's.");

    step("The bus: each module says and hears only what its manifest declares");
    const heard = await until("counter hearing notes.note.created", () =>
      lastLine(counterLog, /heard notes\.note\.created/),
    );
    say(`counter    │ ${heard}`);
    const auditLog = join(state, "nodes", "node-1", "modules", "audit-logger", "log");
    const audited = await until("the audit logger hearing an event", () =>
      lastLine(auditLog, /notes\.note\.created/),
    );
    say(`audit      │ ${audited}`);
    // Said by the s3 provider itself when it made files' bucket: an event of its own manifest's emits.
    const bucketMade = await until(
      "the audit logger hearing s3.bucket.created",
      () => lastLine(auditLog, /s3\.bucket\.created/),
      15,
    ).catch(() => "(s3.bucket.created was said before the audit logger listened)");
    say(`audit      │ ${bucketMade}`);
    say("Each module has its own NATS credential, compiled by the controller from its manifest; the");
    say("server itself refuses the rest. Why counter may not speak in notes' name:");
    await show(["explain", "--fleet", fleet, "counter", "publish", "mesh.events.notes.note.created"]);

    step("Take notes out of the fleet");
    await writeAtomic(fleet, tourFleetYaml(false, ...served));
    say(
      "The controller re-reads the fleet at once; the Postgres provider stops being asked for notes_postgres.",
    );
    say("It waits for 5 consecutive passes that agree before retiring anything, and never deletes.");
    await until("notes_postgres retired", async () => {
      const s = await new Promise<string>((resolve) => {
        // Asked of the provider's own socket: a poll through the mesh would fill its ledger.
        const control = join(state, "nodes", "node-1", "modules", "postgres", "home", "control.sock");
        const args = ["tool", "--control", control, "status", "--json"];
        const c = spawn(process.execPath, [mesh, ...args], { stdio: "pipe" });
        let out = "";
        c.stdout.on("data", (d: Buffer) => (out += d.toString()));
        c.on("close", () => resolve(out));
      });
      return s.includes('"retired"') ? true : undefined;
    });
    say("A person's tools go through the mesh: controller → the node's agent → the provider.");
    await show(["tool", "postgres", "status", "--state", state]);
    if (postgres) {
      const rows = await postgres.query<{ n: number }>("SELECT count(*)::int AS n FROM notes", [], "notes");
      say(`notes' database still holds its ${rows[0]?.n ?? 0} notes; the role can no longer log in.`);
    }
    say("Only a person deletes it: `mesh tool postgres cleanup delete notes_postgres`.");
    say("Everything the provider did, and every tool asked of it, is in its ledger:");
    await show(["ledger", "postgres", "--limit", "4", "--state", state]);
    return "toured";
  };
  const touring = tour();
  // A tour cut short by Ctrl-C is left to fail against what is stopping: nothing more of it is said.
  touring.catch(() => undefined);
  try {
    const how = await Promise.race([touring, interrupted]);
    if (how === "toured" && stays && up !== undefined && up.exitCode === null) {
      const upEnded = new Promise<"ended">((resolve) => up?.once("close", () => resolve("ended")));
      step("Yours to look around: the mesh runs until Ctrl-C");
      say("The dashboard (this link logs one browser in, once, within two minutes; run the first");
      say("command again for another):");
      await show(["dashboard", "--state", state]);
      say("Three commands to try, in another terminal in this checkout:");
      say(`  npx mesh dashboard --state ${state}`);
      say(`  npx mesh status --state ${state}`);
      say(`  npx mesh rotate counter redis-namespace --state ${state}`);
      say(
        dim(
          "  (a new password for counter: its provider applies it, counter is handed it, both ledgers say who)",
        ),
      );
      say(`Ctrl-C stops the mesh and the private servers, and removes ${dir}.`);
      if ((await Promise.race([interrupted, upEnded])) === "ended") say("mesh up ended on its own.");
    }
  } finally {
    step("Ctrl-C: mesh stops everything");
    if (up && up.exitCode === null) {
      up.kill("SIGINT");
      await new Promise((resolve) => up?.once("close", resolve));
    }
    await postgres?.stop();
    await redis?.stop();
    await ceph?.stop();
    await glewlwyd?.stop();
    await rm(dir, { recursive: true, force: true });
    say("Done. `npm test` runs the whole suite against real servers.");
  }
}

main().then(
  // A tour cut short may still be waiting on a timer: everything it waited for is stopped.
  () => process.exit(0),
  (err: unknown) => {
    console.error(`\nthe demonstration failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
