// The api-client example app run as the agent runs it (its manifest's `run`, from its directory,
// with MESH_CREDENTIALS), against a private Glewlwyd. The mesh's part is played by hand: a fleet
// of the oidc provider and the app, its plan and credential file as the mesh derives them, and the
// client made by the provider's own adapter.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  checkFleet,
  credentialFor,
  credentialPath,
  derivePlan,
  formatProblem,
  loadFleet,
  loadFleetManifests,
  secretPath,
  type PlanEntry,
  type PlanInstance,
} from "@mesh/manifest";
import { createOidcAdapter } from "@mesh/provider-oidc";
import { startGlewlwyd, type GlewlwydServer } from "@mesh/testkit";
import { count, killApps, startApp, waitForOutput } from "./run-app.ts";

const OIDC_MANIFEST = fileURLToPath(new URL("../../../providers/oidc/module.json", import.meta.url));
const APP_DIR = fileURLToPath(new URL("../api-client", import.meta.url));
const WAIT_MS = 90_000;
const signal = new AbortController().signal;

let server: GlewlwydServer | undefined;
let stateDir: string;

before(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "mesh-example-api-client-"));
  server = await startGlewlwyd();
});

after(async () => {
  killApps();
  await server?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

async function writeAtomic(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, text, { mode: 0o600 });
  await rename(temp, path);
}

describe("the api-client app", () => {
  it("gets a client_credentials token, verifies it against the server's JWKS, and carries on with a rotated secret", async () => {
    assert.ok(server);
    const fleetFile = join(stateDir, "mesh.yaml");
    await writeFile(
      fleetFile,
      `nodes:\n  node-1: {}\nmodules:\n` +
        `  oidc: { manifest: ${OIDC_MANIFEST}, node: node-1, admin: { env: MESH_OIDC_URL }, endpoint: { host: 127.0.0.1, port: ${server.port} } }\n` +
        `  api-client: { manifest: ${join(APP_DIR, "module.json")}, node: node-1 }\n`,
    );
    const fleet = await loadFleet(fleetFile);
    const manifests = await loadFleetManifests(fleet);
    assert.deepEqual(checkFleet(fleet, manifests).map(formatProblem), []);
    const instance = derivePlan(fleet, manifests).instances.find(
      (i): i is PlanInstance => i.interface === "oidc-client",
    );
    const entry = instance?.consumers[0] as PlanEntry;
    assert.equal(entry.login, "api_client_oidc");

    const credential = credentialFor(entry, instance?.endpoint, stateDir);
    assert.equal(credential.links?.["issuer"], server.issuer, "the credential names the issuer");
    assert.equal(credential.links?.["discovery"], server.discoveryUrl);
    const deliver = async (password: string): Promise<void> => {
      await writeAtomic(secretPath(stateDir, "api-client", "oidc-client"), password);
      await writeAtomic(
        credentialPath(stateDir, "api-client", "oidc-client"),
        `${JSON.stringify(credential, null, 2)}\n`,
      );
    };

    const adapter = createOidcAdapter({ adminUrl: server.adminUrl, instance: "example" });
    const first = randomBytes(24).toString("base64url");
    await adapter.create(
      { as: entry.login, password: first, values: entry.values, derived: entry.derived },
      signal,
    );
    await deliver(first);

    const app = startApp(resolve(APP_DIR), {
      MESH_MODULE: "api-client",
      MESH_CREDENTIALS: dirname(credentialPath(stateDir, "api-client", "oidc-client")),
      EXAMPLE_INTERVAL_MS: "300",
    });
    await waitForOutput(
      app,
      /api-client: got a token for api\.read, signature verified \(ES256, key [^)]+\) against http:\/\/127\.0\.0\.1:\d+\/api\/oidc\/jwks/,
      WAIT_MS,
    );

    // mesh rotate: the provider applies the new secret, then the agent delivers it.
    const second = randomBytes(24).toString("base64url");
    await adapter.create(
      { as: entry.login, password: second, values: entry.values, derived: entry.derived },
      signal,
    );
    const from = app.output.length;
    await deliver(second);
    await waitForOutput(app, /signature verified/, WAIT_MS, from);
    await waitForOutput(app, /signature verified/, WAIT_MS, app.output.length);
    assert.ok(count(app.output, /signature verified/) >= 3);
    assert.ok(!app.output.includes(first) && !app.output.includes(second), "no secret is ever printed");

    app.child.kill("SIGTERM");
    assert.equal(await app.exited, 0, app.output);
  });
});
