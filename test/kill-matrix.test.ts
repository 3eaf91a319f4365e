// The kill matrix: crash-only, shown on real servers. A real `mesh up` (the CLI binary, as an
// operator runs it: nats-server, the controller, the agents, the Postgres and Redis providers against
// real servers, and a module with a process of its own) is killed with -9 at a random point of a
// fleet change and a retirement, and at each phase of a rotation (add, deliver, drain, remove), then
// started again on the same state directory; a provider alone is killed with -9 at a rotation's add
// and drain, and its agent starts it again; a `mesh agent` run on its own is killed while it writes a
// delivery's files. After each restart the mesh must converge: every asked consumer logs in with its
// password (none minted again), nothing asked for is retired, one nats-server and one copy of each
// module run, nothing of the killed run is left, `mesh status` agrees with the backends, and a
// rotation ends (the old password is refused once its grace bound passed).
//
// The random kill points: the seed is printed, MESH_KILL_SEED=<seed> replays it, and
// MESH_KILL_RUNS=<n> asks for more than the 2 per case. The rotation's kills are not random: each
// run watches for its phase and kills there, and the phase seen at the kill is printed.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, watch } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { findProcessesByEnv, isRunning, moduleControlPath, processStartTime } from "@mesh/agent";
import { credentialPath, deriveLogin, providerSecretPath } from "@mesh/manifest";
import { type ConsumerStatus, type StatusReport } from "@mesh/sdk";
import { callControl, passwordTag } from "@mesh/sdk/provider";
import { startPostgres, startRedis, type PostgresServer, type RedisServer, until } from "@mesh/testkit";
import { runCli } from "../packages/cli/src/cli.ts";
import { cleanEnv, MESH_BIN } from "../packages/cli/test/run-mesh.ts";
import { canLoginAs } from "../providers/redis/test/conformance-target.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const PG = "postgres-database";
const REDIS = "redis-namespace";
const SEED = Number(process.env["MESH_KILL_SEED"] ?? Math.floor(Math.random() * 2 ** 31));
const RUNS = Math.max(1, Number(process.env["MESH_KILL_RUNS"] ?? 2));
const GRACE = "3s";

/** A small seeded generator (mulberry32): the same seed gives the same kill points. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A `mesh` process of the matrix: its output kept, for a failure to show. */
interface Spawned {
  readonly child: ChildProcess;
  output(): string;
  readonly exited: Promise<void>;
}

interface Consumer {
  readonly iface: typeof PG | typeof REDIS;
  readonly node: string;
}

/** A rotation's phases, in order. */
const PHASES = ["add", "deliver", "drain", "remove"] as const;
type Phase = (typeof PHASES)[number];
/** What a rotation's run kills: `mesh up` (controller and agent), or the consumer's provider alone. */
type Victim = "mesh up" | "the provider";

/** A process of the mesh as /proc shows it. */
interface Seen {
  readonly pid: number;
  readonly start: number;
  readonly what: string;
}

describe(
  "the kill matrix: kill -9 at a random point, start again, and the mesh converges",
  { timeout: 900_000 },
  () => {
    const random = generator(SEED);
    let postgres: PostgresServer;
    let redis: RedisServer;
    let pgAdmin: string;
    let dir: string;
    const children = new Set<ChildProcess>();
    const listeners: Server[] = [];
    const takenPort = (): Promise<number> =>
      new Promise((resolve, reject) => {
        const server = createServer();
        listeners.push(server);
        server.once("error", reject);
        server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
      });
    const converged: Record<string, { done: number; of: number }> = {};
    const upState = () => join(dir, "up");
    const nodeDir = (node: string) =>
      node === "node-2" ? join(dir, "agent-2") : join(upState(), "nodes", node);
    const busDir = () => join(upState(), "bus");

    // What the fleet asks for now: consumer -> where and what.
    const asked = new Map<string, Consumer>();
    // Modules with a process of their own: name -> node.
    const running = new Map<string, string>([
      ["postgres", "node-1"],
      ["redis", "node-1"],
      ["sleeper", "node-1"],
    ]);

    const fleetYaml = (): string => {
      const provider = (name: string, at: { host: string; port: number }) =>
        `  ${name}:\n    manifest: ${JSON.stringify(join(root, "providers", name, "module.json"))}\n` +
        `    node: node-1\n    endpoint: { host: ${at.host}, port: ${at.port} }\n` +
        // The agent hands each provider its own admin URL and timings; a module inherits nothing. A
        // rotation's drain of 3 s (not the default 2 min): a run killed at any phase converges within
        // the wait below, which counts a consumer done once its files name the applied password.
        `    admin: { env: MESH_${name.toUpperCase()}_URL }\n` +
        "    env: { MESH_EVERY: 250ms, MESH_VERIFY_EVERY: 2s, MESH_ROTATION_GRACE: 3s }\n";
      const lines = [
        "nodes:\n  node-1: {}\n  node-2: {}\nmodules:\n",
        provider("postgres", postgres),
        provider("redis", redis),
      ];
      for (const [name, node] of running) {
        if (name === "postgres" || name === "redis") continue;
        lines.push(
          `  ${name}:\n    manifest: ${JSON.stringify(join(dir, "sleeper", "module.json"))}\n    node: ${node}\n`,
        );
      }
      for (const [name, c] of asked) {
        if (running.has(name)) continue;
        const app = c.iface === PG ? "pg-app" : "redis-app";
        lines.push(
          `  ${name}:\n    manifest: ${JSON.stringify(join(dir, app, "module.json"))}\n    node: ${c.node}\n`,
        );
      }
      return lines.join("");
    };
    // Whole or not at all: the controller's watcher never reads half a fleet.
    const writeFleet = async (): Promise<void> => {
      await writeFile(join(dir, "mesh.next.yaml"), fleetYaml());
      await rename(join(dir, "mesh.next.yaml"), join(dir, "mesh.yaml"));
    };

    const spawnMesh = (args: string[], env: Record<string, string> = {}): Spawned => {
      const child = spawn(process.execPath, [MESH_BIN, ...args], {
        env: cleanEnv({
          MESH_POSTGRES_URL: pgAdmin,
          MESH_REDIS_URL: redis.adminUrl,
          MESH_EVERY: "250ms",
          MESH_VERIFY_EVERY: "2s",
          ...env,
        }),
        stdio: ["ignore", "pipe", "pipe"],
        // Its own process group, as a shell's job: a signal to the group is a terminal's Ctrl-C.
        detached: true,
      });
      children.add(child);
      let out = "";
      child.stdout?.on("data", (c: Buffer) => void (out += c.toString("utf8")));
      child.stderr?.on("data", (c: Buffer) => void (out += c.toString("utf8")));
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      void exited.then(() => children.delete(child));
      return { child, output: () => out, exited };
    };
    let up: Spawned | undefined;
    let agent2: Spawned | undefined;
    const startUp = (): Spawned =>
      (up = spawnMesh([
        "up",
        join(dir, "mesh.yaml"),
        "--state",
        upState(),
        "--node",
        "node-1",
        "--grace",
        GRACE,
        // The test's fleet is in a directory only root reads: modules run as the agent's user.
        "--isolation",
        "auto",
      ]));
    const startAgent2 = (join_?: string): Spawned =>
      (agent2 = spawnMesh([
        "agent",
        "--node",
        "node-2",
        "--state",
        nodeDir("node-2"),
        "--grace",
        GRACE,
        "--isolation",
        "auto",
        ...(join_ === undefined ? [] : ["--join", join_]),
      ]));
    const kill9 = async (s: Spawned | undefined): Promise<void> => {
      if (s === undefined || s.child.exitCode !== null || s.child.signalCode !== null) return;
      s.child.kill("SIGKILL");
      await s.exited;
    };

    /** `mesh args…` in this process: a spawned CLI costs seconds of start on a loaded machine. */
    const mesh = async (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
      let stdout = "";
      let stderr = "";
      const code = await runCli(args, {
        out: (t) => void (stdout += t),
        err: (t) => void (stderr += t),
        env: {},
        stdin: process.stdin,
      });
      return { code, stdout, stderr };
    };

    // Every process marked as this test's mesh (nats-server by its bus directory, modules by their
    // node's state directory), whichever run started it.
    const marked = (): Seen[] =>
      findProcessesByEnv((env) =>
        [env.get("MESH_BUS_DIR"), env.get("MESH_STATE_DIR")].some(
          (v) => v !== undefined && v.startsWith(dir),
        ),
      ).flatMap((pid) => {
        const start = processStartTime(pid);
        return start === undefined ? [] : [{ pid, start, what: whatIs(pid) }];
      });
    const whatIs = (pid: number): string => {
      try {
        const env = new Map(
          readFileSyncSafe(`/proc/${pid}/environ`)
            .split("\0")
            .map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)] as const),
        );
        if (env.has("MESH_BUS_DIR")) return `bus ${env.get("MESH_BUS_DIR")}`;
        return `module ${env.get("MESH_MODULE")} of ${env.get("MESH_STATE_DIR")}`;
      } catch {
        return "gone";
      }
    };
    const leaders = (): Seen[] => marked().filter((p) => pgrpOf(p.pid) === p.pid);

    const passwordOf = async (consumer: string, c: Consumer): Promise<string> => {
      const file = credentialPath(nodeDir(c.node), consumer, c.iface);
      const credential = JSON.parse(await readFile(file, "utf8")) as { passwordFile: string };
      return (await readFile(credential.passwordFile, "utf8")).trim();
    };
    const loginOf = (consumer: string, c: Consumer): string => deriveLogin(consumer, c.iface);
    // The login the credential file names (Postgres moves a consumer to its other login at each
    // rotation); the derived one before the file is written.
    const namedLogin = async (consumer: string, c: Consumer): Promise<string> => {
      const file = credentialPath(nodeDir(c.node), consumer, c.iface);
      const credential = JSON.parse(await readFile(file, "utf8")) as { login?: string };
      return credential.login ?? loginOf(consumer, c);
    };
    const canLogin = async (consumer: string, c: Consumer, password: string): Promise<boolean> => {
      const login = await namedLogin(consumer, c).catch(() => loginOf(consumer, c));
      return c.iface === REDIS ? canLoginAs(redis, login, password) : postgres.canLogin(login, password);
    };
    const providerStatus = (provider: string): Promise<StatusReport> =>
      callControl(
        moduleControlPath(nodeDir("node-1"), provider),
        { tool: "status", args: [], who: "kill-matrix" },
        // A loaded machine, a provider just restarted: a person would wait this long too.
        { timeoutMs: 30_000 },
      ) as Promise<StatusReport>;

    /** Every asked consumer's password now, by consumer. */
    const passwords = async (): Promise<Map<string, string>> => {
      const out = new Map<string, string>();
      for (const [name, c] of asked) out.set(name, await passwordOf(name, c).catch(() => ""));
      return out;
    };

    /**
     * Waits for the mesh to converge and checks it: `kept` are the passwords from before the kill that
     * must not change; `before` the processes of the killed run.
     */
    const checkConverged = async (
      what: string,
      kept: ReadonlyMap<string, string>,
      killed: readonly Seen[],
    ): Promise<void> => {
      try {
        await checkConvergedNow(what, kept, killed);
      } catch (err) {
        const tail = (s: Spawned | undefined): string =>
          (s?.output() ?? "").split("\n").slice(-80).join("\n");
        throw new Error(
          `${(err as Error).message}\n--- mesh up said (the end):\n${tail(up)}\n--- mesh agent said (the end):\n${tail(agent2)}`,
          { cause: err },
        );
      }
    };
    const checkConvergedNow = async (
      what: string,
      kept: ReadonlyMap<string, string>,
      killed: readonly Seen[],
    ) => {
      // First the new run has stopped every process of the killed one (until then, an orphaned
      // provider may still answer on the control socket).
      await until(
        `${what}: nothing of the killed run left`,
        () => {
          const left = killed.filter((p) => isRunning(p.pid, p.start));
          if (left.length > 0) throw new Error(`still running: ${JSON.stringify(left)}`);
          return true;
        },
        60,
      );
      // One nats-server, one copy of each module, nothing of the killed run.
      const oneOfEach = (): true => {
        const count = new Map<string, number>();
        for (const p of leaders()) count.set(p.what, (count.get(p.what) ?? 0) + 1);
        const want = new Map<string, number>([[`bus ${busDir()}`, 1]]);
        for (const [name, node] of running) want.set(`module ${name} of ${nodeDir(node)}`, 1);
        const got = JSON.stringify([...count].sort());
        if (got !== JSON.stringify([...want].sort()))
          throw new Error(`running: ${got}; wanted ${JSON.stringify([...want].sort())}`);
        return true;
      };
      await until(`${what}: one process of each module and one nats-server`, oneOfEach, 90);
      // Every asked consumer active in its provider and logging in with the password its files hold.
      await until(
        `${what}: every asked consumer active and logging in with its password`,
        async () => {
          const states = new Map<string, string>();
          const applied = new Map<string, string | undefined>();
          for (const provider of ["postgres", "redis"]) {
            for (const c of (await providerStatus(provider)).consumers) {
              states.set(c.login, c.state);
              applied.set(c.login, c.applied);
            }
          }
          for (const [name, c] of asked) {
            if (states.get(loginOf(name, c)) !== "active")
              throw new Error(`${loginOf(name, c)} is ${states.get(loginOf(name, c))}`);
            const password = await passwordOf(name, c);
            // During a rotation's drain the old pair still logs in: converged is the files naming
            // the password the provider applied.
            if (applied.get(loginOf(name, c)) !== passwordTag(password))
              throw new Error(`${name}'s files do not name the password its provider applied yet`);
            if (!(await canLogin(name, c, password))) throw new Error(`${name} cannot log in`);
          }
          return true;
        },
        { seconds: 150, everyMs: 300 },
      );
      const now = await passwords();
      for (const [name, password] of kept) {
        assert.equal(now.get(name), password, `${what}: ${name}'s password was not minted again`);
      }
      // `mesh status` names what the backends hold, and the modules as running.
      await until(
        `${what}: mesh status agreeing with the backends`,
        async () => {
          const run = await mesh("status", "--state", upState(), "--json");
          if (run.code !== 0) throw new Error(run.stderr);
          const answer = JSON.parse(run.stdout) as {
            consumers?: { consumer: string; login: string }[];
            nodes?: { name: string; modules?: { name: string; state: string }[] }[];
            failing?: unknown[];
          };
          const listed = new Set((answer.consumers ?? []).map((c) => c.consumer));
          for (const name of asked.keys()) if (!listed.has(name)) throw new Error(`status lacks ${name}`);
          for (const name of listed) if (!asked.has(name)) throw new Error(`status names ${name}, not asked`);
          for (const [name, node] of running) {
            const m = answer.nodes?.find((n) => n.name === node)?.modules?.find((x) => x.name === name);
            if (m?.state !== "running") throw new Error(`status shows ${name} as ${m?.state}`);
          }
          if ((answer.failing ?? []).length > 0)
            throw new Error(`status names failing consumers: ${JSON.stringify(answer.failing)}`);
          return true;
        },
        60,
      );
      // And still one of each, once everything has settled.
      oneOfEach();
    };
    const kept = async (): Promise<Map<string, string>> =>
      new Map([...(await passwords())].filter(([, password]) => password !== ""));

    /** Runs `change` RUNS times; each run kills `victim` at a random point of it and starts it again. */
    const matrix = async (
      name: string,
      windowMs: number,
      change: (run: number) => Promise<Map<string, string>>,
      after: (run: number) => Promise<void> = async () => {},
    ): Promise<void> => {
      converged[name] = { done: 0, of: RUNS };
      for (let run = 1; run <= RUNS; run++) {
        const killed = marked();
        const before = await change(run);
        const at = Math.floor(random() * windowMs);
        await new Promise((r) => setTimeout(r, at));
        const what = `${name}, run ${run} (killed ${at} ms into it)`;
        console.log(`kill matrix: ${what}`);
        await kill9(up);
        await restartUp(what, before, killed);
        await after(run);
        converged[name].done += 1;
      }
    };
    /**
     * After `mesh up` was killed: starts it again and checks the mesh converges. `killed` are the
     * processes from before the kill; what the killed run left running is looked up here.
     */
    const restartUp = async (
      what: string,
      before: ReadonlyMap<string, string>,
      killed: readonly Seen[],
    ): Promise<void> => {
      const orphans = marked();
      // The port the bus had is taken meanwhile: the new bus gets another one, and the agent must
      // use it, not the port the stored join token names.
      const oldPort = Number((await readFile(join(busDir(), "port"), "utf8")).trim());
      await writeFile(join(busDir(), "port"), `${await takenPort()}\n`);
      startUp();
      await checkConverged(what, before, [...killed, ...orphans]);
      const newPort = Number((await readFile(join(busDir(), "port"), "utf8")).trim());
      assert.notEqual(newPort, oldPort, `${what}: the bus moved to another port`);
    };

    /**
     * A rotation of `consumer` with `victim` killed -9 at `phase`: `mesh rotate` is asked, then the
     * provider's status (over its control socket) and the files of the provider and the consumer are
     * looked at every 10 ms until the phase shows, and the victim is killed there. Then the mesh must
     * converge (mesh up started again, or the provider by its agent), `mesh rotate` has said yes, and
     * the rotation ends: the old password refused, the new one logging in. Returns the phase the
     * kill landed in, and prints what was seen then.
     *
     * The phases as seen from outside. Add: the provider's copy of the new password is in place (the
     * agent wrote it beside the old one, and the provider is about to make it valid, or doing so)
     * while the provider's status does not say drain yet; the status says `add` only when it was
     * made mid-way (it is made at the end of each pass, and add begins and ends within one), so it
     * is taken too when it does. Deliver: the consumer's files name the new password (the provider
     * is in drain then). Drain: halfway from its start to its grace bound, the consumer delivered.
     * Remove: the grace bound passing, or the status showing the rotation over, whichever is first.
     */
    const rotationKilledAt = async (victim: Victim, phase: Phase, consumer: string): Promise<Phase> => {
      // Add can pass unseen between two looks, and a drain end before the consumer is delivered:
      // then that rotation runs to its end unkilled (and is checked the same), and another is asked.
      for (let attempt = 1; attempt <= 3; attempt++) {
        const got = await rotationOnce(victim, phase, consumer);
        if (got !== "missed") return got;
      }
      throw new Error(`a rotation of ${consumer}: ${phase} passed unseen 3 times`);
    };
    const rotationOnce = async (
      victim: Victim,
      phase: Phase,
      consumer: string,
    ): Promise<Phase | "missed"> => {
      const c = asked.get(consumer)!;
      const provider = c.iface === PG ? "postgres" : "redis";
      const login = loginOf(consumer, c);
      const what = `a rotation of ${consumer} (${provider}), ${victim} killed at ${phase}`;
      const before = await kept();
      before.delete(consumer);
      const old = { login: await namedLogin(consumer, c), password: await passwordOf(consumer, c) };
      const providerCopy = providerSecretPath(nodeDir("node-1"), provider, consumer, c.iface);
      const socket = moduleControlPath(nodeDir("node-1"), provider);
      const killed = marked();
      const providers = leaders().filter((p) => p.what === `module ${provider} of ${nodeDir("node-1")}`);
      assert.equal(providers.length, 1, `${what}: one ${provider} provider runs`);

      // Add on Postgres lasts a few milliseconds, often less than one look: the roles' catalog is
      // locked (as a busy server's would be) so the provider's add waits, in place, until the kill.
      const holdAdd = phase === "add" && provider === "postgres" ? await postgres.lockRoles() : undefined;
      const began = Date.now();
      let said: { code: number; stdout: string; stderr: string } | undefined;
      const rotating = mesh("rotate", consumer, c.iface, "--state", upState(), "--wait", "0").then(
        (answer) => (said = answer),
      );
      let drain: { since: number; until: number } | undefined;
      let last = "no rotation";
      let appliedNow = "";
      /** One look: the phase `phase` names, once it shows (or add, once it is past), else undefined. */
      const look = async (): Promise<{ phase: Phase | "missed"; how: string } | undefined> => {
        // Read before the status is asked: a copy in place then, and no rotation in the answer after,
        // is a look before the provider said drain.
        const copy = readSecretSync(providerCopy);
        const providerHas = copy !== undefined && copy !== old.password;
        let rotation: ConsumerStatus["rotation"];
        try {
          const status = (await callControl(
            socket,
            { tool: "status", args: [], who: "kill-matrix" },
            { timeoutMs: 5_000 },
          )) as StatusReport;
          const mine = status.consumers.find((x) => x.login === login);
          rotation = mine?.rotation;
          appliedNow =
            mine?.applied === passwordTag(old.password)
              ? "the old password"
              : mine?.applied === undefined
                ? `nothing (${mine?.state})`
                : mine.applied === (copy === undefined ? undefined : passwordTag(copy))
                  ? "its copy of the password"
                  : "another password";
        } catch (err) {
          last = `no answer (${(err as Error).message})`;
          return undefined;
        }
        last = rotation === undefined ? "no rotation" : `${rotation.phase} until ${rotation.until}`;
        const delivered = (await passwordOf(consumer, c).catch(() => old.password)) !== old.password;
        const now = Date.now();
        if (rotation?.phase === "drain")
          drain = { since: Date.parse(rotation.since), until: Date.parse(rotation.until) };
        switch (phase) {
          case "add":
            if (rotation?.phase === "add") return { phase, how: "the provider's status says add" };
            if (providerHas && rotation === undefined)
              return {
                phase,
                how: "the provider's copy of the new password is in place beside the old one, its status not yet saying drain",
              };
            // Too late for add: nothing is killed.
            if (rotation?.phase === "drain") return { phase: "missed", how: "" };
            return undefined;
          case "deliver":
            return delivered
              ? { phase, how: `the consumer's files name the new password (the provider's status: ${last})` }
              : undefined;
          case "drain":
            // Over before the consumer was delivered (a loaded machine): nothing is killed.
            if (drain !== undefined && rotation === undefined) return { phase: "missed", how: "" };
            return drain !== undefined && delivered && now >= (drain.since + drain.until) / 2
              ? {
                  phase,
                  how: `the consumer delivered, the provider's status says drain, ${drain.until - now} ms before the grace bound`,
                }
              : undefined;
          case "remove":
            if (drain === undefined) return undefined;
            if (rotation === undefined)
              return { phase, how: "the provider's status shows the rotation over" };
            return now >= drain.until
              ? {
                  phase,
                  how: `the grace bound passed ${now - drain.until} ms ago (the provider's status: ${last})`,
                }
              : undefined;
        }
      };
      // A look every 10 ms, and another at once when the agent wrote into the provider's secrets
      // during a look or a pause: from that write to the status saying drain takes a few ms on Redis.
      let wrote = false;
      let wake: (() => void) | undefined;
      const watcher = watch(dirname(providerCopy), () => {
        wrote = true;
        wake?.();
      });
      let seen: { phase: Phase | "missed"; how: string } | undefined;
      try {
        for (;;) {
          wrote = false;
          if ((seen = await look()) !== undefined) break;
          if (Date.now() - began > 60_000)
            throw new Error(
              `${what}: the phase did not show within 60 s (the provider's status said: ${last}, ${appliedNow} applied; ` +
                `its copy of the password ${readSecretSync(providerCopy) === old.password ? "is the old one" : "changed"}; ` +
                `mesh rotate said: ${said === undefined ? "nothing yet" : `${said.code} ${said.stderr}`})` +
                `\n--- ${provider} said (the end):\n${(await readFile(join(nodeDir("node-1"), "modules", provider, "log"), "utf8").catch(() => "")).split("\n").slice(-40).join("\n")}` +
                `\n--- mesh up said (the end):\n${(up?.output() ?? "").split("\n").slice(-60).join("\n")}`,
            );
          if (said !== undefined && said.code !== 0)
            throw new Error(`${what}: mesh rotate exited ${said.code}: ${said.stderr}`);
          if (wrote) continue;
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 10);
            wake = () => {
              wake = undefined;
              clearTimeout(timer);
              resolve();
            };
          });
        }
      } catch (err) {
        await holdAdd?.release();
        throw err;
      } finally {
        watcher.close();
      }
      const missed = seen.phase === "missed";
      if (!missed) {
        if (victim === "mesh up") up?.child.kill("SIGKILL");
        else process.kill(providers[0]!.pid, "SIGKILL");
      }
      await holdAdd?.release();
      const at = missed
        ? `${what}: ${phase} passed unseen, nothing killed`
        : `${what} (${Date.now() - began} ms after mesh rotate; seen: ${seen.phase}, ${seen.how})`;
      console.log(`kill matrix: ${at}`);

      if (missed) {
        await checkConverged(at, before, []);
      } else if (victim === "mesh up") {
        await kill9(up);
        await restartUp(at, before, killed);
      } else {
        await checkConverged(at, before, providers);
      }
      const answer = await Promise.race([
        rotating,
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000).unref()),
      ]);
      assert.ok(answer !== undefined, `${at}: mesh rotate answered`);
      assert.equal(answer.code, 0, `${at}: mesh rotate said: ${answer.stderr}`);
      const password = await passwordOf(consumer, c);
      assert.notEqual(password, old.password, `${at}: the consumer's files name a new password`);
      // The rotation ends on time whatever was killed: the old password goes once the grace bound
      // passes (3 s after it began), the new one stays.
      await until(
        `${at}: the rotation over, the old password refused and the new one logging in`,
        async () => {
          const rotation = (await providerStatus(provider)).consumers.find(
            (x) => x.login === login,
          )?.rotation;
          if (rotation !== undefined)
            throw new Error(`the provider's status says ${rotation.phase} until ${rotation.until}`);
          if (await loginWorks(c, old.login, old.password))
            throw new Error(`the old password still logs in as ${old.login}`);
          if (!(await canLogin(consumer, c, password))) throw new Error("the new password does not log in");
          return true;
        },
        60,
      );
      return seen.phase;
    };
    const loginWorks = (c: Consumer, login: string, password: string): Promise<boolean> =>
      c.iface === REDIS ? canLoginAs(redis, login, password) : postgres.canLogin(login, password);

    before(async () => {
      console.log(
        `kill matrix: seed ${SEED} (MESH_KILL_SEED=${SEED} replays it), ${RUNS} kill point(s) per case`,
      );
      [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
      pgAdmin = await postgres.createAdmin("mesh_admin");
      dir = await mkdtemp(join(tmpdir(), "mesh-kill-"));
      for (const [name, iface] of [
        ["pg-app", PG],
        ["redis-app", REDIS],
      ] as const) {
        await mkdir(join(dir, name));
        await writeFile(join(dir, name, "module.json"), JSON.stringify({ name, needs: { [iface]: {} } }));
      }
      await mkdir(join(dir, "sleeper"));
      await writeFile(
        join(dir, "sleeper", "module.json"),
        JSON.stringify({
          name: "sleeper",
          needs: { [REDIS]: {} },
          run: { command: "sleep", args: ["3600"] },
        }),
      );
      for (const name of ["db-a", "db-b", ...Array.from({ length: RUNS }, (_, i) => `db-r${i + 1}`)]) {
        asked.set(name, { iface: PG, node: "node-1" });
      }
      asked.set("sleeper", { iface: REDIS, node: "node-1" });
      asked.set("rd-a", { iface: REDIS, node: "node-1" });
      await writeFleet();
      startUp();
      await checkConverged("the first start", new Map(), []);
    });

    after(async () => {
      const counts = Object.entries(converged).map(([k, v]) => `${k}: ${v.done}/${v.of} converged`);
      console.log(`kill matrix (seed ${SEED}): ${counts.join("; ")}`);
      // Everything this test started, whichever run: the mesh processes, then all they left.
      for (const child of children) child.kill("SIGKILL");
      for (const server of listeners) server.close();
      for (let i = 0; i < 3; i++) {
        for (const p of marked()) {
          try {
            process.kill(pgrpOf(p.pid) === p.pid ? -p.pid : p.pid, "SIGKILL");
          } catch {
            // gone meanwhile
          }
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      await Promise.all([postgres?.stop(), redis?.stop()]);
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    void it("mesh up killed -9 during a fleet change that adds 20 consumers converges after a restart", async () => {
      await matrix("a fleet change adding 20 consumers", 3_000, async (run) => {
        const before = await kept();
        for (let i = 1; i <= 20; i++) asked.set(`rd-${run}-${i}`, { iface: REDIS, node: "node-1" });
        await writeFleet();
        return before;
      });
    });

    void it("mesh up, or a provider alone, killed -9 at each phase of a rotation converges, the rotation ends, and only the rotated password changes", async () => {
      // Each phase once for mesh up, the backends alternating; then the provider alone at add and at
      // drain. Add is taken on Postgres, whose roles' catalog the test can hold locked so that add
      // lasts until the kill: on its own it often passes between two looks (its status goes from no
      // rotation to drain within a few ms), and each miss costs a whole rotation.
      const plan: readonly (readonly [Victim, Phase, string])[] = [
        ["mesh up", "add", "db-a"],
        ["mesh up", "deliver", "rd-a"],
        ["mesh up", "drain", "db-a"],
        ["mesh up", "remove", "rd-a"],
        ["the provider", "add", "db-a"],
        ["the provider", "drain", "rd-a"],
      ];
      const name = "a rotation killed at each phase";
      const tally = (converged[name] = { done: 0, of: plan.length });
      const hit = new Map<Phase, string[]>();
      for (const [victim, phase, consumer] of plan) {
        const got = await rotationKilledAt(victim, phase, consumer);
        hit.set(got, [...(hit.get(got) ?? []), `${victim} (${consumer})`]);
        tally.done += 1;
      }
      console.log(
        `kill matrix: the rotation's phases hit: ${PHASES.map((p) => `${p}: ${(hit.get(p) ?? []).join(", ") || "none"}`).join("; ")}`,
      );
      for (const phase of PHASES) assert.ok(hit.has(phase), `a kill landed at the rotation's ${phase}`);
    });

    void it("mesh up killed -9 during a retirement converges after a restart, and retires only what is no longer asked", async () => {
      await matrix(
        "a retirement",
        3_000,
        async (run) => {
          asked.delete(`db-r${run}`);
          const before = await kept();
          await writeFleet();
          return before;
        },
        async (run) => {
          const login = `db_r${run}_postgres`;
          await until(
            `${login} retired (it is no longer asked for)`,
            async () => {
              const c = (await providerStatus("postgres")).consumers.find((x) => x.login === login);
              return c?.state === "retired";
            },
            60,
          );
        },
      );
    });

    void it("mesh agent killed -9 while it writes deliveries leaves no partial file, and no module starts twice", async () => {
      converged["mesh agent writing deliveries"] = { done: 0, of: RUNS };
      const token = join(upState(), "join", "node-2.token");
      await until("the join token of node-2", () => stat(token).then(() => true), 30);
      running.set("sleeper-2", "node-2");
      asked.set("sleeper-2", { iface: REDIS, node: "node-2" });
      await writeFleet();
      startAgent2(token);
      const log = join(nodeDir("node-2"), "modules", "sleeper-2", "log");
      const starts = async (): Promise<number> =>
        ((await readFile(log, "utf8").catch(() => "")).match(/mesh agent starts sleeper-2/g) ?? []).length;
      await checkConverged("node-2's first start", await kept(), []);
      assert.equal(await starts(), 1, "sleeper-2 started once, with its bus credential");

      for (let run = 1; run <= RUNS; run++) {
        const before = await kept();
        const killed = marked().filter((p) => p.what.includes(nodeDir("node-2")));
        for (let i = 1; i <= 20; i++) asked.set(`rd2-${run}-${i}`, { iface: REDIS, node: "node-2" });
        await writeFleet();
        const at = Math.floor(random() * 1_500);
        await new Promise((r) => setTimeout(r, at));
        const what = `mesh agent writing deliveries, run ${run} (killed ${at} ms into it)`;
        console.log(`kill matrix: ${what}`);
        const startsBefore = await starts();
        await kill9(agent2);
        startAgent2();
        await checkConverged(what, before, killed);
        // Every file whole: no temp file left, every JSON file parses, every secret is one line. A
        // temp file seen once may be a write of the running agent (it writes a temp file, then renames
        // it); one still there 2 s later was left by the killed one.
        const files = await filesUnder(nodeDir("node-2"));
        const temps = files.filter((f) => f.endsWith(".tmp"));
        if (temps.length > 0) await new Promise((r) => setTimeout(r, 2_000));
        for (const file of temps) {
          const left = await stat(file).then(
            () => true,
            () => false,
          );
          assert.ok(!left, `${what}: ${file} is left half-written`);
        }
        for (const file of files) {
          const name = file.slice(file.lastIndexOf("/") + 1);
          if (name.endsWith(".tmp")) continue;
          if (name.endsWith(".json")) JSON.parse(await readFile(file, "utf8"));
          if (file.includes("/secrets/"))
            assert.match(await readFile(file, "utf8"), /^\S+$/, `${file} is whole`);
        }
        assert.equal(await starts(), startsBefore + 1, `${what}: sleeper-2 started once after the restart`);
        converged["mesh agent writing deliveries"].done += 1;
      }
    });

    void it("a second mesh up or mesh agent on a state directory in use exits 1, naming the PID that holds it", async () => {
      const second = spawnMesh(["up", join(dir, "mesh.yaml"), "--state", upState(), "--node", "node-1"]);
      await second.exited;
      assert.equal(second.child.exitCode, 1, second.output());
      assert.match(second.output(), new RegExp(`is in use by mesh up \\(pid ${up?.child.pid}\\)`));
      const agent = spawnMesh(["agent", "--node", "node-2", "--state", nodeDir("node-2")]);
      await agent.exited;
      assert.equal(agent.child.exitCode, 1, agent.output());
      assert.match(
        agent.output(),
        new RegExp(`in use by the agent of node node-2 \\(pid ${agent2?.child.pid}\\)`),
      );
    });

    void it("Ctrl-C twice to the whole group stops the modules, the agents, the controller, the bus, in that order, within the grace period plus 5 s, leaving no process", async () => {
      for (const s of [agent2, up]) {
        assert.ok(s !== undefined && s.child.exitCode === null, "the mesh runs");
        const pid = s.child.pid!;
        const began = Date.now();
        process.kill(-pid, "SIGINT");
        await new Promise((r) => setTimeout(r, 100));
        try {
          process.kill(-pid, "SIGINT");
        } catch {
          // it had stopped already
        }
        await s.exited;
        const took = Date.now() - began;
        assert.ok(took < 3_000 + 5_000, `stopped in ${took} ms`);
        assert.equal(s.child.exitCode, 0, s.output());
        assert.doesNotMatch(s.output(), /lost the bus/, "the bus stops last");
      }
      assert.deepEqual(marked(), [], "no process of the mesh is left");
    });

    void it("one SIGTERM stops mesh agent promptly while it is still waiting for a bus that does not answer", async () => {
      const busFile = join(nodeDir("node-2"), "bus.json");
      await writeFile(busFile, JSON.stringify({ servers: ["nats://127.0.0.1:1"] }));
      const waiting = spawnMesh(["agent", "--node", "node-2", "--state", nodeDir("node-2")]);
      await until("mesh agent to wait for the bus", () => /keeps trying/.test(waiting.output()), 60);
      const began = Date.now();
      waiting.child.kill("SIGTERM");
      await waiting.exited;
      const took = Date.now() - began;
      assert.ok(took < 5_000, `stopped in ${took} ms`);
      assert.equal(waiting.child.exitCode, 0, waiting.output());
    });
  },
);

function pgrpOf(pid: number): number | undefined {
  try {
    const text = readFileSyncSafe(`/proc/${pid}/stat`);
    return Number(text.slice(text.lastIndexOf(")") + 2).split(" ")[2]);
  } catch {
    return undefined;
  }
}

/** A secret file's password now; undefined when it cannot be read. */
function readSecretSync(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

function readFileSyncSafe(path: string): string {
  return readFileSync(path, "latin1");
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await filesUnder(path)));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}
