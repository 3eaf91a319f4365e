// Rotations that cost no failed login, through a real `mesh up` against a real Ceph RADOS Gateway
// (S3). Two apps sign one request to their bucket every 100 ms, each with a new client and counted
// once with no retry after a failure (test/fixtures/rotation-app/app.mjs): one re-reads its
// credential file and password file before each attempt, one reads its access key, secret and
// bucket once from run.env and is restarted on a new secret (onNewPassword: restart). The provider
// alternates access keys on the consumer's one gateway user: a rotation adds the other key pair
// beside the old, which stays valid until the grace bound. Each consumer is rotated
// MESH_TEST_ROTATIONS times (3 unless told) with a short drain (MESH_ROTATION_GRACE 10 s unless
// MESH_TEST_ROTATION_GRACE says otherwise). Neither app may see a failed request. Each rotation's
// time is printed.
import { after, before, describe, it } from "node:test";
import { ROTATION_BACKENDS, RotationMesh } from "./rotation-mesh.ts";

const ROTATIONS = Number(process.env["MESH_TEST_ROTATIONS"] ?? "3");
const GRACE = process.env["MESH_TEST_ROTATION_GRACE"] ?? "10s";

describe("rotations through mesh up cost no failed login (S3)", { timeout: 600_000 }, () => {
  let mesh: RotationMesh;

  before(async () => {
    mesh = await RotationMesh.start({ backends: [ROTATION_BACKENDS.s3], grace: GRACE });
  });

  after(async () => {
    await mesh?.stop();
  });

  it(`${ROTATIONS} rotations of each consumer: 0 failed requests for the app that re-reads, none beyond its restart for the one restarted`, async () => {
    await mesh.assertRotationsCostNoLogin(ROTATIONS);
  });
});
