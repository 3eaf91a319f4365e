// The private Ceph cluster the s3 tests run against: it serves S3 with the admin's key, cleans up
// after itself, and says which Debian packages to install when its binaries are missing.
import assert from "node:assert/strict";
import { access, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { startCeph } from "@mesh/testkit";
import { CephNotFoundError } from "../src/ceph-server.ts";

describe("startCeph", () => {
  it("serves a RADOS Gateway on a free loopback port, with an admin key, and removes everything when stopped", async () => {
    const ceph = await startCeph();
    try {
      assert.match(ceph.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
      const anonymous = await fetch(`${ceph.endpoint}/`);
      assert.equal(anonymous.status, 200, "the gateway answers S3");
      await anonymous.body?.cancel();
      const admin = (await ceph.radosgwAdmin(["user", "info", "--uid=mesh-admin"])) as {
        caps: { type: string; perm: string }[];
        keys: { access_key: string }[];
      };
      assert.deepEqual(admin.caps.map((c) => `${c.type}=${c.perm}`).sort(), [
        "buckets=*",
        "metadata=*",
        "usage=read",
        "users=*",
      ]);
      assert.equal(admin.keys[0]?.access_key, ceph.adminAccessKey);
      await ceph.stopGateway();
      await assert.rejects(fetch(`${ceph.endpoint}/`), "the gateway is down");
      await ceph.startGateway();
      const back = await fetch(`${ceph.endpoint}/`);
      assert.equal(back.status, 200, "and back on the same port");
      await back.body?.cancel();
    } finally {
      await ceph.stop();
    }
    await assert.rejects(access(ceph.dir), "its directory is removed");
  });

  it("names the Debian packages to install when the Ceph binaries are missing", async () => {
    const empty = await mkdtemp(join(tmpdir(), "mesh-empty-path-"));
    const saved = process.env["PATH"];
    process.env["PATH"] = empty;
    try {
      await assert.rejects(startCeph(), (err: unknown) => {
        assert.ok(err instanceof CephNotFoundError);
        assert.match(err.message, /not found on PATH; install the Debian packages radosgw ceph-mon ceph-osd/);
        return true;
      });
    } finally {
      process.env["PATH"] = saved;
      await rm(empty, { recursive: true, force: true });
    }
  });
});
