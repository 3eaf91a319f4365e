// What `mesh status` says of failing consumers and providers, from the nodes' reports (each provider's
// own status, from the first failure) merged with the 5-minute announcements on the bus.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseReport, type NodeReport } from "@mesh/controller";
import { controllerStatus } from "../src/controller-status.ts";
import { type FailingStanding } from "../src/standings-book.ts";
import type { Plan } from "@mesh/manifest";

const HEARD = new Date("2026-11-30T12:00:10.000Z");

const plan: Plan = {
  instances: [
    {
      provider: "postgres",
      node: "node-a",
      interface: "postgres-database",
      consumers: ["notes", "wiki"].map((consumer) => ({
        consumer,
        consumerNode: "node-b",
        interface: "postgres-database",
        login: `${consumer}_postgres`,
        values: {},
        derived: {},
        provider: "postgres",
        providerNode: "node-a",
      })),
    },
  ],
};

const provider = (over: Record<string, unknown> = {}) => ({
  module: "postgres",
  answered: true,
  problem: null,
  askedAt: "2026-11-30T12:00:09.000Z",
  lastPassAt: "2026-11-30T12:00:08.000Z",
  contributionsProblem: null,
  counts: { active: 1, failing: 1, unasked: 0, "awaiting-approval": 0, retired: 2 },
  failing: [
    {
      login: "notes_postgres",
      node: "node-b",
      class: "credentials-rejected",
      since: "2026-11-30T12:00:01.000Z",
      attempts: 4,
      error: "password authentication failed for user mesh_admin at postgres://mesh_admin:hunter2@db/x",
    },
  ],
  waiting: null,
  ...over,
});

const reportOf = (node: string, providers: unknown[]): NodeReport => {
  const body = { node, generation: 3, modules: [], providers };
  const parsed = parseReport(node, new TextEncoder().encode(JSON.stringify(body)), HEARD);
  assert.ok(parsed);
  return parsed;
};

const statusOf = (reports: NodeReport[], failing: FailingStanding[] = []) =>
  controllerStatus({
    plan,
    fleetFile: "/f/mesh.yaml",
    readAt: HEARD.toISOString(),
    refused: null,
    fleetNodes: ["node-a", "node-b"],
    enrolled: new Set(["node-a", "node-b"]),
    reports: new Map(reports.map((r) => [r.node, r])),
    failing,
  });

const announced = (over: Partial<FailingStanding> = {}): FailingStanding => ({
  provider: "postgres",
  interface: "postgres-database",
  instance: "postgres",
  providerNode: "node-a",
  login: "wiki_postgres",
  node: "node-b",
  class: "unreachable",
  error: "connect ECONNREFUSED",
  since: "2026-11-30T11:50:00.000Z",
  attempts: 300,
  at: "2026-11-30T11:55:00.000Z",
  ...over,
});

describe("failing consumers from the providers' own status", () => {
  it("names a consumer from its provider's status as its node reports it, before any announcement", () => {
    const status = statusOf([reportOf("node-a", [provider()])]);
    assert.equal(status.failing.length, 1);
    const [f] = status.failing;
    assert.equal(f?.consumer, "notes");
    assert.equal(f?.login, "notes_postgres");
    assert.equal(f?.interface, "postgres-database");
    assert.equal(f?.class, "credentials-rejected");
    assert.equal(f?.since, "2026-11-30T12:00:01.000Z");
    assert.equal(f?.attempts, 4);
    assert.equal(f?.said, "report");
    assert.ok(!f?.error.includes("hunter2"), `a URL's password is masked: ${f?.error}`);
  });

  it("trusts a node only for the providers the fleet places on it", () => {
    const status = statusOf([reportOf("node-b", [provider()])]);
    assert.deepEqual(status.failing, []);
    assert.equal(status.providers[0]?.answered, false);
    assert.match(status.providers[0]?.problem ?? "", /node node-a has not reported on postgres/);
  });

  it("keeps an announced failure the provider's status also lists, and one its status cannot speak to", () => {
    // The report lists notes only, but says two are failing: the announced wiki is kept.
    const clipped = provider({
      counts: { active: 0, failing: 2, unasked: 0, "awaiting-approval": 0, retired: 0 },
    });
    const status = statusOf([reportOf("node-a", [clipped])], [announced()]);
    assert.deepEqual(
      status.failing.map((f) => [f.login, f.said]),
      [
        ["notes_postgres", "report"],
        ["wiki_postgres", "announcement"],
      ],
    );
  });

  it("drops an announced failure that the provider's newer, whole status no longer lists", () => {
    const status = statusOf([reportOf("node-a", [provider()])], [announced()]);
    assert.deepEqual(
      status.failing.map((f) => f.login),
      ["notes_postgres"],
    );
    // An announcement newer than the report stands.
    const newer = statusOf(
      [reportOf("node-a", [provider()])],
      [announced({ at: "2026-11-30T12:00:09.500Z" })],
    );
    assert.deepEqual(
      newer.failing.map((f) => f.login),
      ["notes_postgres", "wiki_postgres"],
    );
  });

  it("shows each provider's counts and the retirement waiting for a person", () => {
    const waiting = {
      id: "r-1a2b",
      logins: ["a_postgres", "b_postgres", "c_postgres", "d_postgres"],
      count: 4,
      held: 5,
      reason: "4 of 5 held is more than 3",
    };
    const status = statusOf([reportOf("node-a", [provider({ waiting })])]);
    const [p] = status.providers;
    assert.equal(p?.provider, "postgres");
    assert.equal(p?.node, "node-a");
    assert.deepEqual(p?.interfaces, ["postgres-database"]);
    assert.equal(p?.answered, true);
    assert.equal(p?.counts?.retired, 2);
    assert.deepEqual(p?.waiting, waiting);
  });

  it("keeps only well-formed entries of what a node says of its providers", () => {
    const bad = reportOf("node-a", [
      { module: "Not A Module!" },
      provider({
        failing: [
          { login: "DROP TABLE", class: "x", since: "2026-11-30T12:00:01Z" },
          { login: "ok_postgres", class: "Bad Class", since: "2026-11-30T12:00:01Z" },
          { login: "ok_postgres", class: "refused", since: "not a time" },
          {
            login: "ok_postgres",
            class: "refused",
            since: "2026-11-30T12:00:01Z",
            error: "x\ny".repeat(2000),
          },
        ],
      }),
    ]);
    assert.equal(bad.providers?.length, 1);
    const failing = bad.providers?.[0]?.failing ?? [];
    assert.deepEqual(
      failing.map((f) => f.login),
      ["ok_postgres"],
    );
    assert.ok((failing[0]?.error.length ?? 0) <= 1001 && !failing[0]?.error.includes("\n"));
  });
});

describe("misbehaving modules from the nodes' reports", () => {
  const bad = (over: Record<string, unknown> = {}) => ({
    module: "postgres",
    answer: "status",
    fault: "malformed",
    what: "consumers[0]: Invalid input: expected object, received null",
    since: "2026-11-30T12:00:02Z",
    ...over,
  });
  const reportWith = (misbehaving: unknown) => {
    const modules = [{ name: "postgres", state: "running", restarts: 0, log: "/l" }];
    const body = { node: "node-a", generation: 3, modules, misbehaving };
    const parsed = parseReport("node-a", new TextEncoder().encode(JSON.stringify(body)), HEARD);
    assert.ok(parsed);
    return parsed;
  };

  it("names each misbehaving module with its node, what was asked, what was wrong and since when", () => {
    const status = statusOf([reportWith([bad()])]);
    assert.deepEqual(status.misbehaving, [
      {
        node: "node-a",
        module: "postgres",
        answer: "status",
        fault: "malformed",
        what: "consumers[0]: Invalid input: expected object, received null",
        since: "2026-11-30T12:00:02.000Z",
      },
    ]);
  });

  it("keeps only well-formed entries about modules the report names, each text one clipped, masked line", () => {
    const status = statusOf([
      reportWith([
        null,
        "postgres",
        bad({ module: "elsewhere" }),
        bad({ fault: "exploded" }),
        bad({ since: "NaN" }),
        bad({ what: { toString: 1 } }),
        bad({ answer: "retire list", what: `x\ny at postgres://u:hunter2@db ${"z".repeat(5_000)}` }),
      ]),
    ]);
    assert.deepEqual(
      status.misbehaving?.map((m) => m.answer),
      ["retire list"],
    );
    const what = status.misbehaving?.[0]?.what ?? "";
    assert.ok(what.length <= 501 && !what.includes("\n") && !what.includes("hunter2"), what);
  });

  it("reads no misbehaviour from a report that says none, or says it as something other than a list", () => {
    assert.deepEqual(statusOf([reportWith(undefined)]).misbehaving, []);
    assert.deepEqual(statusOf([reportWith({ postgres: bad() })]).misbehaving, []);
  });
});
