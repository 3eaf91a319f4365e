// Rotations that cost no failed login, through a real `mesh up` against a real Redis and MariaDB.
// Per backend two apps log in every 100 ms, each attempt a new connection counted once with no
// retry after a failure (test/fixtures/rotation-app/app.mjs): one re-reads its credential file and
// password file before each attempt, one reads its password once from run.env and is restarted on
// a new one (onNewPassword: restart). Each consumer is rotated MESH_TEST_ROTATIONS times (3 unless
// told; the figure is 10), with a short drain (MESH_ROTATION_GRACE 10 s unless
// MESH_TEST_ROTATION_GRACE says otherwise). Neither app may see a failed login: the old password
// stays valid beside the new one until the grace bound. Each rotation's time is printed.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import { runMesh } from "../packages/cli/test/run-mesh.ts";
import { ROTATION_BACKENDS, RotationMesh, type RotationApp } from "./rotation-mesh.ts";

const ROTATIONS = Number(process.env["MESH_TEST_ROTATIONS"] ?? "3");
// Long enough that the first rotation still drains while mesh status and a second mesh rotate (each
// a CLI started anew) are asked about it on a loaded machine.
const GRACE = process.env["MESH_TEST_ROTATION_GRACE"] ?? "10s";

describe("rotations through mesh up cost no failed login (Redis, MariaDB)", { timeout: 600_000 }, () => {
  let mesh: RotationMesh;
  const said = (err: unknown): never => {
    throw mesh.said(err);
  };

  before(async () => {
    mesh = await RotationMesh.start({
      backends: [ROTATION_BACKENDS.redis, ROTATION_BACKENDS.mariadb],
      grace: GRACE,
    });
  });

  after(async () => {
    await mesh?.stop();
  });

  const drainShown = async (app: RotationApp): Promise<void> => {
    const state = mesh.state;
    const shown = await until(
      `mesh status to show ${app.module}'s rotation`,
      async () => {
        const run = await runMesh(["status", "--json", "--state", state]);
        const status = JSON.parse(run.stdout) as {
          consumers: { consumer: string; rotation?: { phase: string; since: string; until?: string } }[];
        };
        return status.consumers.find((c) => c.consumer === app.module)?.rotation;
      },
      { seconds: 60, everyMs: 250 },
    ).catch(said);
    assert.match(shown.phase, /^(asked|add|drain)$/);
    assert.ok(!Number.isNaN(Date.parse(shown.since)), "since when, as a date");
    // The text names it once the node's report of the provider's phase has come (a moment later).
    await until(
      `mesh status to list ${app.module}'s rotation under way`,
      async () => {
        const text = await runMesh(["status", "--state", state]);
        return new RegExp(`ROTATIONS UNDER WAY[\\s\\S]*${app.module} \\(${app.backend.iface}`).test(
          text.stdout,
        )
          ? true
          : undefined;
      },
      { seconds: 60, everyMs: 250 },
    ).catch(said);
    const again = await mesh.rotate(app);
    assert.equal(again.code, 1, again.stdout + again.stderr);
    assert.match(again.stderr, /is being rotated \(phase (asked|add|drain) since /);
    assert.match(again.stderr, /nothing was rotated/);
  };

  it(`${ROTATIONS} rotations of each consumer: 0 failed logins for the app that re-reads, none beyond its restart for the one restarted`, async () => {
    // Every app logs in before anything is rotated.
    await until(
      "every app to log in",
      async () => {
        for (const app of mesh.apps)
          if (!(await mesh.attempts(app)).some((a) => a.ok === true)) return undefined;
        return true;
      },
      { seconds: 120, everyMs: 200 },
    ).catch(said);
    const startedAt = Date.now();
    const phases: string[] = [];
    for (let round = 1; round <= ROTATIONS; round++) {
      const tags = new Map<string, string | undefined>();
      for (const app of mesh.apps) tags.set(app.module, (await mesh.consumerStatus(app))?.applied);
      const t0 = Date.now();
      const took: string[] = [];
      const first = mesh.apps[0] as RotationApp;
      await Promise.all(
        mesh.apps.map(async (app) => {
          // While the first rotation is under way: mesh status shows where it is, and another mesh
          // rotate of the same consumer is refused, naming its phase. Asked beside the rotate, from
          // the moment status shows it, not after its --wait returns: a CLI takes seconds to start
          // on a loaded machine, and the drain may be over by then.
          const shown =
            round === 1 && app === first
              ? drainShown(app).then(
                  () => undefined,
                  (err: unknown) => err,
                )
              : undefined;
          const run = await mesh.rotate(app, "--wait", "60s");
          assert.equal(run.code, 0, `${app.module}: ${run.stdout}${run.stderr}`);
          took.push(`${app.module} ${Date.now() - t0} ms`);
          const failed = await shown;
          if (failed !== undefined) throw failed;
        }),
      );
      const applied = Date.now() - t0;
      // The rotation ends when the old password goes: the provider's status names no rotation and
      // a new password applied.
      await until(
        `rotation ${round} to end for every consumer`,
        async () => {
          for (const app of mesh.apps) {
            const c = await mesh.consumerStatus(app);
            if (c === undefined || c.rotation !== undefined || c.applied === tags.get(app.module))
              return undefined;
          }
          return true;
        },
        { seconds: 90, everyMs: 100 },
      ).catch(said);
      phases.push(
        `round ${round}: applied in ${applied} ms (${took.join(", ")}), over in ${Date.now() - t0} ms`,
      );
    }
    // A last stretch of logins with only the newest password valid.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    for (const app of mesh.apps) {
      const seen = (await mesh.attempts(app)).filter((a) => a.at >= startedAt);
      const logins = seen.filter((a) => a.ok !== undefined);
      const failed = logins.filter((a) => a.ok === false);
      const starts = seen.filter((a) => a.event === "start").length;
      console.log(
        `${app.module}: ${failed.length} failed / ${logins.length} attempts over ${ROTATIONS} rotations` +
          (app.mode === "once" ? `, restarted ${starts} times` : ""),
      );
      assert.deepEqual(
        failed.map((f) => f.why),
        [],
        `${app.module} (${app.mode === "reread" ? "re-reads before each login" : "restarted on a new password"}) never fails a login`,
      );
      assert.ok(logins.length >= 10 * ROTATIONS, `${app.module} kept logging in (${logins.length} attempts)`);
      if (app.mode === "once")
        assert.equal(starts, ROTATIONS, `${app.module} was restarted once per rotation`);
      else assert.equal(starts, 0, `${app.module} was never restarted`);
    }
    console.log(phases.join("\n"));
    assert.doesNotMatch(
      mesh.up.output(),
      /:\/\/[^@\s/]*:[^@\s/]+@/,
      "no URL with a password in mesh up's output",
    );
  });
});
