// `mesh plan` and `mesh status` against a fleet whose answer is larger than one NATS message may
// hold (the default max_payload is 1 MiB): the controller answers in parts, the CLI puts them back
// together. MESH_PLAN_TEST_CONSUMERS sets the fleet's size (default 3,000; 10,000 works too).
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createAuthority, type BusAuthority } from "@mesh/bus";
import { startController, type Controller } from "@mesh/controller";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import type { PlanReport } from "../src/plan-command.ts";
import { POSTGRES, writeManifest } from "../../controller/test/fleet-dir.ts";
import { meshInProcess as mesh, writeOperatorState } from "./run-mesh.ts";

const CONSUMERS = Number(process.env["MESH_PLAN_TEST_CONSUMERS"] ?? 3_000);

// A Postgres-like provider on node-1 and CONSUMERS apps needing it, each with its own manifest.
async function writeFleet(dir: string, consumers: number): Promise<string> {
  await writeManifest(dir, "postgres", POSTGRES);
  const modules = ["  postgres: { manifest: ./postgres/module.json, node: node-1 }"];
  for (let i = 0; i < consumers; i++) {
    const name = `app${String(i).padStart(5, "0")}`;
    await writeManifest(dir, name, { name, needs: { "postgres-database": { values: {} } } });
    modules.push(`  ${name}: { manifest: ./${name}/module.json, node: node-1 }`);
  }
  const file = join(dir, `mesh-${consumers}.yaml`);
  await writeFile(file, `nodes:\n  node-1: {}\nmodules:\n${modules.join("\n")}\n`);
  return file;
}

describe(`mesh plan against a fleet of ${CONSUMERS} consumers`, { timeout: 80 * CONSUMERS + 120_000 }, () => {
  let dir: string;
  let state: string;
  let fleetFile: string;
  let authority: BusAuthority;
  let nats: NatsServer;
  let controller: Controller;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-plan-large-"));
    state = join(dir, "state");
    await mkdir(state, { recursive: true });
    fleetFile = await writeFleet(dir, CONSUMERS);
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    controller = await startController({
      stateDir: join(state, "controller"),
      fleetFile,
      servers: [nats.url],
      authority,
      logger: quietLogger,
      watch: false,
      // The one controller here: its first publish of a large fleet must not make it step down on a
      // renewal acknowledged late (a loaded machine).
      leaseTimings: { stepDownAfterMs: 120_000, takeOverAfterMs: 240_000 },
    });
    await writeOperatorState(authority, state, nats.url);
  });

  after(async () => {
    await controller?.stop();
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("compares with what the mesh serves though its answer is more than one message holds", async () => {
    // What the controller answers mesh plan with: the served fleet and every kept password's key.
    const answerBytes = Buffer.byteLength(JSON.stringify({ ok: true, fleet: controller.current() }));
    assert.ok(answerBytes > 1024 * 1024, `the served fleet is ${answerBytes} bytes, more than 1 MiB`);
    const same = await mesh(["plan", fleetFile, "--state", state, "--json"]);
    assert.equal(same.code, 0, same.stderr);
    const report = JSON.parse(same.stdout) as PlanReport;
    assert.equal(report.against.kind, "mesh");
    assert.equal(report.changed, false);

    const bigger = await writeFleet(join(dir, "next"), CONSUMERS + 1);
    const next = await mesh(["plan", bigger, "--state", state, "--json"]);
    assert.equal(next.code, 0, next.stderr);
    const changes = JSON.parse(next.stdout) as PlanReport;
    assert.equal(changes.changed, true);
    assert.equal(changes.summary.create, 1, "one new consumer");
    assert.equal(changes.summary.mint, 1, "one new password");
  });

  it("answers mesh status with every consumer", async () => {
    const run = await mesh(["status", "--json", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    assert.equal((JSON.parse(run.stdout) as { consumers: unknown[] }).consumers.length, CONSUMERS);
  });
});
