// A mesh for the backup tests: a real Postgres, its provider and two consumers on one node, run by
// a real `mesh up`; what each consumer was handed, and whether it logs in with it.
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { postgresFleetYaml } from "./postgres-fleet.ts";

/** The consumers of the fleet. */
export const CONSUMERS = ["notes", "wiki"] as const;

/** A fleet with two consumers of a real Postgres, and its mesh. */
export class BackupMesh {
  up: MeshProcess | undefined;
  private constructor(
    readonly server: PostgresServer,
    readonly admin: string,
    readonly dir: string,
  ) {}

  /** Starts Postgres and writes the fleet (nothing runs yet). */
  static async make(prefix: string): Promise<BackupMesh> {
    const server = await startPostgres();
    const admin = await server.createAdmin("mesh_admin");
    const dir = await mkdtemp(join(tmpdir(), prefix));
    // Readable by the modules' own users, so that --isolation auto runs each as its own user.
    await chmod(dir, 0o755);
    for (const name of CONSUMERS) {
      await mkdir(join(dir, name));
      await writeFile(
        join(dir, name, "module.json"),
        JSON.stringify({
          name,
          needs: { "postgres-database": { values: {} } },
          run: { command: "sleep", args: ["100000"] },
        }),
      );
    }
    await writeFile(join(dir, "mesh.yaml"), postgresFleetYaml(server, CONSUMERS));
    return new BackupMesh(server, admin, dir);
  }

  get fleet(): string {
    return join(this.dir, "mesh.yaml");
  }

  get state(): string {
    return join(this.dir, "state");
  }

  /** `mesh up` of the fleet, resolved once its modules start. */
  async start(): Promise<MeshProcess> {
    const up = startMesh(["up", this.fleet, "--state", this.state, "--isolation", "auto"], {
      MESH_POSTGRES_URL: this.admin,
      MESH_EVERY: "1s",
    });
    this.up = up;
    await up.waitFor(/the modules start/);
    return up;
  }

  /** Stops `mesh up` (SIGINT) and waits for it to end. */
  async stop(): Promise<void> {
    const up = this.up;
    this.up = undefined;
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
  }

  /** `consumer`'s credential file, or undefined while there is none. */
  async #credentialOf(
    consumer: string,
  ): Promise<{ login: string; passwordFile: string; values?: { name?: string } } | undefined> {
    const file = join(
      this.state,
      "nodes",
      "node-a",
      "modules",
      consumer,
      "credentials",
      "postgres-database.json",
    );
    const text = await readFile(file, "utf8").catch(() => undefined);
    return text === undefined ? undefined : JSON.parse(text);
  }

  /**
   * The password the mesh handed `consumer`, from the password file its credential file names (each
   * of a consumer's two logins has its own), or undefined while there is none.
   */
  async passwordOf(consumer: string): Promise<string | undefined> {
    const credential = await this.#credentialOf(consumer);
    if (credential === undefined) return undefined;
    return (await readFile(credential.passwordFile, "utf8").catch(() => undefined))?.trim();
  }

  /** The login `consumer`'s credential file names now, or undefined while there is none. */
  async loginOf(consumer: string): Promise<string | undefined> {
    return (await this.#credentialOf(consumer))?.login;
  }

  /**
   * Whether `consumer` logs in to Postgres with `password`, as its credential file says (or as
   * `login`, one of its two, when given).
   */
  async logsIn(consumer: string, password: string, login?: string): Promise<boolean> {
    const found = await this.#credentialOf(consumer);
    if (found === undefined) return false;
    const credential = login === undefined ? found : { ...found, login };
    const client = new pg.Client({
      host: "127.0.0.1",
      port: this.server.port,
      user: credential.login,
      password,
      database: credential.values?.name ?? credential.login,
      connectionTimeoutMillis: 5_000,
    });
    try {
      await client.connect();
      await client.query("select 1");
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /**
   * Waits until every consumer logs in with the password it was handed (and, given `expected`,
   * that this is the one expected), and answers each one's password.
   */
  async everyConsumerLogsIn(
    seconds: number,
    expected?: ReadonlyMap<string, string>,
  ): Promise<Map<string, string>> {
    const seen = new Map<string, string>();
    await until(
      expected === undefined
        ? "every consumer logs in"
        : "every consumer logs in with its unchanged password",
      async () => {
        for (const m of CONSUMERS) {
          const password = await this.passwordOf(m);
          if (password === undefined) return false;
          if (expected !== undefined && password !== expected.get(m)) return false;
          if (!(await this.logsIn(m, password))) return false;
          seen.set(m, password);
        }
        return true;
      },
      { seconds, everyMs: 500 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${this.up?.output().slice(-6000)}`);
    });
    return seen;
  }

  /** Stops everything and removes what was made. */
  async dispose(): Promise<void> {
    await this.stop();
    await this.server.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}
