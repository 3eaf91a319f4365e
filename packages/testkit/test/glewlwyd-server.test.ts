import assert from "node:assert/strict";
import { access } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { startGlewlwyd, type GlewlwydServer } from "@mesh/testkit";

async function logsIn(server: GlewlwydServer, password: string): Promise<boolean> {
  const response = await fetch(`${server.baseUrl}/api/auth/`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username: "admin", password }),
  });
  await response.arrayBuffer();
  return response.status === 200;
}

void describe("startGlewlwyd", { timeout: 120_000 }, () => {
  let server: GlewlwydServer;
  before(async () => {
    server = await startGlewlwyd();
  });
  after(async () => {
    await server?.stop();
  });

  void it("starts on a loopback port with the stock admin password replaced", async () => {
    assert.equal(server.host, "127.0.0.1");
    assert.notEqual(server.port, 4593);
    assert.equal(await logsIn(server, "password"), false, "the stock password is refused");
    assert.equal(await logsIn(server, server.adminPassword), true, "the new one logs in");
    assert.match(server.adminUrl, /^http:\/\/admin:[^@]+@127\.0\.0\.1:\d+\/api$/);
  });

  void it("publishes an OIDC discovery document and an ES256 key set for its issuer", async () => {
    const discovery = (await (await fetch(server.discoveryUrl)).json()) as Record<string, unknown>;
    assert.equal(discovery["issuer"], server.issuer);
    assert.equal(discovery["jwks_uri"], server.jwksUrl);
    assert.equal(discovery["token_endpoint"], server.tokenUrl);
    assert.equal(discovery["introspection_endpoint"], server.introspectionUrl);
    const jwks = (await (await fetch(server.jwksUrl)).json()) as { keys: { kty: string; alg: string }[] };
    assert.deepEqual(
      jwks.keys.map((k) => [k.kty, k.alg]),
      [["EC", "ES256"]],
    );
  });

  void it("gives a confidential client a client_credentials token and refuses a wrong secret", async () => {
    const made = await server.admin("POST", "/client/", {
      client_id: "kit_client",
      enabled: true,
      confidential: true,
      password: "kit-secret",
      scope: ["api.read"],
      authorization_type: ["client_credentials"],
      token_endpoint_auth_method: ["client_secret_basic", "client_secret_post"],
    });
    assert.equal(made.status, 200);
    const ask = (secret: string) =>
      fetch(server.tokenUrl, {
        method: "POST",
        headers: {
          authorization: `Basic ${Buffer.from(`kit_client:${secret}`).toString("base64")}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: "grant_type=client_credentials&scope=api.read",
      });
    const good = await ask("kit-secret");
    const body = (await good.json()) as { access_token?: string; expires_in?: number };
    assert.equal(good.status, 200);
    assert.equal(typeof body.access_token, "string");
    assert.ok((body.expires_in ?? 0) <= 300, "access tokens are short");
    const bad = await ask("not-the-secret");
    await bad.arrayBuffer();
    assert.equal(bad.status, 403);
  });

  void it("removes its directory when stopped", async () => {
    const other = await startGlewlwyd();
    await other.stop();
    await assert.rejects(access(other.dir));
    await other.stop(); // idempotent
  });
});
