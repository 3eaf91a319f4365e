// `mesh rotate` gives an OIDC client a secret that works while the old one stops: `mesh up` runs a
// nats-server, the controller and one agent, which runs the oidc provider against a private
// Glewlwyd for one consumer with no process of its own. The consumer's credential names the
// discovery document; its password file holds the secret. Once a client_credentials token request
// with that secret succeeds, `mesh rotate` mints a new one: the password file changes, a token
// request with the new secret succeeds within seconds, and one with the old secret is refused.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { credentialPath, secretPath, type Credential } from "@mesh/manifest";
import { startGlewlwyd, type GlewlwydServer, until } from "@mesh/testkit";
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
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", NODE);
  const waitFor = <T>(what: string, probe: () => Promise<T | undefined>) =>
    until(what, probe, { seconds: 60, everyMs: 250 }).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
    });
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
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("gives a secret that gets a token while the old one is refused", async () => {
    const credential = await waitFor("the consumer's credential file", async () => {
      try {
        return JSON.parse(await readFile(credentialPath(nodeState(), CONSUMER, IFACE), "utf8")) as Credential;
      } catch {
        return undefined;
      }
    });
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
    await waitFor("a token with the first secret", async () =>
      (await askToken(tokenUrl, login, oldSecret)).hasToken ? true : undefined,
    );

    const rotate = await runMesh(["rotate", CONSUMER, IFACE, "--state", state()]);
    assert.equal(rotate.code, 0, `mesh rotate failed:\n${rotate.stdout}${rotate.stderr}`);
    const rotatedAt = Date.now();

    const newSecret = await waitFor("the password file to change", async () => {
      const now = await readSecret().catch(() => "");
      return now.length > 0 && now !== oldSecret ? now : undefined;
    });
    const fileSeconds = (Date.now() - rotatedAt) / 1000;
    await waitFor("a token with the new secret", async () =>
      (await askToken(tokenUrl, login, newSecret)).hasToken ? true : undefined,
    );
    const workSeconds = (Date.now() - rotatedAt) / 1000;
    console.log(
      `after mesh rotate: the password file changed in ${fileSeconds.toFixed(1)} s, ` +
        `the new secret got a token in ${workSeconds.toFixed(1)} s`,
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
