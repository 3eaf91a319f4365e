// `mesh dashboard` against a real controller HTTP server with the dashboard's routes, as `mesh up`
// leaves it: the state directory names where the server answers and where the operator token is.
// The link it prints logs in once; a wrong token, no mesh, a server gone and another Unix user each
// get no link, with the exit code the help gives.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import {
  dashboardRoutes,
  HttpAuth,
  loadOrCreateToken,
  operatorTokenPath,
  startControllerHttp,
  type ControllerHttpServer,
  type DashboardSources,
} from "@mesh/controller";
import { freePort } from "@mesh/testkit";
import { meshInProcess as mesh, MESH_BIN } from "./run-mesh.ts";

/** The dashboard's sources are never asked here: only its login routes are. */
const NO_SOURCES = new Proxy({} as DashboardSources, {
  get: () => () => {
    throw new Error("mesh dashboard asked the controller for more than a login code");
  },
});

describe("mesh dashboard", { timeout: 60_000 }, () => {
  let state: string;
  let server: ControllerHttpServer;
  let tokenFile: string;

  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-dashboard-cli-"));
    // As mesh up leaves it: traverse only, its files root's own.
    await chmod(state, 0o711);
    tokenFile = operatorTokenPath(join(state, "controller"));
    const auth = new HttpAuth({ operatorToken: await loadOrCreateToken(tokenFile, "operator token") });
    server = await startControllerHttp({ auth, routes: dashboardRoutes({ sources: NO_SOURCES, auth }) });
    await writeFile(
      join(state, "http.json"),
      JSON.stringify({ url: server.url, operatorTokenFile: tokenFile }),
      {
        mode: 0o600,
      },
    );
  });
  after(async () => {
    await server?.close();
    if (state) await rm(state, { recursive: true, force: true });
  });

  const logIn = (url: string, code: string) =>
    fetch(new URL("/api/login", url), {
      method: "POST",
      headers: { "content-type": "application/json", origin: new URL(url).origin },
      body: JSON.stringify({ code }),
    });

  it("prints a link whose code logs a browser in once", async () => {
    const run = await mesh(["dashboard", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const url = run.stdout.trim();
    assert.match(url, new RegExp(`^${server.url}/\\?code=[A-Za-z0-9_-]{24}$`));
    assert.match(run.stderr, /logs in once, within 2 min \(until \d{4}-\d\d-\d\dT/);
    const code = new URL(url).searchParams.get("code") ?? "";
    const first = await logIn(url, code);
    assert.equal(first.status, 200);
    assert.match(first.headers.get("set-cookie") ?? "", /HttpOnly; SameSite=Strict/);
    const who = ((await first.json()) as { who: string }).who;
    assert.match(who, /^[^ ]+ \(dashboard session [0-9a-f]{4}\)$/, "named after the Unix user who asked");
    assert.equal((await logIn(url, code)).status, 401, "the second use is refused");
  });

  it("prints the link and when it expires as JSON, and takes the address and the token from flags", async () => {
    const run = await mesh([
      "dashboard",
      "--json",
      "--state",
      join(state, "nowhere"),
      "--url",
      `${server.url}/`,
      "--operator-token-file",
      tokenFile,
    ]);
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as { url: string; expiresAt: string };
    assert.ok(answer.url.startsWith(`${server.url}/?code=`));
    assert.ok(Date.parse(answer.expiresAt) > Date.now());
  });

  it("refuses a token the controller does not know (exit 1), and says where no mesh ran (exit 3)", async () => {
    const wrong = join(state, "wrong.token");
    await writeFile(wrong, "a-token-of-another-mesh-entirely\n", { mode: 0o600 });
    const refused = await mesh(["dashboard", "--state", state, "--operator-token-file", wrong]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /refused the operator token in .*wrong\.token/);
    assert.equal(refused.stdout, "");
    const none = await mesh(["dashboard", "--state", join(state, "nowhere")]);
    assert.equal(none.code, 3, none.stderr);
    assert.match(none.stderr, /no mesh has run with state in/);
  });

  it("says the controller does not answer when nothing listens there (exit 3)", async () => {
    const gone = await mesh([
      "dashboard",
      "--url",
      `http://127.0.0.1:${await freePort()}`,
      "--operator-token-file",
      tokenFile,
    ]);
    assert.equal(gone.code, 3, gone.stderr);
    assert.match(gone.stderr, /does not answer .*is mesh up still running\?/);
  });

  it("gives another Unix user of the machine no link: it cannot read the state or the token", async () => {
    const run = promisify(execFile);
    const asNobody = async (args: string[]) =>
      run("runuser", ["-u", "nobody", "--", process.execPath, MESH_BIN, "dashboard", ...args], {
        cwd: tmpdir(),
      }).then(
        (r) => ({ code: 0, ...r }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
    const fromState = await asNobody(["--state", state]);
    assert.equal(fromState.code, 2, fromState.stderr);
    assert.match(fromState.stderr, /run this as the user that runs mesh up \(root\)/);
    const fromFlags = await asNobody(["--url", server.url, "--operator-token-file", tokenFile]);
    assert.equal(fromFlags.code, 2, fromFlags.stderr);
    assert.equal(fromFlags.stdout, "", "no link");
  });
});
