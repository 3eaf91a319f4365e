// `mesh rotate` gives an OIDC client a secret that works while the old one stops: `mesh up` runs a
// nats-server, the controller and one agent, which runs the oidc provider against a private
// Glewlwyd for one consumer with no process of its own. The consumer's credential names the
// discovery document; its password file holds the secret. Once a client_credentials token request
// with that secret succeeds, `mesh rotate` mints a new one: the password file changes, a token
// request with the new secret succeeds within seconds, and one with the old secret is refused.
// A Glewlwyd client holds one secret, so the rotation is a cut-over: an app that re-reads its
// secret before each token request (every 100 ms here) is refused from the moment its file holds
// the new secret until Glewlwyd has it. That window is measured, printed and bounded (< 5 s).
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { credentialPath, secretPath, type Credential } from "@mesh/manifest";
import { startGlewlwyd, type GlewlwydServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const CONSUMER = "reports";
const IFACE = "oidc-client";
const NODE = "node-a";

/** What the token endpoint answered: its status and its OAuth 2.0 error, never the token. */
interface TokenAnswer {
  readonly status: number;
  readonly error: string | undefined;
  readonly hasToken: boolean;
}

async function askToken(tokenUrl: string, login: string, secret: string): Promise<TokenAnswer> {
  const basic = Buffer.from(`${login}:${secret}`, "utf8").toString("base64");
  const response = await fetch(tokenUrl, {
    method: "POST",
    headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", scope: "api.read" }).toString(),
    signal: AbortSignal.timeout(5_000),
  });
  const body = (await response.json().catch(() => ({}))) as { access_token?: unknown; error?: unknown };
  return {
    status: response.status,
    error: typeof body.error === "string" ? body.error : undefined,
    hasToken: typeof body.access_token === "string" && body.access_token.length > 0,
  };
}

describe("mesh rotate on an OIDC client", { timeout: 180_000 }, () => {
  let server: GlewlwydServer;
  let dir: string;
  let up: MeshProcess;
  /** Whether the app that asks for tokens goes on (stopped in after(), should the test fail first). */
  let asking = false;
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", NODE);
  const readSecret = async () => (await readFile(secretPath(nodeState(), CONSUMER, IFACE), "utf8")).trim();

  before(async () => {
    server = await startGlewlwyd();
    dir = await mkdtemp(join(tmpdir(), "mesh-oidc-"));
    // Passable by the modules' own users, so the provider runs isolated, as its own user, and can
    // write only its home: where it must keep the API key it makes.
    await chmod(dir, 0o711);
    await mkdir(join(dir, CONSUMER));
    // A consumer with no process of its own: only its client and its secret matter here.
    await writeFile(
      join(dir, CONSUMER, "module.json"),
      JSON.stringify({
        name: CONSUMER,
        needs: { [IFACE]: { values: { grant_types: ["client_credentials"], scopes: ["api.read"] } } },
      }),
    );
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  ${NODE}: {}
modules:
  oidc:
    manifest: ${JSON.stringify(join(root, "providers", "oidc", "module.json"))}
    node: ${NODE}
    endpoint: { host: ${server.host}, port: ${server.port} }
    admin: { env: MESH_OIDC_URL }
    env: { MESH_EVERY: 1s }
  ${CONSUMER}: { manifest: ./${CONSUMER}/module.json, node: ${NODE} }
`,
    );
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_OIDC_URL: server.adminUrl,
    });
    await up.waitFor(/4\/4 the modules start/);
  });

  after(async () => {
    asking = false;
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("gives a secret that gets a token while the old one is refused", async () => {
    const credential = await up.until(
      "the consumer's credential file",
      async () => {
        try {
          return JSON.parse(
            await readFile(credentialPath(nodeState(), CONSUMER, IFACE), "utf8"),
          ) as Credential;
        } catch {
          return undefined;
        }
      },
      60,
    );
    assert.equal(credential.provider, "oidc");
    assert.equal(credential.passwordFile, secretPath(nodeState(), CONSUMER, IFACE));
    const discoveryUrl = credential.links?.["discovery"];
    assert.ok(
      discoveryUrl,
      `the credential links the discovery document: ${JSON.stringify(credential.links)}`,
    );
    const discovery = (await (await fetch(discoveryUrl, { signal: AbortSignal.timeout(5_000) })).json()) as {
      issuer?: string;
      token_endpoint?: string;
    };
    assert.equal(discovery.issuer, server.issuer);
    const tokenUrl = discovery.token_endpoint;
    assert.ok(typeof tokenUrl === "string", "the discovery document names a token endpoint");
    const login = credential.login;

    const oldSecret = await readSecret();
    assert.ok(oldSecret.length > 0, "the password file holds a secret");
    await up.until(
      "a token with the first secret",
      async () => ((await askToken(tokenUrl, login, oldSecret)).hasToken ? true : undefined),
      60,
    );

    // An app that re-reads its secret before each token request, every 100 ms, each counted once.
    const requests: { at: number; ok: boolean }[] = [];
    asking = true;
    const app = (async () => {
      while (asking) {
        const next = Date.now() + 100;
        const secret = await readSecret().catch(() => "");
        const answer = await askToken(tokenUrl, login, secret).catch(() => undefined);
        requests.push({ at: Date.now(), ok: answer?.hasToken === true });
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - Date.now())));
      }
    })();

    const rotate = await runMesh(["rotate", CONSUMER, IFACE, "--state", state()]);
    assert.equal(rotate.code, 0, `mesh rotate failed:\n${rotate.stdout}${rotate.stderr}`);
    const rotatedAt = Date.now();

    const newSecret = await up.until(
      "the password file to change",
      async () => {
        const now = await readSecret().catch(() => "");
        return now.length > 0 && now !== oldSecret ? now : undefined;
      },
      60,
    );
    const fileSeconds = (Date.now() - rotatedAt) / 1000;
    await up.until(
      "a token with the new secret",
      async () => ((await askToken(tokenUrl, login, newSecret)).hasToken ? true : undefined),
      60,
    );
    const workSeconds = (Date.now() - rotatedAt) / 1000;
    console.log(
      `after mesh rotate: the password file changed in ${fileSeconds.toFixed(1)} s, ` +
        `the new secret got a token in ${workSeconds.toFixed(1)} s`,
    );
    // The app goes on a little with the new secret, then its requests are read: the cut-over is
    // from its first refused request to the success after the last one.
    await up.until(
      "the app's requests to get a token again",
      async () => (requests.filter((r) => r.at > rotatedAt && r.ok).length >= 5 ? true : undefined),
      60,
    );
    asking = false;
    await app;
    const failed = requests.filter((r) => !r.ok);
    const firstFailed = failed[0];
    const recovered = requests.find((r) => r.ok && r.at > (failed.at(-1)?.at ?? Infinity));
    const cutOverMs =
      firstFailed === undefined ? 0 : (recovered?.at ?? Number.POSITIVE_INFINITY) - firstFailed.at;
    console.log(
      `OIDC cut-over for an app that re-reads its secret before each token request: ` +
        `${failed.length} of ${requests.length} requests refused, over ${(cutOverMs / 1000).toFixed(2)} s`,
    );
    assert.ok(
      cutOverMs < 5_000,
      `the cut-over stays short: ${failed.length} requests refused over ${cutOverMs} ms`,
    );

    const refused = await askToken(tokenUrl, login, oldSecret);
    console.log(`the old secret then got ${refused.status} ${refused.error ?? "(no error named)"}`);
    assert.equal(refused.hasToken, false, "the old secret gets no token");
    assert.ok(
      [400, 401, 403].includes(refused.status),
      `the old secret is refused (${refused.status} ${refused.error ?? ""})`,
    );
    if (refused.error !== undefined) assert.match(refused.error, /invalid_client|unauthorized_client/);

    const output = up.output() + rotate.stdout + rotate.stderr;
    assert.ok(
      !output.includes(oldSecret) && !output.includes(newSecret) && !output.includes(server.adminPassword),
      "no secret is printed",
    );
  });
});
