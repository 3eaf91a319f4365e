// A mesh for rotating consumers while their apps log in, shared by test/rotation-through-mesh.test.ts,
// test/s3-rotation-through-mesh.test.ts and bench/rotation.ts: real backends (Redis, MariaDB,
// PostgreSQL, Ceph's RADOS Gateway for S3, as asked), their providers and, per backend, two apps (test/fixtures/rotation-app/app.mjs) on one node run by a real `mesh up`:
// one re-reads its credential file and password file before each login ("reread"), one reads its
// password once from its environment and is restarted on a new one ("once", onNewPassword:
// restart). Each app logs in every 100 ms, a new connection each time, and writes each attempt as
// one JSON line to its home's attempts.jsonl. `rotateRounds` rotates every consumer at once, round
// after round, and `assertNoFailedLogin` says whether any app saw a failed login while it did.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { secondLogin, secondSecretPath, secretPath } from "@mesh/manifest";
import { callControl } from "@mesh/sdk/provider";
import {
  startCeph,
  startMariadb,
  startPostgres,
  startRedis,
  until,
  type PostgresServer,
} from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess, type MeshRun } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const APP = join(root, "test", "fixtures", "rotation-app", "app.mjs");

/** A backend the rotation app logs in to, its interface and provider, and its logins' suffix. */
export interface RotationBackend {
  readonly backend: "redis" | "mariadb" | "postgres" | "s3";
  readonly iface: string;
  readonly provider: string;
  readonly short: string;
  /**
   * Whether its provider moves a consumer to its other login at each rotation (alternatesLogins:
   * Postgres's second role, S3's second access key on the one gateway user).
   */
  readonly alternates: boolean;
}

export const ROTATION_BACKENDS = {
  redis: { backend: "redis", iface: "redis-namespace", provider: "redis", short: "redis", alternates: false },
  mariadb: {
    backend: "mariadb",
    iface: "mysql-database",
    provider: "mariadb",
    short: "mysql",
    alternates: false,
  },
  postgres: {
    backend: "postgres",
    iface: "postgres-database",
    provider: "postgres",
    short: "postgres",
    alternates: true,
  },
  s3: { backend: "s3", iface: "s3-bucket", provider: "s3", short: "s3", alternates: true },
} as const satisfies Record<string, RotationBackend>;

/** How an app takes its password: re-read before each login, or read once and restarted. */
export type AppMode = "reread" | "once";

export interface RotationApp {
  readonly module: string;
  readonly backend: RotationBackend;
  readonly mode: AppMode;
}

/** One line of an app's attempts.jsonl: a login tried (ok or not, and why), or its start or stop. */
export interface Attempt {
  readonly pid: number;
  readonly at: number;
  readonly ok?: boolean;
  readonly why?: string;
  /** The login (for S3 the access key) it tried. */
  readonly login?: string;
  /** For PostgreSQL, the role the session acted as (a second login acts as the first). */
  readonly who?: string;
  readonly event?: "start" | "stop";
}

/** Both apps of each backend, named `<backend>-<mode>`. */
export function appsOf(backends: readonly RotationBackend[]): RotationApp[] {
  return backends.flatMap((b) =>
    (["reread", "once"] as const).map((mode) => ({ module: `${b.backend}-${mode}`, backend: b, mode })),
  );
}

function manifestOf(app: RotationApp): unknown {
  const i = app.backend.iface;
  return {
    name: app.module,
    needs: { [i]: {} },
    run: {
      command: process.execPath,
      args: [APP],
      env: {
        ROTATION_APP_BACKEND: app.backend.backend,
        ROTATION_APP_MODE: app.mode,
        ...(app.mode === "once"
          ? {
              APP_LOGIN: `{${i}.login}`,
              APP_PASSWORD: `{${i}.password}`,
              APP_HOST: `{${i}.host}`,
              APP_PORT: `{${i}.port}`,
              ...(app.backend.backend === "postgres" ? { APP_DATABASE: `{${i}.values.name}` } : {}),
              // S3's bucket is the endpoint's path (`/<bucket>`).
              ...(app.backend.backend === "s3" ? { APP_PATH: `{${i}.path}` } : {}),
            }
          : {}),
      },
      ...(app.mode === "once" ? { onNewPassword: "restart" } : {}),
    },
  };
}

/** What `RotationMesh.start` is asked for. */
export interface RotationMeshOptions {
  readonly backends: readonly RotationBackend[];
  /** The providers' MESH_ROTATION_GRACE: how long a rotated-out password stays valid ("6s"). */
  readonly grace: string;
}

/** The backends, the apps and `mesh up` running them; `stop()` removes all of it. */
export class RotationMesh {
  readonly apps: readonly RotationApp[];

  private constructor(
    readonly dir: string,
    readonly up: MeshProcess,
    apps: readonly RotationApp[],
    private readonly servers: readonly { stop(): Promise<void> }[],
    /** The admin URLs handed to the providers, whose passwords mesh up must not print either. */
    private readonly adminUrls: readonly string[],
    /** The PostgreSQL server, when asked for, to look at its roles. */
    readonly postgres: PostgresServer | undefined,
  ) {
    this.apps = apps;
  }

  static async start(options: RotationMeshOptions): Promise<RotationMesh> {
    const wanted = new Set(options.backends.map((b) => b.backend));
    const servers: { stop(): Promise<void> }[] = [];
    try {
      const track = async <T extends { stop(): Promise<void> }>(
        backend: RotationBackend["backend"],
        start: () => Promise<T>,
      ): Promise<T | undefined> => {
        if (!wanted.has(backend)) return undefined;
        const server = await start();
        servers.push(server);
        return server;
      };
      const starting = [
        track("redis", startRedis),
        track("mariadb", startMariadb),
        track("postgres", startPostgres),
        track("s3", startCeph),
      ] as const;
      // Every server that started is in `servers`, to be stopped, before one that did not is thrown.
      await Promise.allSettled(starting);
      const [redis, mariadb, postgres, ceph] = await Promise.all(starting);
      const apps = appsOf(options.backends);
      const dir = await mkdtemp(join(tmpdir(), "mesh-rotation-"));
      // Readable by the modules' own users: --isolation auto runs each app as its own user.
      await chmod(dir, 0o755);
      for (const app of apps) {
        await mkdir(join(dir, app.module));
        await writeFile(join(dir, app.module, "module.json"), JSON.stringify(manifestOf(app), null, 2));
      }
      const env: Record<string, string> = {};
      const providers: string[] = [];
      const providerEnv = `env: { MESH_EVERY: 1s, MESH_ROTATION_GRACE: ${options.grace} }`;
      const entry = (name: string, server: { host: string; port: number }, adminEnv: string): string =>
        `  ${name}:
    manifest: ${JSON.stringify(join(root, "providers", name, "module.json"))}
    node: node-a
    endpoint: { host: ${server.host}, port: ${server.port} }
    admin: { env: ${adminEnv} }
    ${providerEnv}`;
      if (redis !== undefined) {
        env["MESH_REDIS_URL"] = redis.adminUrl;
        providers.push(entry("redis", redis, "MESH_REDIS_URL"));
      }
      if (mariadb !== undefined) {
        env["MESH_MARIADB_URL"] = await mariadb.createAdmin("mesh_admin");
        providers.push(entry("mariadb", mariadb, "MESH_MARIADB_URL"));
      }
      if (postgres !== undefined) {
        env["MESH_POSTGRES_URL"] = await postgres.createAdmin("mesh_admin");
        providers.push(entry("postgres", postgres, "MESH_POSTGRES_URL"));
      }
      if (ceph !== undefined) {
        env["MESH_S3_URL"] = ceph.adminUrl;
        providers.push(entry("s3", ceph, "MESH_S3_URL"));
      }
      await writeFile(
        join(dir, "mesh.yaml"),
        `nodes:
  node-a: {}
modules:
${providers.join("\n")}
${apps.map((a) => `  ${a.module}: { manifest: ./${a.module}/module.json, node: node-a }`).join("\n")}
`,
      );
      const up = startMesh(
        ["up", join(dir, "mesh.yaml"), "--state", join(dir, "state"), "--isolation", "auto"],
        env,
      );
      const mesh = new RotationMesh(dir, up, apps, servers, Object.values(env), postgres);
      await up.waitFor(/the modules start/);
      return mesh;
    } catch (err) {
      await Promise.all(servers.map((s) => s.stop()));
      throw err;
    }
  }

  get state(): string {
    return join(this.dir, "state");
  }

  /** A module's home on the node. */
  home(module: string): string {
    return join(this.state, "nodes", "node-a", "modules", module, "home");
  }

  /**
   * The login the mesh derives for an app's consumer. Where logins alternate, the provider's status
   * names the consumer by it whichever of its two logins is in use.
   */
  loginOf(app: RotationApp): string {
    return `${app.module.replace(/-/g, "_")}_${app.backend.short}`;
  }

  /** The app's consumer as its provider's status lists it now, or undefined when it cannot be asked. */
  async consumerStatus(app: RotationApp) {
    const control = join(this.home(app.backend.provider), "control.sock");
    const status = await callControl(control, { tool: "status", who: "test" }).catch(() => undefined);
    return status?.consumers.find((c) => c.login === this.loginOf(app));
  }

  /**
   * The passwords the node holds for the apps now (both password files of a consumer whose logins
   * alternate), each at least 8 characters, to look for in what mesh up printed.
   */
  async passwordsNow(): Promise<string[]> {
    const node = join(this.state, "nodes", "node-a");
    const files = this.apps.flatMap((a) => [
      secretPath(node, a.module, a.backend.iface),
      secondSecretPath(node, a.module, a.backend.iface),
    ]);
    const read = await Promise.all(files.map((f) => readFile(f, "utf8").catch(() => "")));
    return read.map((p) => p.replace(/\r?\n$/, "")).filter((p) => p.length >= 8);
  }

  /** Every attempt the app has written so far. */
  async attempts(app: RotationApp): Promise<Attempt[]> {
    return (await readFile(join(this.home(app.module), "attempts.jsonl"), "utf8").catch(() => ""))
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as Attempt);
  }

  /** `mesh rotate <app> <its interface> --state … …extra`. */
  rotate(app: RotationApp, ...extra: string[]): Promise<MeshRun> {
    return runMesh(["rotate", app.module, app.backend.iface, "--state", this.state, ...extra]);
  }

  /** Waits until every app has logged in once. */
  async allLoggedIn(seconds = 120): Promise<void> {
    await until(
      "every app to log in",
      async () => {
        for (const app of this.apps)
          if (!(await this.attempts(app)).some((a) => a.ok === true)) return undefined;
        return true;
      },
      { seconds, everyMs: 200 },
    ).catch((err: unknown) => {
      throw this.said(err);
    });
  }

  /**
   * While `app`'s rotation is under way: `mesh status --json` shows its phase and since when, text
   * `mesh status` lists it under the rotations under way, and another `mesh rotate` of the same
   * consumer is refused, naming its phase.
   */
  async assertRotationShown(app: RotationApp): Promise<void> {
    const said = (err: unknown): never => {
      throw this.said(err);
    };
    const shown = await until(
      `mesh status to show ${app.module}'s rotation`,
      async () => {
        const run = await runMesh(["status", "--json", "--state", this.state]);
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
        const text = await runMesh(["status", "--state", this.state]);
        return new RegExp(`ROTATIONS UNDER WAY[\\s\\S]*${app.module} \\(${app.backend.iface}`).test(
          text.stdout,
        )
          ? true
          : undefined;
      },
      { seconds: 60, everyMs: 250 },
    ).catch(said);
    const again = await this.rotate(app);
    assert.equal(again.code, 1, again.stdout + again.stderr);
    assert.match(again.stderr, /is being rotated \(phase (asked|add|drain) since /);
    assert.match(again.stderr, /nothing was rotated/);
  }

  /**
   * Once every app has logged in, rotates every consumer `rounds` times, all at once in each round
   * with `mesh rotate --wait`, each round over when every provider's status names no rotation and
   * a new password applied (then `afterRound` is called); then a last second of logins with only
   * the newest passwords valid. Unless `showFirst` is false, `assertRotationShown` checks how the
   * mesh shows the first consumer's first rotation while it is under way (the grace must leave the
   * CLI time for it). Prints each round's times and each app's logins, and asserts that no app saw a
   * failed login, that each app that reads its password once was restarted exactly once per
   * rotation (and the others never), that an app whose logins alternate used both, and that mesh
   * up printed no URL with a password in it, nor any password the apps were given.
   */
  async assertRotationsCostNoLogin(
    rounds: number,
    options: { readonly showFirst?: boolean; readonly afterRound?: (round: number) => Promise<void> } = {},
  ): Promise<void> {
    await this.allLoggedIn();
    const startedAt = Date.now();
    const phases: string[] = [];
    const passwords = new Set(await this.passwordsNow());
    for (let round = 1; round <= rounds; round++) {
      const tags = new Map<string, string | undefined>();
      for (const app of this.apps) tags.set(app.module, (await this.consumerStatus(app))?.applied);
      const t0 = Date.now();
      const took: string[] = [];
      const first = this.apps[0] as RotationApp;
      await Promise.all(
        this.apps.map(async (app) => {
          // Asked beside the rotate, from the moment status shows it, not after its --wait returns:
          // a CLI takes seconds to start on a loaded machine, and the drain may be over by then.
          const shown =
            round === 1 && app === first && options.showFirst !== false
              ? this.assertRotationShown(app).then(
                  () => undefined,
                  (err: unknown) => err,
                )
              : undefined;
          const run = await this.rotate(app, "--wait", "60s");
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
          for (const app of this.apps) {
            const c = await this.consumerStatus(app);
            if (c === undefined || c.rotation !== undefined || c.applied === tags.get(app.module))
              return undefined;
          }
          return true;
        },
        { seconds: 90, everyMs: 100 },
      ).catch((err: unknown) => {
        throw this.said(err);
      });
      for (const p of await this.passwordsNow()) passwords.add(p);
      phases.push(
        `round ${round}: applied in ${applied} ms (${took.join(", ")}), over in ${Date.now() - t0} ms`,
      );
      await options.afterRound?.(round);
    }
    // A last stretch of logins with only the newest password valid.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    for (const app of this.apps) {
      const seen = (await this.attempts(app)).filter((a) => a.at >= startedAt);
      const logins = seen.filter((a) => a.ok !== undefined);
      const failed = logins.filter((a) => a.ok === false);
      const starts = seen.filter((a) => a.event === "start").length;
      console.log(
        `${app.module}: ${failed.length} failed / ${logins.length} attempts over ${rounds} rotations` +
          (app.mode === "once" ? `, restarted ${starts} times` : ""),
      );
      assert.deepEqual(
        failed.map((f) => f.why),
        [],
        `${app.module} (${app.mode === "reread" ? "re-reads before each login" : "restarted on a new password"}) never fails a login`,
      );
      assert.ok(logins.length >= 10 * rounds, `${app.module} kept logging in (${logins.length} attempts)`);
      if (app.mode === "once") assert.equal(starts, rounds, `${app.module} was restarted once per rotation`);
      else assert.equal(starts, 0, `${app.module} was never restarted`);
      // Where logins alternate, each rotation moves the app to the other one.
      const login = this.loginOf(app);
      assert.deepEqual(
        [...new Set(logins.filter((a) => a.ok === true).map((a) => a.login))].sort(),
        app.backend.alternates && rounds > 0 ? [login, secondLogin(login)].sort() : [login],
        `${app.module} logged in as`,
      );
      // A PostgreSQL session on the second login acts as the first (the app asks current_user).
      if (app.backend.backend === "postgres")
        assert.deepEqual(
          [...new Set(logins.filter((a) => a.ok === true).map((a) => a.who))],
          [login],
          `${app.module}'s sessions acted as`,
        );
    }
    console.log(phases.join("\n"));
    const output = this.up.output();
    assert.doesNotMatch(output, /:\/\/[^@\s/]*:[^@\s/]+@/, "no URL with a password in mesh up's output");
    for (const url of this.adminUrls) {
      const secret = URL.canParse(url) ? decodeURIComponent(new URL(url).password) : "";
      if (secret !== "") passwords.add(secret);
    }
    // Each app's first password and one more per rotation at least: the files were read.
    assert.ok(
      passwords.size >= this.apps.length * (rounds + 1),
      `${passwords.size} passwords looked for in mesh up's output`,
    );
    const printed = [...passwords].filter((p) => output.includes(p)).length;
    assert.equal(printed, 0, `mesh up printed ${printed} of the ${passwords.size} passwords`);
  }

  /** An error naming `err` and the end of what mesh up said. */
  said(err: unknown): Error {
    return new Error(`${(err as Error).message}; mesh up said:\n${this.up.output().slice(-6000)}`);
  }

  async stop(): Promise<void> {
    if (this.up.child.exitCode === null) {
      this.up.child.kill("SIGINT");
      await this.up.done;
    }
    await Promise.all(this.servers.map((s) => s.stop()));
    await rm(this.dir, { recursive: true, force: true });
  }
}
