// What `mesh status` prints about failing consumers, from a controller's answer.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { maskDeep, maskUrls } from "../src/format.ts";
import { formatStatus, maskedAnswer, type StatusAnswer } from "../src/status-command.ts";

const NOW = Date.parse("2026-03-01T12:30:45Z");

const answer = (failing?: StatusAnswer["failing"]): StatusAnswer => ({
  nodes: [{ name: "node-a", enrolled: true, lastReportAt: null, modules: [] }],
  consumers: [
    {
      consumer: "notes",
      interface: "postgres-database",
      login: "notes_postgres",
      provider: "postgres",
      node: "node-b",
    },
  ],
  ...(failing === undefined ? {} : { failing }),
  fleet: { file: "/x/mesh.yaml", readAt: "2026-03-01T12:00:00.000Z", refused: null },
});

describe("mesh status's failing consumers", () => {
  it("names each failing consumer with its class, since when and how long, attempts and last error", () => {
    const text = formatStatus(
      answer([
        {
          provider: "postgres",
          interface: "postgres-database",
          consumer: "notes",
          login: "notes_postgres",
          node: "node-b",
          class: "credentials-rejected",
          since: "2026-03-01T12:18:15.250Z",
          attempts: 151,
          error: 'password authentication failed for user "mesh_admin"',
          at: "2026-03-01T12:30:40.000Z",
        },
      ]),
      NOW,
    );
    assert.match(text, /FAILING: 1 consumer\(s\)/);
    assert.match(text, /notes \(login notes_postgres, on node-b\): postgres-database from postgres/);
    assert.match(
      text,
      /credentials-rejected since 2026-03-01T12:18:15Z \(12m29s ago\), 151 attempt\(s\), last said 2026-03-01T12:30:40Z/,
    );
    assert.match(text, /last error: password authentication failed for user "mesh_admin"/);
    assert.match(
      text,
      /CONSUMER +INTERFACE +LOGIN +PROVIDER\nnotes +postgres-database +notes_postgres +postgres/,
    );
  });

  it("never prints the password of a URL inside an error, in text or JSON", () => {
    const failing = [
      {
        provider: "postgres",
        interface: "postgres-database",
        consumer: "notes",
        class: "unreachable",
        since: "2026-03-01T12:00:00Z",
        attempts: 3,
        error: "connect to postgres://mesh_admin:hunter2@db:5432/postgres failed (redis://:s3cret@r:6379)",
      },
    ];
    const text = formatStatus(answer(failing), NOW);
    const json = JSON.stringify(maskedAnswer(answer(failing)));
    for (const shown of [text, json]) {
      assert.ok(!shown.includes("hunter2") && !shown.includes("s3cret"), shown);
      assert.ok(shown.includes("postgres://mesh_admin:***@db:5432/postgres"), shown);
    }
    assert.equal(maskUrls("no url here"), "no url here");
  });

  it("masks every URL's password anywhere in an answer, as `mesh ledger` and `mesh tool` print it", () => {
    const answer = {
      ok: false,
      error: "refused: postgres://mesh_admin:hunter2@db:5432/postgres said no",
      code: "refused",
      entries: [{ seq: 1, entry: { why: ["redis://:s3cret@r:6379"], freedBytes: 7, ok: true } }],
    };
    const masked = maskDeep(answer);
    const shown = JSON.stringify(masked);
    assert.ok(!shown.includes("hunter2") && !shown.includes("s3cret"), shown);
    assert.equal(masked.error, "refused: postgres://mesh_admin:***@db:5432/postgres said no");
    assert.deepEqual(masked.entries[0]?.entry, { why: ["redis://:***@r:6379"], freedBytes: 7, ok: true });
    assert.equal(masked.code, "refused");
  });

  it("shows where each running module serves its metrics, and nothing for one that does not", () => {
    const text = formatStatus({
      ...answer(),
      nodes: [
        {
          name: "node-a",
          enrolled: true,
          lastReportAt: null,
          modules: [
            { name: "postgres", state: "running", restarts: 0, metrics: "http://127.0.0.1:41234/metrics" },
            { name: "notes", state: "running", restarts: 12 },
          ],
        },
      ],
    });
    assert.match(text, /NODE \/ MODULE +STATE +RESTARTS +METRICS\n/);
    assert.match(text, /\n {2}postgres +running +0 +http:\/\/127\.0\.0\.1:41234\/metrics\n/);
    assert.match(text, /\n {2}notes +running +12\n/);
  });

  it("says a module that is not isolated, as whom it runs and why, and one that waits for its bus credential", () => {
    const text = formatStatus({
      ...answer(),
      nodes: [
        {
          name: "node-a",
          enrolled: true,
          lastReportAt: null,
          modules: [
            {
              name: "notes",
              state: "running",
              restarts: 0,
              isolation: { isolated: false, user: "root", reason: "user mesh-notes cannot read /root/app" },
            },
            { name: "counter", state: "starting", restarts: 0, waiting: "its bus credential" },
            {
              name: "redis",
              state: "running",
              restarts: 0,
              isolation: { isolated: true, user: "mesh-redis" },
            },
          ],
        },
      ],
    });
    assert.match(
      text,
      /\n {2}notes +running +0\n {4}not isolated: runs as root \(user mesh-notes cannot read \/root\/app\)\n/,
    );
    assert.match(text, /\n {2}counter +starting +0\n {4}waits for its bus credential\n/);
    assert.doesNotMatch(text, /redis[^\n]*\n {4}not isolated/, "an isolated module says nothing more");
  });

  it("says the limit a module reached and when, its limits and home's size, and the users of modules gone", () => {
    const limits = { pids: 100, memory: 64 * 1024 ** 2, cpu: null, home: 1024 ** 3 };
    const text = formatStatus({
      ...answer(),
      nodes: [
        {
          name: "node-a",
          enrolled: true,
          lastReportAt: null,
          modules: [
            {
              name: "hog",
              state: "running",
              restarts: 1,
              cgroup: "mesh-abcdef-hog",
              limits,
              limitEvent: {
                kind: "out-of-memory",
                text: "killed: out of memory (limit 64M)",
                at: "2026-03-01T12:30:00.000Z",
              },
              home: { bytes: 12 * 1024 ** 2, at: "2026-03-01T12:30:00.000Z" },
            },
            {
              name: "full",
              state: "stopped",
              restarts: 0,
              reason:
                "home 1.5G passed its limit 1G: stopped until the home is under it again or the fleet file raises limits.home",
              limitEvent: {
                kind: "home",
                text: "home 1.5G passed its limit 1G: stopped until the home is under it again or the fleet file raises limits.home",
                at: "2026-03-01T12:30:00.000Z",
              },
            },
            {
              name: "free",
              state: "running",
              restarts: 0,
              limits: { pids: null, memory: null, cpu: null, home: null },
            },
          ],
          goneModuleUsers: ["mesh-abcdef-old"],
        },
      ],
    });
    assert.match(
      text,
      /\n {2}hog +running +1\n {4}killed: out of memory \(limit 64M\) at [^\n]+\n {4}limits pids 100, memory 64M; home 12M \(limit 1G\)\n/,
    );
    assert.match(text, /\n {2}full +stopped +0\n {4}not started: home 1\.5G passed its limit 1G/);
    assert.doesNotMatch(text, /full[^\n]*\n[^\n]*\n {4}home 1\.5G/, "the reason is said once");
    assert.match(text, /\n {2}free +running +0\n {4}no limits\n/);
    assert.match(
      text,
      /users of modules gone from node-a \(kept for a rollback; `userdel` removes one[^)]*\): mesh-abcdef-old/,
    );
  });

  it("says none are announced, and says nothing of them to an answer without the field", () => {
    assert.match(formatStatus(answer([]), NOW), /FAILING: none announced/);
    assert.doesNotMatch(formatStatus(answer(), NOW), /FAILING/);
  });

  it("shows each provider's counts, the retirement waiting for a person and how to act on it", () => {
    const text = formatStatus(
      {
        ...answer([]),
        providers: [
          {
            provider: "postgres",
            node: "node-a",
            answered: true,
            lastPassAt: "2026-03-01T12:30:40.000Z",
            contributionsProblem: null,
            counts: { active: 3, failing: 0, unasked: 0, "awaiting-approval": 22, retired: 2 },
            waiting: {
              id: "w-42",
              logins: Array.from({ length: 20 }, (_, i) => `c${i}_postgres`),
              count: 22,
              held: 25,
              reason: "22 of 25 held is more than 3",
            },
          },
          {
            provider: "redis",
            node: "node-b",
            answered: false,
            problem: "nothing listens at its control socket",
          },
        ],
      },
      NOW,
    );
    assert.match(
      text,
      /PROVIDER +NODE +ACTIVE +FAILING +UNASKED +WAITING +RETIRED +LAST PASS\npostgres +node-a +3 +0 +0 +22 +2 +2026-03-01T12:30:40Z/,
    );
    assert.match(
      text,
      /WAITS FOR A PERSON: retiring 22 consumer\(s\): c0_postgres, .*c19_postgres and 2 more \(22 of 25/,
    );
    assert.match(text, /approve with: mesh tool postgres retire approve w-42/);
    assert.match(text, /2 retired: `mesh tool postgres cleanup list` lists them/);
    assert.match(text, /\nredis +node-b +not heard from: nothing listens at its control socket/);
    assert.match(text, /FAILING: none known; redis not heard from/);
  });

  it("says no consumer fails when every provider's own status says so", () => {
    const provider = { provider: "postgres", node: "node-a", answered: true, counts: { active: 1 } };
    assert.match(
      formatStatus({ ...answer([]), providers: [provider] }, NOW),
      /FAILING: none \(as each provider's own status says\)/,
    );
  });
});

describe("mesh status's endpoints", () => {
  it("names both addresses where the fleet's endpoint: and the provider disagree, and says an address learnt from the provider", () => {
    const text = formatStatus(
      {
        ...answer([]),
        providers: [
          {
            provider: "postgres",
            node: "node-a",
            answered: true,
            counts: { active: 1 },
            serves: "127.0.0.1:5433",
            endpoints: [
              {
                interface: "postgres-database",
                given: "127.0.0.1:5432",
                from: "fleet",
                serves: "127.0.0.1:5433",
                disagrees: true,
              },
            ],
          },
          {
            provider: "redis",
            node: "node-a",
            answered: true,
            counts: { active: 1 },
            serves: "127.0.0.1:6380",
            endpoints: [
              {
                interface: "redis-namespace",
                given: "127.0.0.1:6380",
                from: "provider",
                serves: "127.0.0.1:6380",
                disagrees: false,
              },
            ],
          },
        ],
      },
      NOW,
    );
    assert.match(
      text,
      /ENDPOINT DISAGREES: its postgres-database consumers are sent to 127\.0\.0\.1:5432 \(the fleet's endpoint:\), while postgres serves at 127\.0\.0\.1:5433 \(its admin URL/,
    );
    assert.match(
      text,
      /redis-namespace consumers are sent to 127\.0\.0\.1:6380, where it serves \(the fleet names no endpoint:\)/,
    );
    assert.equal(text.match(/ENDPOINT DISAGREES/g)?.length, 1);
  });
});

describe("mesh status's misbehaving modules", () => {
  it("names a misbehaving module under its node: what was asked, what was wrong and since when", () => {
    const text = formatStatus(
      {
        ...answer(),
        nodes: [
          {
            name: "node-a",
            enrolled: true,
            lastReportAt: null,
            modules: [{ name: "postgres", state: "running", restarts: 0 }],
          },
        ],
        misbehaving: [
          {
            node: "node-a",
            module: "postgres",
            answer: "status",
            fault: "malformed",
            what: "consumers[0]: expected object, received null",
            since: "2026-03-01T12:28:45Z",
          },
        ],
      },
      NOW,
    );
    assert.match(
      text,
      /\n  postgres +running +0\n    misbehaving since 2026-03-01T12:28:45Z \(2m ago\): its answer to status is malformed: consumers\[0\]: expected object, received null\n/,
    );
  });
});

describe("mesh status's controllers", () => {
  const lead = (self: string, term: number) => ({ self, leading: true, leader: self, term });
  const stand = (self: string, leader: string | null, term: number | null) => ({
    self,
    leading: false,
    leader,
    term,
  });

  it("names the leader, its term and the standbys, above the fleet", () => {
    const text = formatStatus(
      {
        ...answer(),
        controller: stand("host-b:/var/lib/mesh/controller", "host-a:/var/lib/mesh/controller", 3),
        controllers: [
          lead("host-a:/var/lib/mesh/controller", 3),
          stand("host-b:/var/lib/mesh/controller", "host-a:/var/lib/mesh/controller", 3),
          stand("host-c:/srv/mesh/controller", "host-a:/var/lib/mesh/controller", 3),
        ],
      },
      NOW,
    );
    const [first, second, third] = text.split("\n");
    assert.equal(first, "leader   host-a:/var/lib/mesh/controller, term 3");
    assert.equal(second, "standby  host-b:/var/lib/mesh/controller, host-c:/srv/mesh/controller");
    assert.match(third ?? "", /^fleet \/x\/mesh\.yaml/);
  });

  it("says when the leader the others name did not answer, and when none leads or none stands by", () => {
    const silent = formatStatus(
      { ...answer(), controller: stand("b", "a", 4), controllers: [stand("b", "a", 4)] },
      NOW,
    );
    assert.match(
      silent,
      /^leader {3}a, term 4 \(did not answer: the others last saw it lead\)\nstandby {2}b\n/,
    );
    const alone = formatStatus({ ...answer(), controller: lead("a", 1), controllers: [lead("a", 1)] }, NOW);
    assert.match(alone, /^leader {3}a, term 1\nstandby {2}none answered\n/);
    const none = formatStatus({ ...answer(), controller: stand("b", null, null), controllers: [] }, NOW);
    assert.match(none, /^leader {3}none: no controller holds the lease now/);
    assert.match(formatStatus(answer(), NOW), /^fleet /, "an older controller's answer: nothing said");
  });
});

describe("mesh status's versions", () => {
  it("names each node's mesh and protocol, an incompatible one in words, and the answering controller's", () => {
    const text = formatStatus({
      ...answer(),
      nodes: [
        {
          name: "node-a",
          enrolled: true,
          modules: [],
          version: { release: "0.2.0", protocol: 2, compatible: true },
        },
        {
          name: "node-b",
          enrolled: true,
          modules: [],
          version: { release: null, protocol: 1, compatible: true },
        },
        {
          name: "node-c",
          enrolled: true,
          modules: [],
          version: {
            release: "0.4.0",
            protocol: 4,
            compatible: false,
            problem: "its agent is too new: upgrade the controller",
          },
        },
      ],
      mesh: { release: "0.2.0", protocol: 2, stateFormat: 2 },
    });
    assert.match(
      text,
      /^version {2}mesh 0\.2\.0 \(protocol 2, state format 2\), the controller that answered$/m,
    );
    assert.match(text, /^node-a +enrolled, mesh 0\.2\.0 \(protocol 2\)$/m);
    assert.match(text, /^node-b +enrolled, mesh 0\.1\.0 \(protocol 1\)$/m);
    assert.match(text, /^node-c +enrolled, mesh 0\.4\.0 \(protocol 4\) INCOMPATIBLE$/m);
    assert.match(text, /^ {2}its agent is too new: upgrade the controller$/m);
  });

  it("says nothing of versions a controller of 0.1.0 does not answer", () => {
    const text = formatStatus(answer());
    assert.doesNotMatch(text, /^version|protocol/m);
  });
});

describe("mesh status's scheduled rotations", () => {
  it("lists the next few rotations due, soonest first, and says how many more there are", () => {
    const consumers = Array.from({ length: 7 }, (_, i) => ({
      consumer: `app-${i}`,
      interface: "postgres-database",
      login: `app_${i}_postgres`,
      provider: "postgres",
      rotationDue: `2026-03-0${9 - i}T00:00:00.000Z`,
    }));
    const text = formatStatus({ ...answer(), consumers: [...consumers, ...(answer().consumers ?? [])] }, NOW);
    assert.match(text, /ROTATIONS DUE NEXT: 7 scheduled, the first 5:/);
    const listed = [...text.matchAll(/^ {2}(app-\d) \(.*rotation due (\S+)$/gm)].map((m) => m[1]);
    assert.deepEqual(listed, ["app-6", "app-5", "app-4", "app-3", "app-2"]);
    assert.match(text, /… and 2 more/);
    assert.doesNotMatch(formatStatus(answer(), NOW), /ROTATIONS DUE/);
  });
});
