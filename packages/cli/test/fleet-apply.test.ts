// `mesh apply`, `mesh fleet history|show|rollback` against a real controller on a real nats-server,
// asked with the operator's credential alone (a state directory holding only operator.creds and
// bus.json, as a laptop's would): the plan names the stored revision, a stale apply is refused
// naming both revisions, and a rollback is an apply of an earlier revision.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createAuthority, type BusAuthority } from "@mesh/bus";
import { startController, type Controller } from "@mesh/controller";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import { EXIT_STALE_REVISION } from "../src/exit-codes.ts";
import { meshInProcess as mesh, writeOperatorState } from "./run-mesh.ts";

const POSTGRES = {
  name: "postgres",
  adminUrl: false,
  provides: {
    "postgres-database": {
      receives: "/run/mesh/postgres-database.json",
      spec: {},
      endpoint: { scheme: "postgresql", port: 5432, path: "/{login}" },
    },
  },
};
const app = (name: string): object => ({ name, needs: { "postgres-database": { values: {} } } });

function fleetText(apps: readonly string[]): string {
  return (
    `nodes:\n  node-a: {}\nmodules:\n  postgres: { manifest: ./postgres/module.json, node: node-a }\n` +
    apps.map((a) => `  ${a}: { manifest: ./${a}/module.json, node: node-a }\n`).join("")
  );
}

void describe("mesh apply and mesh fleet, from a machine with the operator's credential", () => {
  let authority: BusAuthority;
  let nats: NatsServer;
  let controller: Controller | undefined;
  let dir: string;
  let laptop: string;
  let fleetFile: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-fleet-apply-"));
    for (const [name, manifest] of [
      ["postgres", POSTGRES],
      ["app1", app("app1")],
      ["app2", app("app2")],
    ] as const) {
      await mkdir(join(dir, name), { recursive: true });
      await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest));
    }
    fleetFile = join(dir, "mesh.yaml");
    await writeFile(fleetFile, fleetText(["app1"]));
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    // A controller with no fleet file of its own: it serves what is applied.
    controller = await startController({
      stateDir: join(dir, "controller"),
      servers: [nats.url],
      authority,
      logger: quietLogger,
    });
    laptop = join(dir, "laptop");
    await mkdir(laptop);
    await writeOperatorState(authority, laptop, nats.url);
  });
  after(async () => {
    await controller?.stop();
    await nats?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  void it("applies revision 1, then 2; an apply planned against 1 is refused naming both; history, show and rollback", async () => {
    assert.equal(controller?.current().modules.length, 0, "nothing is served before an apply");
    const first = await mesh(["apply", fleetFile, "--state", laptop]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /revision 0/, "the plan names the stored revision");
    assert.match(first.stdout, /applied: revision 1 \(was 0\)/);
    assert.equal(controller?.current().modules.length, 2);

    await writeFile(fleetFile, fleetText(["app1", "app2"]));
    const second = await mesh(["apply", fleetFile, "--state", laptop]);
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stdout, /revision 1,/);
    assert.match(second.stdout, /applied: revision 2 \(was 1\)/);

    // Another machine's file, planned when revision 1 was stored.
    await writeFile(fleetFile, fleetText([]));
    const stale = await mesh(["apply", fleetFile, "--state", laptop, "--expect-revision", "1"]);
    assert.equal(stale.code, EXIT_STALE_REVISION, stale.stderr);
    assert.match(stale.stderr, /revision 1/);
    assert.match(stale.stderr, /revision 2/);
    assert.equal(controller?.revision(), 2, "nothing was applied");
    assert.ok(controller?.current().modules.some((m) => m.name === "app2"));

    const same = await mesh(["apply", join(dir, "none.yaml"), "--state", laptop]);
    assert.equal(same.code, 2, "a fleet file that cannot be read is refused before asking");

    const history = await mesh(["fleet", "history", "--state", laptop, "--json"]);
    assert.equal(history.code, 0, history.stderr);
    const listed = JSON.parse(history.stdout) as {
      revision: number;
      history: { revision: number; who: string; via: string; summary: string }[];
    };
    assert.equal(listed.revision, 2);
    assert.deepEqual(
      listed.history.map((h) => [h.revision, h.via]),
      [
        [1, "mesh apply"],
        [2, "mesh apply"],
      ],
    );
    assert.match(listed.history[1]?.summary ?? "", /1 consumer\(s\) added/);
    const text = await mesh(["fleet", "history", "--state", laptop]);
    assert.match(text.stdout, /^\*\s+2 /m, "the served revision is marked");

    const shown = await mesh(["fleet", "show", "1", "--state", laptop]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.equal(shown.stdout, fleetText(["app1"]));

    const rolled = await mesh(["fleet", "rollback", "1", "--state", laptop]);
    assert.equal(rolled.code, 0, rolled.stderr);
    assert.match(rolled.stdout, /app2/, "the plan says app2 goes");
    assert.match(rolled.stdout, /applied: revision 3 \(was 2\)/);
    assert.deepEqual(
      controller?.current().modules.map((m) => m.name),
      ["app1", "postgres"],
    );
    const after = JSON.parse((await mesh(["fleet", "history", "--state", laptop, "--json"])).stdout) as {
      history: { revision: number; via: string }[];
    };
    assert.equal(after.history.at(-1)?.via, "rollback to 1");
  });

  void it("applies a fleet larger than one bus message (in parts), and shows it back whole", async () => {
    // A generated fleet: 60 apps, each manifest padded with a long description, 1.5 MB in all.
    const big = join(dir, "big");
    const apps = Array.from({ length: 60 }, (_, i) => `big${i}`);
    for (const name of ["postgres", ...apps]) {
      await mkdir(join(big, name), { recursive: true });
      const manifest =
        name === "postgres" ? POSTGRES : { ...app(name), description: `${name} `.padEnd(25_000, "pad ") };
      await writeFile(join(big, name, "module.json"), JSON.stringify(manifest));
    }
    const bigFleet = join(big, "mesh.yaml");
    await writeFile(bigFleet, fleetText(apps));
    const before = controller?.revision() ?? 0;
    const applied = await mesh(["apply", bigFleet, "--state", laptop]);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, new RegExp(`applied: revision ${before + 1} \\(was ${before}\\)`));
    assert.equal(controller?.current().modules.length, 61);
    const source = controller?.current().source;
    assert.ok(source !== undefined);
    assert.ok(Buffer.byteLength(JSON.stringify(source)) > 1024 * 1024, "the fleet is larger than 1 MiB");
    assert.match(source.manifests[join(big, "big59", "module.json")] ?? "", /"description":"big59 pad pad/);

    const shown = await mesh(["fleet", "show", String(before + 1), "--state", laptop, "--json"]);
    assert.equal(shown.code, 0, shown.stderr);
    const got = JSON.parse(shown.stdout) as {
      source: { fleetText: string; manifests: Record<string, string> };
    };
    assert.equal(got.source.fleetText, fleetText(apps));
    assert.deepEqual(got.source.manifests, source.manifests, "every manifest comes back as applied");
  });
});
