// What the CLI and the provider process say about admin URLs rests on these.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UNREADABLE_URL, redactSecrets, redactUrl, redactingLogger, secretsOfUrl } from "@mesh/sdk/provider";

describe("redactUrl", () => {
  it("replaces the password and keeps the rest", () => {
    assert.equal(
      redactUrl("postgres://mesh_admin:s3cr%40t@127.0.0.1:5432/postgres"),
      "postgres://mesh_admin:***@127.0.0.1:5432/postgres",
    );
    assert.equal(redactUrl("redis://:pw@127.0.0.1:6379"), "redis://:***@127.0.0.1:6379");
  });

  it("leaves a URL without a password as it is", () => {
    assert.equal(redactUrl("postgres://127.0.0.1:5432/postgres"), "postgres://127.0.0.1:5432/postgres");
  });

  it("replaces a password given as a query parameter", () => {
    assert.equal(redactUrl("mysql://u@h/db?password=xyz&ssl=true"), "mysql://u@h/db?password=***&ssl=true");
  });

  it("reads an unescaped @ or / in a password the way its writer meant it", () => {
    const shown = redactUrl("postgres://admin:pa@ss/wo@rd@db.example:5432/postgres");
    assert.equal(shown, "postgres://admin:***@db.example:5432/postgres");
  });

  it("never echoes a URL that does not parse", () => {
    assert.equal(redactUrl("admin:hunter2 at somewhere"), UNREADABLE_URL);
    const shown = redactUrl("postgres://admin:hunter2@[not-an-ip/db");
    assert.ok(!shown.includes("hunter2"), shown);
  });
});

describe("redactSecrets", () => {
  it("replaces a secret raw, percent-escaped, query-escaped and path-escaped", () => {
    const secret = "p@ss/w rd+&x";
    const forms = [
      secret,
      encodeURIComponent(secret),
      encodeURIComponent(secret).replaceAll("%20", "+"),
      "p@ss%2Fw%20rd+&x",
    ];
    const text = forms.map((f, i) => `${i}:${f}`).join(" ");
    assert.equal(redactSecrets(text, [secret]), "0:*** 1:*** 2:*** 3:***");
  });

  it("masks a secret that contains another one whole", () => {
    assert.equal(redactSecrets("key=abcdef", ["abc", "abcdef"]), "key=***");
  });

  it("ignores empty secrets", () => {
    assert.equal(redactSecrets("nothing here", [""]), "nothing here");
  });
});

describe("a redacting logger", () => {
  it("scrubs every level of every secret the admin URL carries", () => {
    const url = "postgres://admin:t0p%2Fsecret@h/db";
    const lines: string[] = [];
    const logger = redactingLogger(
      { info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) },
      secretsOfUrl(url),
    );
    logger.info(`connecting to ${url}`);
    logger.warn("auth failed for password t0p/secret");
    logger.error("t0p%2Fsecret rejected");
    assert.deepEqual(lines, [
      "connecting to postgres://admin:***@h/db",
      "auth failed for password ***",
      "*** rejected",
    ]);
  });
});
