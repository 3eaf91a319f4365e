import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { deriveLogin, LOGIN_PATTERN } from "@mesh/manifest";
import { InvalidNameError, MODULE_NAME_PATTERN } from "../src/names.ts";
import { isSecondLogin, secondLogin } from "../src/login.ts";

const moduleName = fc.stringMatching(MODULE_NAME_PATTERN);
const longModuleName = fc.stringMatching(/^[a-z][a-z0-9-]{29,40}$/);
const iface = fc.constantFrom(
  "postgres-database",
  "redis-namespace",
  "mysql-database",
  "s3-bucket",
  "x",
  "nats-account",
);

describe("deriveLogin", () => {
  it("joins the module and the interface's first word with _", () => {
    assert.equal(deriveLogin("notes", "postgres-database"), "notes_postgres");
    assert.equal(deriveLogin("notes", "redis-namespace"), "notes_redis");
    assert.equal(deriveLogin("photo-album", "s3-bucket"), "photo_album_s3");
    assert.equal(deriveLogin("a", "x"), "a_x");
  });

  it("shortens a long login to exactly 32 characters with a stable hash suffix", () => {
    const name = "a-very-long-module-name-for-a-test-xx";
    const login = deriveLogin(name, "postgres-database");
    assert.equal(login.length, 32);
    assert.match(login, /^a_very_long_module_name_[a-z2-7]{8}$/);
    assert.equal(deriveLogin(name, "postgres-database"), login);
    assert.notEqual(deriveLogin(name, "postgres-replica"), login);
  });

  it("writes out a login of up to 31 characters in full", () => {
    const name = "m".repeat(22); // 22 + "_postgres" = 31
    assert.equal(deriveLogin(name, "postgres-database"), `${name}_postgres`);
    assert.equal(deriveLogin(`${name}m`, "postgres-database").length, 32);
  });

  it("refuses a module or interface name that is not valid, before deriving anything", () => {
    for (const [m, i] of [
      ["Notes", "postgres-database"],
      ["../x", "postgres-database"],
      ["", "postgres-database"],
      ["notes_app", "postgres-database"],
      ["notes", "Postgres"],
      ["notes", "pg_db"],
      ["notes", ""],
      ["a".repeat(42), "x"],
    ] as const) {
      assert.throws(() => deriveLogin(m, i), InvalidNameError, `${m} ${i}`);
    }
  });

  it("always derives a login every backend accepts", () => {
    fc.assert(
      fc.property(fc.oneof(moduleName, longModuleName), iface, (m, i) => {
        const login = deriveLogin(m, i);
        assert.match(login, LOGIN_PATTERN);
        assert.ok(login.length <= 32);
      }),
      { numRuns: 2000 },
    );
  });

  it("derives the same login for the same inputs every time", () => {
    fc.assert(
      fc.property(moduleName, iface, (m, i) => deriveLogin(m, i) === deriveLogin(m, i)),
      { numRuns: 500 },
    );
  });

  it("derives distinct logins for 10,000 distinct random module names", () => {
    fc.assert(
      fc.property(fc.uniqueArray(moduleName, { minLength: 10_000, maxLength: 10_000 }), iface, (names, i) => {
        const logins = new Set(names.map((n) => deriveLogin(n, i)));
        assert.equal(logins.size, names.length);
      }),
      { numRuns: 3 },
    );
  });

  it("derives distinct logins for 10,000 long module names that share their first 30 characters", () => {
    const prefix = "shared-prefix-of-thirty-chars-";
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.stringMatching(/^[a-z0-9-]{1,11}$/), { minLength: 10_000, maxLength: 10_000 }),
        (suffixes) => {
          const logins = new Set(suffixes.map((s) => deriveLogin(`${prefix}${s}`, "postgres-database")));
          assert.equal(logins.size, suffixes.length);
        },
      ),
      { numRuns: 2 },
    );
  });

  it("derives distinct logins for one module's interfaces with distinct first words", () => {
    fc.assert(
      fc.property(moduleName, (m) => {
        const logins = ["postgres-database", "redis-namespace", "mysql-database", "s3-bucket"].map((i) =>
          deriveLogin(m, i),
        );
        assert.equal(new Set(logins).size, 4);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("secondLogin", () => {
  it("adds _2 to a login of up to 30 characters", () => {
    assert.equal(secondLogin("notes_postgres"), "notes_postgres_2");
    assert.equal(secondLogin("a".repeat(30)), `${"a".repeat(30)}_2`);
    assert.equal(isSecondLogin("notes_postgres_2"), true);
    assert.equal(isSecondLogin("notes_postgres"), false);
  });

  it("is a valid login of at most 32 characters, never a derived login, one per login", () => {
    const interfaceWord = fc.stringMatching(/^[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,5})?$/);
    fc.assert(
      fc.property(moduleName, moduleName, interfaceWord, interfaceWord, (m1, m2, i1, i2) => {
        const first = deriveLogin(m1, i1);
        const second = secondLogin(first);
        assert.match(second, LOGIN_PATTERN);
        assert.ok(second.length <= 32);
        assert.equal(isSecondLogin(second), true);
        assert.equal(isSecondLogin(first), false, "a derived login never has a second login's shape");
        assert.notEqual(second, deriveLogin(m2, i2), "never another consumer's derived login");
        const other = deriveLogin(m2, i2);
        if (other !== first) assert.notEqual(secondLogin(other), second, "two logins, two second logins");
      }),
      { numRuns: 3000 },
    );
  });

  it("shortens a login longer than 30 characters to exactly 32, still ending in _2", () => {
    fc.assert(
      fc.property(longModuleName, iface, (m, i) => {
        const first = deriveLogin(m, i);
        const second = secondLogin(first);
        assert.equal(second.length, 32);
        assert.ok(second.startsWith(first.slice(0, 21)));
        assert.ok(second.endsWith("_2"));
      }),
    );
  });
});
