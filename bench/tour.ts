// The tour's fleet (`npm start`'s: four providers, four apps and an audit logger on one node) started
// cold with its backends already running: how long from `mesh up`'s start until every app has used
// its credential once, where that time goes, and how much memory Mesh's own processes hold once it
// runs (`mesh up` with its controller and agent, the bus, the four providers; not the apps).
//
// Goals: every app served within 2 s of `mesh up`'s start; Mesh's own processes ≤ 300 MB RSS in all.
// Baselines in the same run: each app's own time from its process's start to its first use (what no
// control plane can save), and the backends' own RSS (what the mesh drives).
//
//   npm run build && node --conditions=source --import tsx bench/tour.ts
//   MESH_BENCH_STEADY_S=10   how long the mesh runs after the last app's first use before RSS is read
//   MESH_BENCH_ROUNDS=1      cold starts, each on a fresh state directory (the figures are medians)

import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdir, readFile, readdir, readlink, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startCeph, startGlewlwyd, startPostgres, startRedis } from "@mesh/testkit";
import { servedAt, TOUR_APPS, tourFleetYaml } from "../examples/one-machine/fleet.ts";
import {
  envInt,
  fmtMs,
  mb,
  median,
  memoryInStatus,
  now,
  onCleanup,
  printResult,
  runBench,
  say,
  sleep,
  table,
  tempDir,
  verdict,
} from "./lib.ts";

const GOAL_START_MS = 2000;
const GOAL_RSS_MB = 300;
const STEADY_S = envInt("MESH_BENCH_STEADY_S", 10);
const ROUNDS = envInt("MESH_BENCH_ROUNDS", 1);
const MESH = join(fileURLToPath(new URL("..", import.meta.url)), "packages", "cli", "bin", "mesh.js");
const APPS = Object.keys(TOUR_APPS) as (keyof typeof TOUR_APPS)[];
const PROVIDERS = ["postgres", "redis", "s3", "oidc"] as const;
/** The longest a cold start may take before the round is given up as broken. */
const BOUND_MS = 120_000;

/** A process on this machine, read from /proc. */
interface Proc {
  readonly pid: number;
  readonly ppid: number;
  readonly comm: string;
  readonly cmdline: string;
  /** Its working directory: a module runs in its manifest's directory. */
  readonly cwd: string;
  /** When it started, in ms since the epoch (10 ms resolution). */
  readonly startedAt: number;
  readonly rssMb: number;
}

const ticksPerSecond = 100; // Linux's USER_HZ on every architecture Debian ships
const bootMs = async (): Promise<number> =>
  Number(/^btime (\d+)$/m.exec(await readFile("/proc/stat", "utf8"))?.[1] ?? 0) * 1000;

async function processes(): Promise<Proc[]> {
  const boot = await bootMs();
  const all: Proc[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = await readFile(`/proc/${name}/stat`, "utf8");
      // comm is in parentheses and may hold spaces: the fields after it start past the last ')'.
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const status = await readFile(`/proc/${name}/status`, "utf8");
      const cmdline = (await readFile(`/proc/${name}/cmdline`, "utf8")).replaceAll("\0", " ").trim();
      const cwd = await readlink(`/proc/${name}/cwd`).catch(() => "");
      all.push({
        pid: Number(name),
        ppid: Number(rest[1]),
        comm,
        cmdline,
        cwd,
        startedAt: boot + (Number(rest[19]) * 1000) / ticksPerSecond,
        rssMb: mb(memoryInStatus(status).rss),
      });
    } catch {
      // ended while it was read
    }
  }
  return all;
}

/** `root` and every process below it. */
function descendants(all: readonly Proc[], root: number): Proc[] {
  const below = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of all)
      if (!below.has(p.pid) && below.has(p.ppid)) {
        below.add(p.pid);
        grew = true;
      }
  }
  return all.filter((p) => below.has(p.pid));
}

/** What a process under `mesh up` is: the mesh itself, the bus, a provider, or an app (by the directory it runs in). */
function roleOf(p: Proc, upPid: number): string {
  if (p.pid === upPid) return "mesh up (controller + agent)";
  if (p.comm === "nats-server") return "bus (nats-server)";
  const where = `${p.cwd} ${p.cmdline}`;
  for (const name of PROVIDERS) if (where.includes(`providers/${name}`)) return `provider ${name}`;
  const app = /examples\/fleet\/([\w-]+)/.exec(where)?.[1];
  return app === undefined ? `other: ${p.comm}` : `app ${app}`;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("close", () => resolve());
    child.kill("SIGINT");
  });
}

interface Round {
  readonly served: number;
  readonly parts: Record<string, number>;
  /** Each app's own time, from its process's start to its first use. */
  readonly appOwn: Record<string, number>;
  readonly rss: Map<string, number>;
}

runBench("tour", async () => {
  say("tour: starting PostgreSQL, Redis, Ceph and Glewlwyd (not timed)");
  const postgres = await startPostgres();
  onCleanup(() => postgres.stop());
  const redis = await startRedis();
  onCleanup(() => redis.stop());
  const ceph = await startCeph();
  onCleanup(() => ceph.stop());
  const glewlwyd = await startGlewlwyd();
  onCleanup(() => glewlwyd.stop());
  const env = {
    ...process.env,
    NODE_OPTIONS: "",
    MESH_POSTGRES_URL: await postgres.createAdmin("mesh_admin"),
    MESH_REDIS_URL: redis.adminUrl,
    MESH_S3_URL: ceph.adminUrl,
    MESH_OIDC_URL: glewlwyd.adminUrl,
  };
  const served = [
    servedAt(env.MESH_POSTGRES_URL),
    servedAt(env.MESH_REDIS_URL),
    servedAt(env.MESH_S3_URL),
    servedAt(env.MESH_OIDC_URL),
  ] as const;
  // The backends' processes, by what their command lines name (their directories, Redis' port).
  const backendMarks = [postgres.dataDir, ceph.dir, glewlwyd.dir, `:${redis.port}`];

  const rounds: Round[] = [];
  for (let r = 1; r <= ROUNDS; r++) {
    const dir = await tempDir("tour");
    // The modules' own users pass through it to reach their directories in the state.
    await chmod(dir, 0o711);
    const state = join(dir, "state");
    await mkdir(state);
    const fleet = join(dir, "mesh.yaml");
    await writeFile(`${fleet}.tmp`, tourFleetYaml(true, ...served));
    await rename(`${fleet}.tmp`, fleet);

    const lines: { at: number; text: string }[] = [];
    const started = now();
    const wallStarted = Date.now();
    const up = spawn(process.execPath, [MESH, "up", fleet, "--state", state, "--isolation", "auto"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    onCleanup(() => stop(up));
    let pending = "";
    const hear = (d: Buffer): void => {
      const at = now() - started;
      const parts = (pending + d.toString()).split("\n");
      pending = parts.pop() ?? "";
      for (const text of parts) lines.push({ at, text });
    };
    up.stdout.on("data", hear);
    up.stderr.on("data", hear);

    // Each app's first use, read from its log as the tour does (polled every 20 ms, bounded).
    const firstUse = new Map<string, number>();
    const logOf = (app: string): string => join(state, "nodes", "node-1", "modules", app, "log");
    while (firstUse.size < APPS.length) {
      if (now() - started > BOUND_MS)
        throw new Error(
          `round ${r}: not every app used its credential within ${BOUND_MS / 1000} s ` +
            `(${[...firstUse.keys()].join(", ") || "none"} did); mesh up said:\n` +
            lines.map((l) => l.text).join("\n"),
        );
      if (up.exitCode !== null)
        throw new Error(`mesh up ended (${up.exitCode}):\n${lines.map((l) => l.text).join("\n")}`);
      for (const app of APPS) {
        if (firstUse.has(app)) continue;
        const text = await readFile(logOf(app), "utf8").catch(() => "");
        if (TOUR_APPS[app].test(text)) firstUse.set(app, now() - started);
      }
      await sleep(20);
    }
    const servedMs = Math.max(...firstUse.values());

    const all = await processes();
    const under = descendants(all, up.pid as number);
    const appOwn: Record<string, number> = {};
    for (const app of APPS) {
      const proc = under.find((p) => roleOf(p, up.pid as number) === `app ${app}`);
      const use = firstUse.get(app) as number;
      if (proc !== undefined) appOwn[app] = wallStarted + use - proc.startedAt;
    }
    // MESH_BENCH_TIMELINE=FILE: what mesh up said, each line with its time since mesh up began.
    const timeline = process.env["MESH_BENCH_TIMELINE"];
    if (timeline !== undefined && timeline !== "") {
      const text = lines.map((l) => `${String(Math.round(l.at)).padStart(7)} ms  ${l.text}`).join("\n");
      await writeFile(ROUNDS > 1 ? `${timeline}.${r}` : timeline, `${text}\n`);
    }
    const when = (pattern: RegExp): number => lines.find((l) => pattern.test(l.text))?.at ?? NaN;
    const lastOf = (patterns: readonly RegExp[]): number => Math.max(...patterns.map(when));
    const parts = {
      "bus started, agent connected": when(/the agent of node node-1 is connected to the bus/),
      "first delivery published": when(/published generation \d+ of node node-1/),
      "every provider started": lastOf(PROVIDERS.map((p) => new RegExp(`^.*\\b${p} started \\(pid`))),
      "every app started (its password applied)": lastOf(
        APPS.map((a) => new RegExp(`\\b${a} started \\(pid`)),
      ),
      "every app used its credential": servedMs,
    };

    say(
      `tour: round ${r}: every app served ${fmtMs(servedMs)} after mesh up began; steady for ${STEADY_S} s`,
    );
    await sleep(STEADY_S * 1000);
    const steady = descendants(await processes(), up.pid as number);
    const rss = new Map<string, number>();
    for (const p of steady) {
      const role = roleOf(p, up.pid as number);
      rss.set(role, (rss.get(role) ?? 0) + p.rssMb);
    }
    const everything = await processes();
    const backends = everything
      .filter((p) => backendMarks.some((mark) => p.cmdline.includes(mark)))
      .flatMap((p) => descendants(everything, p.pid));
    const backendRss = [...new Map(backends.map((p) => [p.pid, p.rssMb])).values()];
    rss.set(
      "(baseline) the backends",
      backendRss.reduce((sum, mb) => sum + mb, 0),
    );
    await stop(up);
    rounds.push({ served: servedMs, parts, appOwn, rss });
  }

  const partNames = Object.keys(rounds[0]?.parts ?? {});
  const roles = [...new Set(rounds.flatMap((r) => [...r.rss.keys()]))].sort();
  const meshRoles = roles.filter(
    (role) => role.startsWith("mesh up") || role.startsWith("bus") || role.startsWith("provider"),
  );
  const meshRss = median(rounds.map((r) => meshRoles.reduce((sum, role) => sum + (r.rss.get(role) ?? 0), 0)));
  const servedMs = median(rounds.map((r) => r.served));
  const ownMax = median(rounds.map((r) => Math.max(...Object.values(r.appOwn))));
  printResult(
    "tour",
    [
      `mesh up on the tour's fleet (4 providers, ${APPS.length} apps, an audit logger; backends already running), ` +
        `${ROUNDS} round(s), medians:`,
      "",
      table(
        ["since mesh up began", "time"],
        partNames.map((name) => [name, fmtMs(median(rounds.map((r) => r.parts[name] ?? NaN)))]),
      ),
      "",
      table(
        ["app", "its own start → first use (baseline)"],
        APPS.map((app) => [app, fmtMs(median(rounds.map((r) => r.appOwn[app] ?? NaN)))]),
      ),
      "",
      table(
        ["process", `RSS after ${STEADY_S} s steady`],
        roles.map((role) => [role, `${median(rounds.map((r) => r.rss.get(role) ?? 0)).toFixed(1)} MB`]),
      ),
      "",
      `cold start: ${verdict(fmtMs(servedMs), `≤ ${fmtMs(GOAL_START_MS)}`, servedMs <= GOAL_START_MS)}; ` +
        `the slowest app's own part ${fmtMs(ownMax)}, the mesh's ${fmtMs(servedMs - ownMax)}`,
      `Mesh's own processes (mesh up, the bus, the providers): ` +
        verdict(`${meshRss.toFixed(1)} MB`, `≤ ${GOAL_RSS_MB} MB`, meshRss <= GOAL_RSS_MB),
    ].join("\n"),
  );
});
