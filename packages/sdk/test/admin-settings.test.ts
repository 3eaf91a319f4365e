// The settings every provider checks the same way, and the refusals every provider shares.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  AdminSettingError,
  assertInstance,
  checkAdminSettings,
  defineProvider,
  DerivedChangedError,
  findInChain,
  isRefusal,
  NotMadeHereError,
  NotRetiredError,
  parseAdminUrl,
  positiveSetting,
  RefusalError,
  ValueRefusedError,
  type AdminUrlRules,
} from "@mesh/sdk";

const RULES: AdminUrlRules = {
  backend: "Widget",
  schemes: ["widget:", "widgets:"],
  defaultPort: 4242,
  env: "MESH_WIDGET_URL",
  example: "widget://<admin>:<password>@<host>:<port>",
};

function refusal(raw: string, rules: AdminUrlRules = RULES): AdminSettingError {
  try {
    parseAdminUrl(raw, rules);
  } catch (err) {
    assert.ok(err instanceof AdminSettingError, String(err));
    return err;
  }
  assert.fail(`${raw} was accepted`);
}

void describe("admin settings", () => {
  void it("takes an admin URL apart, %-decoded, with the default port", () => {
    const u = parseAdminUrl("  widget://ad%40min:p%2Fss@[::1]/base  ", RULES);
    assert.equal(u.host, "::1");
    assert.equal(u.port, 4242);
    assert.equal(u.user, "ad@min");
    assert.equal(u.password, "p/ss");
    assert.equal(u.path, "base");
    assert.equal(u.endpoint, "[::1]:4242");
    assert.equal(u.text, "widget://ad%40min:p%2Fss@[::1]/base");
    assert.equal(parseAdminUrl("widgets://a:b@h:7/", RULES).port, 7);
  });

  void it("refuses a URL it cannot use, naming the flag and the variable and never the password", () => {
    for (const raw of [
      "",
      "s3cr3t",
      "http://admin:s3cr3t@h:1",
      "widget://:s3cr3t@h:1",
      "widget://admin:s3cr3t@h:99999",
      "widget://admin:s3cr3t@:1",
      "widget://admin:s3cr%ZZ@h:1",
    ]) {
      const err = refusal(raw);
      assert.equal(err.setting, "adminUrl");
      assert.match(err.message, /--admin-url/);
      assert.match(err.message, /MESH_WIDGET_URL/);
      assert.ok(!err.message.includes("s3cr3t") && !err.message.includes("s3cr%ZZ"), err.message);
    }
  });

  void it("takes each scheme's own default port, and checks the instance with the URL", () => {
    const rules: AdminUrlRules = { ...RULES, schemes: undefined, ports: { "https:": 443, "http:": 80 } };
    assert.equal(parseAdminUrl("https://a:b@h", rules).port, 443);
    assert.equal(parseAdminUrl("http://a:b@h", rules).port, 80);
    assert.match(refusal("widget://a:b@h", rules).message, /not https: or http:/);
    const checked = checkAdminSettings({ adminUrl: "https://a:b@h:8443", instance: "main" }, rules);
    assert.equal(checked.instance, "main");
    assert.equal(checked.admin.endpoint, "h:8443");
    assert.throws(
      () => checkAdminSettings({ adminUrl: "https://a:b@h", instance: "a:b" }, rules),
      (err: unknown) => err instanceof AdminSettingError && err.setting === "instance",
    );
  });

  void it("describes a provider with the variable and example its refusals name", () => {
    const provider = defineProvider("widget", "widget-store", RULES, () => {
      throw new Error("not made in this test");
    });
    assert.equal(provider.adminUrlEnv, "MESH_WIDGET_URL");
    assert.equal(provider.adminUrlExample, RULES.example);
    assert.equal(provider.interface, "widget-store");
  });

  void it("says where a provider serves from its admin URL, the scheme's default port when it names none", () => {
    const provider = defineProvider("widget", "widget-store", RULES, () => {
      throw new Error("not made in this test");
    });
    assert.deepEqual(provider.serves?.("widget://admin:pw@10.0.0.7:5555/x"), {
      host: "10.0.0.7",
      port: 5555,
    });
    assert.deepEqual(provider.serves?.("widget://admin:pw@db.internal"), { host: "db.internal", port: 4242 });
    assert.deepEqual(provider.serves?.("widget://admin:pw@[::1]:7"), { host: "::1", port: 7 });
    // Not a URL it takes: it cannot say, and says nothing of the URL.
    assert.equal(provider.serves?.("http://admin:pw@h:1"), undefined);
    assert.equal(provider.serves?.("not a url"), undefined);
  });

  void it("requires a password only where the rules say so, and a user unless they say not", () => {
    assert.match(refusal("widget://admin@h", { ...RULES, needsPassword: true }).message, /no password/);
    assert.equal(parseAdminUrl("widget://admin@h", RULES).password, "");
    assert.equal(parseAdminUrl("widget://:pw@h", { ...RULES, needsUser: false }).user, "");
  });

  void it("accepts one instance pattern and refuses the rest with the setting named", () => {
    for (const ok of ["main", "postgres", "conformance-neighbour", "a", "A.b_c-9", "x".repeat(63)]) {
      assert.equal(assertInstance(ok), ok);
    }
    for (const bad of ["", "a:b", "a b", "-x", "_x", ".x", "x".repeat(64), 'x"y', undefined, 3]) {
      assert.throws(
        () => assertInstance(bad),
        (err: unknown) => err instanceof AdminSettingError && err.setting === "instance",
      );
    }
  });

  void it("takes a positive whole number, or the fallback when none is given", () => {
    assert.equal(positiveSetting("poolSize", undefined, 5), 5);
    assert.equal(positiveSetting("poolSize", 3, 5), 3);
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.throws(
        () => positiveSetting("poolSize", bad, 5),
        (err: unknown) => err instanceof AdminSettingError && err.setting === "poolSize",
      );
    }
  });
});

void describe("refusals", () => {
  void it("are all refusals, each naming the login and what to do", () => {
    const all = [
      new NotMadeHereError("alice", "main", {
        resource: 'role "alice"',
        madeBy: 'it is marked by instance "other"',
      }),
      new NotRetiredError("alice"),
      new ValueRefusedError("alice", "name", "a b", "is not a plain name"),
      new DerivedChangedError("alice", "database", "shop", "store"),
    ];
    for (const err of all) {
      assert.ok(err instanceof RefusalError);
      assert.equal(err.login, "alice");
      assert.ok(isRefusal(err));
      assert.equal(err.name, err.constructor.name);
    }
    assert.match(
      all[0]!.message,
      /role "alice" was not made by mesh provider instance "main" \(it is marked by instance "other"\)/,
    );
    assert.match(all[1]!.message, /not retired \(it is active\)/);
    assert.match(all[2]!.message, /values\.name "a b" is not a plain name/);
    assert.match(all[3]!.message, /made with database "shop" and now asks for "store"/);
  });

  void it("are found along a cause chain and inside an AggregateError, and nothing else is", () => {
    const deep = new Error("outer", {
      cause: new AggregateError([new Error("x"), new NotRetiredError("b")]),
    });
    assert.ok(isRefusal(deep));
    assert.equal(isRefusal(new Error("ECONNREFUSED")), false);
    assert.equal(isRefusal("a string"), false);
    const cyclic = new Error("loop") as Error & { cause?: unknown };
    cyclic.cause = cyclic;
    assert.equal(isRefusal(cyclic), false, "a cycle ends");
    assert.equal(findInChain(deep, (e): e is NotRetiredError => e instanceof NotRetiredError)?.login, "b");
  });
});
