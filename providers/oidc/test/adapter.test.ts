// What only the oidc adapter has to prove, against one real private Glewlwyd: tokens as a consumer
// gets them (refused for a wrong secret or another's client id, signed with a key the JWKS
// publishes), retirement and coming back as it was, a rotated secret, checks that mint no token,
// values refused in words, and the admin session on an API key kept 0600.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { parseManifest } from "@mesh/manifest";
import { guardAdapter, isRefusal, ValueRefusedError, type Provision } from "@mesh/sdk";
import type { OidcAdapterConfig } from "../src/index.ts";
import { freePort, recordingLogger, startGlewlwyd, type GlewlwydServer } from "@mesh/testkit";
import {
  createOidcAdapter,
  fetchHttpClient,
  keyFileOf,
  OidcClientAdapter,
  provider,
  ReadWriteLock,
  resolveOidcConfig,
  type HttpClient,
} from "../src/index.ts";
import { ALLOWED_SCOPES, GRANT_TYPES } from "../src/config.ts";
import { type HttpRequest } from "../src/adapter.ts";
import { clientOf, getsToken, requestToken } from "./conformance-target.ts";

const signal = new AbortController().signal;
const mint = (): string => randomBytes(24).toString("base64url");

function consumer(as: string, values: Record<string, unknown> = {}, password = mint()): Provision {
  return { as, password, values, derived: {} };
}

/** An adapter of instance "main" at `adminUrl`, inside the guard as the harness runs it. */
function guardedAt(adminUrl: string, more: Partial<OidcAdapterConfig> = {}) {
  const adapter = createOidcAdapter({ adminUrl, instance: "main", logger: recordingLogger(), ...more });
  return guardAdapter(adapter, { instance: "main" });
}

/** An HTTP client that remembers every request it made (method and path, never a body). */
function countingHttp(): HttpClient & { calls: string[] } {
  const inner = fetchHttpClient(15_000);
  const calls: string[] = [];
  const http = (request: HttpRequest) => {
    calls.push(`${request.method} ${new URL(request.url).pathname}`);
    return inner(request);
  };
  return Object.assign(http, { calls });
}

/** How many access tokens the server has issued, read from its SQLite database. */
function tokensIssued(server: GlewlwydServer): number {
  const out = spawnSync(
    "sqlite3",
    [join(server.dir, "glewlwyd.db"), "SELECT count(*) FROM gpo_access_token"],
    {
      encoding: "utf8",
    },
  );
  return Number(out.stdout.trim());
}

const manifest = JSON.parse(await readFile(new URL("../module.json", import.meta.url), "utf8")) as {
  provides: Record<string, { spec: Record<string, { items: { enum: string[] } }> }>;
};

void describe("the oidc provider's manifest", () => {
  void it("parses, names the provider's interface, and offers exactly the grants and scopes the adapter allows", () => {
    const parsed = parseManifest(JSON.stringify(manifest), "providers/oidc/module.json");
    assert.deepEqual([...parsed.provides.keys()], [provider.interface]);
    const spec = manifest.provides[provider.interface]?.spec;
    assert.deepEqual([...(spec?.["grant_types"]?.items.enum ?? [])].sort(), [...GRANT_TYPES.keys()].sort());
    assert.deepEqual([...(spec?.["scopes"]?.items.enum ?? [])].sort(), [...ALLOWED_SCOPES].sort());
    assert.ok(parsed.provides.get(provider.interface)?.endpoint?.links.has("discovery"));
  });
});

void describe("where the API key is kept", () => {
  void it("is MESH_OIDC_KEY_FILE, else in the module's home under the agent, else nowhere", () => {
    assert.equal(keyFileOf({ MESH_OIDC_KEY_FILE: "/etc/mesh/key" }), "/etc/mesh/key");
    assert.equal(
      keyFileOf({ MESH_STATE_DIR: "/var/lib/mesh", MESH_MODULE: "oidc" }),
      "/var/lib/mesh/modules/oidc/home/glewlwyd-api.key",
    );
    assert.equal(keyFileOf({ MESH_STATE_DIR: "relative", MESH_MODULE: "oidc" }), undefined);
    assert.equal(keyFileOf({ MESH_STATE_DIR: "/var/lib/mesh", MESH_MODULE: "../etc" }), undefined);
    assert.equal(keyFileOf({}), undefined);
  });
});

void describe("ReadWriteLock", () => {
  void it("lets reads run together and a write run alone, in the order they came", async () => {
    const lock = new ReadWriteLock();
    const log: string[] = [];
    let running = 0;
    let most = 0;
    const task = (name: string, write: boolean) =>
      lock.run(write, async () => {
        running++;
        most = Math.max(most, running);
        if (write) assert.equal(running, 1, `${name} runs alone`);
        log.push(`start ${name}`);
        await new Promise((r) => setTimeout(r, 5));
        log.push(`end ${name}`);
        running--;
      });
    await Promise.all([
      task("r1", false),
      task("r2", false),
      task("w1", true),
      task("r3", false),
      task("w2", true),
    ]);
    assert.equal(most, 2, "the first two reads ran together");
    assert.deepEqual(log.slice(4), ["start w1", "end w1", "start r3", "end r3", "start w2", "end w2"]);
  });
});

void describe("oidc adapter", { timeout: 300_000 }, () => {
  let server: GlewlwydServer;
  let adapter: OidcClientAdapter;
  let dir: string;
  const logger = recordingLogger();

  before(async () => {
    server = await startGlewlwyd();
    dir = await mkdtemp(join(tmpdir(), "mesh-oidc-test-"));
    adapter = createOidcAdapter({ adminUrl: server.adminUrl, instance: "main", logger });
  });
  after(async () => {
    await server?.stop();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  void it("gives the minted secret a token signed with a key the server's JWKS publishes, and a wrong secret none", async () => {
    const p = consumer("signed");
    await adapter.create(p, signal);
    assert.equal(await getsToken(server, p.as, `${p.password}x`), false, "a wrong secret gets no token");
    assert.equal(await getsToken(server, p.as, ""), false, "no secret gets no token");
    const { status, accessToken } = await requestToken(server, p.as, p.password);
    assert.equal(status, 200);
    const discovery = (await (await fetch(server.discoveryUrl)).json()) as {
      jwks_uri: string;
      issuer: string;
    };
    const { payload, protectedHeader } = await jwtVerify(
      accessToken ?? "",
      createRemoteJWKSet(new URL(discovery.jwks_uri)),
      {
        issuer: discovery.issuer,
      },
    );
    assert.equal(protectedHeader.alg, "ES256");
    assert.equal(payload["client_id"], p.as);
    assert.equal(payload["scope"], "api.read");
  });

  void it("gives no token to one consumer's secret under another's client id", async () => {
    const a = consumer("tenant_one");
    const b = consumer("tenant_two");
    await adapter.create(a, signal);
    await adapter.create(b, signal);
    assert.equal(await getsToken(server, b.as, a.password), false);
    assert.equal(await getsToken(server, a.as, b.password), false);
    assert.equal(await getsToken(server, a.as, a.password), true);
  });

  void it("makes the client with the grants, scopes and redirect URIs asked for, and repairs them when they drift", async () => {
    const values = {
      grant_types: ["authorization_code", "refresh_token", "client_credentials"],
      scopes: ["openid", "api.write"],
      redirect_uris: ["https://shop.example/callback", "http://127.0.0.1:8080/cb?x=1"],
    };
    const p = consumer("webapp", values);
    await adapter.create(p, signal);
    const client = await clientOf(server, p.as);
    assert.deepEqual([...(client?.["authorization_type"] as string[])].sort(), [
      "client_credentials",
      "code",
      "refresh_token",
    ]);
    assert.deepEqual([...(client?.["scope"] as string[])].sort(), ["api.write", "openid"]);
    assert.deepEqual([...(client?.["redirect_uri"] as string[])].sort(), [...values.redirect_uris].sort());
    assert.equal(client?.["confidential"], true);
    assert.equal(await adapter.holds(p, signal), true);
    // Asked for less: not held until made so.
    const fewer = { ...p, values: { ...values, scopes: ["openid"] } };
    assert.equal(await adapter.holds(fewer, signal), false);
    await adapter.create(fewer, signal);
    assert.equal(await adapter.holds(fewer, signal), true);
    const dropped = await requestToken(server, p.as, p.password, ["api.write"]);
    assert.notEqual(dropped.status, 200, "a scope no longer asked for is given no more");
  });

  void it("retires a client so it gets no token, and brings it back as it was when asked again", async () => {
    const values = {
      scopes: ["api.read", "api.write"],
      redirect_uris: ["https://crm.example/cb"],
      grant_types: ["client_credentials", "authorization_code"],
    };
    const p = consumer("crm", values);
    await adapter.create(p, signal);
    const nameBy = "CRM (named on the admin page)";
    const made = await clientOf(server, p.as);
    assert.ok(made, "the client exists");
    delete made["source"];
    await server.admin("PUT", `/client/${p.as}`, {
      ...made,
      name: nameBy,
      post_logout_redirect_uri: "https://crm.example/bye",
    });
    const before = await clientOf(server, p.as);

    await adapter.retire(p.as, {}, "unasked for five passes", new Date("2026-01-02T03:04:05Z"));
    assert.equal(await getsToken(server, p.as, p.password), false, "a retired client gets no token");
    assert.equal(await adapter.holds(p, signal), false);
    const retired = await clientOf(server, p.as);
    assert.equal(retired?.["enabled"], false);
    assert.equal(retired?.["name"], nameBy, "nothing is taken away");
    assert.deepEqual(retired?.["redirect_uri"], before?.["redirect_uri"]);
    assert.match(
      String(retired?.["description"]),
      /^mesh:main \{.*"state":"retired".*"why":"unasked for five passes"/,
    );
    const entry = (await adapter.inventory()).find((e) => e.as === p.as);
    assert.equal(entry?.state, "retired");
    assert.equal(entry?.retiredAt?.toISOString(), "2026-01-02T03:04:05.000Z");

    await adapter.create(p, signal);
    assert.equal(await getsToken(server, p.as, p.password, ["api.read", "api.write"]), true);
    const back = await clientOf(server, p.as);
    assert.deepEqual(
      { ...back, description: undefined },
      { ...before, description: undefined },
      "back as it was",
    );
    assert.equal((await adapter.inventory()).find((e) => e.as === p.as)?.state, "active");
  });

  void it("rotates the secret: the new one works and the old one stops", async () => {
    const old = consumer("rotating");
    await adapter.create(old, signal);
    const rotated = { ...old, password: mint() };
    assert.equal(await adapter.holds(rotated, signal), false, "the new secret is not held yet");
    await adapter.create(rotated, signal);
    assert.equal(await getsToken(server, old.as, rotated.password), true);
    assert.equal(await getsToken(server, old.as, old.password), false);
    assert.equal(await adapter.holds(rotated, signal), true);
    assert.equal(await adapter.holds(old, signal), false);
  });

  void it("checks secrets without minting a token: one admin read a page and one introspection per client", async () => {
    const http = countingHttp();
    const counted = new OidcClientAdapter(
      http,
      resolveOidcConfig({ adminUrl: server.adminUrl, instance: "paged", listPage: 5 }),
      recordingLogger(),
    );
    const ps = Array.from({ length: 12 }, (_, i) => consumer(`checked_${i}`));
    for (const p of ps) await counted.create(p, signal);
    const issued = tokensIssued(server);
    http.calls.length = 0;
    const many = await counted.holdsMany(ps, signal);
    assert.deepEqual(
      [...many.values()],
      ps.map(() => true),
    );
    assert.equal(await counted.holds(ps[0] as Provision, signal), true);
    assert.equal(tokensIssued(server), issued, "no token was minted by the checks");
    const admin = http.calls.filter((c) => c.startsWith("GET /api/client"));
    const introspections = http.calls.filter((c) => c === "POST /api/oidc/introspect");
    // Twelve clients of this instance in pages of five: three reads, and one for holds.
    assert.equal(admin.length, 4, `three pages for holdsMany, one read for holds: ${admin.join(", ")}`);
    assert.equal((await counted.inventory()).length, 12, "the inventory reads every page");
    assert.equal(introspections.length, 13);
    assert.ok(!http.calls.some((c) => c.includes("/token")), "no token request");
  });

  void it("makes clients whose writes overlap, although SQLite refuses some of them at first", async () => {
    const ps = Array.from({ length: 16 }, (_, i) => consumer(`overlap_${i}`));
    await Promise.all(ps.map((p) => adapter.create(p, signal)));
    const many = await adapter.holdsMany(ps, signal);
    assert.deepEqual(
      ps.filter((p) => many.get(p.as) !== true).map((p) => p.as),
      [],
    );
  });

  void it("refuses values it cannot use, naming the field, before anything is sent", async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ redirect_uris: ["ftp://files.example/cb"] }, "redirect_uris", /http or https/],
      [{ redirect_uris: ["https://a.example/cb#x"] }, "redirect_uris", /fragment/],
      [{ redirect_uris: ["cb"] }, "redirect_uris", /absolute URL/],
      [{ grant_types: ["authorization_code"] }, "redirect_uris", /needs at least one redirect URI/],
      [{ grant_types: ["implicit"] }, "grant_types", /not a grant type/],
      [{ scopes: ["g_admin"] }, "scopes", /not a scope this provider allows/],
      [{ scopes: [] }, "scopes", /no client_credentials token without a scope/],
      [{ scopes: "api.read" }, "scopes", /list of strings/],
    ];
    for (const [values, field, message] of cases) {
      const p = consumer("refused_values", values);
      const err = await adapter.create(p, signal).catch((e: unknown) => e);
      assert.ok(err instanceof ValueRefusedError, `${JSON.stringify(values)} is refused`);
      assert.equal(err.field, field);
      assert.match(err.message, message);
      assert.ok(isRefusal(err), "the harness classes it refused");
    }
    assert.equal(await clientOf(server, "refused_values"), undefined, "no client was made");
  });

  void it("refuses a scope the server does not have, saying how to make it", async () => {
    assert.equal((await server.admin("DELETE", "/scope/email")).status, 200);
    const err = await adapter
      .create(consumer("wants_email", { scopes: ["email"] }), signal)
      .catch((e: unknown) => e);
    assert.ok(err instanceof ValueRefusedError);
    assert.match(err.message, /is not a scope on Glewlwyd at 127\.0\.0\.1:\d+: make it there/);
  });

  void it("makes its API key once from the admin password, keeps it 0600, and makes another when it stops working", async () => {
    const keyFile = join(dir, "state", "glewlwyd-api.key");
    const lines = recordingLogger();
    // A new adapter over the same key file, as a restarted provider is, counting its requests.
    const restart = () => {
      const http = countingHttp();
      const config = resolveOidcConfig({ adminUrl: server.adminUrl, instance: "main", keyFile });
      return { http, adapter: new OidcClientAdapter(http, config, lines) };
    };
    const { http: firstHttp, adapter: first } = restart();
    await first.inventory();
    await first.inventory();
    assert.equal(firstHttp.calls.filter((c) => c === "POST /api/auth/").length, 1, "one admin login");
    const key = (await readFile(keyFile, "utf8")).trim();
    assert.ok(key.length > 10);
    assert.equal((await stat(keyFile)).mode & 0o777, 0o600);

    const { http: againHttp, adapter: again } = restart();
    await again.inventory();
    assert.ok(!againHttp.calls.includes("POST /api/auth/"), "a restart uses the kept key, not the password");

    await writeFile(keyFile, "not-a-key-the-server-knows\n", { mode: 0o600 });
    const { http: renewedHttp, adapter: renewed } = restart();
    await renewed.inventory();
    assert.equal(
      renewedHttp.calls.filter((c) => c === "POST /api/auth/").length,
      1,
      "a refused key is made again",
    );
    assert.notEqual((await readFile(keyFile, "utf8")).trim(), "not-a-key-the-server-knows");
    const said = lines.said.map((l) => l.message).join("\n");
    assert.ok(!said.includes(server.adminPassword), "the admin password is never said");
    assert.ok(!said.includes(key), "the key is never said");
  });

  void it("classes a wrong admin password as credentials-rejected, without saying it", async () => {
    const url = new URL(server.adminUrl);
    url.password = "wrong-admin-password";
    const wrong = guardedAt(url.toString());
    const err = await wrong.inventory().catch((e: unknown) => e);
    assert.equal(wrong.classify(err), "credentials-rejected", String(err));
    assert.ok(!String((err as Error).message).includes("wrong-admin-password"));
  });

  void it("classes a server that is not there as unreachable", async () => {
    const url = new URL(server.adminUrl);
    url.port = String(await freePort());
    const gone = guardedAt(url.toString());
    const err = await gone.holds(consumer("nobody_there"), signal).catch((e: unknown) => e);
    assert.equal(gone.classify(err), "unreachable", String(err));
  });

  void it("says plainly when the OIDC plugin named cannot check a secret", async () => {
    const elsewhere = guardedAt(server.adminUrl, { plugin: "nope" });
    const p = consumer("plugin_check");
    await elsewhere.create(p, signal).catch(() => undefined);
    const err = await elsewhere.holds(p, signal).catch((e: unknown) => e);
    assert.match(String((err as Error).message), /introspection-revocation-allow-target-client/);
    assert.equal(elsewhere.classify(err), "refused");
  });

  void it("deletes a retired client, reporting 0 bytes freed and saying so", async () => {
    const p = consumer("short_lived");
    await adapter.create(p, signal);
    await adapter.retire(p.as, {}, "unasked", new Date());
    assert.deepEqual(await adapter.delete({ as: p.as, derived: {} }), { freedBytes: 0 });
    assert.equal(await clientOf(server, p.as), undefined);
    assert.ok(logger.said.some((l) => /keeps no data of its own, so 0 bytes were freed/.test(l.message)));
  });
});
