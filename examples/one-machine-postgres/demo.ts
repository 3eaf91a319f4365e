// `npm start`: Mesh's Postgres provider on one machine, narrated for a person watching. It starts its
// own PostgreSQL, plays the part of the mesh (a contributions file and two secret files), runs the real
// `mesh provider postgres`, shows each consumer logging in with the password the mesh minted, then
// stops asking for one and shows it retired — access off, data kept — rather than deleted.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { startPostgres, type PostgresServer } from "@mesh/testkit";

const root = fileURLToPath(new URL("../..", import.meta.url));
const mesh = join(root, "packages", "cli", "bin", "mesh.js");
const tty = process.stdout.isTTY === true;
const bold = (s: string): string => (tty ? `\x1b[1m${s}\x1b[0m` : s);
const dim = (s: string): string => (tty ? `\x1b[2m${s}\x1b[0m` : s);
const EVERY_SECONDS = 2;

let stepNo = 0;
function step(title: string): void {
  stepNo++;
  console.log(`\n${bold(`${stepNo}. ${title}`)}`);
}
function say(text: string): void {
  console.log(`   ${text}`);
}

async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, path);
}

/** Runs `mesh tool ...` against the provider and shows what it prints. */
async function tool(control: string, ...args: string[]): Promise<string> {
  const child = spawn(process.execPath, [mesh, "tool", "--control", control, ...args], { stdio: "pipe" });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (out += d.toString()));
  await new Promise((resolve) => child.on("close", resolve));
  console.log(dim(`   $ mesh tool ${args.join(" ")}`));
  for (const line of out.trimEnd().split("\n")) console.log(`     ${line}`);
  return out;
}

async function canLogIn(
  server: PostgresServer,
  login: string,
  password: string,
  database: string,
): Promise<string> {
  const client = new pg.Client({ host: server.host, port: server.port, user: login, password, database });
  try {
    await client.connect();
    return "logged in";
  } catch (err) {
    return `refused (${(err as Error).message})`;
  } finally {
    await client.end().catch(() => {});
  }
}

async function until(what: string, check: () => Promise<boolean>, seconds = 60): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  console.log(bold("Mesh — the Postgres provider on one machine"));
  say("A module asks for a database; the mesh derives its login and mints its password;");
  say("the provider makes exactly that, checks it keeps holding, and never deletes on its own.");

  step("Start a private PostgreSQL (scram-sha-256, a free loopback port)");
  const server = await startPostgres();
  const adminUrl = await server.createAdmin("mesh_admin");
  say(`PostgreSQL is up on ${server.host}:${server.port}.`);
  say("The provider's admin role has only CREATEROLE and CREATEDB — no superuser, as on managed Postgres.");

  const dir = await mkdtemp(join(tmpdir(), "mesh-demo-"));
  const receives = join(dir, "postgres-database.json");
  const control = join(dir, "postgres.sock");
  const consumers = [
    { as: "blog_db", node: "web-1", values: { name: "blog" } },
    { as: "wiki_db", node: "web-2", values: { name: "wiki", extensions: ["pgcrypto"] } },
  ];
  const passwords = new Map(consumers.map((c) => [c.as, randomBytes(24).toString("base64url")]));
  let provider: ChildProcess | undefined;

  try {
    step("Play the mesh: mint two passwords and write the contributions file");
    for (const c of consumers) await writeAtomic(join(dir, `${c.as}.secret`), `${passwords.get(c.as)}\n`);
    const contributions = (list: typeof consumers) =>
      JSON.stringify(
        {
          requirement: "postgres-database",
          given: list.map((c) => ({ ...c, secret: join(dir, `${c.as}.secret`) })),
        },
        null,
        2,
      );
    await writeAtomic(receives, contributions(consumers));
    say(`${receives} asks for ${consumers.map((c) => c.as).join(" and ")};`);
    say("each password (192 bits, CSPRNG) is in its own 0600 secret file, never in the contributions file.");

    step("Run the provider: mesh provider postgres");
    say(dim(`(passes every ${EVERY_SECONDS}s for this demonstration; the default is 5s)`));
    provider = spawn(
      process.execPath,
      [
        mesh,
        "provider",
        "postgres",
        "--receives",
        receives,
        "--control",
        control,
        "--every",
        `${EVERY_SECONDS}s`,
      ],
      { env: { ...process.env, MESH_POSTGRES_URL: adminUrl }, stdio: ["ignore", "pipe", "pipe"] },
    );
    const show = (d: Buffer) => {
      for (const line of d.toString().trimEnd().split("\n")) console.log(dim(`   provider │ ${line}`));
    };
    provider.stdout?.on("data", show);
    provider.stderr?.on("data", show);
    const admin = new pg.Client({ connectionString: server.superuserUrl });
    await admin.connect();
    const roleCan = async (login: string) =>
      (await admin.query("SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", [login])).rows[0]
        ?.rolcanlogin === true;
    await until("both consumers", async () => (await roleCan("blog_db")) && (await roleCan("wiki_db")));
    await new Promise((r) => setTimeout(r, 300));

    step("Each consumer logs in with the password the mesh minted");
    for (const c of consumers) {
      const pw = passwords.get(c.as) ?? "";
      say(`${c.as} → database ${c.values.name}: ${await canLogIn(server, c.as, pw, c.values.name)}`);
    }
    say(`blog_db with a wrong password: ${await canLogIn(server, "blog_db", "not-the-password", "blog")}`);
    say(
      `wiki_db into blog's database: ${await canLogIn(server, "wiki_db", passwords.get("wiki_db") ?? "", "blog")}`,
    );
    const wiki = new pg.Client({
      host: server.host,
      port: server.port,
      user: "wiki_db",
      password: passwords.get("wiki_db"),
      database: "wiki",
    });
    await wiki.connect();
    await wiki.query("CREATE TABLE pages (title text, body text)");
    await wiki.query("INSERT INTO pages VALUES ('Home', 'Welcome to the wiki')");
    await wiki.end();
    say("wiki_db wrote a page into its database.");
    await tool(control, "status");

    step("The mesh stops asking for wiki_db");
    await writeAtomic(receives, contributions(consumers.slice(0, 1)));
    say("The contributions file now lists only blog_db. Nothing happens at once: the same unasked set");
    say("must be seen in 5 consecutive periodic passes, so a half-written file or a passing mistake never");
    say("costs anyone their database.");
    await new Promise((r) => setTimeout(r, EVERY_SECONDS * 1000 * 1.2));
    await tool(control, "status");
    await until("wiki_db retired", async () => !(await roleCan("wiki_db")), 120);
    await new Promise((r) => setTimeout(r, 300));

    step("wiki_db is retired, not deleted");
    await tool(control, "status");
    say(`wiki_db logs in: ${await canLogIn(server, "wiki_db", passwords.get("wiki_db") ?? "", "wiki")}`);
    const kept = await server.query<{ title: string }>("SELECT title FROM pages", [], "wiki");
    say(`its data is still there: ${kept.length} page(s) (${kept.map((r) => r.title).join(", ")}).`);
    const mark = await admin.query<{ c: string }>(
      "SELECT shobj_description(oid, 'pg_authid') AS c FROM pg_roles WHERE rolname = 'wiki_db'",
    );
    say(`the mark on the role, in the server itself: ${mark.rows[0]?.c ?? "(none)"}`);
    await tool(control, "cleanup", "list");
    say("Only a person deletes it: `mesh tool cleanup delete wiki_db` asks them to type the login.");
    say("Asked for again, it would come back as it was, with its pages.");
    await admin.end();
  } finally {
    step("Stop the provider and the private PostgreSQL");
    if (provider && provider.exitCode === null) {
      provider.kill("SIGTERM");
      await new Promise((resolve) => provider?.once("close", resolve));
    }
    await server.stop();
    await rm(dir, { recursive: true, force: true });
    say("Done. `npm test` runs the whole suite against real servers.");
  }
}

main().catch((err: unknown) => {
  console.error(`\nthe demonstration failed: ${(err as Error).message}`);
  process.exit(1);
});
