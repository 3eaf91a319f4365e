// `mesh join-token NODE`: what an operator carries to a new machine. The running controller gives
// the node's token (the same one until renewed); the bus URLs in it are made ones the node can
// reach: `--advertise` replaces a loopback address, which the other machine cannot use.
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { JOIN_TOKEN_SUBJECT } from "@mesh/bus/subjects";
import { askController, busOverride, stateDirOf, withAskFlags } from "./controller-request.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";

const HELP = `
The token holds the node's join secret and credentials that may only ask to enroll: give it to the
person setting up that machine, and no one else. It enrolls one node key: the node that first uses
it may use it again (an agent stopped mid-enrollment retries), any other key is refused. Use --renew
when the node's machine is replaced or its state directory is lost, or when the token may have been
seen by someone else: the old token is then refused.

Examples:
  $ mesh join-token node-2 --advertise 10.0.0.1 --out node-2.token
  then, on node-2's machine: mesh agent --node node-2 --join node-2.token
  $ mesh join-token node-2 --renew --advertise mesh-1.example.net:4222 --out node-2.token`;

/** A bad `--advertise` value. */
export class AdvertiseError extends Error {
  override name = "AdvertiseError";
  constructor(readonly value: string) {
    super(
      `--advertise ${JSON.stringify(value)} is not HOST or HOST:PORT (e.g. 10.0.0.1 or mesh-1.example.net:4222)`,
    );
  }
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\]|0\.0\.0\.0|\[::\])$/i;

/**
 * `servers` with each loopback or unspecified host (127.0.0.1, localhost, ::1, 0.0.0.0) replaced by
 * `advertise` (`HOST` keeps each URL's port, `HOST:PORT` replaces it too). Other URLs are kept.
 * @throws AdvertiseError for a value that is not HOST or HOST:PORT.
 */
export function advertiseServers(servers: readonly string[], advertise: string): string[] {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$/.exec(advertise.trim());
  const port = match?.[2] !== undefined ? Number(match[2]) : undefined;
  if (match === null || (port !== undefined && (port < 1 || port > 65535)))
    throw new AdvertiseError(advertise);
  const host = match[1] ?? "";
  return servers.map((url) => {
    const parts = /^([a-z]+:\/\/)(\[[^\]]+\]|[^:/]+)(?::(\d+))?(.*)$/i.exec(url);
    if (parts === null || !LOOPBACK.test(parts[2] ?? "")) return url;
    const [, scheme = "", , oldPort, rest = ""] = parts;
    return `${scheme}${host}${port !== undefined ? `:${port}` : oldPort !== undefined ? `:${oldPort}` : ""}${rest}`;
  });
}

/** What `writeJoinTokens` needs of the running controller. */
export interface JoinTokenSource {
  joinToken(node: string): Promise<string>;
}

/**
 * Writes `<state>/join/<node>.token` (0600, atomically) for each of `nodes` (the nodes of the fleet
 * this machine does not run), its bus URLs advertised as `advertise` when given, and answers the
 * files written. `mesh up` calls it once the controller runs.
 * @throws AdvertiseError for a bad `advertise`; UnknownNodeError for a node not in the fleet; the
 * file system's errors.
 */
export async function writeJoinTokens(options: {
  readonly controller: JoinTokenSource;
  readonly state: string;
  readonly nodes: readonly string[];
  readonly advertise?: string;
  /** The bus's URLs as they serve now (default: the token's own), before `advertise` applies. */
  readonly servers?: readonly string[];
}): Promise<string[]> {
  const written: string[] = [];
  if (options.nodes.length === 0) return written;
  await mkdir(join(options.state, "join"), { recursive: true, mode: 0o700 });
  const { decodeJoinToken, encodeJoinToken, writeFileAtomic } = await import("@mesh/bus");
  for (const node of options.nodes) {
    const token = decodeJoinToken(await options.controller.joinToken(node));
    const now = options.servers ?? token.servers;
    const servers = options.advertise !== undefined ? advertiseServers(now, options.advertise) : [...now];
    const file = join(options.state, "join", `${node}.token`);
    await writeFileAtomic(file, `${encodeJoinToken({ ...token, servers })}\n`, 0o600);
    written.push(file);
  }
  return written;
}

type Answer =
  | { readonly ok: true; readonly node: string; readonly token: string; readonly renewed: boolean }
  | { readonly ok: false; readonly error?: string; readonly unknownNode?: boolean };

/** Adds `mesh join-token` to `program`. */
export function addJoinTokenCommand(program: Command, io: CliIo): void {
  withAskFlags(program.command("join-token"))
    .summary("print or write the join token a node enrolls with")
    .description("print, or write (0600) to a file, the join token a node of the fleet enrolls with")
    .argument("<node>", "the node, as named in the fleet file")
    .option("--advertise <host[:port]>", "the bus address the node reaches, in place of a loopback one")
    .option("--out <file>", "write the token to this file (0600) instead of printing it")
    .option("--renew", "make a new token; the old one is refused from then on")
    .option("--json", "print {node, servers, renewed, token or out} as JSON, for scripts")
    .addHelpText("after", HELP)
    .action(
      async (
        node: string,
        flags: {
          advertise?: string;
          out?: string;
          renew?: boolean;
          state?: string;
          json?: boolean;
          bus?: string[];
          busCa?: string;
        },
      ) => {
        if (flags.advertise !== undefined) {
          try {
            advertiseServers([], flags.advertise);
          } catch (err) {
            throw new CliExit(EXIT_USAGE, (err as Error).message);
          }
        }
        // Loaded only when the command runs: building the program (for --help, or any other
        // command) must not pay for the bus.
        const { decodeJoinToken, encodeJoinToken, writeFileAtomic } = await import("@mesh/bus");
        const answer = await askController<Answer>(
          stateDirOf(flags.state, io),
          JOIN_TOKEN_SUBJECT,
          JSON.stringify({ node, renew: flags.renew === true }),
          {
            name: "mesh join-token",
            ...busOverride(flags),
            io,
            waiting: `waiting for the controller to give node ${node}'s join token`,
          },
        );
        if (!answer.ok)
          throw new CliExit(EXIT_REFUSED, answer.error ?? `the controller refused node ${node}'s join token`);
        const token = decodeJoinToken(answer.token);
        const servers =
          flags.advertise !== undefined
            ? advertiseServers(token.servers, flags.advertise)
            : [...token.servers];
        if (servers.every((url) => LOOPBACK.test(/^[a-z]+:\/\/(\[[^\]]+\]|[^:/]+)/i.exec(url)?.[1] ?? ""))) {
          io.err(
            `warning: the token's bus URLs (${servers.join(", ")}) are this machine's loopback: another machine ` +
              `cannot reach them; give --advertise HOST with an address node ${node} reaches\n`,
          );
        }
        const text = encodeJoinToken({ ...token, servers });
        const out = flags.out !== undefined ? resolve(flags.out) : undefined;
        if (out !== undefined) await writeFileAtomic(out, `${text}\n`, 0o600);
        const renewed = answer.renewed;
        if (flags.json === true) {
          io.out(formatJson({ node, servers, renewed, ...(out !== undefined ? { out } : { token: text }) }));
        } else if (out !== undefined) {
          io.out(
            `wrote ${renewed ? "a new" : "the"} join token of node ${node} to ${out} (0600); bus: ${servers.join(",")}\n`,
          );
        } else {
          io.out(`${text}\n`);
        }
      },
    );
}
