// Postgres consumers rotated again and again through a real `mesh up` (test/rotation-mesh.ts), while
// two apps log in every 100 ms: one reads its credential file, then the password file it names,
// before each connection, one reads its password once from run.env and is restarted on a new one.
// Not one login fails. Postgres holds one password per role, so each rotation moves a consumer to
// its other login (`<module>_postgres` and `<module>_postgres_2`, a member of the first acting as
// it), the old one valid until the drain ends (MESH_ROTATION_GRACE, short here), then disabled; the
// database stays the first login's.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { secondLogin } from "@mesh/manifest";
import { ROTATION_BACKENDS, RotationMesh } from "./rotation-mesh.ts";

const ROTATIONS = 4;
// Short: how mesh status shows a rotation under way is test/rotation-through-mesh.test.ts's, so this
// one asks nothing while the drain lasts; long enough for the restarted app to be stopped and started
// again on a loaded machine before the old password goes.
const GRACE = "5s";

describe(
  "Postgres consumers rotated through mesh up, alternating their two logins",
  { timeout: 300_000 },
  () => {
    let mesh: RotationMesh;

    before(async () => {
      mesh = await RotationMesh.start({ backends: [ROTATION_BACKENDS.postgres], grace: GRACE });
    });

    after(async () => {
      await mesh?.stop();
    });

    it(`${ROTATIONS} rotations: no failed login, the old login disabled once each drain ends`, async () => {
      const server = mesh.postgres ?? assert.fail("the rotation mesh started no PostgreSQL");
      const canLogIn = async (role: string): Promise<boolean | undefined> =>
        (
          await server.query<{ can: boolean }>("SELECT rolcanlogin AS can FROM pg_roles WHERE rolname = $1", [
            role,
          ])
        )[0]?.can;
      await mesh.assertRotationsCostNoLogin(ROTATIONS, {
        showFirst: false,
        afterRound: async (round) => {
          for (const app of mesh.apps) {
            const first = mesh.loginOf(app);
            // Odd rounds move the consumer to its second login, even ones back to its first.
            const [now, was] = round % 2 === 1 ? [secondLogin(first), first] : [first, secondLogin(first)];
            assert.equal(await canLogIn(now), true, `${now} logs in after rotation ${round}`);
            assert.equal(await canLogIn(was), false, `${was} no longer logs in once rotation ${round} ended`);
          }
        },
      });
      for (const app of mesh.apps) {
        const login = mesh.loginOf(app);
        const owners = await server.query<{ owner: string }>(
          "SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = $1",
          [login],
        );
        assert.equal(owners[0]?.owner, login, `${app.module}'s database still belongs to its first login`);
      }
    });
  },
);
