// A private Ceph cluster for tests: one monitor, one OSD keeping everything in memory (memstore) and a
// RADOS Gateway serving S3 and its admin API, all on free loopback ports in a temporary directory.
// The cluster's own daemons trust each other (auth none, loopback only); the S3 side still checks
// every request's signature, so a wrong secret is refused as on any S3 server.
import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { freePort } from "./free-port.ts";
import { awaitReady, logTail, spawnServer, terminate } from "./server-process.ts";

/** The binaries a cluster needs, and the Debian package of each. */
const BINARIES = {
  "ceph-mon": "ceph-mon",
  "ceph-osd": "ceph-osd",
  radosgw: "radosgw",
  rados: "ceph-common",
  monmaptool: "ceph-common",
  ceph: "ceph-common",
  "radosgw-admin": "ceph-common",
} as const;

/** The caps the provider's admin user needs: users, buckets, usage and metadata. */
export const CEPH_ADMIN_CAPS = "users=*;buckets=*;usage=read;metadata=*";

/** A running private Ceph cluster with a RADOS Gateway. */
export interface CephServer {
  readonly host: string;
  /** The gateway's port: S3 and the admin API (`/admin/...`). */
  readonly port: number;
  /** `http://127.0.0.1:<port>`: where S3 clients connect. */
  readonly endpoint: string;
  /** `http://<access key>:<secret key>@127.0.0.1:<port>`: a gateway user with `CEPH_ADMIN_CAPS`. */
  readonly adminUrl: string;
  readonly adminAccessKey: string;
  readonly adminSecretKey: string;
  /** The cluster's directory (configuration, monitor store, logs); removed by `stop()`. */
  readonly dir: string;
  /**
   * Makes another gateway user with the given caps (none when empty) and returns its admin URL, for
   * tests of an admin that lacks caps.
   */
  createUser(uid: string, caps: string): Promise<string>;
  /** Runs `radosgw-admin` on the cluster (JSON output parsed when there is any). */
  radosgwAdmin(args: readonly string[]): Promise<unknown>;
  /** Runs `rados` on the cluster; its standard output. */
  rados(args: readonly string[]): Promise<string>;
  /** Stops the gateway only (the cluster keeps its data): S3 and the admin API stop answering. */
  stopGateway(): Promise<void>;
  /** Starts the gateway again on the same port. */
  startGateway(): Promise<void>;
  /** Stops every daemon and removes the cluster's directory. Idempotent. */
  stop(): Promise<void>;
}

/** A Ceph binary is not installed where the tests look for it. */
export class CephNotFoundError extends Error {
  override name = "CephNotFoundError";
  constructor(readonly binary: string) {
    super(
      `${binary} not found on PATH; install the Debian packages radosgw ceph-mon ceph-osd ceph-common ` +
        `(apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-common)`,
    );
  }
}

/** A step of the cluster's start failed; the message says which, with the daemon's log tail. */
export class CephStartError extends Error {
  override name = "CephStartError";
  constructor(
    readonly step: string,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`the private Ceph cluster did not start (${step}): ${detail}`, options);
  }
}

const HOST = "127.0.0.1";
const READY_WITHIN_MS = 60_000;
const STOP_WITHIN_MS = 10_000;
const COMMAND_WITHIN_MS = 60_000;

/**
 * Starts a private Ceph cluster: `monmaptool`, `ceph-mon --mkfs`, the monitor, `ceph osd new`,
 * `ceph-osd --mkfs`, the OSD placed by hand in the CRUSH map, then `radosgw`, and an admin user
 * with `CEPH_ADMIN_CAPS`. About 3–5 s to the first PUT on an idle machine.
 * @throws CephNotFoundError when a binary is missing; CephStartError when a step fails.
 */
export async function startCeph(): Promise<CephServer> {
  const bin = await findBinaries();
  const dir = await mkdtemp(join(tmpdir(), "mesh-ceph-"));
  const children: ChildProcess[] = [];
  let gateway: ChildProcess | undefined;
  const stopAll = async (): Promise<void> => {
    if (gateway !== undefined) await terminate(gateway, STOP_WITHIN_MS);
    // The OSD before the monitor, so it does not wait for a monitor that is gone.
    for (const child of [...children].reverse()) await terminate(child, STOP_WITHIN_MS);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const [monPort, port] = [await freePort(), await freePort()];
    const fsid = randomUUID();
    const config = join(dir, "ceph.conf");
    for (const sub of ["run", "log", "mon", "osd/osd.0", "rgw"])
      await mkdir(join(dir, sub), { recursive: true });
    await writeFile(config, cephConfig(dir, fsid, monPort, port), { mode: 0o600 });
    const run = (binary: string, args: readonly string[]): Promise<string> =>
      command(binary, ["-c", config, ...args]);
    // A monitor that has just formed its quorum sometimes refuses the CLI's first question on a
    // loaded machine ("problem getting command descriptions"); the commands asked are idempotent.
    const ask = (args: readonly string[]): Promise<string> => retried(() => run(bin.ceph, args));

    await command(bin.monmaptool, [
      "--create",
      "--addv",
      "a",
      `[v1:${HOST}:${monPort}]`,
      "--fsid",
      fsid,
      join(dir, "monmap"),
    ]);
    await run(bin["ceph-mon"], ["--mkfs", "-i", "a", "--monmap", join(dir, "monmap")]);
    children.push(
      await daemon(bin["ceph-mon"], [config, "-f", "-i", "a"], join(dir, "log", "mon.a.log"), "monitor", () =>
        run(bin.ceph, ["--connect-timeout", "2", "mon", "stat"]),
      ),
    );

    const osdUuid = randomUUID();
    const id = (await ask(["osd", "new", osdUuid])).trim();
    if (id !== "0") throw new CephStartError("ceph osd new", `expected OSD id 0, got ${JSON.stringify(id)}`);
    await run(bin["ceph-osd"], ["-i", "0", "--mkfs", "--osd-uuid", osdUuid]);
    // Placed by hand: with auth off the OSD may send its own start-up CRUSH commands before it has
    // the map, and exit ("wrong fsid").
    await ask(["osd", "crush", "add", "osd.0", "1.0", "root=default", "host=localhost"]);
    children.push(
      await daemon(
        bin["ceph-osd"],
        [config, "-f", "-i", "0"],
        join(dir, "log", "osd.0.log"),
        "OSD",
        async () => {
          const dump = JSON.parse(await run(bin.ceph, ["osd", "dump", "-f", "json"])) as {
            osds?: { up?: number }[];
          };
          return dump.osds?.[0]?.up === 1 ? "up" : "down";
        },
        (reply) => reply === "up",
      ),
    );

    const launchGateway = async (): Promise<ChildProcess> =>
      daemon(
        bin.radosgw,
        [config, "-f", "-n", "client.rgw"],
        join(dir, "log", "client.rgw.log"),
        "radosgw",
        async () => {
          const response = await fetch(`http://${HOST}:${port}/`, { signal: AbortSignal.timeout(2_000) });
          await response.body?.cancel();
          return String(response.status);
        },
        (status) => /^\d+$/.test(status),
      );
    gateway = await launchGateway();

    const adminAccessKey = `MESHADMIN${randomBytes(6).toString("hex").toUpperCase()}`;
    const adminSecretKey = randomBytes(24).toString("base64url");
    const radosgwAdmin = async (args: readonly string[]): Promise<unknown> => {
      const out = await run(bin["radosgw-admin"], args);
      return out.trim() === "" ? undefined : (JSON.parse(out) as unknown);
    };
    const makeUser = async (uid: string, caps: string, access: string, secret: string): Promise<string> => {
      await radosgwAdmin([
        "user",
        "create",
        `--uid=${uid}`,
        `--display-name=${uid}`,
        `--access-key=${access}`,
        `--secret-key=${secret}`,
      ]);
      if (caps !== "") await radosgwAdmin(["caps", "add", `--uid=${uid}`, `--caps=${caps}`]);
      return `http://${encodeURIComponent(access)}:${encodeURIComponent(secret)}@${HOST}:${port}`;
    };
    const adminUrl = await makeUser("mesh-admin", CEPH_ADMIN_CAPS, adminAccessKey, adminSecretKey);

    let stopped: Promise<void> | undefined;
    return {
      host: HOST,
      port,
      endpoint: `http://${HOST}:${port}`,
      adminUrl,
      adminAccessKey,
      adminSecretKey,
      dir,
      createUser: (uid, caps) =>
        makeUser(
          uid,
          caps,
          `KEY${randomBytes(8).toString("hex").toUpperCase()}`,
          randomBytes(24).toString("base64url"),
        ),
      radosgwAdmin,
      rados: (args) => run(bin.rados, args),
      async stopGateway() {
        if (gateway !== undefined) await terminate(gateway, STOP_WITHIN_MS);
        gateway = undefined;
      },
      async startGateway() {
        if (stopped !== undefined) throw new Error("the Ceph cluster was stopped; start another");
        gateway ??= await launchGateway();
      },
      stop() {
        stopped ??= stopAll();
        return stopped;
      },
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

function cephConfig(dir: string, fsid: string, monPort: number, port: number): string {
  return `[global]
fsid = ${fsid}
mon host = v1:${HOST}:${monPort}
mon initial members = a
public addr = ${HOST}
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
ms bind msgr2 = false
keyring = ${join(dir, "keyring")}
run dir = ${join(dir, "run")}
admin socket = ${join(dir, "run", "$name.asok")}
log file = ${join(dir, "log", "$name.log")}
pid file = ${join(dir, "run", "$name.pid")}
mon data = ${join(dir, "mon", "$name")}
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 1
paxos propose interval = 0.05
osd data = ${join(dir, "osd", "$name")}
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush update on start = false
osd class update on start = false

[client.rgw]
rgw frontends = beast endpoint=${HOST}:${port}
rgw data = ${join(dir, "rgw")}
`;
}

async function findBinaries(): Promise<Record<keyof typeof BINARIES, string>> {
  const found: Partial<Record<keyof typeof BINARIES, string>> = {};
  const dirs = (process.env["PATH"] ?? "").split(delimiter).filter((d) => d !== "");
  for (const name of Object.keys(BINARIES) as (keyof typeof BINARIES)[]) {
    for (const dir of dirs) {
      try {
        await access(join(dir, name), constants.X_OK);
        found[name] = join(dir, name);
        break;
      } catch {
        // not in this directory
      }
    }
    if (found[name] === undefined) throw new CephNotFoundError(name);
  }
  return found as Record<keyof typeof BINARIES, string>;
}

/** `attempt`, tried again up to 4 more times, half a second apart, while it fails. */
async function retried<T>(attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (err) {
      if (tries >= 5) throw err;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

/** Runs a command to its end; its standard output, or a CephStartError with what it said. */
function command(binary: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      binary,
      args,
      { timeout: COMMAND_WITHIN_MS, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err === null) return resolve(stdout);
        const said = `${stderr}`.trim().split("\n").slice(-3).join(" | ");
        reject(
          new CephStartError(
            `${binary.split("/").pop()} ${args
              .filter((a) => !a.startsWith("--secret"))
              .slice(2, 5)
              .join(" ")}`,
            said || err.message,
            { cause: err },
          ),
        );
      },
    );
  });
}

/** Starts a daemon in the foreground and waits until `probe` says it serves. */
async function daemon(
  binary: string,
  args: readonly string[],
  log: string,
  what: string,
  probe: () => Promise<string>,
  ready: (reply: string) => boolean = () => true,
): Promise<ChildProcess> {
  const [config, ...rest] = args;
  const server = spawnServer(binary, ["-c", config ?? "", ...rest]);
  try {
    return await awaitReady(server, {
      probe,
      ready: (reply) => reply !== "" && ready(reply),
      expected: `an answer from the ${what}`,
      withinMs: READY_WITHIN_MS,
      stopWithinMs: STOP_WITHIN_MS,
      log,
      fail: (detail) => new CephStartError(what, detail),
    });
  } catch (err) {
    await terminate(server.child, STOP_WITHIN_MS);
    throw err instanceof CephStartError
      ? err
      : new CephStartError(what, `${String(err)}; log: ${await logTail(log)}`);
  }
}
