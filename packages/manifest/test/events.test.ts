import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  compilePermissions,
  eventSubject,
  explain,
  InvalidEventNameError,
  loadFleet,
  loadFleetManifests,
  parseManifest,
  SeatConflictError,
  seatHolders,
  seatSubject,
  subjectCovers,
  subscriptionSubjects,
  type Manifest,
} from "@mesh/manifest";
import { InvalidNameError } from "../src/names.ts";
import { SeatNotDeclaredError } from "../src/events.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));

const HOSTILE = [
  "",
  "a.>",
  "a.*",
  "*",
  ">",
  "**",
  "a b",
  "a\tb",
  "A",
  "a..b",
  ".a",
  "a.",
  "$sys",
  "a.$b",
  "a\nb",
];

function manifest(doc: Record<string, unknown>, file = "/srv/app/module.json"): Manifest {
  return parseManifest(JSON.stringify(doc, null, 2), file);
}

describe("subjects", () => {
  it("places a module's event under its own name", () => {
    assert.equal(eventSubject("notes", "note.created"), "mesh.events.notes.note.created");
  });

  it("places a seat's event under the seats namespace, apart from every module", () => {
    assert.equal(
      seatSubject("identity-provider", "user.created"),
      "mesh.seats.identity-provider.user.created",
    );
    assert.notEqual(seatSubject("notes", "x"), eventSubject("notes", "x"));
  });

  it("refuses every event name that could widen or break a subject", () => {
    for (const bad of HOSTILE) {
      assert.throws(() => eventSubject("notes", bad), InvalidEventNameError, JSON.stringify(bad));
      assert.throws(() => seatSubject("idp", bad), InvalidEventNameError, JSON.stringify(bad));
    }
  });

  it("refuses every module or seat name that could smuggle a dot or a wildcard", () => {
    for (const bad of [...HOSTILE, "notes.other", "notes.>", "notes-*"]) {
      assert.throws(() => eventSubject(bad, "note.created"), InvalidNameError, JSON.stringify(bad));
      assert.throws(() => seatSubject(bad, "note.created"), InvalidEventNameError, JSON.stringify(bad));
    }
  });

  it("turns subscriptions into subjects, resolving a source as a seat only when the fleet has that seat", () => {
    const seats = new Set(["idp"]);
    assert.deepEqual(subscriptionSubjects("**", seats), ["mesh.events.>", "mesh.seats.>"]);
    assert.deepEqual(subscriptionSubjects("notes.note.created", seats), ["mesh.events.notes.note.created"]);
    assert.deepEqual(subscriptionSubjects("notes.**", seats), ["mesh.events.notes.>"]);
    assert.deepEqual(subscriptionSubjects("idp.user.created", seats), ["mesh.seats.idp.user.created"]);
    assert.deepEqual(subscriptionSubjects("idp.**", seats), ["mesh.seats.idp.>"]);
    assert.deepEqual(subscriptionSubjects("x.y"), ["mesh.events.x.y", "mesh.seats.x.y"]);
  });

  it("refuses a subscription that is not one", () => {
    for (const bad of [
      "notes",
      "notes.",
      "notes.*",
      "notes.>",
      "*.x",
      ">",
      "a b.c",
      "notes.a..b",
      "Notes.x",
    ]) {
      assert.throws(() => subscriptionSubjects(bad), InvalidEventNameError, JSON.stringify(bad));
    }
  });

  it("matches subjects the way NATS does", () => {
    assert.ok(subjectCovers("mesh.events.>", "mesh.events.notes.note.created"));
    assert.ok(subjectCovers("mesh.events.>", "mesh.events.notes.>"));
    assert.ok(!subjectCovers("mesh.events.>", "mesh.events"));
    assert.ok(subjectCovers("mesh.events.notes.>", "mesh.events.notes.*"));
    assert.ok(!subjectCovers("mesh.events.notes.*", "mesh.events.notes.>"));
    assert.ok(!subjectCovers("mesh.events.notes.note.created", "mesh.events.notes.note.*"));
    assert.ok(!subjectCovers("mesh.events.notes.note.created", "mesh.events.notes.note.created.x"));
    assert.ok(subjectCovers("a.*.c", "a.b.c"));
  });
});

describe("compilePermissions", () => {
  it("lets a module publish only its declared events under its own name and its seats", () => {
    const m = manifest({ name: "idp", emits: ["user.created"], seats: ["identity-provider"] });
    assert.deepEqual(compilePermissions(m, "idp", ["identity-provider"]), {
      pub: { allow: ["mesh.events.idp.user.created", "mesh.seats.identity-provider.user.created"] },
      sub: { allow: [] },
    });
    assert.deepEqual(compilePermissions(m, "idp", []).pub.allow, ["mesh.events.idp.user.created"]);
  });

  it("adds the standings events for a module that provides an interface, and only then", () => {
    const provider = manifest({ name: "pg", provides: { "postgres-database": { receives: "/run/x.json" } } });
    assert.deepEqual(compilePermissions(provider, "pg", []).pub.allow, [
      "mesh.events.pg.provisioner.failing",
      "mesh.events.pg.provisioner.recovered",
    ]);
    assert.deepEqual(compilePermissions(manifest({ name: "app" }), "app", []).pub.allow, []);
  });

  it("uses the fleet name, not the manifest's, as the namespace", () => {
    const m = manifest({ name: "notes", emits: ["note.created"] });
    assert.deepEqual(compilePermissions(m, "notes-2", []).pub.allow, ["mesh.events.notes-2.note.created"]);
  });

  it("refuses a seat the manifest does not declare, and a hostile module or seat name", () => {
    const m = manifest({ name: "app", emits: ["a"] });
    assert.throws(() => compilePermissions(m, "app", ["idp"]), SeatNotDeclaredError);
    assert.throws(() => compilePermissions(m, "app.>", []), InvalidNameError);
    assert.throws(() => compilePermissions(m, "app", ["idp.>"]), InvalidEventNameError);
  });

  it("subscribes a module to everything for ** and to nothing it does not declare", () => {
    const audit = manifest({ name: "audit", subscribes: ["**"] });
    assert.deepEqual(compilePermissions(audit, "audit", []).sub.allow, ["mesh.events.>", "mesh.seats.>"]);
  });
});

describe("permissions of the example fleet", () => {
  let manifests: Map<string, Manifest>;
  const seats = new Map<string, string>();
  before(async () => {
    manifests = await loadFleetManifests(await loadFleet(`${root}examples/fleet/mesh.yaml`));
  });

  // Every example module against every declared and undeclared event, as the manifests say.
  const matrix: [string, "publish" | "subscribe", string, boolean][] = [
    ["notes", "publish", "mesh.events.notes.note.created", true],
    ["notes", "publish", "mesh.events.notes.note.deleted", false],
    ["notes", "publish", "mesh.events.counter.note.created", false],
    ["notes", "publish", "mesh.events.notes.provisioner.failing", false],
    ["notes", "publish", "mesh.seats.notes.note.created", false],
    ["notes", "publish", "mesh.events.notes.>", false],
    ["notes", "publish", "mesh.events.>", false],
    ["notes", "subscribe", "mesh.events.notes.note.created", false],
    ["notes", "subscribe", "mesh.events.>", false],
    ["counter", "publish", "mesh.events.counter.note.created", false],
    ["counter", "publish", "mesh.events.notes.note.created", false],
    ["counter", "subscribe", "mesh.events.notes.note.created", true],
    ["counter", "subscribe", "mesh.events.notes.note.deleted", false],
    ["counter", "subscribe", "mesh.events.notes.>", false],
    ["counter", "subscribe", "mesh.events.>", false],
    ["counter", "subscribe", "mesh.events.counter.note.created", false],
    ["postgres", "publish", "mesh.events.postgres.provisioner.failing", true],
    ["postgres", "publish", "mesh.events.postgres.provisioner.recovered", true],
    ["postgres", "publish", "mesh.events.redis.provisioner.failing", false],
    ["postgres", "publish", "mesh.events.postgres.provisioner.other", false],
    ["redis", "publish", "mesh.events.redis.provisioner.failing", true],
    ["redis", "subscribe", "mesh.events.notes.note.created", false],
  ];
  for (const [module, action, subject, allowed] of matrix) {
    it(`${allowed ? "allows" : "denies"} ${module} to ${action} ${subject}`, () => {
      const got = explain(manifests, seats, module, action, subject);
      assert.equal(got.allowed, allowed, got.because);
      // A wildcard publish is refused by NATS itself, before any manifest has a say.
      if (!(action === "publish" && subject.includes(">"))) {
        assert.equal(got.file, manifests.get(module)?.file);
        assert.equal(typeof got.line, "number");
      }
      const perms = compilePermissions(manifests.get(module)!, module, [], new Set());
      const list = action === "publish" ? perms.pub.allow : perms.sub.allow;
      assert.equal(list.includes(subject), allowed && !subject.includes(">"));
    });
  }

  it("names the emits line that allows a declared event", () => {
    const got = explain(manifests, seats, "notes", "publish", "mesh.events.notes.note.created");
    assert.equal(got.field, "emits[0]");
    assert.match(got.because, /notes emits note\.created/);
    assert.ok(got.file?.endsWith("examples/fleet/notes/module.json"));
    assert.equal(got.line, 7);
  });

  it("names the subscribes line that allows a subscription", () => {
    const got = explain(manifests, seats, "counter", "subscribe", "mesh.events.notes.note.created");
    assert.equal(got.field, "subscribes[0]");
    assert.equal(got.line, 8);
  });

  it("says what to change when an event is not declared", () => {
    const got = explain(manifests, seats, "notes", "publish", "mesh.events.notes.note.deleted");
    assert.equal(got.field, "emits");
    assert.match(got.because, /does not declare note\.deleted in "emits"/);
  });

  it("says a subject under another module's name belongs to that module", () => {
    const got = explain(manifests, seats, "notes", "publish", "mesh.events.counter.hit");
    assert.match(got.because, /counter's namespace/);
  });

  it("denies an unknown module and a malformed subject without throwing", () => {
    assert.match(
      explain(manifests, seats, "ghost", "publish", "mesh.events.ghost.x").because,
      /no module "ghost"/,
    );
    for (const bad of [
      "",
      "mesh..events",
      "mesh.events.notes.note created",
      "mesh.events.notes.note.created.",
    ]) {
      assert.equal(explain(manifests, seats, "notes", "publish", bad).allowed, false, JSON.stringify(bad));
    }
  });
});

describe("seats", () => {
  const idp = manifest(
    { name: "idp", emits: ["user.created"], seats: ["identity-provider"] },
    "/srv/idp/module.json",
  );
  const audit = manifest({ name: "audit", subscribes: ["**"] }, "/srv/audit/module.json");
  const follower = manifest(
    { name: "app", subscribes: ["identity-provider.user.created"] },
    "/srv/app/module.json",
  );
  const manifests = new Map([
    ["idp", idp],
    ["audit", audit],
    ["app", follower],
  ]);

  it("lists each seat's holder, and refuses a seat two modules declare or a seat named like a module", () => {
    assert.deepEqual(seatHolders(manifests), new Map([["identity-provider", "idp"]]));
    const twice = new Map([...manifests, ["idp-2", idp]]);
    assert.throws(() => seatHolders(twice), SeatConflictError);
    const named = manifest({ name: "x", seats: ["audit"] });
    assert.throws(() => seatHolders(new Map([...manifests, ["x", named]])), SeatConflictError);
  });

  it("lets the holder publish in the seat's name and a follower subscribe to the seat", () => {
    const seats = seatHolders(manifests);
    const subject = "mesh.seats.identity-provider.user.created";
    assert.equal(explain(manifests, seats, "idp", "publish", subject).allowed, true);
    assert.equal(explain(manifests, seats, "app", "subscribe", subject).allowed, true);
    assert.equal(
      explain(manifests, seats, "app", "subscribe", "mesh.events.identity-provider.user.created").allowed,
      false,
    );
    assert.equal(explain(manifests, seats, "audit", "subscribe", subject).allowed, true);
    assert.equal(explain(manifests, seats, "audit", "subscribe", "mesh.events.>").allowed, true);
    const denied = explain(manifests, seats, "app", "publish", subject);
    assert.equal(denied.allowed, false);
    assert.match(denied.because, /does not hold the seat identity-provider \(idp does\)/);
  });
});
