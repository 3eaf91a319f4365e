// A mesh for rotating consumers while their apps log in, shared by test/rotation-through-mesh.test.ts
// and bench/rotation.ts: real backends (Redis, MariaDB, PostgreSQL, as asked), their providers and,
// per backend, two apps (test/fixtures/rotation-app/app.mjs) on one node run by a real `mesh up`:
// one re-reads its credential file and password file before each login ("reread"), one reads its
// password once from its environment and is restarted on a new one ("once", onNewPassword:
// restart). Each app logs in every 100 ms, a new connection each time, and writes each attempt as
// one JSON line to its home's attempts.jsonl.
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { callControl } from "@mesh/sdk/provider";
import { startMariadb, startPostgres, startRedis, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess, type MeshRun } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const APP = join(root, "test", "fixtures", "rotation-app", "app.mjs");

/** A backend the rotation app logs in to, its interface and provider, and its logins' suffix. */
export interface RotationBackend {
  readonly backend: "redis" | "mariadb" | "postgres";
  readonly iface: string;
  readonly provider: string;
  readonly short: string;
}

export const ROTATION_BACKENDS = {
  redis: { backend: "redis", iface: "redis-namespace", provider: "redis", short: "redis" },
  mariadb: { backend: "mariadb", iface: "mysql-database", provider: "mariadb", short: "mysql" },
  postgres: { backend: "postgres", iface: "postgres-database", provider: "postgres", short: "postgres" },
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
            }
          : {}),
      },
      ...(app.mode === "once" ? { onNewPassword: "restart" } : {}),
    },
  };
}

/** What `startRotationMesh` is asked for. */
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
  ) {
    this.apps = apps;
  }

  static async start(options: RotationMeshOptions): Promise<RotationMesh> {
    const wanted = new Set(options.backends.map((b) => b.backend));
    const servers: { stop(): Promise<void> }[] = [];
    try {
      const [redis, mariadb, postgres] = await Promise.all([
        wanted.has("redis") ? startRedis() : undefined,
        wanted.has("mariadb") ? startMariadb() : undefined,
        wanted.has("postgres") ? startPostgres() : undefined,
      ]);
      for (const s of [redis, mariadb, postgres]) if (s !== undefined) servers.push(s);
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
        env["MESH_POSTGRES_URL"] = await (postgres as PostgresServer).createAdmin("mesh_admin");
        providers.push(entry("postgres", postgres, "MESH_POSTGRES_URL"));
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
      const mesh = new RotationMesh(dir, up, apps, servers);
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

  /** The login the mesh derives for an app's consumer. */
  loginOf(app: RotationApp): string {
    return `${app.module.replace(/-/g, "_")}_${app.backend.short}`;
  }

  /** The app's consumer as its provider's status lists it now, or undefined when it cannot be asked. */
  async consumerStatus(app: RotationApp) {
    const control = join(this.home(app.backend.provider), "control.sock");
    const status = await callControl(control, { tool: "status", who: "test" }).catch(() => undefined);
    return status?.consumers.find((c) => c.login === this.loginOf(app));
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
