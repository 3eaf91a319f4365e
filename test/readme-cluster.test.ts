// The README's "Three machines" walk-through, run as written on three network namespaces: each
// line of its `sh` blocks, in order, on the machine its block's first comment names, in a shell
// whose `mesh` is this checkout's. Only hosts and places are substituted, as the README says:
// 10.0.0.N becomes namespace N's address; `/var/lib/mesh-bus` a directory the three share (so the
// copy step 1 asks for is already made); every other `/var/lib/…` a directory of that machine's
// own. A block written "on the second machine" runs on each machine for its own node (node-2 and
// n2 become node-N and nN); one "for node-2" runs once per node, and its token is carried to that
// node's machine, as step 3 says. `nats-server`, `mesh controller` and `mesh agent` keep running;
// every other line must exit 0, or the test fails naming it. The TLS variant (its block's comment
// says "with TLS, in place of steps 1 and 2") is not run here.
//
// Needs root and `ip netns`; without them it is skipped, saying why (as the cluster test is).
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { appendFile, chmod, copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startPostgres, until, type PostgresServer } from "@mesh/testkit";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MESH = join(ROOT, "packages", "cli", "bin", "mesh.js");
const TAG = String((process.pid + 7) % 10_000);
const BRIDGE = `mrb${TAG}`;
const SUBNET = `10.211.${(process.pid % 250) + 1}`;
const BRIDGE_ADDRESS = `${SUBNET}.254`;
const HOSTS = [1, 2, 3].map((i) => ({
  i,
  ns: `mesh-r${TAG}-h${i}`,
  veth: `mr${TAG}h${i}`,
  peer: `mr${TAG}h${i}p`,
  address: `${SUBNET}.${i}`,
}));

function cannotRun(): string | undefined {
  if (process.platform !== "linux") return "the README's cluster walk-through needs Linux network namespaces";
  if (typeof process.getuid !== "function" || process.getuid() !== 0)
    return "the README's cluster walk-through needs root, to make network namespaces (ip netns add)";
  try {
    execFileSync("ip", ["netns", "list"], { stdio: "ignore" });
  } catch {
    return "the README's cluster walk-through needs `ip netns` (the Debian package iproute2)";
  }
  return undefined;
}

function ip(...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile("ip", args, { timeout: 15_000, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err) reject(new Error(`ip ${args.join(" ")}: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}

/** One `sh` block of the walk-through: where it says it runs, and its commands (continuations joined). */
interface Block {
  readonly where: string;
  readonly lines: readonly string[];
}

/** The `sh` blocks of the README's "Three machines" section, in order. */
async function walkthrough(): Promise<Block[]> {
  const text = await readFile(join(ROOT, "README.md"), "utf8");
  const at = text.indexOf("\n## Three machines\n");
  assert.ok(at >= 0, 'the README has "## Three machines"');
  const next = text.indexOf("\n## ", at + 1);
  const section = text.slice(at, next < 0 ? undefined : next);
  const blocks: Block[] = [];
  for (const m of section.matchAll(/\n *```sh\n([\s\S]*?)\n *```/g)) {
    const raw = (m[1] ?? "").split("\n").map((l) => l.trim());
    const where = raw[0]?.startsWith("# on ") ? raw[0].slice(2) : "";
    const lines: string[] = [];
    let pending = "";
    for (const l of raw) {
      if (l === "" || l.startsWith("#")) continue;
      if (l.endsWith("\\")) {
        pending += `${l.slice(0, -1).trim()} `;
        continue;
      }
      lines.push(`${pending}${l}`);
      pending = "";
    }
    // The TLS variant replaces steps 1 and 2 with a cluster of its own: not run here.
    if (raw[0]?.startsWith("# with TLS")) continue;
    blocks.push({ where, lines });
  }
  return blocks;
}

interface Started {
  readonly line: string;
  readonly child: ChildProcess;
  output: string;
}

const started: Started[] = [];

function removeNetworkNow(): void {
  const quiet = { stdio: "ignore" as const, timeout: 10_000 };
  for (const h of HOSTS) {
    let pids: string[] = [];
    try {
      pids = execFileSync("ip", ["netns", "pids", h.ns], { encoding: "utf8", timeout: 10_000 })
        .split(/\s+/)
        .filter((p) => p !== "");
    } catch {
      // no such namespace
    }
    for (const pid of pids) {
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {
        // gone already
      }
    }
    try {
      execFileSync("ip", ["netns", "del", h.ns], quiet);
    } catch {
      // not there
    }
  }
  try {
    execFileSync("ip", ["link", "del", BRIDGE], quiet);
  } catch {
    // not there
  }
}

const reason = cannotRun();
if (reason !== undefined) process.stderr.write(`# skipped: ${reason}\n`);
else
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.once(signal, () => {
      removeNetworkNow();
      process.exit(1);
    });

describe(
  "the README's three-machine walk-through, on namespaces",
  { skip: reason ?? false, timeout: 420_000 },
  () => {
    let dir: string;
    let postgres: PostgresServer | undefined;
    let adminUrl = "";
    const home = (i: number): string => join(dir, `h${i}`, "home");
    const ran: string[] = [];

    // The README's line as machine `i` runs it.
    const substitute = (line: string, i: number): string =>
      line
        .replace(/10\.0\.0\.(\d)/g, (_m, n: string) => `${SUBNET}.${n}`)
        .replace(/\/var\/lib\/mesh-bus/g, join(dir, "shared", "mesh-bus"))
        .replace(/\/var\/lib\//g, `${join(dir, `h${i}`, "var-lib")}/`);

    const env = (): NodeJS.ProcessEnv => ({
      ...process.env,
      PATH: `${join(dir, "bin")}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
    });

    // Runs `line` with sh on machine `i`, in its home, to the end.
    const run = (line: string, i: number, extra: NodeJS.ProcessEnv = {}) =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const host = HOSTS[i - 1];
        if (host === undefined) throw new Error(`no machine ${i}`);
        const c = spawn("ip", ["netns", "exec", host.ns, "sh", "-c", line], {
          cwd: home(i),
          env: { ...env(), ...extra },
          stdio: ["ignore", "pipe", "pipe"],
        });
        let out = "";
        let err = "";
        c.stdout.on("data", (d: Buffer) => (out += d.toString()));
        c.stderr.on("data", (d: Buffer) => (err += d.toString()));
        const timer = setTimeout(() => c.kill("SIGKILL"), 120_000);
        c.on("close", (code) => {
          clearTimeout(timer);
          resolve({ code, out, err });
        });
      });

    // Starts `line` with sh on machine `i`, in its own process group, to keep running.
    const keep = (line: string, i: number, extra: NodeJS.ProcessEnv = {}): Started => {
      const host = HOSTS[i - 1];
      if (host === undefined) throw new Error(`no machine ${i}`);
      const child = spawn("ip", ["netns", "exec", host.ns, "sh", "-c", `exec ${line}`], {
        cwd: home(i),
        env: { ...env(), ...extra },
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
      const s: Started = { line: `machine ${i}: ${line}`, child, output: "" };
      child.stdout?.on("data", (d: Buffer) => (s.output += d.toString()));
      child.stderr?.on("data", (d: Buffer) => (s.output += d.toString()));
      started.push(s);
      return s;
    };

    const said = (): string => started.map((s) => `--- ${s.line}\n${s.output.slice(-3000)}`).join("\n");

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), "mesh-readme-cluster-"));
      await chmod(dir, 0o755);
      await mkdir(join(dir, "bin"));
      await writeFile(join(dir, "bin", "mesh"), `#!/bin/sh\nexec ${process.execPath} ${MESH} "$@"\n`, {
        mode: 0o755,
      });
      // Each machine's /var/lib (and the shared one) as a machine has it: 0755, so a module's own
      // user may enter the directories the agent makes there for it.
      for (const h of HOSTS) {
        await mkdir(home(h.i), { recursive: true });
        await mkdir(join(dir, `h${h.i}`, "var-lib"), { mode: 0o755 });
      }
      await mkdir(join(dir, "shared"), { mode: 0o755 });
      await ip("link", "add", BRIDGE, "type", "bridge");
      await ip("addr", "add", `${BRIDGE_ADDRESS}/24`, "dev", BRIDGE);
      await ip("link", "set", BRIDGE, "up");
      for (const h of HOSTS) {
        await ip("netns", "add", h.ns);
        await ip("link", "add", h.veth, "type", "veth", "peer", "name", h.peer);
        await ip("link", "set", h.veth, "netns", h.ns);
        await ip("link", "set", h.peer, "master", BRIDGE);
        await ip("link", "set", h.peer, "up");
        await ip("-n", h.ns, "addr", "add", `${h.address}/24`, "dev", h.veth);
        await ip("-n", h.ns, "link", "set", h.veth, "up");
        await ip("-n", h.ns, "link", "set", "lo", "up");
      }
      postgres = await startPostgres({ settings: { listen_addresses: `127.0.0.1,${BRIDGE_ADDRESS}` } });
      await appendFile(join(postgres.dataDir, "pg_hba.conf"), `host all all ${SUBNET}.0/24 scram-sha-256\n`);
      await postgres.query("SELECT pg_reload_conf()");
      adminUrl = (await postgres.createAdmin("mesh_admin")).replace("@127.0.0.1:", `@${BRIDGE_ADDRESS}:`);
      // The fleet the walk-through names: the Postgres provider on node-1, notes on node-2.
      await writeFile(
        join(home(1), "mesh.yaml"),
        `nodes:\n  node-1: {}\n  node-2: {}\n  node-3: {}\nmodules:\n  postgres:\n` +
          `    manifest: ${JSON.stringify(join(ROOT, "providers", "postgres", "module.json"))}\n` +
          `    node: node-1\n    endpoint: { host: ${BRIDGE_ADDRESS}, port: ${postgres.port} }\n` +
          `    admin: { env: MESH_POSTGRES_URL }\n    env: { MESH_EVERY: 1s }\n` +
          `  notes:\n    manifest: ${JSON.stringify(join(ROOT, "examples", "fleet", "notes", "module.json"))}\n` +
          `    node: node-2\n`,
        { mode: 0o644 },
      );
    });

    after(async () => {
      for (const s of [...started].reverse()) {
        if (s.child.exitCode !== null || s.child.signalCode !== null || s.child.pid === undefined) continue;
        try {
          process.kill(-s.child.pid, "SIGTERM");
        } catch {
          // gone already
        }
      }
      await new Promise((r) => setTimeout(r, 3000));
      removeNetworkNow();
      await postgres?.stop();
      if (process.env["MESH_CLUSTER_TEST_LOG"] === "1") process.stderr.write(said());
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    });

    it("runs every command of the walk-through as written, and the mesh it makes works", async () => {
      const blocks = await walkthrough();
      assert.ok(blocks.length >= 6, `the walk-through has its blocks (${blocks.length})`);
      let controller: Started | undefined;
      for (const block of blocks) {
        assert.match(
          block.where,
          /^on the (first|second) machine/,
          `a block says where it runs: ${block.lines[0]}`,
        );
        const each = block.where.startsWith("on the second machine");
        const perNode = /for node-2$/.test(block.where);
        const machines = each ? [1, 2, 3] : [1];
        for (const line of block.lines) {
          for (const i of machines) {
            const targets = perNode ? [1, 2, 3] : [i];
            for (const n of targets) {
              const forNode =
                each || perNode ? line.replace(/node-2/g, `node-${n}`).replace(/\/n2\//g, `/n${n}/`) : line;
              const written = substitute(forNode, i);
              ran.push(`machine ${i}: ${written}`);
              if (/^(nats-server|mesh controller|mesh agent) /.test(forNode)) {
                const s = keep(
                  written,
                  i,
                  forNode.startsWith("mesh agent") && n === 1 ? { MESH_POSTGRES_URL: adminUrl } : {},
                );
                if (forNode.startsWith("mesh controller")) {
                  controller = s;
                  await until(
                    "the controller to serve",
                    () => (/the controller serves/.test(s.output) ? true : undefined),
                    90,
                  ).catch((err: unknown) => {
                    throw new Error(`${(err as Error).message}; ${said()}`);
                  });
                }
                continue;
              }
              if (forNode.startsWith("mesh rotate") || forNode.startsWith("mesh status")) {
                // The mesh the walk-through made must be whole first: every node enrolled, notes live.
                await until(
                  "notes on node-2 to store a note",
                  async () =>
                    /stored note/.test(
                      await readFile(
                        join(dir, "h2", "var-lib", "mesh-node", "modules", "notes", "log"),
                        "utf8",
                      ).catch(() => ""),
                    )
                      ? true
                      : undefined,
                  120,
                ).catch((err: unknown) => {
                  throw new Error(`${(err as Error).message}; ${said()}`);
                });
              }
              // A join token is answered once the controller's interest has reached every server.
              const result = await until(
                `\`${written}\``,
                async () => {
                  const r = await run(written, i);
                  return forNode.startsWith("mesh join-token") && r.code === 3 ? undefined : r;
                },
                60,
              );
              assert.equal(
                result.code,
                0,
                `machine ${i}: \`${written}\` failed:\n${result.out}${result.err}\n${said()}`,
              );
              if (forNode.startsWith("mesh status")) {
                assert.match(
                  result.out,
                  /^leader   \S+, term \d+/m,
                  "text status names the leader and its term",
                );
                assert.match(result.out, /node-2/);
              }
              if (forNode.startsWith("mesh fleet history")) assert.match(result.out, /^\*\s+\d+ /m);
              if (perNode && forNode.startsWith("mesh join-token") && n !== 1) {
                // Carried to that node's machine, as step 3 says.
                await copyFile(join(home(1), `node-${n}.token`), join(home(n), `node-${n}.token`));
              }
            }
          }
        }
      }
      assert.ok(controller !== undefined, "the walk-through starts a controller");
      process.stderr.write(`# ran, as written (substituted):\n${ran.map((l) => `#   ${l}`).join("\n")}\n`);
    });
  },
);
