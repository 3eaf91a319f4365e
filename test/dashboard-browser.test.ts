// The operator's dashboard in a real browser (Debian's Chromium, driven headless by playwright-core)
// against a real mesh: `mesh up` runs nats-server, the controller and one agent, which runs the
// Postgres provider on a real PostgreSQL. One consumer fails for real (a role of its login exists
// that the provider did not make, so it is never touched); two of three consumers are then removed
// from the fleet, more than the harness's retirement bound lets go without a person, so they wait
// for approval. The page logs in through the one-time link `mesh dashboard` prints (mesh up runs with
// no security flag, as npm start runs it), approves them, refuses a delete with the wrong login
// typed, and deletes with the right one; each action is read back from the ledger with `mesh
// ledger`, as the CLI shows it, as done by the session's operator. Without the session, another Unix
// user of the machine approves and deletes nothing. Screenshots of every view go to
// test-output/screenshots/.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium, type Browser, type Page } from "playwright-core";
import type { LedgerView } from "@mesh/bus";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const CHROMIUM = "/usr/bin/chromium";
const SCREENSHOTS = join(root, "test-output", "screenshots");
const PG_MANIFEST = JSON.stringify(join(root, "providers", "postgres", "module.json"));
// Long enough for a page that polls every 2 s; a deadline, not a timing assertion.
const SEEN = { timeout: 30_000 };

const fleetYaml = (port: number, consumers: readonly string[]): string =>
  `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${PG_MANIFEST}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s, MESH_FAILING_AFTER: 1s }
${consumers.map((c) => `  ${c}: { manifest: ./consumer/module.json, node: node-a }\n`).join("")}`;

interface LedgerAnswer {
  entries: LedgerView[];
}

const skip = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} is absent: install Debian's chromium (apt-get install chromium) to run the dashboard's browser tests`;

describe("the dashboard in a browser, against a real mesh", { timeout: 180_000, skip }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  let browser: Browser;
  let page: Page;
  let base: string;
  let token: string;
  let who: string;
  const state = () => join(dir, "state");
  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  const ledger = async (): Promise<LedgerAnswer> => {
    const run = await runMesh(["ledger", "postgres", "--limit", "500", "--json", "--state", state()]);
    assert.equal(run.code, 0, `mesh ledger failed:\n${run.stdout}${run.stderr}`);
    return JSON.parse(run.stdout) as LedgerAnswer;
  };
  /** A JSON POST as curl sends it, from the page's own origin, without any credential. */
  const post = (body: unknown): RequestInit => ({
    method: "POST",
    headers: { "content-type": "application/json", origin: base },
    body: JSON.stringify(body),
  });
  /** `path` POSTed by curl run as another Unix user of the machine (nobody); its HTTP status. */
  const asNobody = async (path: string, body: unknown): Promise<string> => {
    const { stdout } = await promisify(execFile)("runuser", [
      ...["-u", "nobody", "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"],
      ...["-H", "content-type: application/json", "-d", JSON.stringify(body), `${base}${path}`],
    ]);
    return stdout;
  };
  const roles = async (): Promise<string[]> =>
    (await server.query<{ rolname: string }>("SELECT rolname FROM pg_roles ORDER BY rolname")).map(
      (r) => r.rolname,
    );

  before(async () => {
    await mkdir(SCREENSHOTS, { recursive: true });
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    // A role the provider did not make, under the login the consumer "blocked" derives: the
    // provider never alters it, so that consumer fails on every pass.
    await server.query("CREATE ROLE blocked_postgres LOGIN");
    dir = await mkdtemp(join(tmpdir(), "mesh-dashboard-"));
    await mkdir(join(dir, "consumer"));
    // Consumers with no process of their own: only their databases matter here.
    await writeFile(
      join(dir, "consumer", "module.json"),
      JSON.stringify({ name: "consumer", needs: { "postgres-database": { values: {} } } }),
    );
    await writeFile(join(dir, "mesh.yaml"), fleetYaml(server.port, ["blocked", "c1", "c2", "c3"]));
    // No security flag: the operator token is made in the state directory, as npm start has it.
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
      MESH_EVERY: "1s",
      MESH_FAILING_AFTER: "1s",
    });
    await up.waitFor(/the dashboard: http:\/\/127\.0\.0\.1:\d+\//);
    base = /the dashboard: (http:\/\/127\.0\.0\.1:\d+)\//.exec(up.output())?.[1] ?? "";
    token = (await readFile(join(state(), "controller", "operator.token"), "utf8")).trim();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
    page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  });

  after(async () => {
    await browser?.close();
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("loads, asks to log in, logs in once through mesh dashboard's link, then shows the nodes, their agents and the modules", async () => {
    const unauthorised = await fetch(`${base}/api/state`);
    assert.equal(unauthorised.status, 401, "the API asks for the operator's credential");
    await page.goto(`${base}/`);
    await page.locator("#login-form").waitFor(SEEN);
    await shot("login");
    const link = await runMesh(["dashboard", "--state", state()]);
    assert.equal(link.code, 0, link.stderr);
    const url = link.stdout.trim();
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/\?code=/);
    await page.goto(url);
    await page.locator("#who:not([hidden])").waitFor(SEEN);
    assert.doesNotMatch(page.url(), /code=/, "the code is taken off the address");
    who = await page.locator("#who-name").innerText();
    assert.match(who, /^\S+ \(dashboard session [0-9a-f]{4}\)$/);
    const cookies = await page.context().cookies(base);
    const session = cookies.find((c) => c.name.startsWith("mesh-session-"));
    assert.ok(session, JSON.stringify(cookies));
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, "Strict");
    // The link works once: a second browser that opens it is asked to log in.
    const other = await browser.newPage();
    try {
      await other.goto(url);
      await other.locator("#login-error", { hasText: "used already" }).waitFor(SEEN);
      assert.equal((await other.context().cookies(base)).length, 0);
    } finally {
      await other.close();
    }
    const node = page.locator("#nodes tbody tr", { hasText: "node-a" });
    await node.getByText("connected").waitFor(SEEN);
    const provider = page.locator("#modules tbody tr", { hasText: "postgres" });
    await provider.getByText("running").waitFor(SEEN);
    for (const consumer of ["blocked", "c1", "c2", "c3"])
      await page.locator("#modules tbody tr", { hasText: consumer }).first().waitFor(SEEN);
    await page.locator("#providers tbody tr", { hasText: "postgres" }).getByText("3 active").waitFor(SEEN);
    // Beside the provider, a link to where it serves its metrics, which answers Prometheus's text.
    const metrics = page.locator("#providers tbody tr", { hasText: "postgres" }).locator("a.metrics");
    await metrics.waitFor(SEEN);
    const href = (await metrics.getAttribute("href")) ?? "";
    assert.match(href, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    assert.match(await (await fetch(href)).text(), /^mesh_provider_consumers\{.*state="active"\} 3$/m);
    await shot("overview");
    assert.doesNotMatch(await page.locator("#view").innerText(), /\b(null|undefined|NaN)\b/);
    assert.ok(!(await page.content()).includes(token), "the operator token is not put in the page");
  });

  it("shows the failing consumer with its class and since when", async () => {
    await page.goto(`${base}/#provider/postgres`);
    const row = page.locator("#provider tbody tr", { hasText: "blocked_postgres" });
    await row.locator(".badge.failing").waitFor(SEEN);
    const text = await row.innerText();
    assert.match(text, /failing/);
    assert.match(text, /blocked/, "named by its consumer module");
    assert.match(text, /ago|just now/, "since when");
    assert.match(text, /was not made by mesh provider instance "postgres"/, "why, in the provider's words");
    const failingClass = await row.locator(".badge.class").innerText();
    assert.ok(failingClass.length > 0, "the failure class is shown");
    for (const login of ["c1_postgres", "c2_postgres", "c3_postgres"]) {
      await page.locator("#provider tbody tr", { hasText: login }).getByText("active").waitFor(SEEN);
    }
    await shot("provider-detail");
    assert.doesNotMatch(await page.locator("#view").innerText(), /\b(null|undefined|NaN)\b/);

    // The first page tells it without a click: which consumer fails and why; its app is not green.
    await page.goto(`${base}/#overview`);
    const told = page.locator("#story-failing tbody tr", { hasText: "blocked" });
    await told.waitFor(SEEN);
    assert.match(await told.innerText(), /was not made by mesh provider instance "postgres"/);
    const app = page.locator("#modules tbody tr", { hasText: /^blocked/ }).first();
    await app.waitFor(SEEN);
    assert.equal(await app.locator(".badge.active").count(), 0, "an app whose credential fails is not green");
    await page.setViewportSize({ width: 390, height: 844 });
    await shot("phone-provider-detail");
    await page.setViewportSize({ width: 1200, height: 860 });
  });

  it("approves a retirement waiting for a person, and the approval is in the ledger", async () => {
    // Two of three held consumers at once is more than half: the harness waits for a person.
    const tmp = join(dir, "mesh.yaml.tmp");
    await writeFile(tmp, fleetYaml(server.port, ["blocked", "c3"]));
    await rename(tmp, join(dir, "mesh.yaml"));
    await page.goto(`${base}/#approvals`);
    const waiting = page.locator("#approvals .waiting[data-provider=postgres]");
    await waiting.waitFor(SEEN);
    const said = await waiting.innerText();
    assert.match(said, /c1_postgres/);
    assert.match(said, /c2_postgres/);
    assert.match(said, /2 of 3 held is more than 50%/);
    await shot("approvals");
    // Another Unix user of the machine (as a module's own is), without the session: nothing approved.
    const id = (await waiting.getAttribute("data-set")) ?? "";
    const approve = await asNobody("/api/approve", { module: "postgres", id });
    assert.equal(approve, "401");
    await page.locator("#approvals .waiting[data-provider=postgres]").waitFor(SEEN);
    await waiting.locator("button.approve").click();
    await page.locator("#notice.ok", { hasText: "retired c1_postgres, c2_postgres" }).waitFor(SEEN);
    await page.locator("#approvals", { hasText: "Nothing waits for approval." }).waitFor(SEEN);

    await page.goto(`${base}/#provider/postgres`);
    for (const login of ["c1_postgres", "c2_postgres"]) {
      await page.locator("#provider tbody tr", { hasText: login }).locator(".badge.retired").waitFor(SEEN);
    }
    await page.goto(`${base}/#ledger/postgres`);
    await page
      .locator(".timeline li[data-kind=action]", { hasText: "c1_postgres" })
      .filter({ has: page.locator(".badge", { hasText: /^approved$/ }) })
      .waitFor(SEEN);
    await page.locator(".timeline li[data-kind=tool]", { hasText: "retire approve" }).waitFor(SEEN);
    await shot("ledger-timeline");

    // The first page lists it among the recent operator actions, with who and through what.
    await page.goto(`${base}/#overview`);
    const action = page.locator("#story-actions tbody tr", { hasText: "retire approve" }).first();
    await action.waitFor(SEEN);
    const listed = await action.innerText();
    assert.ok(listed.includes(who), `by ${who}: ${listed}`);
    assert.match(listed, /dashboard/);
    await shot("overview-story");
    await page.goto(`${base}/#ledger/postgres`);

    // The provider's claims of the approval, each borne out by the call the mesh recorded.
    const views = (await ledger()).entries;
    const call = views.find((v) => v.entry["kind"] === "tool" && v.entry["tool"] === "retire approve");
    assert.deepEqual(call?.recorded, { who, via: "dashboard" }, "asked by the session's operator");
    assert.equal(call?.entry["ok"], true);
    const approved = views.filter((v) => v.claim?.action === "approved");
    assert.deepEqual(approved.map((v) => v.claim?.login).sort(), ["c1_postgres", "c2_postgres"]);
    assert.ok(
      approved.every((v) => v.claim?.who === who && v.matches === call?.seq && !v.flagged),
      `done as the session's operator, ${who}: ${JSON.stringify(approved)}`,
    );
  });

  it("refuses a delete with the wrong login typed, and deletes with the right one", async () => {
    await page.goto(`${base}/#provider/postgres`);
    const row = page.locator("#provider tbody tr", { hasText: "c1_postgres" });
    await row.locator("button.delete").click();
    await page.locator("#delete-dialog[open]").waitFor(SEEN);
    await page.fill("#delete-typed", "c2_postgres");
    await page.click("#delete-confirm");
    await page.locator("#delete-error", { hasText: "nothing was deleted" }).waitFor(SEEN);
    assert.ok(await page.locator("#delete-dialog[open]").isVisible(), "the dialog stays open");
    await shot("delete-dialog");

    // The server refuses it too, whatever a page sends.
    const refused = await fetch(`${base}/api/delete`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ module: "postgres", login: "c1_postgres", typed: "c2_postgres" }),
    });
    assert.equal(refused.status, 400);
    assert.equal(((await refused.json()) as { code?: string }).code, "login-mismatch");
    assert.ok((await roles()).includes("c1_postgres"), "nothing was deleted");
    // Without the session or the token, as another Unix user: 401, and the database is still there.
    const body = { module: "postgres", login: "c1_postgres", typed: "c1_postgres" };
    assert.equal(await asNobody("/api/delete", body), "401");
    assert.equal((await fetch(`${base}/api/delete`, post(body))).status, 401, "nor as root without it");
    const kept = await server.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_database WHERE datname = 'c1_postgres'",
    );
    assert.equal(kept[0]?.n, 1, "c1's database is still there");
    assert.ok(
      !(await ledger()).entries.some((e) => e.entry["tool"] === "cleanup delete"),
      "a refused delete never reached the provider",
    );

    await page.fill("#delete-typed", "c1_postgres");
    await page.click("#delete-confirm");
    await page.locator("#delete-dialog:not([open])").waitFor({ state: "attached", ...SEEN });
    await page.locator("#notice.ok", { hasText: "deleted c1_postgres" }).waitFor(SEEN);
    await page
      .locator("#provider tbody tr", { hasText: "c1_postgres" })
      .locator(".badge.deleted")
      .waitFor(SEEN);
    assert.ok(!(await roles()).includes("c1_postgres"), "its role is gone from PostgreSQL");
    assert.ok((await roles()).includes("c2_postgres"), "the other retired one is kept");
    await shot("provider-after-delete");

    const views = (await ledger()).entries;
    const calls = views.filter((v) => v.entry["kind"] === "tool" && v.entry["tool"] === "cleanup delete");
    assert.deepEqual(
      calls.map((v) => [v.entry["args"], v.entry["ok"], v.recorded]),
      [[["c1_postgres"], true, { who, via: "dashboard" }]],
    );
    const deleted = views.filter((v) => v.claim?.action === "deleted");
    assert.deepEqual(
      deleted.map((v) => [v.claim?.login, v.claim?.who, v.matches, v.flagged]),
      [["c1_postgres", who, calls[0]?.seq, undefined]],
    );
  });
});
