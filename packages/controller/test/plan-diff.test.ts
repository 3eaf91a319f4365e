// The pure comparison behind `mesh plan`: the fleet the mesh serves against the fleet as it reads
// now, with the harness's own retirement bound deciding what waits for a person.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { diffFleetPlans, EMPTY_FLEET, secretKey, type ComparedFleet } from "@mesh/controller";
import type { PlanEntry, PlanInstance } from "@mesh/manifest";

interface Consumer {
  readonly name: string;
  readonly node: string;
  readonly values?: Record<string, unknown>;
}

interface Provider {
  readonly name: string;
  readonly iface: string;
  readonly node: string;
  readonly port?: number;
  readonly consumers: readonly Consumer[];
}

const PG = "postgres-database";
const REDIS = "redis-namespace";
const suffix = (iface: string): string => (iface === PG ? "postgres" : "redis");

/** A fleet as `loadFleetPlan` gives it: providers with their consumers, every module placed. */
function fleet(providers: readonly Provider[], extra: Record<string, string> = {}): ComparedFleet {
  const instances: PlanInstance[] = providers.map((p) => ({
    provider: p.name,
    node: p.node,
    interface: p.iface,
    endpoint: {
      scheme: p.iface === PG ? "postgresql" : "redis",
      host: "127.0.0.1",
      port: p.port ?? 5432,
      path: "/",
      query: {},
    },
    consumers: p.consumers.map((c): PlanEntry => ({
      consumer: c.name,
      consumerNode: c.node,
      interface: p.iface,
      login: `${c.name}_${suffix(p.iface)}`,
      values: c.values ?? {},
      derived: {},
      provider: p.name,
      providerNode: p.node,
    })),
  }));
  const placed = new Map<string, string>(Object.entries(extra));
  for (const p of providers) {
    placed.set(p.name, p.node);
    for (const c of p.consumers) placed.set(c.name, c.node);
  }
  const modules = [...placed]
    .map(([name, node]) => ({ name, node, manifest: `/fleet/${name}/module.json` }))
    .sort((a, b) => a.name.localeCompare(b.name));
  return {
    plan: { instances },
    nodes: [...new Set(modules.map((m) => m.node))].sort(),
    modules,
  };
}

const apps = (...names: string[]): Consumer[] => names.map((name) => ({ name, node: "node-1" }));
const postgres = (consumers: readonly Consumer[], node = "node-1"): Provider => ({
  name: "postgres",
  iface: PG,
  node,
  consumers,
});

describe("diffFleetPlans", () => {
  it("says nothing changes when the fleet reads as it is served", () => {
    const served = fleet([postgres(apps("blog", "notes"))]);
    const diff = diffFleetPlans(served, structuredClone(served));
    assert.equal(diff.changed, false);
    assert.deepEqual(diff.providers, []);
    assert.deepEqual(diff.modules, []);
    assert.deepEqual(diff.nodes, []);
    assert.equal(diff.summary.create + diff.summary.change + diff.summary.retire, 0);
  });

  it("against an empty mesh, everything is created with a minted password and every module starts", () => {
    const diff = diffFleetPlans(EMPTY_FLEET, fleet([postgres(apps("blog", "notes"))]));
    assert.equal(diff.changed, true);
    const [pg] = diff.providers;
    assert.equal(pg?.change, "new");
    assert.equal(pg?.holds, 0);
    assert.deepEqual(
      pg?.creates.map((c) => [c.login, c.password]),
      [
        ["blog_postgres", "mint"],
        ["notes_postgres", "mint"],
      ],
    );
    assert.equal(pg?.retirement, null);
    assert.deepEqual(
      diff.modules.map((m) => `${m.change} ${m.module}@${m.node}`),
      ["start blog@node-1", "start notes@node-1", "start postgres@node-1"],
    );
    assert.deepEqual(diff.nodes, [{ node: "node-1", change: "add" }]);
    assert.equal(diff.summary.mint, 2);
  });

  it("creates a new consumer and mints its password, or reuses the one the controller keeps", () => {
    const served = fleet([postgres(apps("notes"))]);
    const next = fleet([postgres(apps("blog", "notes", "wiki"))]);
    const diff = diffFleetPlans(served, next, { keptPasswords: [secretKey("wiki", PG)] });
    const [pg] = diff.providers;
    assert.equal(pg?.change, "same");
    assert.deepEqual(
      pg?.creates.map((c) => `${c.login}:${c.password}`),
      ["blog_postgres:mint", "wiki_postgres:kept"],
    );
    assert.deepEqual(diff.summary, {
      ...diff.summary,
      create: 2,
      mint: 1,
      change: 0,
      retire: 0,
      moduleStart: 2,
    });
  });

  it("retires a consumer no longer asked for, on its own when within the bound", () => {
    const served = fleet([postgres(apps("blog", "notes", "shop"))]);
    const next = fleet([postgres(apps("notes", "shop"))]);
    const diff = diffFleetPlans(served, next);
    const [pg] = diff.providers;
    assert.deepEqual(
      pg?.retires.map((r) => r.login),
      ["blog_postgres"],
    );
    assert.equal(pg?.holds, 3);
    assert.equal(pg?.retirement?.held, 3);
    assert.equal(pg?.retirement?.needsApproval, false);
    assert.equal(pg?.retirement?.reason, null);
    assert.deepEqual(diff.modules, [
      {
        module: "blog",
        change: "stop",
        node: "node-1",
        previousNode: null,
        manifest: "/fleet/blog/module.json",
        previousManifest: null,
      },
    ]);
  });

  it("a retirement past the bound waits for a person: 2 of 3, any 4, but not 1 of 2", () => {
    const waits = (before: string[], after: string[]) =>
      diffFleetPlans(fleet([postgres(apps(...before))]), fleet([postgres(apps(...after))])).providers[0]
        ?.retirement;
    const twoOfThree = waits(["a1", "a2", "a3"], ["a3"]);
    assert.equal(twoOfThree?.needsApproval, true);
    assert.match(twoOfThree?.reason ?? "", /2 of 3 held is more than 50%/);
    assert.equal(waits(["a1", "a2"], ["a2"])?.needsApproval, false);
    const four = waits(
      ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"],
      ["a5", "a6", "a7", "a8", "a9"],
    );
    assert.equal(four?.needsApproval, true);
    assert.match(four?.reason ?? "", /4 at once is more than 3/);
  });

  it("counts held as the harness does, after the creates: 2 retired while 2 are made, of 3 held, retires on its own", () => {
    const retirement = diffFleetPlans(
      fleet([postgres(apps("a1", "a2", "a3"))]),
      fleet([postgres(apps("a3", "b1", "b2"))]),
    ).providers[0]?.retirement;
    assert.equal(retirement?.held, 5);
    assert.equal(retirement?.needsApproval, false, "2 of 5 is not more than half");
  });

  it("uses a provider's own bound when it has one", () => {
    const diff = diffFleetPlans(
      fleet([postgres(apps("a1", "a2", "a3"))]),
      fleet([postgres(apps("a2", "a3"))]),
      {
        limitsOf: (p) =>
          p === "postgres" ? { stablePasses: 5, retireAtOnce: 0, retireFraction: 0.5 } : undefined,
      },
    );
    assert.equal(diff.providers[0]?.retirement?.needsApproval, true);
    assert.equal(diff.summary.awaitingApproval, 1);
  });

  it("a consumer that moves to another node keeps its login and password; its module moves", () => {
    const served = fleet([postgres(apps("notes"))], { spare: "node-2" });
    const next = fleet([postgres([{ name: "notes", node: "node-2" }])], { spare: "node-2" });
    const diff = diffFleetPlans(served, next);
    const change = diff.providers[0]?.changes[0];
    assert.equal(change?.login, "notes_postgres");
    assert.deepEqual(change?.changes, [{ what: "node", from: "node-1", to: "node-2" }]);
    assert.equal(change?.reapplied, false, "the backend has nothing to do");
    assert.deepEqual(diff.providers[0]?.creates, []);
    assert.deepEqual(diff.providers[0]?.retires, []);
    assert.deepEqual(
      diff.modules.map((m) => `${m.change} ${m.module} ${m.previousNode}->${m.node}`),
      ["move notes node-1->node-2"],
    );
  });

  it("re-applies each consumer whose values change, or whose provider moves to another node", () => {
    const served = fleet([postgres(apps("notes", "blog"))], { spare: "node-2" });
    const next = fleet(
      [
        postgres(
          [
            { name: "blog", node: "node-1" },
            { name: "notes", node: "node-1", values: { extensions: ["citext"] } },
          ],
          "node-2",
        ),
      ],
      { spare: "node-2" },
    );
    const [pg] = diffFleetPlans(served, next).providers;
    assert.equal(pg?.change, "moved");
    assert.equal(pg?.previousNode, "node-1");
    assert.deepEqual(
      pg?.changes.map((c) => [c.login, c.changes.map((f) => f.what), c.reapplied]),
      [
        ["blog_postgres", ["provider-node"], true],
        ["notes_postgres", ["values", "provider-node"], true],
      ],
    );
  });

  it("a consumer whose interface changes is created at the new provider and retired at the old one", () => {
    const redis: Provider = { name: "redis", iface: REDIS, node: "node-1", port: 6379, consumers: [] };
    const served = fleet([postgres(apps("notes", "blog")), redis]);
    const next = fleet([postgres(apps("blog")), { ...redis, consumers: apps("notes") }]);
    const diff = diffFleetPlans(served, next, { keptPasswords: [secretKey("notes", PG)] });
    const byProvider = Object.fromEntries(diff.providers.map((p) => [p.provider, p]));
    assert.deepEqual(
      byProvider.redis?.creates.map((c) => `${c.login}:${c.password}`),
      ["notes_redis:mint"],
      "another interface is another login, with its own password",
    );
    assert.deepEqual(
      byProvider.postgres?.retires.map((r) => r.login),
      ["notes_postgres"],
    );
    assert.equal(byProvider.postgres?.retirement?.needsApproval, false, "1 of 2 retires on its own");
  });

  it("a consumer that changes provider keeps its password: created by one, retired by the other", () => {
    const other: Provider = { name: "postgres2", iface: PG, node: "node-1", port: 5433, consumers: [] };
    const served = fleet([postgres(apps("notes", "blog", "shop")), other]);
    const next = fleet([postgres(apps("blog", "shop")), { ...other, consumers: apps("notes") }]);
    const diff = diffFleetPlans(served, next, { keptPasswords: [secretKey("notes", PG)] });
    assert.deepEqual(
      diff.providers.map((p) => [
        p.provider,
        p.creates.map((c) => c.password),
        p.retires.map((r) => r.login),
      ]),
      [
        ["postgres", [], ["notes_postgres"]],
        ["postgres2", ["kept"], []],
      ],
    );
  });

  it("a provider that leaves the fleet retires nothing: its consumers stay in the backend", () => {
    const redis: Provider = {
      name: "redis",
      iface: REDIS,
      node: "node-1",
      port: 6379,
      consumers: apps("counter"),
    };
    const diff = diffFleetPlans(fleet([postgres(apps("notes")), redis]), fleet([postgres(apps("notes"))]));
    const [gone] = diff.providers;
    assert.equal(gone?.change, "removed");
    assert.deepEqual(gone?.retires, []);
    assert.equal(gone?.retirement, null);
    assert.deepEqual(
      gone?.leftInBackend.map((c) => c.login),
      ["counter_redis"],
    );
    assert.deepEqual(
      diff.modules.map((m) => `${m.change} ${m.module}`),
      ["stop counter", "stop redis"],
    );
  });

  it("says when a provider's endpoint changes, and which nodes are added or removed", () => {
    const served = fleet([postgres(apps("notes"))], { old: "node-0" });
    const next = fleet([{ ...postgres(apps("notes")), port: 5433 }], { fresh: "node-3" });
    const diff = diffFleetPlans(served, next);
    assert.deepEqual(diff.providers[0]?.endpoint, {
      from: "postgresql://127.0.0.1:5432",
      to: "postgresql://127.0.0.1:5433",
    });
    assert.deepEqual(diff.nodes, [
      { node: "node-0", change: "remove" },
      { node: "node-3", change: "add" },
    ]);
    assert.equal(diff.summary.nodesAdded, 1);
    assert.equal(diff.summary.nodesRemoved, 1);
  });

  it("a module given another manifest restarts", () => {
    const served = fleet([postgres(apps("notes"))]);
    const next: ComparedFleet = {
      ...served,
      modules: served.modules.map((m) =>
        m.name === "notes" ? { ...m, manifest: "/elsewhere/module.json" } : m,
      ),
    };
    const diff = diffFleetPlans(served, next);
    assert.deepEqual(
      diff.modules.map((m) => [m.change, m.module, m.previousManifest, m.manifest]),
      [["restart", "notes", "/fleet/notes/module.json", "/elsewhere/module.json"]],
    );
  });

  it("a module given another metrics address restarts, and says so", () => {
    const served = fleet([postgres(apps("notes"))]);
    const next: ComparedFleet = {
      ...served,
      modules: served.modules.map((m) => (m.name === "postgres" ? { ...m, metrics: "0.0.0.0:9464" } : m)),
    };
    const diff = diffFleetPlans(served, next);
    assert.deepEqual(
      diff.modules.map((m) => [m.change, m.module, m.previousManifest, m.metrics]),
      [["restart", "postgres", null, { from: null, to: "0.0.0.0:9464" }]],
    );
    assert.equal(diff.summary.moduleRestart, 1);
    assert.equal(diffFleetPlans(next, next).changed, false);
  });
  it("a module that starts shows every limit it will run under, the defaults where the fleet says none", () => {
    const served = fleet([postgres(apps("notes"))]);
    const next: ComparedFleet = {
      ...served,
      modules: [
        ...served.modules,
        {
          name: "wiki",
          node: "node-1",
          manifest: "/fleet/wiki/module.json",
          limits: { memory: 64 * 1024 ** 2 },
        },
      ],
    };
    const diff = diffFleetPlans(served, next);
    assert.deepEqual(
      diff.modules.map((m) => [m.change, m.module, m.limits]),
      [["start", "wiki", { from: null, to: { memory: 64 * 1024 ** 2, pids: 512, cpu: null, home: null } }]],
    );
  });

  it("a module given other limits alone runs on under them, without a restart", () => {
    const served = fleet([postgres(apps("notes"))]);
    const next: ComparedFleet = {
      ...served,
      modules: served.modules.map((m) =>
        m.name === "notes" ? { ...m, limits: { pids: 100, home: null } } : m,
      ),
    };
    const diff = diffFleetPlans(served, next);
    assert.deepEqual(
      diff.modules.map((m) => [m.change, m.module, m.limits?.from?.pids, m.limits?.to.pids]),
      [["limits", "notes", 512, 100]],
    );
    assert.equal(diff.summary.moduleLimits, 1);
    assert.equal(diff.summary.moduleRestart, 0);
    const same: ComparedFleet = {
      ...served,
      modules: served.modules.map((m) => (m.name === "notes" ? { ...m, limits: { pids: 512 } } : m)),
    };
    assert.equal(diffFleetPlans(served, same).changed, false, "the default written out is no change");
  });
});
