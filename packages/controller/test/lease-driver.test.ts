import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { closeBus, createAuthority, openState, type BusState } from "@mesh/bus";
import { CONTROLLER_LEASE_KEY, LeaseDriver } from "../src/lease-driver.ts";
import { ControllerLease, type LeaseTimings } from "../src/controller-lease.ts";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAsController } from "./test-mesh.ts";

const TIMINGS: LeaseTimings = { renewEveryMs: 200, stepDownAfterMs: 600, takeOverAfterMs: 1_000 };

void describe("the controller lease on a real bucket", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let bucket: BusState<unknown>;

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    nc = await connectAsController(authority, nats.url);
    bucket = await openState<unknown>(nc, "mesh-lease-test");
  });
  after(async () => {
    await closeBus(nc);
    await nats.stop();
  });

  void it("lets exactly one of two controllers that find no lease take it, by compare-and-set", async () => {
    // One clock for both, moved by hand: neither may take over by waiting.
    const now = (): number => 0;
    const said: string[] = [];
    const drivers = ["one", "two"].map((id) => {
      const lease = new ControllerLease(id, TIMINGS, now);
      const driver = new LeaseDriver({
        bucket,
        lease,
        timings: TIMINGS,
        now,
        logger: quietLogger,
        changed: async (leading) => void said.push(`${id} ${leading ? "leads" : "stands by"}`),
      });
      return { lease, driver };
    });
    await Promise.all(drivers.map((d) => d.driver.tick()));
    const leading = drivers.filter((d) => d.lease.leading());
    assert.equal(leading.length, 1, "exactly one leads");
    const winner = leading[0]!.lease.self;
    assert.deepEqual(said, [`${winner} leads`]);
    const stored = await bucket.entry(CONTROLLER_LEASE_KEY);
    assert.deepEqual(stored?.value, { holder: winner, term: 1 });

    // Renewals move the revision; the other sees it and keeps standing by.
    await Promise.all(drivers.map((d) => d.driver.tick()));
    assert.ok((await bucket.entry(CONTROLLER_LEASE_KEY))!.revision > stored!.revision);
    assert.equal(drivers.filter((d) => d.lease.leading()).length, 1);
    const loser = drivers.find((d) => !d.lease.leading())!;
    assert.deepEqual(loser.lease.seen(), { holder: winner, term: 1 });
  });

  void it("gives the lease up on a clean stop, so a standby takes it over at its next reading in the next term", async () => {
    const released = await openState<unknown>(nc, "mesh-lease-release-test");
    // The standby's clock never moves: it could not take over by waiting the lease out.
    const now = (): number => 0;
    const make = (id: string, patient: boolean) => {
      const lease = new ControllerLease(id, TIMINGS, now, patient);
      return {
        lease,
        driver: new LeaseDriver({
          bucket: released,
          lease,
          timings: TIMINGS,
          now,
          logger: quietLogger,
          changed: async () => undefined,
        }),
      };
    };
    const leader = make("leader", false);
    const standby = make("standby", true);
    await leader.driver.tick();
    assert.equal(leader.lease.term(), 1);
    await standby.driver.tick();
    await standby.driver.tick();
    assert.equal(standby.lease.leading(), false, "a live lease is not taken over");

    await leader.driver.stop();
    assert.equal(leader.lease.leading(), false, "it leads no more once stopped");
    assert.deepEqual((await released.entry(CONTROLLER_LEASE_KEY))?.value, {
      holder: "leader",
      term: 1,
      released: true,
    });
    await standby.driver.tick();
    assert.equal(standby.lease.leading(), true, "the standby took the released lease at once");
    assert.equal(standby.lease.term(), 2);
    assert.deepEqual((await released.entry(CONTROLLER_LEASE_KEY))?.value, { holder: "standby", term: 2 });

    // A stopped controller whose lease another took since writes nothing back.
    const revision = (await released.entry(CONTROLLER_LEASE_KEY))?.revision;
    await standby.driver.tick();
    const late = make("leader", false);
    late.lease.written(revision ?? 0, { holder: "leader", term: 1 });
    await late.driver.stop();
    assert.deepEqual((await released.entry(CONTROLLER_LEASE_KEY))?.value, { holder: "standby", term: 2 });
    await standby.driver.stop();
  });
  void it("keeps the lease while taking up the lead lasts longer than the lease itself", async () => {
    const slow = await openState<unknown>(nc, "mesh-lease-slow-test");
    const lease = new ControllerLease("slow", TIMINGS, Date.now);
    let revisionsWhileServing = 0;
    const driver = new LeaseDriver({
      bucket: slow,
      lease,
      timings: TIMINGS,
      now: Date.now,
      logger: quietLogger,
      // A first delivery of a large fleet: three times as long as the lease lasts unrenewed.
      changed: async (leading) => {
        if (!leading) return;
        const first = (await slow.entry(CONTROLLER_LEASE_KEY))!.revision;
        await new Promise((resolve) => setTimeout(resolve, 3 * TIMINGS.stepDownAfterMs));
        revisionsWhileServing = (await slow.entry(CONTROLLER_LEASE_KEY))!.revision - first;
        assert.ok(lease.leading(), "still leads when serving ends");
      },
    });
    await driver.tick();
    assert.ok(revisionsWhileServing >= 2, `renewed ${revisionsWhileServing} time(s) while serving`);
    assert.ok(lease.leading());
    await driver.stop();
  });
  void it("takes over while what a standby does meanwhile still waits on the bus", async () => {
    const own = await openState<unknown>(nc, "mesh-lease-idle-test");
    await own.put(CONTROLLER_LEASE_KEY, { holder: "gone", term: 3 });
    let clock = 0;
    const now = (): number => clock;
    const lease = new ControllerLease("standby", TIMINGS, now, true);
    let following = 0;
    let release: () => void = () => undefined;
    const driver = new LeaseDriver({
      bucket: own,
      lease,
      timings: TIMINGS,
      now,
      logger: quietLogger,
      changed: async () => undefined,
      // A read of the leader's fleet the bus does not answer (its server cut off).
      idle: () => {
        following++;
        return new Promise<void>((resolve) => (release = resolve));
      },
    });
    // A tick that waited for the following would never end: bounded, it says so.
    const tick = async (): Promise<void> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("the tick waited for the following")), 5_000);
      });
      await Promise.race([driver.tick(), late]).finally(() => clearTimeout(timer));
    };
    await tick();
    assert.equal(lease.leading(), false);
    clock += TIMINGS.takeOverAfterMs + 1;
    await tick();
    assert.equal(lease.leading(), true, "took over, its following still waiting");
    assert.equal(following, 1, "one following at a time");
    assert.deepEqual((await own.entry(CONTROLLER_LEASE_KEY))?.value, { holder: "standby", term: 4 });
    release();
    await driver.stop();
  });
});
