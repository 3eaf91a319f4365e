// The s3 provider's own promises, beyond the conformance kit, against one private Ceph cluster
// shared by every case: what a consumer's key can and cannot reach, retirement as S3 sees it, the
// bytes a delete reports, the events, and the refusals a person must act on.
import assert from "node:assert/strict";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import {
  GetObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
} from "@aws-sdk/client-s3";
import { checkModules, credentialFor, deriveValues, loadManifest } from "@mesh/manifest";
import {
  guardAdapter,
  isValidLogin,
  LOGIN_PATTERN,
  runProvisioner,
  type GuardedAdapter,
  type Provision,
} from "@mesh/sdk";
import { mintPassword, recordingLogger, startCeph, type CephServer } from "@mesh/testkit";
import { bucketFor, classifyS3Error, createS3Adapter, type S3Events } from "../src/index.ts";
import { asConsumer, refusal } from "./conformance-target.ts";

const here = dirname(fileURLToPath(import.meta.url));
const signal = (): AbortSignal => new AbortController().signal;

/** An events sink that keeps what it is told. */
function recordingEvents(): S3Events & {
  said: { event: string; body: Readonly<Record<string, unknown>> }[];
} {
  const said: { event: string; body: Readonly<Record<string, unknown>> }[] = [];
  return { said, emit: (event, body) => said.push({ event, body }) };
}

/** The S3 name rules (AWS's, the strictest): 3–63 of [a-z0-9-], a letter or digit at each end, no xn-- prefix. */
function isValidBucketName(name: string): boolean {
  return /^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/.test(name) && !name.startsWith("xn--");
}

void describe("the bucket named from a login", () => {
  void it("is a valid S3 bucket name for every valid login, and no two logins share one", () => {
    const login = fc.stringMatching(LOGIN_PATTERN);
    fc.assert(
      fc.property(login, (l) => isValidBucketName(bucketFor(l))),
      { numRuns: 2_000 },
    );
    fc.assert(
      fc.property(login, login, (a, b) => a === b || bucketFor(a) !== bucketFor(b)),
      { numRuns: 2_000 },
    );
    for (const l of ["a", "ab", "abc_", "a__", "xn__abc", "notes_s3_bucket", "z".repeat(32)]) {
      assert.ok(isValidLogin(l));
      assert.ok(isValidBucketName(bucketFor(l)), `${l} → ${bucketFor(l)}`);
    }
    assert.equal(bucketFor("notes_s3_bucket"), "notes-s3-bucket");
    assert.equal(bucketFor("ab"), "0ab0");
  });

  void it("is what the manifest derives, so the consumer's credential names it in its URL", async () => {
    const manifest = await loadManifest(join(here, "..", "module.json"));
    const provided = manifest.provides.get("s3-bucket");
    assert.ok(provided);
    const derived = deriveValues(provided, {}, "files_s3_bucket");
    assert.deepEqual(derived, { bucket: "files-s3-bucket" });
    const credential = credentialFor(
      {
        consumer: "files",
        consumerNode: "n1",
        interface: "s3-bucket",
        login: "files_s3_bucket",
        values: {},
        derived,
        provider: "s3",
        providerNode: "n1",
      },
      { scheme: "http", host: "127.0.0.1", port: 7480, path: provided.endpoint?.path ?? "", query: {} },
      "/var/lib/mesh",
    );
    assert.equal(credential.url, "http://files_s3_bucket@127.0.0.1:7480/files-s3-bucket");
    assert.equal(credential.values["bucket"], "files-s3-bucket");
  });

  void it("mesh check finds the events the code emits declared in the manifest", async () => {
    assert.deepEqual(await checkModules([join(here, "..")]), []);
  });
});

void describe("the s3 adapter on a real RADOS Gateway", { timeout: 300_000 }, () => {
  let ceph: CephServer;
  let adapter: GuardedAdapter;
  const events = recordingEvents();
  let serial = 0;
  const provision = (stem: string, values: Readonly<Record<string, unknown>> = {}): Provision => {
    const as = `${stem}_${++serial}`;
    return { as, password: mintPassword(), values, derived: { bucket: bucketFor(as) } };
  };
  const put = (p: Provision, key: string, body: string): Promise<unknown> =>
    asConsumer(ceph, p, (c) =>
      c.send(new PutObjectCommand({ Bucket: bucketFor(p.as), Key: key, Body: body })),
    );
  const get = (p: Provision, key: string): Promise<string | undefined> =>
    asConsumer(ceph, p, async (c) => {
      const answer = await c.send(new GetObjectCommand({ Bucket: bucketFor(p.as), Key: key }));
      return answer.Body?.transformToString();
    });

  before(async () => {
    ceph = await startCeph();
    adapter = guardAdapter(
      createS3Adapter({ adminUrl: ceph.adminUrl, instance: "main", logger: recordingLogger(), events }),
      { instance: "main" },
    );
  });
  after(async () => {
    await adapter?.close();
    await ceph?.stop();
  });

  void it("keeps a consumer's key out of another consumer's bucket: no read, no write, no list", async () => {
    const a = provision("reader");
    const b = provision("owner");
    await adapter.create(a, signal());
    await adapter.create(b, signal());
    await put(b, "secret.txt", "b's own");
    const theirs = bucketFor(b.as);
    await asConsumer(ceph, a, async (c) => {
      assert.equal(
        await refusal(c.send(new GetObjectCommand({ Bucket: theirs, Key: "secret.txt" }))),
        "AccessDenied",
      );
      assert.equal(
        await refusal(c.send(new PutObjectCommand({ Bucket: theirs, Key: "x", Body: "intruder" }))),
        "AccessDenied",
      );
      assert.equal(await refusal(c.send(new ListObjectsV2Command({ Bucket: theirs }))), "AccessDenied");
      const listed = await c.send(new ListBucketsCommand({}));
      assert.deepEqual(
        listed.Buckets?.map((x) => x.Name),
        [bucketFor(a.as)],
        "a sees only its own bucket",
      );
    });
    assert.equal(await get(b, "secret.txt"), "b's own");
  });

  void it("refuses a wrong secret key", async () => {
    const p = provision("wrong_secret");
    await adapter.create(p, signal());
    const refused = await asConsumer(ceph, { as: p.as, password: `${p.password}x` }, (c) =>
      refusal(c.send(new ListObjectsV2Command({ Bucket: bucketFor(p.as) }))),
    );
    assert.equal(refused, "SignatureDoesNotMatch");
  });

  void it("refuses a retired consumer's key and keeps its objects; asked again, it reads them", async () => {
    const p = provision("sleeper");
    await adapter.create(p, signal());
    await put(p, "kept.txt", "from before");
    await adapter.retire(p.as, p.derived, "unasked (test)", new Date());
    const refused = await asConsumer(ceph, p, (c) =>
      refusal(c.send(new GetObjectCommand({ Bucket: bucketFor(p.as), Key: "kept.txt" }))),
    );
    assert.equal(refused, "UserSuspended");
    const stats = (await ceph.radosgwAdmin(["bucket", "stats", `--bucket=${bucketFor(p.as)}`])) as {
      usage: { "rgw.main"?: { num_objects: number } };
    };
    assert.equal(stats.usage["rgw.main"]?.num_objects, 1, "its object is kept");
    await adapter.create(p, signal());
    assert.equal(await get(p, "kept.txt"), "from before");
    assert.equal(await adapter.holds(p, signal()), true);
  });

  void it("reports as freed the bytes of the objects a delete removed", async () => {
    const p = provision("leaving");
    await adapter.create(p, signal());
    await put(p, "one.bin", "x".repeat(1000));
    await put(p, "two.bin", "y".repeat(2345));
    await adapter.retire(p.as, p.derived, "unasked (test)", new Date());
    const { freedBytes } = await adapter.delete({ as: p.as, derived: p.derived });
    assert.equal(freedBytes, 3345);
    assert.equal(await adapter.exists?.(p.as), false, "the gateway user is gone");
    await assert.rejects(
      ceph.radosgwAdmin(["bucket", "stats", `--bucket=${bucketFor(p.as)}`]),
      "the bucket is gone",
    );
  });

  void it("announces bucket.created on create, and bucket.removed on retire and on delete", async () => {
    const p = provision("announced");
    const from = events.said.length;
    await adapter.create(p, signal());
    await adapter.create(p, signal());
    await adapter.retire(p.as, p.derived, "unasked (test)", new Date());
    await adapter.delete({ as: p.as, derived: p.derived });
    const said = events.said.slice(from).map((e) => [e.event, e.body["bucket"], e.body["reason"]]);
    assert.deepEqual(said, [
      ["bucket.created", bucketFor(p.as), undefined],
      ["bucket.removed", bucketFor(p.as), "retired"],
      ["bucket.removed", bucketFor(p.as), "deleted"],
    ]);
    for (const e of events.said)
      assert.ok(!JSON.stringify(e.body).includes(p.password), "no secret in an event");
  });

  void it("makes the bucket even when announcing fails", async () => {
    const failing = guardAdapter(
      createS3Adapter({
        adminUrl: ceph.adminUrl,
        instance: "main",
        logger: recordingLogger(),
        events: {
          emit: () => {
            throw new Error("the bus is away");
          },
        },
      }),
      { instance: "main" },
    );
    const p = provision("unheard");
    await failing.create(p, signal());
    assert.equal(await failing.holds(p, signal()), true);
  });

  void it("refuses values that ask for another consumer's bucket, naming the field and the fix", async () => {
    const other = provision("victim");
    await adapter.create(other, signal());
    const p = provision("greedy", { bucket: bucketFor(other.as) });
    const err = await adapter.create(p, signal()).then(
      () => assert.fail("created"),
      (e: unknown) => e as Error,
    );
    assert.equal(err.name, "ValueRefusedError");
    assert.match(err.message, /values\.bucket/);
    assert.match(err.message, /remove bucket from the consumer's values/);
    assert.equal(adapter.classify(err), "refused");
    assert.equal(await adapter.exists?.(p.as), false, "nothing was made");
    const stolen = { ...provision("thief"), derived: { bucket: bucketFor(other.as) } };
    await assert.rejects(adapter.create(stolen, signal()), /derived\.bucket/);
  });

  void it("refuses a password that cannot be an S3 secret key, in words", async () => {
    const p = { ...provision("unicode"), password: "pässwörd ✓" };
    await assert.rejects(adapter.create(p, signal()), { name: "S3PasswordRefusedError" });
    assert.equal(await adapter.exists?.(p.as), false);
  });

  void it("refuses an admin that lacks the caps, naming the admin URL and the caps to add", async () => {
    const weakUrl = await ceph.createUser("weak-admin", "users=read");
    const weak = guardAdapter(createS3Adapter({ adminUrl: weakUrl, instance: "main" }), { instance: "main" });
    const err = await weak.create(provision("capless"), signal()).then(
      () => assert.fail("created"),
      (e: unknown) => e as Error,
    );
    assert.equal(err.name, "S3AdminCapsError");
    assert.match(err.message, /adminUrl/);
    assert.match(
      err.message,
      /radosgw-admin caps add --uid=<admin uid> --caps="users=\*;buckets=\*;usage=read;metadata=\*"/,
    );
    assert.equal(weak.classify(err), "refused");
    assert.ok(!err.message.includes(new URL(weakUrl).password), "the secret key is not in the message");
  });

  void it("says a wrong admin secret is a rejected credential, without the secret", async () => {
    const url = new URL(ceph.adminUrl);
    url.password = "not-the-secret";
    const wrong = guardAdapter(createS3Adapter({ adminUrl: url.href, instance: "main" }), {
      instance: "main",
    });
    const err = await wrong.inventory().then(
      () => assert.fail("listed"),
      (e: unknown) => e as Error,
    );
    assert.equal(err.name, "S3AdminCredentialsError");
    assert.equal(wrong.classify(err), "credentials-rejected");
    assert.match(err.message, /check the access key and secret key in the admin URL/);
  });

  void it("is unreachable while the gateway is down, and heals without a restart when it is back", async () => {
    const p = provision("patient");
    const outage = createS3Adapter({ adminUrl: ceph.adminUrl, instance: "main", requestTimeoutMs: 5_000 });
    await ceph.stopGateway();
    try {
      const err = await outage.create(p, signal()).then(
        () => assert.fail("created while the gateway is down"),
        (e: unknown) => e,
      );
      assert.equal(classifyS3Error(err), "unreachable");
      assert.equal(adapter.classify(err), "unreachable");
    } finally {
      await ceph.startGateway();
    }
    await outage.create(p, signal());
    assert.equal(await outage.holds(p, signal()), true);
  });

  void it("answers holdsMany for a hundred consumers as holds does", async () => {
    const ps = Array.from({ length: 100 }, () => provision("many"));
    await Promise.all(ps.map((p) => adapter.create(p, signal())));
    const unknown = provision("never_made");
    const answers = await adapter.holdsMany([...ps, unknown], signal());
    assert.ok(ps.every((p) => answers.get(p.as) === true));
    assert.equal(answers.get(unknown.as), false);
  });

  void it("through the harness: unreachable while the gateway is down, active when it is back, and cleanup delete reports the bytes it removed", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-s3-harness-"));
    const receives = join(dir, "s3-bucket.json");
    const write = async (path: string, text: string): Promise<void> => {
      await writeFile(`${path}.tmp`, text, { mode: 0o600 });
      await rename(`${path}.tmp`, path);
    };
    const p = provision("harnessed");
    const contributions = (given: Provision[]): string =>
      JSON.stringify({
        requirement: "s3-bucket",
        given: given.map((g) => ({
          as: g.as,
          secret: join(dir, g.as),
          node: "n1",
          values: {},
          derived: g.derived,
        })),
      });
    await write(join(dir, p.as), p.password);
    await write(receives, contributions([p]));
    const handle = runProvisioner(
      "s3-bucket",
      createS3Adapter({ adminUrl: ceph.adminUrl, instance: "harness", requestTimeoutMs: 5_000 }),
      {
        receives,
        instance: "harness",
        every: 3_600_000,
        watch: false,
        stablePasses: 1,
        logger: recordingLogger(),
      },
    );
    try {
      await ceph.stopGateway();
      try {
        await handle.ready;
        const failing = handle.status().consumers.find((c) => c.login === p.as);
        assert.equal(failing?.state, "failing");
        assert.equal(failing?.class, "unreachable");
      } finally {
        await ceph.startGateway();
      }
      await handle.pass("periodic");
      assert.equal(
        handle.status().consumers.find((c) => c.login === p.as)?.state,
        "active",
        "healed, no restart",
      );
      await put(p, "a.bin", "a".repeat(4096));
      await put(p, "b.txt", "bytes");
      await write(receives, contributions([]));
      for (let i = 0; i < 3 && handle.cleanupList().length === 0; i++) await handle.pass("periodic");
      assert.deepEqual(
        handle.cleanupList().map((e) => e.login),
        [p.as],
        "retired once unasked",
      );
      const deleted = await handle.cleanupDelete(p.as, "test");
      assert.equal(deleted.freedBytes, 4096 + 5);
    } finally {
      await handle.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
