import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ControllerLease, DEFAULT_LEASE_TIMINGS, type LeaseStep } from "../src/controller-lease.ts";

/** A clock the test moves by hand. */
function fakeClock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1_000;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

/** Writes what `step` says as the bucket would take it, returning the new revision. */
function apply(lease: ControllerLease, step: LeaseStep, revision: number, sentAt?: number): number {
  assert.notEqual(step.kind, "wait");
  if (step.kind === "wait") return revision;
  lease.written(revision + 1, step.record, sentAt);
  return revision + 1;
}

void describe("the controller lease", () => {
  void it("is created at once by a controller that finds no lease, in term 1", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    assert.equal(lease.leading(), false);
    const step = lease.step();
    assert.deepEqual(step, { kind: "create", record: { holder: "a", term: 1 } });
    apply(lease, step, 0);
    assert.equal(lease.leading(), true);
    assert.equal(lease.term(), 1);
  });

  void it("is renewed by its holder with the revision it last wrote", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    let revision = apply(lease, lease.step(), 0);
    clock.advance(2_000);
    lease.observe({ revision, record: { holder: "a", term: 1 } });
    const step = lease.step();
    assert.deepEqual(step, { kind: "update", revision, record: { holder: "a", term: 1 } });
    revision = apply(lease, step, revision);
    clock.advance(5_000);
    assert.equal(lease.leading(), true, "5 s after an acknowledged renewal it still leads");
  });

  void it("stops leading 6 s after its last acknowledged renewal was sent", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    const sentAt = clock.now();
    clock.advance(1_500); // the acknowledgement took 1.5 s
    apply(lease, lease.step(), 0, sentAt);
    clock.advance(4_499);
    assert.equal(lease.leading(), true);
    clock.advance(1);
    assert.equal(lease.leading(), false, "6 s after the write was sent, not after it was acknowledged");
    assert.equal(lease.term(), undefined);
  });

  void it("leads again when a late renewal is acknowledged on the revision nobody changed", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    const revision = apply(lease, lease.step(), 0);
    clock.advance(7_000);
    assert.equal(lease.leading(), false);
    const step = lease.step();
    assert.deepEqual(step, { kind: "update", revision, record: { holder: "a", term: 1 } });
    apply(lease, step, revision);
    assert.equal(lease.leading(), true);
  });

  void it("is taken over by a standby 10 s after the revision it saw last changed, in the next term", () => {
    const clock = fakeClock();
    const standby = new ControllerLease("b", DEFAULT_LEASE_TIMINGS, clock.now, true);
    standby.observe({ revision: 7, record: { holder: "a", term: 3 } });
    clock.advance(9_000);
    standby.observe({ revision: 8, record: { holder: "a", term: 3 } }); // renewed: the wait starts again
    clock.advance(9_999);
    standby.observe({ revision: 8, record: { holder: "a", term: 3 } });
    assert.deepEqual(standby.step(), { kind: "wait" });
    clock.advance(1);
    const step = standby.step();
    assert.deepEqual(step, { kind: "update", revision: 8, record: { holder: "b", term: 4 } });
    apply(standby, step, 8);
    assert.equal(standby.leading(), true);
    assert.equal(standby.term(), 4);
  });

  void it("makes a patient standby wait even when there is no lease yet", () => {
    const clock = fakeClock();
    const standby = new ControllerLease("b", DEFAULT_LEASE_TIMINGS, clock.now, true);
    standby.observe(undefined);
    assert.deepEqual(standby.step(), { kind: "wait" });
    clock.advance(10_000);
    assert.deepEqual(standby.step(), { kind: "create", record: { holder: "b", term: 1 } });
  });

  void it("lets a restarted holder take its own lease back at once, in the same term", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe({ revision: 5, record: { holder: "a", term: 2 } });
    assert.deepEqual(lease.step(), { kind: "update", revision: 5, record: { holder: "a", term: 2 } });
  });

  void it("makes a leader stand by when it sees another holder or its write is refused", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    const revision = apply(lease, lease.step(), 0);
    lease.observe({ revision: revision + 1, record: { holder: "b", term: 2 } });
    assert.equal(lease.leading(), false);
    assert.deepEqual(lease.seen(), { holder: "b", term: 2 });
    assert.deepEqual(lease.step(), { kind: "wait" }, "the new holder's lease is live");

    const other = new ControllerLease("c", DEFAULT_LEASE_TIMINGS, clock.now);
    other.observe(undefined);
    apply(other, other.step(), 0);
    other.refused();
    assert.equal(other.leading(), false);
  });

  void it("gives the lease up on release, and a released lease is taken over at once in the next term", () => {
    const clock = fakeClock();
    const lease = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    lease.observe(undefined);
    const revision = apply(lease, lease.step(), 0);
    assert.deepEqual(lease.release(), { revision, record: { holder: "a", term: 1, released: true } });
    assert.equal(lease.leading(), false);
    assert.equal(lease.release(), undefined, "nothing to give up twice");

    // A standby whose clock has not moved: it waits out a live lease, not a released one.
    const standby = new ControllerLease("b", DEFAULT_LEASE_TIMINGS, clock.now, true);
    standby.observe({ revision, record: { holder: "a", term: 1 } });
    assert.deepEqual(standby.step(), { kind: "wait" });
    standby.observe({ revision: revision + 1, record: { holder: "a", term: 1, released: true } });
    assert.deepEqual(standby.step(), {
      kind: "update",
      revision: revision + 1,
      record: { holder: "b", term: 2 },
    });
    // Its own released lease, found by the same controller restarted: taken back in the same term.
    const again = new ControllerLease("a", DEFAULT_LEASE_TIMINGS, clock.now);
    again.observe({ revision: revision + 1, record: { holder: "a", term: 1, released: true } });
    assert.deepEqual(again.step(), {
      kind: "update",
      revision: revision + 1,
      record: { holder: "a", term: 1 },
    });
  });
});
