import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import { scramVerifier } from "../src/index.ts";
import { parseScramVerifier, preparePassword, verifierMatches } from "../src/scram.ts";

const PASSWORDS = [
  "plain-ascii-password",
  `it's "quoted" \\ and $$ dollars`,
  "pässwörd ünïcode ✓ 日本語",
  "ﬁne ligature", // NFKC folds the ligature to "fi"
  "non\u00a0breaking space", // SASLprep maps it to a plain space
  "soft\u00adhyphen", // SASLprep maps it to nothing
  "Ⅸ roman numeral",
  "bell\u0007 and ü", // a prohibited character: the server hashes the raw password
];

void describe("SCRAM-SHA-256 verifiers", () => {
  let server: PostgresServer;
  let n = 0;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });

  async function storedFor(passwordOrVerifier: string): Promise<{ role: string; stored: string }> {
    const role = `scram_${++n}`;
    await server.query(`CREATE ROLE ${role} LOGIN PASSWORD ${pg.escapeLiteral(passwordOrVerifier)}`);
    const [row] = await server.query<{ rolpassword: string }>(
      "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
      [role],
    );
    assert.ok(row);
    return { role, stored: row.rolpassword };
  }

  async function logsIn(role: string, password: string): Promise<boolean> {
    const client = new pg.Client({
      host: server.host,
      port: server.port,
      user: role,
      password,
      database: "postgres",
    });
    client.on("error", () => {});
    try {
      await client.connect();
      return true;
    } catch (err) {
      if ((err as { code?: string }).code === "28P01") return false;
      throw err;
    } finally {
      await client.end().catch(() => {});
    }
  }

  void it("has the form SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>", async () => {
    const verifier = await scramVerifier("secret");
    assert.match(verifier, /^SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/);
    const parsed = parseScramVerifier(verifier);
    assert.equal(parsed?.iterations, 4096);
    assert.equal(parsed?.salt.length, 16);
    assert.notEqual(await scramVerifier("secret"), verifier, "each verifier has its own salt");
  });

  void it("is stored by the real server exactly as sent, and the password logs in with it", async () => {
    for (const password of PASSWORDS) {
      const verifier = await scramVerifier(password);
      const { role, stored } = await storedFor(verifier);
      assert.equal(stored, verifier, `the server kept the verifier for ${JSON.stringify(password)} as is`);
      assert.equal(await logsIn(role, password), true, `logs in with ${JSON.stringify(password)}`);
      assert.equal(await logsIn(role, `${password}!`), false);
    }
  });

  void it("recognises the verifier the server itself computes, SASLprep included", async () => {
    for (const password of PASSWORDS) {
      const { stored } = await storedFor(password);
      assert.equal(await verifierMatches(stored, password), true, `matches for ${JSON.stringify(password)}`);
      assert.equal(await verifierMatches(stored, `${password}x`), false);
    }
  });

  void it("prepares passwords as the server does", () => {
    assert.equal(preparePassword("plain \u0007 ascii"), "plain \u0007 ascii");
    assert.equal(preparePassword("ﬁ"), "fi");
    assert.equal(preparePassword("a\u00a0b"), "a b");
    assert.equal(preparePassword("a\u00adb"), "ab");
    assert.equal(preparePassword("bell\u0007 ü"), "bell\u0007 ü", "prohibited: the raw password");
    assert.equal(preparePassword("\u00ad"), "\u00ad", "empty after mapping: the raw password");
  });

  void it("answers false for anything that is not a SCRAM-SHA-256 verifier", async () => {
    assert.equal(await verifierMatches(null, "x"), false);
    assert.equal(await verifierMatches("md5abcdef", "x"), false);
    assert.equal(await verifierMatches("x", "x"), false, "a plaintext password is not a verifier");
    assert.equal(parseScramVerifier("SCRAM-SHA-256$4096:c2FsdA==$bad:bad"), undefined);
  });
});
