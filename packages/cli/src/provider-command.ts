// `mesh provider <name>`: runs one provider in the foreground until Ctrl-C or SIGTERM.

import { Argument, type Command } from "commander";
import type { ProviderProcess } from "@mesh/sdk/provider";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";
import { PROVIDER_NAMES, type ProviderName, loadProvider } from "./providers.ts";

interface ProviderCommandFlags {
  readonly receives?: string;
  readonly secretsDir?: string;
  readonly adminUrl?: string;
  readonly control?: string;
  readonly instance?: string;
  readonly every?: string;
  readonly verifyEvery?: string;
  readonly metrics?: string;
}

/** Adds `mesh provider` to `program`. Its action resolves once the provider has stopped cleanly. */
export function addProviderCommand(program: Command, io: CliIo): void {
  program
    .command("provider")
    .summary("run one provider alone, in the foreground")
    .description("run one provider in the foreground until Ctrl-C or SIGTERM")
    .addArgument(new Argument("<name>", "which provider").choices(PROVIDER_NAMES))
    .option("--receives <file>", "the contributions file the mesh writes for it (default: $MESH_RECEIVES)")
    .option(
      "--secrets-dir <dir>",
      "read consumers' secrets only from regular files under this directory (default: $MESH_SECRETS_DIR, " +
        "else the contributions file's directory)",
    )
    .option(
      "--admin-url <url>",
      "how it reaches its server as an admin (default: $MESH_<NAME>_URL, e.g. $MESH_POSTGRES_URL; " +
        "prefer the variable: a flag is visible to other users in the process list)",
    )
    .option("--control <socket>", "serve its tools on this Unix socket, mode 0600 (default: $MESH_CONTROL)")
    .option(
      "--instance <name>",
      "names it in the marks it writes (default: $MESH_INSTANCE, else the provider's name)",
    )
    .option("--every <duration>", "how often it passes (default: $MESH_EVERY, else 5s)")
    .option(
      "--verify-every <duration>",
      "how often it verifies each consumer (default: $MESH_VERIFY_EVERY, else 60s)",
    )
    .option(
      "--metrics <host:port>",
      "serve Prometheus metrics on http://HOST:PORT/metrics; a bare port means 127.0.0.1 (default: $MESH_METRICS, else none)",
    )
    .addHelpText(
      "after",
      `
Durations are written with a unit: 250ms, 5s, 1m, 1h30m.

Examples:
  $ export MESH_POSTGRES_URL=postgres://mesh_admin:PASSWORD@127.0.0.1:5432/postgres
  $ mesh provider postgres --receives /run/mesh/postgres-database.json --control /run/mesh/postgres.sock \\
      --metrics 127.0.0.1:9464
  then, from another shell: mesh tool --control /run/mesh/postgres.sock status
  and Prometheus scrapes http://127.0.0.1:9464/metrics`,
    )
    .action(async (name: ProviderName, flags: ProviderCommandFlags) => {
      // Loaded only when the command runs: building the program must not pay for the provider process.
      const { consoleLogger } = await import("@mesh/sdk");
      const {
        ProviderSettingsError,
        redactSecrets,
        resolveProviderSettings,
        secretsOfUrl,
        startProviderProcess,
        untilStopSignal,
      } = await import("@mesh/sdk/provider");
      const provider = await loadProvider(name);
      let settings;
      try {
        settings = resolveProviderSettings(provider, io.env, flags);
      } catch (err) {
        if (err instanceof ProviderSettingsError) throw new CliExit(EXIT_USAGE, err.message);
        throw err;
      }
      // Listening before starting, so a signal while it starts still stops it cleanly.
      const signalled = untilStopSignal(consoleLogger);
      let running: ProviderProcess;
      try {
        running = await startProviderProcess({ provider, ...settings, logger: consoleLogger });
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        throw new CliExit(EXIT_REFUSED, redactSecrets(message, secretsOfUrl(settings.adminUrl)));
      }
      await signalled;
      await running.stop();
      io.err(`mesh provider ${name}: stopped\n`);
    });
}
