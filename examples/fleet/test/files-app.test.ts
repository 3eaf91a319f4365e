// The example fleet's files app, run as the agent runs it (the manifest's `run`, from its directory,
// with MESH_CREDENTIALS), against a private Ceph cluster. The mesh's part is played by hand through
// @mesh/manifest: a plan from a fleet file naming the s3 provider and the files app, the credential
// file as credentialFor writes it, and the consumer made by the s3 provider's own adapter.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  checkFleet,
  credentialFor,
  credentialPath,
  derivePlan,
  formatProblem,
  loadFleet,
  loadFleetManifests,
  secretPath,
  type Manifest,
  type PlanEntry,
  type PlanInstance,
} from "@mesh/manifest";
import { createS3Adapter, type S3BucketAdapter } from "@mesh/provider-s3";
import { startCeph, type CephServer } from "@mesh/testkit";
import { count, killApps, startApp, waitForOutput } from "./run-app.ts";

const here = dirname(fileURLToPath(import.meta.url));
const WAIT_MS = 90_000;
const IFACE = "s3-bucket";

let ceph: CephServer | undefined;
let adapter: S3BucketAdapter | undefined;
let stateDir: string;
let manifests: Map<string, Manifest>;
let entry: PlanEntry;
let instance: PlanInstance;

async function writeAtomic(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, text, { mode: 0o600 });
  await rename(temp, path);
}

before(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "mesh-example-files-"));
  const fleetFile = join(stateDir, "mesh.yaml");
  await writeFile(
    fleetFile,
    [
      "nodes:",
      "  node-1: {}",
      "modules:",
      "  s3:",
      `    manifest: ${resolve(here, "../../../providers/s3/module.json")}`,
      "    node: node-1",
      "    admin: { env: MESH_S3_URL }",
      "  files:",
      `    manifest: ${resolve(here, "../files/module.json")}`,
      "    node: node-1",
      "",
    ].join("\n"),
  );
  const fleet = await loadFleet(fleetFile);
  manifests = await loadFleetManifests(fleet);
  assert.deepEqual(checkFleet(fleet, manifests).map(formatProblem), []);
  const plan = derivePlan(fleet, manifests);
  const found = plan.instances.find((i) => i.interface === IFACE);
  const consumer = found?.consumers.find((c) => c.consumer === "files");
  assert.ok(found && consumer, "the plan has files consuming s3-bucket");
  [instance, entry] = [found, consumer];
  ceph = await startCeph();
  adapter = createS3Adapter({ adminUrl: ceph.adminUrl, instance: "apps-test" });
});

after(async () => {
  killApps();
  await ceph?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

describe("the files app", () => {
  it("waits for its credential and its key, then stores a file in its bucket and reads it back, never printing its secret", async () => {
    assert.ok(ceph && adapter && instance.endpoint);
    assert.equal(
      entry.derived["bucket"],
      entry.login.replace(/_/g, "-"),
      "the bucket is named from the login",
    );
    const password = randomBytes(24).toString("base64url");
    const manifest = manifests.get("files");
    assert.ok(manifest?.run);
    const app = startApp(
      dirname(resolve(manifest.file)),
      {
        MESH_MODULE: "files",
        MESH_CREDENTIALS: dirname(credentialPath(stateDir, "files", IFACE)),
        EXAMPLE_INTERVAL_MS: "300",
      },
      manifest.run,
    );
    await waitForOutput(app, /files: waiting for my credential: .* does not exist yet/, WAIT_MS);
    await writeAtomic(secretPath(stateDir, "files", IFACE), password);
    const credential = credentialFor(
      entry,
      { ...instance.endpoint, host: ceph.host, port: ceph.port },
      stateDir,
    );
    assert.equal(
      credential.url,
      `http://${entry.login}@${ceph.host}:${ceph.port}/${String(entry.derived["bucket"])}`,
    );
    await writeAtomic(credentialPath(stateDir, "files", IFACE), `${JSON.stringify(credential, null, 2)}\n`);
    // The credential is there before the provider made the key: the app keeps trying.
    await waitForOutput(app, /files: cannot connect to http:\/\/.* yet/, WAIT_MS);
    await adapter.create(
      { as: entry.login, password, values: entry.values, derived: entry.derived },
      new AbortController().signal,
    );
    await waitForOutput(
      app,
      /files: stored hello\.txt \(#2, \d+ bytes\) in bucket [a-z0-9-]+ and read it back/,
      WAIT_MS,
    );
    app.child.kill("SIGTERM");
    assert.equal(await app.exited, 0, app.output);
    assert.equal(count(app.output, /waiting for my credential/), 1, "said once");
    assert.ok(!app.output.includes(password), app.output);
  });
});
