// What the agent reads of its providers for its report: each provider's own status, from a real
// control socket, kept small (failing consumers, the waiting retirement, counts) and scrubbed of the
// node's secrets.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  ToolError,
  type ConsumerStatus,
  type ProvisionerTools,
  type RetireList,
  type StatusReport,
} from "@mesh/sdk";
import { serveControl, type ControlServer } from "@mesh/sdk/provider";
import { moduleControlPath } from "../src/index.ts";
import { MAX_REPORTED_FAILING, ProviderStandings } from "../src/provider-standings.ts";
import { secretPath } from "@mesh/manifest";
import { until } from "@mesh/testkit";
import { recordingLogger } from "./test-mesh.ts";

const PASSWORD = "s3cret-Consumer-pw";

function toolsSaying(consumers: () => ConsumerStatus[], waiting: RetireList | null = null): ProvisionerTools {
  return {
    status: (): StatusReport => ({
      interface: "postgres-database",
      instance: "postgres",
      receives: "/r.json",
      lastPassAt: new Date().toISOString(),
      contributionsProblem: null,
      consumers: consumers(),
    }),
    retireList: () => waiting ?? { id: null, logins: [], held: 0, reason: "nothing waits" },
    retireApprove: () => Promise.reject(new Error("not here")),
    cleanupList: () => [],
    cleanupDelete: () => Promise.reject(new Error("not here")),
  };
}

const consumer = (login: string, state: ConsumerStatus["state"], why = ""): ConsumerStatus => ({
  login,
  state,
  class: state === "failing" ? "credentials-rejected" : null,
  since: "2026-11-30T12:00:00.000Z",
  why,
  node: "node-b",
  attempts: state === "failing" ? 3 : undefined,
});

describe("the agent's reading of its providers' status", () => {
  let dir: string;
  const servers: ControlServer[] = [];
  const standings: ProviderStandings[] = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-provider-standings-"));
    // A secret of the node: what no report may carry, whatever the provider wrote into an error.
    const secret = secretPath(dir, "notes", "postgres-database");
    await mkdir(dirname(secret), { recursive: true });
    await writeFile(secret, `${PASSWORD}\n`, { mode: 0o600 });
  });
  after(async () => {
    for (const s of standings) s.stop();
    for (const s of servers) await s.close();
    await rm(dir, { recursive: true, force: true });
  });

  const serve = async (module: string, tools: ProvisionerTools): Promise<void> => {
    await mkdir(dirname(moduleControlPath(dir, module)), { recursive: true });
    servers.push(await serveControl(tools, moduleControlPath(dir, module)));
  };
  const follow = (modules: string[]) => {
    let changes = 0;
    const s = new ProviderStandings({
      stateDir: dir,
      logger: recordingLogger(),
      onChange: () => (changes += 1),
      everyMs: 100,
    });
    standings.push(s);
    s.follow(modules);
    return { s, changes: () => changes };
  };

  it("reports failing consumers with class, since and scrubbed error, and counts every state", async () => {
    let failing = true;
    await serve(
      "pg1",
      toolsSaying(() => [
        consumer("notes_postgres", failing ? "failing" : "active", `password ${PASSWORD} rejected`),
        consumer("old_postgres", "retired"),
        consumer("wiki_postgres", "active"),
      ]),
    );
    const { s, changes } = follow(["pg1"]);
    const first = await until("the provider's standing", () => s.standings()[0], 30);
    assert.equal(first.answered, true);
    assert.deepEqual(first.counts, { active: 1, failing: 1, unasked: 0, "awaiting-approval": 0, retired: 1 });
    assert.equal(first.failing.length, 1);
    const [f] = first.failing;
    assert.equal(f?.login, "notes_postgres");
    assert.equal(f?.class, "credentials-rejected");
    assert.equal(f?.since, "2026-11-30T12:00:00.000Z");
    assert.equal(f?.node, "node-b");
    assert.ok(!JSON.stringify(first).includes(PASSWORD), JSON.stringify(first));
    // A recovery is news: the report goes out at once.
    const before = changes();
    failing = false;
    await until(
      "the recovery, said at once",
      () => s.standings()[0]?.failing.length === 0 && changes() > before,
      30,
    );
  });

  it("lists at most MAX_REPORTED_FAILING failing consumers, counting them all", async () => {
    const many = Array.from({ length: MAX_REPORTED_FAILING + 50 }, (_, i) =>
      consumer(`c${i}_postgres`, "failing"),
    );
    await serve(
      "pg2",
      toolsSaying(() => many),
    );
    const { s } = follow(["pg2"]);
    const got = await until("the provider's standing", () => s.standings()[0], 30);
    assert.equal(got.failing.length, MAX_REPORTED_FAILING);
    assert.equal(got.counts.failing, MAX_REPORTED_FAILING + 50);
  });

  it("reports the set waiting for a person with the id retire approve takes", async () => {
    const logins = ["a_postgres", "b_postgres", "c_postgres", "d_postgres"];
    const list = { id: "w-42", logins, held: 5, reason: "4 of 5 is more than 3" };
    await serve(
      "pg3",
      toolsSaying(() => logins.map((l) => consumer(l, "awaiting-approval")), list),
    );
    const { s } = follow(["pg3"]);
    const got = await until("the provider's standing", () => s.standings()[0], 30);
    assert.deepEqual(got.waiting, { id: "w-42", logins, count: 4, held: 5, reason: "4 of 5 is more than 3" });
    assert.equal(got.counts["awaiting-approval"], 4);
  });

  it("says a provider's refusal of status, scrubbed of the node's secrets, and does not count it as misbehaving", async () => {
    await serve("pg6", {
      ...toolsSaying(() => []),
      status: () => {
        throw new ToolError("stopped", `stopping; it held ${PASSWORD} a moment ago`);
      },
    });
    const { s } = follow(["pg6"]);
    const got = await until("its standing", () => s.standings()[0], 30);
    assert.equal(got.answered, false);
    assert.match(got.problem ?? "", /^it refused status \(stopped\): stopping; it held /);
    assert.ok(!(got.problem ?? "").includes(PASSWORD), got.problem ?? "");
  });

  it("says a provider that does not listen, and never follows a link planted at its socket", async () => {
    await mkdir(dirname(moduleControlPath(dir, "pg4")), { recursive: true });
    await mkdir(dirname(moduleControlPath(dir, "pg5")), { recursive: true });
    await symlink(moduleControlPath(dir, "pg1"), moduleControlPath(dir, "pg5"));
    const { s } = follow(["pg4", "pg5"]);
    const got = await until(
      "both standings",
      () => (s.standings().length === 2 ? s.standings() : undefined),
      30,
    );
    assert.deepEqual(
      got.map((p) => [p.module, p.answered]),
      [
        ["pg4", false],
        ["pg5", false],
      ],
    );
    assert.match(got[0]?.problem ?? "", /nothing listens at its control socket/);
    assert.match(got[1]?.problem ?? "", /is a symlink, and a symlink is never followed/);
  });
});
