// `mesh backup --out FILE` and `mesh restore FILE --state DIR`: one file holding what a mesh needs
// to come back with every password it had. The controller's files (its keys, the bus authority,
// the tokens) and the nodes' enrollment (each local node's keys and bus credential) are copied;
// every stream of the mesh's account (the KV buckets: fleet, sealed passwords, nodes, deliveries;
// the ledgers) is read through the bus's own API, never by copying a running server's files. The
// modules' homes are not in it: they are the apps' data, backed up as the apps' data is.
import { createReadStream, createWriteStream, constants as fsConstants } from "node:fs";
import { chmod, mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { createInterface } from "node:readline";
import { createGunzip, createGzip } from "node:zlib";
import type { Command } from "commander";
import type { NatsConnection } from "@nats-io/transport-node";
import type { StreamHeader, StreamMessage } from "@mesh/bus";
import { BUS_CA_OPTION, busCaOf, busOf, STATE_OPTION, stateDirOf } from "./controller-request.ts";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { withProgress } from "./progress.ts";
import { STATE_FORMAT_FILE } from "./state-format.ts";

/** What the first line of a backup says it is. */
export const BACKUP_FORMAT = "mesh-backup";
/** The version of the backup's layout; a newer one is refused, naming both. */
export const BACKUP_VERSION = 1;

/** One line of a backup file (gzip'd JSON lines): the head, a file, a stream, a message, the end. */
type BackupLine =
  | { readonly head: BackupHead }
  | { readonly file: { readonly path: string; readonly mode: number; readonly data: string } }
  | { readonly stream: StreamHeader }
  | { readonly msg: StreamMessage & { readonly stream: string } }
  | { readonly end: BackupCounts };

/** What a backup says of itself first. */
export interface BackupHead {
  readonly format: typeof BACKUP_FORMAT;
  readonly version: number;
  /** When it was taken (ISO 8601): restore says how old it is. */
  readonly takenAt: string;
  /** The mesh's version that took it. */
  readonly mesh: string;
  /** Whether the mesh was running (its bus read live) or stopped (its bus started for the backup). */
  readonly from: "running" | "stopped" | "cluster";
  /** The local nodes whose enrollment it holds. */
  readonly nodes: readonly string[];
}

/** How much a backup holds: its last line, so a cut-off file is never restored. */
export interface BackupCounts {
  readonly files: number;
  readonly streams: number;
  readonly messages: number;
}

/** The files of a local node's state that are its enrollment (the rest is made again at start). */
const NODE_FILES = ["keys.json", "node.creds", "mesh-id", "ledgers", "bus-ca.pem"] as const;

/** Who the backup and the restore are on the bus (a user minted for the time of the work). */
const BACKUP_USER = "mesh-backup";

/** Adds `mesh backup` and `mesh restore` to `program`. */
export function addBackupCommands(program: Command, io: CliIo): void {
  program
    .command("backup")
    .summary("write one file holding what a restore needs, from a running or stopped mesh")
    .description(
      "write one file (0600, atomically) holding what `mesh restore` needs: the controller's keys and " +
        "bus authority, the sealed passwords, the fleet, the nodes' enrollment and the ledgers' history " +
        "(not the modules' homes: those are the apps' data)",
    )
    .requiredOption("--out <file>", "the backup file to write (0600; made beside it, then renamed)")
    .option(...STATE_OPTION)
    .option(
      "--bus <url,...>",
      "read a cluster's streams through these servers (a mesh run with --bus); default: the running mesh's bus, or, when it is stopped, its embedded bus started for the time of the backup",
      (value: string, before: string[] | undefined) => [...(before ?? []), value],
    )
    .option(...BUS_CA_OPTION)
    .option("--json", "print what was written as JSON, for scripts")
    .addHelpText(
      "after",
      `
Consistent while the mesh runs: every stream of the mesh's account is read through the bus, each up
to the last message it held when the backup began. A stopped one-machine mesh's own nats-server is
started on its state (and stopped after), so nothing is copied from under a server. The file holds
secrets (the bus authority, the controller's keys): keep it as you keep the state directory.

Examples:
  $ mesh backup --out /var/backups/mesh/mesh-$(date +%F).backup --state /var/lib/mesh
  $ mesh backup --out mesh.backup --bus nats://10.0.0.1:4222,nats://10.0.0.2:4222`,
    )
    .action(
      async (flags: { out: string; state?: string; bus?: string[]; busCa?: string; json?: boolean }) => {
        await backup(stateDirOf(flags.state, io), resolve(flags.out), flags, io);
      },
    );

  program
    .command("restore")
    .summary("bring a backup's mesh back into a new state directory, on this machine or another")
    .description(
      "write a backup's files into an empty state directory and its streams into the bus (the embedded " +
        "one of that directory, or a cluster's with --bus); then `mesh up` serves the fleet with every " +
        "password it had",
    )
    .argument("<file>", "the backup file (from mesh backup)")
    .option(...STATE_OPTION)
    .option(
      "--bus <url,...>",
      "write the streams into this cluster (which trusts the backup's operator: mesh bus-config) instead of the state directory's embedded bus",
      (value: string, before: string[] | undefined) => [...(before ?? []), value],
    )
    .option(...BUS_CA_OPTION)
    .option(
      "--advertise <host[:port]>",
      "the bus address other machines reach, written into the join tokens of the nodes this machine does not run",
    )
    .option("--json", "print what was restored as JSON, for scripts")
    .addHelpText(
      "after",
      `
The state directory must not hold a mesh yet. The embedded bus may come back on any port: mesh up
tells its own agents where it is, and restore writes a renewed join token (<state>/join/<node>.token)
for each node of the backup that this machine does not run; on its machine that node's agent
reconnects with mesh agent --node NODE --bus URL (its own state kept), or enrolls again with
--join FILE. A backup older than the backends (a password rotated since) is said: the providers
apply the restored password again at the next mesh up, and mesh status names what still fails.

Examples:
  $ mesh restore /var/backups/mesh/mesh-2026-12-01.backup --state /var/lib/mesh
  $ mesh up /etc/mesh/mesh.yaml --state /var/lib/mesh`,
    )
    .action(
      async (
        file: string,
        flags: { state?: string; bus?: string[]; busCa?: string; advertise?: string; json?: boolean },
      ) => {
        await restore(resolve(file), stateDirOf(flags.state, io), flags, io);
      },
    );
}

/** A bus to work on for the time of a backup or restore, and how to let it go. */
interface OpenBus {
  readonly nc: NatsConnection;
  readonly servers: readonly string[];
  close(): Promise<void>;
}

/** Connects to `servers` as a user the authority of `controllerDir` mints for an hour, allowed everything. */
async function connectAsBackup(
  controllerDir: string,
  servers: readonly string[],
  ca: string | undefined,
): Promise<NatsConnection> {
  const { loadOrCreateAuthority } = await import("@mesh/controller");
  const { connectBus, credsFor, newUserKeys } = await import("@mesh/bus");
  const authority = await loadOrCreateAuthority(controllerDir);
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: BACKUP_USER,
    publicKey: keys.publicKey,
    // Publishing anywhere covers answering; `allowResponses` would make every message read cost more.
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    expiresAt: new Date(Date.now() + 60 * 60_000),
  });
  try {
    return await connectBus({
      servers,
      creds: credsFor(jwt, keys.seed),
      name: BACKUP_USER,
      ...(ca !== undefined ? { ca } : {}),
    });
  } catch (err) {
    throw new CliExit(
      EXIT_UNREACHABLE,
      `the bus at ${servers.join(", ")} does not answer (${(err as Error).message}): ` +
        "start the mesh, or give --bus with servers that answer",
    );
  }
}

/**
 * Opens the bus of the mesh in `state`: `--bus` when given; the running mesh's (its lock held,
 * `bus.json` naming its bus); else the embedded bus started on its state for the time of the work.
 */
async function openBus(
  state: string,
  who: string,
  flags: { bus?: string[]; busCa?: string },
  say: (line: string) => void,
): Promise<OpenBus & { readonly from: BackupHead["from"] }> {
  const controllerDir = join(state, "controller");
  const given = busOf(flags.bus);
  const givenCa = await busCaOf(flags.busCa);
  if (given !== undefined) {
    const nc = await connectAsBackup(controllerDir, given, givenCa);
    return { nc, servers: given, from: "cluster", close: () => closeQuietly(nc) };
  }
  const { lockStateDir, StateLockedError } = await import("@mesh/agent");
  let lock: Awaited<ReturnType<typeof lockStateDir>>;
  try {
    lock = await lockStateDir(state, who);
  } catch (err) {
    if (!(err instanceof StateLockedError)) throw err;
    // A mesh runs there: its bus is read while it serves.
    const record = await readFile(join(state, "bus.json"), "utf8").then(
      (t) => JSON.parse(t) as { servers?: string[]; ca?: string },
      () => ({}) as { servers?: string[]; ca?: string },
    );
    if (!Array.isArray(record.servers) || record.servers.length === 0)
      throw new CliExit(
        EXIT_UNREACHABLE,
        `a mesh runs with state in ${state} but ${join(state, "bus.json")} names no bus: give --bus`,
      );
    say(`the mesh in ${state} runs: its bus at ${record.servers.join(", ")} is read while it serves`);
    const nc = await connectAsBackup(controllerDir, record.servers, givenCa ?? record.ca);
    return { nc, servers: record.servers, from: "running", close: () => closeQuietly(nc) };
  }
  try {
    const { loadOrCreateAuthority } = await import("@mesh/controller");
    const { startEmbeddedBus } = await import("./embedded-bus.ts");
    const authority = await loadOrCreateAuthority(controllerDir);
    const bus = await startEmbeddedBus(join(state, "bus"), authority);
    say(`the mesh in ${state} is stopped: its nats-server runs for the time of this (${bus.url})`);
    let nc: NatsConnection;
    try {
      nc = await connectAsBackup(controllerDir, [bus.url], undefined);
    } catch (err) {
      await bus.stop();
      throw err;
    }
    return {
      nc,
      servers: [bus.url],
      from: "stopped",
      async close() {
        await closeQuietly(nc);
        await bus.stop();
        await lock.release();
      },
    };
  } catch (err) {
    await lock.release();
    if (err instanceof CliExit) throw err;
    throw new CliExit(EXIT_REFUSED, `cannot start the bus of ${state}: ${(err as Error).message}`);
  }
}

async function closeQuietly(nc: NatsConnection): Promise<void> {
  const { closeBus } = await import("@mesh/bus");
  await closeBus(nc);
}

/**
 * The files of `state` a backup keeps, relative to it: the state's format record (so a restored
 * state is not taken for an older one and migrated), the controller's, and each local node's
 * enrollment.
 */
async function stateFiles(state: string): Promise<{ files: string[]; nodes: string[] }> {
  const files: string[] = [];
  if ((await stat(join(state, STATE_FORMAT_FILE)).catch(() => undefined))?.isFile() === true)
    files.push(STATE_FORMAT_FILE);
  for (const name of (await readdir(join(state, "controller"))).sort()) {
    if (name.endsWith(".tmp") || name.includes(".tmp-")) continue;
    const s = await stat(join(state, "controller", name));
    if (s.isFile()) files.push(join("controller", name));
  }
  const nodes = (await readdir(join(state, "nodes")).catch(() => [] as string[])).sort();
  const kept: string[] = [];
  for (const node of nodes) {
    let any = false;
    for (const name of NODE_FILES) {
      const s = await stat(join(state, "nodes", node, name)).catch(() => undefined);
      if (s?.isFile() !== true) continue;
      files.push(join("nodes", node, name));
      any = true;
    }
    if (any) kept.push(node);
  }
  return { files, nodes: kept };
}

async function backup(
  state: string,
  out: string,
  flags: { bus?: string[]; busCa?: string; json?: boolean },
  io: CliIo,
): Promise<void> {
  const authorityFile = join(state, "controller", "authority.json");
  if (
    !(await stat(authorityFile).then(
      (s) => s.isFile(),
      () => false,
    ))
  )
    throw new CliExit(
      EXIT_USAGE,
      `no mesh's state in ${state} (no ${authorityFile}): give --state, the directory mesh up runs with`,
    );
  await stat(dirname(out)).catch(() => {
    throw new CliExit(EXIT_USAGE, `--out: the directory ${dirname(out)} does not exist`);
  });
  // The CLI package's own version (package.json sits one level above src/ and dist/ alike).
  const MESH_VERSION = (
    JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
  ).version;
  const { dumpStreams } = await import("@mesh/bus");
  const temp = `${out}.tmp-${process.pid}`;
  const counts = await withProgress(io, `backing up the mesh in ${state}`, async (say) => {
    const bus = await openBus(state, "mesh backup", flags, say);
    let ok = false;
    const gzip = createGzip();
    const sink = createWriteStream(temp, { flags: "wx", mode: 0o600 });
    const finished = new Promise<void>((res, rej) => {
      sink.once("close", res);
      sink.once("error", rej);
      gzip.once("error", rej);
    });
    gzip.pipe(sink);
    try {
      const write = async (line: BackupLine): Promise<void> => {
        if (!gzip.write(`${JSON.stringify(line)}\n`))
          await new Promise<void>((r) => gzip.once("drain", () => r()));
      };
      const { files, nodes } = await stateFiles(state);
      const head: BackupHead = {
        format: BACKUP_FORMAT,
        version: BACKUP_VERSION,
        takenAt: new Date().toISOString(),
        mesh: MESH_VERSION,
        from: bus.from,
        nodes,
      };
      await write({ head });
      for (const path of files) {
        const full = join(state, path);
        const mode = (await stat(full)).mode & 0o777;
        await write({ file: { path, mode, data: (await readFile(full)).toString("base64") } });
      }
      say(
        `    ${files.length} file(s): the controller's keys, authority and tokens; ${nodes.length} node(s)' enrollment`,
      );
      const dumped = await dumpStreams(bus.nc, {
        stream: async (stream) => {
          say(`    stream ${stream.name}: ${stream.messages} message(s)`);
          await write({ stream });
        },
        message: (stream, message) => write({ msg: { stream, ...message } }),
      });
      const end: BackupCounts = { files: files.length, ...dumped };
      await write({ end });
      gzip.end();
      await finished;
      await syncFile(temp);
      ok = true;
      return end;
    } finally {
      if (!ok) {
        gzip.destroy();
        sink.destroy();
        await rm(temp, { force: true });
      }
      await bus.close();
    }
  }).catch(async (err: unknown) => {
    await rm(temp, { force: true });
    if (err instanceof CliExit) throw err;
    throw new CliExit(
      EXIT_REFUSED,
      `the backup failed, nothing was written to ${out}: ${(err as Error).message}`,
    );
  });
  await chmod(temp, 0o600);
  await rename(temp, out);
  await syncFile(dirname(out));
  io.out(
    flags.json === true
      ? formatJson({ out, ...counts })
      : `backed up to ${out}: ${counts.files} file(s), ${counts.streams} stream(s), ${counts.messages} message(s)\n`,
  );
}

/** Flushes `path` (a file or a directory) to disk, as far as the file system lets it. */
async function syncFile(path: string): Promise<void> {
  const handle = await open(path, fsConstants.O_RDONLY).catch(() => undefined);
  await handle?.sync().catch(() => {});
  await handle?.close();
}

/** Reads each line of backup `file` in order; a line that is not a backup's is an error naming it. */
async function* backupLines(file: string): AsyncGenerator<BackupLine> {
  const lines = createInterface({ input: createReadStream(file).pipe(createGunzip()), crlfDelay: Infinity });
  let n = 0;
  try {
    for await (const text of lines) {
      n += 1;
      if (text === "") continue;
      let line: unknown;
      try {
        line = JSON.parse(text);
      } catch {
        throw new CliExit(EXIT_USAGE, `${file} is not a mesh backup (line ${n} is not JSON)`);
      }
      if (typeof line !== "object" || line === null)
        throw new CliExit(EXIT_USAGE, `${file} is not a mesh backup (line ${n})`);
      yield line as BackupLine;
    }
  } catch (err) {
    if (err instanceof CliExit) throw err;
    throw new CliExit(
      EXIT_USAGE,
      `${file} cannot be read as a mesh backup (${(err as Error).message}): give a file mesh backup wrote`,
    );
  }
}

/** Reads `file` once through: its head, and its counts when it is whole. */
async function checkBackup(file: string): Promise<{ head: BackupHead; end: BackupCounts }> {
  let head: BackupHead | undefined;
  let end: BackupCounts | undefined;
  const seen = { files: 0, streams: 0, messages: 0 };
  for await (const line of backupLines(file)) {
    if ("head" in line) head = line.head;
    else if (head === undefined)
      throw new CliExit(EXIT_USAGE, `${file} is not a mesh backup (it does not begin with one's head)`);
    else if ("file" in line) seen.files += 1;
    else if ("stream" in line) seen.streams += 1;
    else if ("msg" in line) seen.messages += 1;
    else if ("end" in line) end = line.end;
  }
  if (head?.format !== BACKUP_FORMAT)
    throw new CliExit(EXIT_USAGE, `${file} is not a mesh backup (it does not begin with one's head)`);
  if (head.version > BACKUP_VERSION)
    throw new CliExit(
      EXIT_USAGE,
      `${file} is a backup of format ${head.version}, newer than this mesh reads (${BACKUP_VERSION}): ` +
        `restore it with mesh ${head.mesh} or newer`,
    );
  if (
    end === undefined ||
    end.files !== seen.files ||
    end.streams !== seen.streams ||
    end.messages !== seen.messages
  )
    throw new CliExit(
      EXIT_USAGE,
      `${file} is cut off (it holds ${seen.files} file(s), ${seen.streams} stream(s), ${seen.messages} message(s)` +
        `${end === undefined ? " and no end" : `, its end says ${end.files}, ${end.streams}, ${end.messages}`}): ` +
        "nothing was restored; use another backup",
    );
  return { head, end };
}

/** `path` (relative, from a backup) as a path under `state`, or an error when it would leave it. */
function underState(state: string, path: string): string {
  const full = resolve(state, path);
  const allowed =
    path === STATE_FORMAT_FILE || /^(controller\/[^/]+|nodes\/[a-z0-9][a-z0-9-]*\/[^/]+)$/.test(path);
  if (!allowed || !full.startsWith(state + sep))
    throw new CliExit(
      EXIT_USAGE,
      `the backup names a file outside a state directory's own: ${JSON.stringify(path)}`,
    );
  return full;
}

function ageOf(ms: number): string {
  const minutes = Math.round(ms / 60_000);
  if (minutes < 120) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  return hours < 48 ? `${hours} h` : `${Math.round(hours / 24)} days`;
}

async function restore(
  file: string,
  state: string,
  flags: { bus?: string[]; busCa?: string; advertise?: string; json?: boolean },
  io: CliIo,
): Promise<void> {
  const { head, end } = await withProgress(io, `reading ${file}`, () => checkBackup(file));
  for (const part of [join(state, "controller", "authority.json"), join(state, "bus", "jetstream")]) {
    const there = await readdir(part).then(
      (names) => names.length > 0,
      (err: NodeJS.ErrnoException) => err.code === "ENOTDIR",
    );
    if (there)
      throw new CliExit(
        EXIT_REFUSED,
        `${state} already holds a mesh (${part}): restore into an empty or new state directory, ` +
          "or move that one away first",
      );
  }
  await mkdir(join(state, "nodes"), { recursive: true, mode: 0o711 });
  await chmod(state, 0o711);
  await mkdir(join(state, "controller"), { recursive: true, mode: 0o700 });
  const { loadStream, StreamExistsError } = await import("@mesh/bus");
  const result = await withProgress(io, `restoring ${file} into ${state}`, async (say) => {
    say(
      `the backup was taken at ${head.takenAt} (${ageOf(Date.now() - Date.parse(head.takenAt))} ago) ` +
        `by mesh ${head.mesh}: ${end.files} file(s), ${end.streams} stream(s), ${end.messages} message(s)`,
    );
    // The files first: the bus is started with the authority they hold.
    for await (const line of backupLines(file)) {
      if (!("file" in line)) continue;
      const path = underState(state, line.file.path);
      await mkdir(dirname(path), {
        recursive: true,
        mode: path.includes(`${sep}nodes${sep}`) ? 0o711 : 0o700,
      });
      await writeFile(`${path}.tmp`, Buffer.from(line.file.data, "base64"), { mode: 0o600 });
      await chmod(`${path}.tmp`, line.file.mode & 0o777);
      await rename(`${path}.tmp`, path);
    }
    const bus = await openBus(state, "mesh restore", flags, say);
    try {
      let loading: Awaited<ReturnType<typeof loadStream>> | undefined;
      let current: StreamHeader | undefined;
      let messages = 0;
      const finish = async (): Promise<void> => {
        if (loading === undefined || current === undefined) return;
        const added = await loading.done();
        say(`    stream ${current.name}: ${added} message(s)`);
      };
      for await (const line of backupLines(file)) {
        if ("stream" in line) {
          await finish();
          current = line.stream;
          try {
            loading = await loadStream(bus.nc, line.stream, bus.from === "stopped" ? 1 : undefined);
          } catch (err) {
            if (err instanceof StreamExistsError)
              throw new CliExit(
                EXIT_REFUSED,
                `${err.message}: this bus already holds a mesh; restore onto a bus without one`,
              );
            throw err;
          }
        } else if ("msg" in line) {
          if (loading === undefined || current?.name !== line.msg.stream)
            throw new CliExit(
              EXIT_USAGE,
              `${file} is damaged: a message of ${line.msg.stream} outside its stream`,
            );
          await loading.add(line.msg);
          messages += 1;
        }
      }
      await finish();
      const tokens = await renewJoinTokens(bus.nc, state, head.nodes, bus.servers, flags.advertise);
      return { messages, tokens, servers: bus.servers };
    } finally {
      await bus.close();
    }
  }).catch((err: unknown) => {
    if (err instanceof CliExit) throw err;
    throw new CliExit(
      EXIT_REFUSED,
      `the restore failed: ${(err as Error).message}; ${state} now holds part of the backup: ` +
        "remove it (and the bus's streams, with --bus) before restoring again",
    );
  });
  if (flags.json === true) {
    io.out(
      formatJson({
        state,
        takenAt: head.takenAt,
        files: end.files,
        streams: end.streams,
        messages: result.messages,
        joinTokens: result.tokens,
      }),
    );
    return;
  }
  const lines = [
    `restored into ${state}: ${end.files} file(s), ${end.streams} stream(s), ${result.messages} message(s), ` +
      `as the mesh was at ${head.takenAt}`,
    `a password rotated after ${head.takenAt} is not put back: at the next mesh up its provider finds ` +
      "its backend holding a newer one, says so, and the mesh rotates that consumer to a newer password still " +
      "(mesh status names it while it lasts)",
    ...result.tokens.map(
      (t) =>
        `node ${t.node} (on another machine): its agent reconnects with mesh agent --node ${t.node} --bus ` +
        `${t.servers.join(",")}, or enrolls again with the renewed token ${t.file}`,
    ),
    `next: mesh up FLEET --state ${state}${flags.bus !== undefined ? ` --bus ${result.servers.join(",")}` : ""}`,
  ];
  io.out(`${lines.join("\n")}\n`);
}

/**
 * Renews the join token of every node the restored mesh gave one to and that this machine does not
 * run (`local`), naming the bus that serves now, and writes each to `<state>/join/<node>.token`.
 */
async function renewJoinTokens(
  nc: NatsConnection,
  state: string,
  local: readonly string[],
  servers: readonly string[],
  advertise: string | undefined,
): Promise<{ node: string; file: string; servers: string[] }[]> {
  const { openState, DESIRED_STATE_BUCKET, writeFileAtomic } = await import("@mesh/bus");
  const { JoinSecrets, loadOrCreateAuthority, loadOrCreateControllerKeys } = await import("@mesh/controller");
  const { advertiseServers } = await import("./join-token-command.ts");
  const desired = await openState<unknown>(nc, DESIRED_STATE_BUCKET, { create: false }).catch(
    () => undefined,
  );
  if (desired === undefined) return [];
  const nodes = (await desired.keys())
    .filter((k) => k.startsWith("join."))
    .map((k) => k.slice("join.".length))
    .filter((n) => !local.includes(n))
    .sort();
  if (nodes.length === 0) return [];
  let reach: string[];
  try {
    reach = advertise !== undefined ? advertiseServers(servers, advertise) : [...servers];
  } catch (err) {
    throw new CliExit(EXIT_USAGE, `--advertise: ${(err as Error).message}`);
  }
  const controllerDir = join(state, "controller");
  const keys = await loadOrCreateControllerKeys(controllerDir);
  const authority = await loadOrCreateAuthority(controllerDir);
  const secrets = new JoinSecrets(desired, keys.seal, authority, reach, {
    info: () => {},
    warn: () => {},
    error: () => {},
  });
  await mkdir(join(state, "join"), { recursive: true, mode: 0o700 });
  const written: { node: string; file: string; servers: string[] }[] = [];
  for (const node of nodes) {
    const token = await secrets.renew(node);
    const file = join(state, "join", `${node}.token`);
    await writeFileAtomic(file, `${token}\n`, 0o600);
    written.push({ node, file, servers: reach });
  }
  return written;
}
