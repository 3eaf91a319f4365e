// `mesh bus-config`: the nats-server configuration of each server of a NATS cluster for the mesh,
// trusting the operator of the controller's authority (made in <state>/controller when it is not
// there yet), so an operator grows the bus with NATS itself, as NATS's operators do.
import { mkdir } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import type { ClusterServer } from "@mesh/bus";
import { stateDirOf } from "./controller-request.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";

const HELP = `
Each server's directory <out>/<NAME>/ holds nats.conf (0600: it names the mesh's operator), and with
--tls-dir its certificate and key in tls/. Copy it to <data-dir>/<NAME>/ on that server's machine
(the config names its JetStream store and account JWTs there) and run \`nats-server -c
<data-dir>/<NAME>/nats.conf\`. Account JWTs are kept with the full resolver, so a revocation reaches
every server and outlives a restart. With --tls-dir, clients and routes use TLS; the CA is made there
once, kept (its key 0600), and reused when the command runs again.

Examples:
  $ mesh bus-config --cluster mesh --server n1=10.0.0.1:4222:6222 --server n2=10.0.0.2:4222:6222 \\
      --server n3=10.0.0.3:4222:6222 --out ./bus --data-dir /var/lib/mesh-bus
  $ mesh bus-config --cluster mesh --server n1=10.0.0.1:4222:6222 --server n2=10.0.0.2:4222:6222 \\
      --server n3=10.0.0.3:4222:6222 --tls-dir /var/lib/mesh/bus-ca --json`;

/** What `mesh bus-config` wrote, as `--json` prints it. */
export interface BusConfigWritten {
  readonly cluster: string;
  /** The client URLs to give `--bus`, one per server. */
  readonly bus: readonly string[];
  /** The CA clients trust, when TLS was asked for. */
  readonly ca?: string;
  readonly servers: readonly { readonly name: string; readonly config: string; readonly run: string }[];
}

/** What `writeBusConfig` is given. */
export interface BusConfigRequest {
  readonly cluster: string;
  readonly servers: readonly ClusterServer[];
  /** The mesh's state directory; the authority is in `<state>/controller`. */
  readonly state: string;
  /** Where the files are written: `<out>/<name>/`. */
  readonly out: string;
  /** Where each server's files are on its machine: `<dataDir>/<name>/` (default: `out`). */
  readonly dataDir?: string;
  /** The mesh's bus CA is kept here; TLS for clients and routes when given. */
  readonly tlsDir?: string;
}

/**
 * Writes one nats-server configuration per server (and, with `tlsDir`, its certificate), from the
 * authority in `<state>/controller`.
 * @throws ClusterSpecError for servers that cannot form a cluster; BusTlsError when openssl fails;
 * AuthorityFileError when the authority file is damaged; the file system's errors.
 */
export async function writeBusConfig(request: BusConfigRequest): Promise<BusConfigWritten> {
  const { loadOrCreateAuthority } = await import("@mesh/controller");
  const { clusterClientUrls, clusterServerConfigs, readFileIfExists, writeFileAtomic } =
    await import("@mesh/bus");
  const { ensureBusCa, issueServerCertificate } = await import("./bus-tls.ts");
  const out = resolve(request.out);
  const dataDir = resolve(request.dataDir ?? out);
  const tls = request.tlsDir !== undefined;
  const authority = await loadOrCreateAuthority(join(request.state, "controller"));
  const configs = clusterServerConfigs(authority, {
    cluster: request.cluster,
    servers: request.servers,
    dataDir,
    tls,
  });
  const ca = request.tlsDir !== undefined ? await ensureBusCa(resolve(request.tlsDir)) : undefined;
  const written: BusConfigWritten["servers"][number][] = [];
  for (const config of configs) {
    const dir = join(out, config.server.name);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (ca !== undefined)
      await issueServerCertificate(ca, config.server.name, config.server.host, join(dir, "tls"));
    for (const [path, text] of Object.entries(config.seedFiles)) {
      const seed = join(dir, path);
      await mkdir(dirname(seed), { recursive: true, mode: 0o700 });
      if ((await readFileIfExists(seed)) === undefined) await writeFileAtomic(seed, text, 0o600);
    }
    const file = join(dir, "nats.conf");
    await writeFileAtomic(file, config.text, 0o600);
    written.push({
      name: config.server.name,
      config: file,
      run: `nats-server -c ${join(config.dir, "nats.conf")}`,
    });
  }
  return {
    cluster: request.cluster,
    bus: clusterClientUrls(request.servers, tls),
    ...(ca !== undefined ? { ca: ca.certFile } : {}),
    servers: written,
  };
}

/** Adds `mesh bus-config` to `program`. */
export function addBusConfigCommand(program: Command, io: CliIo): void {
  program
    .command("bus-config")
    .summary("write each nats-server's configuration for a NATS cluster of the mesh")
    .description(
      "write one nats-server configuration per server of a NATS cluster trusting the mesh's operator",
    )
    .requiredOption("--cluster <name>", "the cluster's name, the same on every server")
    .requiredOption(
      "--server <NAME=HOST:CLIENT_PORT:CLUSTER_PORT...>",
      "a server of the cluster (once per server): its name, the address others reach it at, its ports",
    )
    .option(
      "--tls-dir <dir>",
      "use TLS for clients and routes, with the mesh's bus CA kept in this directory",
    )
    .option("--out <dir>", "where to write each server's directory", "mesh-bus")
    .option("--data-dir <dir>", "where each server's directory is on its machine (default: --out)")
    .option("--state <dir>", "the mesh's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option("--json", "print what was written as JSON, for scripts")
    .addHelpText("after", HELP)
    .action(
      async (flags: {
        cluster: string;
        server: string[];
        tlsDir?: string;
        out: string;
        dataDir?: string;
        state?: string;
        json?: boolean;
      }) => {
        // Loaded only when the command runs: building the program must not pay for the bus.
        const { ClusterSpecError, parseClusterServer } = await import("@mesh/bus");
        const { BusTlsError } = await import("./bus-tls.ts");
        let written: BusConfigWritten;
        try {
          written = await writeBusConfig({
            cluster: flags.cluster,
            servers: flags.server.map(parseClusterServer),
            state: stateDirOf(flags.state, io),
            out: flags.out,
            ...(flags.dataDir !== undefined ? { dataDir: flags.dataDir } : {}),
            ...(flags.tlsDir !== undefined ? { tlsDir: flags.tlsDir } : {}),
          });
        } catch (err) {
          if (err instanceof ClusterSpecError) throw new CliExit(EXIT_USAGE, `--server ${err.message}`);
          if (err instanceof BusTlsError) throw new CliExit(EXIT_REFUSED, err.message);
          throw new CliExit(EXIT_REFUSED, (err as Error).message);
        }
        if (flags.json === true) return io.out(formatJson(written));
        const lines = written.servers.map((s) => `  ${s.name}: ${s.config}\n      on its machine: ${s.run}`);
        io.out(
          `wrote the configuration of ${written.servers.length} server(s) of cluster ${written.cluster}:\n` +
            `${lines.join("\n")}\n` +
            `the bus: ${written.bus.join(",")}\n` +
            (written.ca !== undefined
              ? `clients trust the CA ${written.ca}: give it to mesh controller, mesh up and mesh agent as --bus-ca ${written.ca}\n`
              : ""),
        );
      },
    );
}
