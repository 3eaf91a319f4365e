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
  secondLogin,
  type ActionEntry,
  type GuardedAdapter,
  type Provision,
  type RotationMark,
} from "@mesh/sdk";
import { mintPassword, recordingLogger, startCeph, type CephServer } from "@mesh/testkit";
import { bucketFor, createS3Adapter, resolveS3Config } from "../src/index.ts";
import { classifyS3Error, S3BucketAdapter, SdkConsumerS3, SignedGatewayAdmin } from "../src/adapter.ts";
import { type S3Events } from "../src/config.ts";
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

  /** The gateway user of `as` as its operator sees it: its access keys and its mark, no secret. */
  const userSeen = async (as: string): Promise<{ accessKeys: string[]; mark: Record<string, unknown> }> => {
    const info = (await ceph.radosgwAdmin(["user", "info", `--uid=${as}`])) as {
      display_name: string;
      keys: { access_key: string }[];
    };
    const mark = JSON.parse(info.display_name.replace(/^mesh-mark /, "")) as Record<string, unknown>;
    return { accessKeys: info.keys.map((k) => k.access_key).sort(), mark };
  };
  /** Whether a request signed with this access key and secret is served (a list of the consumer's bucket). */
  const signs = async (p: Provision, accessKey: string, secret: string): Promise<boolean> =>
    (await asConsumer(ceph, { as: accessKey, password: secret }, (c) =>
      refusal(c.send(new ListObjectsV2Command({ Bucket: bucketFor(p.as), MaxKeys: 1 }))),
    )) === undefined;

  void it("records the mint time of the password applied in the mark, and reads a mark without one as unknown", async () => {
    const entryOf = async (as: string) => (await adapter.inventory()).find((e) => e.as === as);
    const p = { ...provision("minted"), minted: "2026-03-04T05:06:07.089Z" };
    await adapter.create(p, signal());
    assert.equal((await entryOf(p.as))?.minted, p.minted);
    assert.equal((await userSeen(p.as)).mark["minted"], p.minted, "in the display name");
    // A new password minted later (as `mesh rotate --now` gives): the mark follows it.
    const next = { ...p, password: mintPassword(), minted: "2026-05-06T07:08:09.000Z" };
    await adapter.create(next, signal());
    assert.equal((await entryOf(p.as))?.minted, next.minted);
    assert.equal(await adapter.holds(next, signal()), true);

    // A consumer made by a mesh of before mint times records none.
    const unknown = provision("minted_none");
    await adapter.create(unknown, signal());
    assert.equal((await entryOf(unknown.as))?.minted, undefined);
    assert.equal("minted" in (await userSeen(unknown.as)).mark, false);

    // The mark a provider of before mint times wrote is read as it was, the consumer still held.
    const admin = new SignedGatewayAdmin(resolveS3Config({ adminUrl: ceph.adminUrl, instance: "main" }));
    const old = { v: 1, instance: "main", state: "active", bucket: bucketFor(p.as) };
    const written = await admin.request(
      "POST",
      "/admin/user",
      { uid: p.as, "display-name": `mesh-mark ${JSON.stringify(old)}` },
      signal(),
    );
    assert.equal(written.status, 200);
    const entry = await entryOf(p.as);
    assert.equal(entry?.state, "active");
    assert.equal(entry?.minted, undefined);
    assert.equal(await adapter.holds(next, signal()), true);

    // Applied again, the mark records it; retired, it gives none.
    await adapter.create(next, signal());
    assert.equal((await entryOf(p.as))?.minted, next.minted);
    await adapter.retire(p.as, p.derived, "unasked (test)", new Date());
    assert.equal((await entryOf(p.as))?.minted, undefined);
    assert.equal("minted" in (await userSeen(p.as)).mark, false);
  });

  void it("a rotation whose key pair failed half-way is in the mark as phase add, and a new adapter finishes it", async () => {
    const resolved = resolveS3Config({ adminUrl: ceph.adminUrl, instance: "main" });
    const real = new SignedGatewayAdmin(resolved);
    let failKeys = true;
    // The gateway refuses the new key pair once, as a provider killed between the mark and the key would leave it.
    const flaky = new S3BucketAdapter(
      {
        request: (method, path, query, sig) =>
          failKeys && method === "PUT" && "key" in query
            ? Promise.reject(new Error("killed before the key pair was made"))
            : real.request(method, path, query, sig),
      },
      new SdkConsumerS3(resolved),
      resolved,
      recordingLogger(),
      undefined,
    );
    const p = provision("halfway");
    await adapter.create(p, signal());
    const next = { ...p, password: mintPassword(), login: secondLogin(p.as), retiring: p.password };
    const rotation: RotationMark = {
      phase: "drain",
      since: new Date().toISOString(),
      until: new Date(Date.now() + 60_000).toISOString(),
    };
    await assert.rejects(flaky.overlap(next, rotation, signal()), /killed before/);
    const seen = await userSeen(p.as);
    assert.deepEqual(seen.accessKeys, [p.as], "only the old key pair so far");
    assert.deepEqual(seen.mark["rotation"], { ...rotation, phase: "add" }, "the mark says a rotation began");
    const entry = (await adapter.inventory()).find((e) => e.as === p.as);
    assert.equal(entry?.rotation?.phase, "add", "a restarted provider reads it from the inventory");
    assert.equal(await adapter.holds(next, signal()), false, "not held until both key pairs are made");
    assert.equal(await signs(p, p.as, p.password), true, "the old key pair still signs");

    failKeys = false;
    await adapter.overlap(next, rotation, signal());
    assert.equal(await adapter.holds(next, signal()), true);
    assert.deepEqual((await userSeen(p.as)).accessKeys, [p.as, next.login].sort(), "both key pairs");
    assert.deepEqual((await userSeen(p.as)).mark["rotation"], rotation, "phase drain once both sign");
    assert.equal(await signs(p, next.login, next.password), true, "the new key pair signs");
    assert.equal(await signs(p, p.as, p.password), true, "the old key pair still signs");
  });

  void it("through the harness: a rotation adds a key pair, a provider restarted mid-drain keeps both until the grace bound, then only the new one signs; --now removes the old one at once", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-s3-rotation-"));
    const receives = join(dir, "s3-bucket.json");
    const write = async (path: string, text: string): Promise<void> => {
      await writeFile(`${path}.tmp`, text, { mode: 0o600 });
      await rename(`${path}.tmp`, path);
    };
    const p = provision("rotated");
    const entry = (extra: Record<string, unknown>): string =>
      JSON.stringify({
        requirement: "s3-bucket",
        given: [{ as: p.as, node: "n1", values: {}, derived: p.derived, ...extra }],
      });
    const actions: ActionEntry[] = [];
    const logger = recordingLogger();
    const start = (grace: number) =>
      runProvisioner(
        "s3-bucket",
        createS3Adapter({ adminUrl: ceph.adminUrl, instance: "rotation", requestTimeoutMs: 5_000 }),
        {
          receives,
          instance: "rotation",
          every: 3_600_000,
          watch: false,
          rotationGrace: grace,
          logger,
          actions: { append: (e) => actions.push(e) },
        },
      );
    await write(join(dir, "first"), p.password);
    await write(receives, entry({ secret: join(dir, "first") }));
    let handle = start(8_000);
    try {
      await handle.ready;
      assert.equal(await signs(p, p.as, p.password), true);

      // mesh rotate: the new password on the second access key, the old one given as retiring.
      const second = mintPassword();
      await write(join(dir, "second"), second);
      await write(
        receives,
        entry({ secret: join(dir, "second"), login: secondLogin(p.as), retiring: join(dir, "first") }),
      );
      await handle.pass("watch");
      const status = handle.status().consumers.find((c) => c.login === p.as);
      assert.equal(status?.rotation?.phase, "drain");
      assert.equal(await signs(p, secondLogin(p.as), second), true, "the new key pair signs");
      assert.equal(await signs(p, p.as, p.password), true, "the old key pair still signs while it drains");
      assert.equal((await userSeen(p.as)).mark["rotation"] !== undefined, true, "the mark records it");
      assert.deepEqual(
        actions.filter((a) => a.login === p.as && a.action.startsWith("rotation-")).map((a) => a.action),
        ["rotation-add", "rotation-deliver", "rotation-drain"],
      );

      // The provider goes away mid-drain; another one reads the rotation from the mark.
      await handle.stop();
      handle = start(8_000);
      await handle.ready;
      assert.equal(
        handle.status().consumers.find((c) => c.login === p.as)?.rotation?.phase,
        "drain",
        "the restarted provider knows the rotation",
      );
      assert.equal(await signs(p, p.as, p.password), true, "the old key pair is kept until the grace bound");
      assert.equal(await signs(p, secondLogin(p.as), second), true);
      const marked = (await userSeen(p.as)).mark["rotation"] as { until: string } | undefined;
      const until = Date.parse(marked?.until ?? "");
      assert.ok(until > Date.now(), "the grace bound has not passed yet");
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, until - Date.now()) + 200));
      await handle.pass("periodic");
      assert.equal(await signs(p, p.as, p.password), false, "the old key pair is removed");
      assert.equal(await signs(p, secondLogin(p.as), second), true, "the new key pair signs");
      const after = await userSeen(p.as);
      assert.deepEqual(after.accessKeys, [secondLogin(p.as)]);
      assert.equal(after.mark["rotation"], undefined, "the mark forgets the rotation");
      assert.equal(after.mark["bucket"], bucketFor(p.as), "the bucket stays the first login's");

      // mesh rotate --now: back on the first access key, no overlap, the leaked pair gone at once.
      const third = mintPassword();
      await write(join(dir, "third"), third);
      await write(receives, entry({ secret: join(dir, "third"), cut: true }));
      await handle.pass("watch");
      assert.equal(await signs(p, secondLogin(p.as), second), false, "the leaked key pair is refused");
      assert.equal(await signs(p, p.as, third), true, "the new one signs");
      assert.deepEqual((await userSeen(p.as)).accessKeys, [p.as]);
      assert.ok(actions.some((a) => a.login === p.as && a.action === "sessions-ended"));
      const said = logger.lines.join("\n");
      for (const secret of [p.password, second, third])
        assert.ok(!said.includes(secret), "no secret in the log");
    } finally {
      await handle.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
