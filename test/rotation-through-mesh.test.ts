// Rotations that cost no failed login, through a real `mesh up` against a real Redis and MariaDB.
// Per backend two apps log in every 100 ms, each attempt a new connection counted once with no
// retry after a failure (test/fixtures/rotation-app/app.mjs): one re-reads its credential file and
// password file before each attempt, one reads its password once from run.env and is restarted on
// a new one (onNewPassword: restart). Each consumer is rotated MESH_TEST_ROTATIONS times (3 unless
// told; the figure is 10), with a short drain (MESH_ROTATION_GRACE 10 s unless
// MESH_TEST_ROTATION_GRACE says otherwise). Neither app may see a failed login: the old password
// stays valid beside the new one until the grace bound. Each rotation's time is printed. The rounds
// and what they must cost are test/rotation-mesh.ts's, shared with the S3 test.
import { after, before, describe, it } from "node:test";
import { ROTATION_BACKENDS, RotationMesh } from "./rotation-mesh.ts";

const ROTATIONS = Number(process.env["MESH_TEST_ROTATIONS"] ?? "3");
// Long enough that the first rotation still drains while mesh status and a second mesh rotate (each
// a CLI started anew) are asked about it on a loaded machine.
const GRACE = process.env["MESH_TEST_ROTATION_GRACE"] ?? "10s";

describe("rotations through mesh up cost no failed login (Redis, MariaDB)", { timeout: 600_000 }, () => {
  let mesh: RotationMesh;

  before(async () => {
    mesh = await RotationMesh.start({
      backends: [ROTATION_BACKENDS.redis, ROTATION_BACKENDS.mariadb],
      grace: GRACE,
    });
  });

  after(async () => {
    await mesh?.stop();
  });

  it(`${ROTATIONS} rotations of each consumer: 0 failed logins for the app that re-reads, none beyond its restart for the one restarted`, async () => {
    await mesh.assertRotationsCostNoLogin(ROTATIONS);
  });
});
