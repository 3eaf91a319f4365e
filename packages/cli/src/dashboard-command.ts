// `mesh dashboard`: prints a link that logs a browser in to the running controller's dashboard. It
// asks the controller's HTTP server for a one-time login code with the operator token (a file only
// root reads), so only whoever holds the operator's credential ever gets a session; the page trades
// the code for a session cookie. Where the server answers and where the token is come from the state
// directory, written by the `mesh up` or `mesh controller` running on it.
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import type { Command } from "commander";
import { readControllerHttp, stateDirOf } from "./controller-request.ts";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { osUserName } from "./who.ts";

const HELP = `
The link works once, within 2 minutes; the session it starts ends after 12 hours without a request
(7 days at most), when it logs out, or when the controller restarts. Actions taken in it are
recorded in the ledger as yours: "alice (dashboard session 3f9c)". It reads <state>/http.json (where
the controller's HTTP server answers) and the operator token file it names, both written by mesh up
or mesh controller: run it as the user that runs them (root). From another machine: give mesh up a
fixed --http port, tunnel it with the same number (ssh -L 9470:127.0.0.1:9470 mesh-host), and open
the link printed on the mesh's machine in your own browser.

Examples:
  $ mesh dashboard
  $ mesh dashboard --state /var/lib/mesh
  $ mesh dashboard --url http://127.0.0.1:9470 --operator-token-file /etc/mesh/operator.token
  $ mesh dashboard --json | jq -r .url`;

/** How long the controller has to answer. */
const ASK_TIMEOUT_MS = 10_000;

/** What the controller answers to `POST /api/login-code`. */
interface LoginCodeAnswer {
  readonly ok: boolean;
  readonly code?: string;
  readonly expiresAt?: string;
  readonly error?: string;
}

/** Adds `mesh dashboard` to `program`. */
export function addDashboardCommand(program: Command, io: CliIo): void {
  program
    .command("dashboard")
    .summary("print a one-time link that logs a browser in to the dashboard")
    .description(
      "print a link to the running controller's dashboard with a one-time login code, asked with the operator token",
    )
    .option("--state <dir>", "the mesh's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option(
      "--url <url>",
      "the controller's HTTP address, in place of the one the state directory names (e.g. through an SSH tunnel)",
    )
    .option(
      "--operator-token-file <path>",
      "the operator token's file, in place of the one the state directory names",
    )
    .option("--json", "print {url, expiresAt} as JSON, for scripts")
    .addHelpText("after", HELP)
    .action(async (flags: { state?: string; url?: string; operatorTokenFile?: string; json?: boolean }) => {
      const state = stateDirOf(flags.state, io);
      const needsRecord = flags.url === undefined || flags.operatorTokenFile === undefined;
      const record = needsRecord ? await readControllerHttp(state) : undefined;
      const base = baseUrl(flags.url ?? record?.url ?? "");
      const tokenFile = resolve(flags.operatorTokenFile ?? record?.operatorTokenFile ?? "");
      const token = await readOperatorToken(tokenFile);
      const answer = await askCode(base, token, tokenFile);
      const url = `${base}/?code=${encodeURIComponent(answer.code)}`;
      if (flags.json === true) {
        io.out(formatJson({ url, expiresAt: answer.expiresAt }));
        return;
      }
      io.out(`${url}\n`);
      const minutes = Math.max(1, Math.round((Date.parse(answer.expiresAt) - Date.now()) / 60_000));
      io.err(
        `this link logs in once, within ${minutes} min (until ${answer.expiresAt}): open it in a browser ` +
          "on this machine (or through an SSH tunnel to it)\n",
      );
    });
}

/** `url` without a trailing slash; a wildcard listen address is opened at loopback. */
function baseUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new CliExit(EXIT_USAGE, `--url ${JSON.stringify(url)} is not a URL: give http://HOST:PORT`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new CliExit(EXIT_USAGE, `--url ${url} is not http:// or https://`);
  if (u.hostname === "0.0.0.0") u.hostname = "127.0.0.1";
  else if (u.hostname === "[::]") u.hostname = "[::1]";
  return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
}

async function readOperatorToken(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EACCES")
      throw new CliExit(
        EXIT_USAGE,
        `cannot read the operator token ${path}: run mesh dashboard as the user that runs mesh up (root)`,
      );
    throw new CliExit(
      EXIT_UNREACHABLE,
      `no operator token at ${path} (${code ?? "unreadable"}): has mesh up run with this state? ` +
        "(--operator-token-file names another)",
    );
  }
  const token = text.trim();
  if (token === "" || /\s/.test(token))
    throw new CliExit(EXIT_USAGE, `${path} does not hold an operator token (one line, no spaces)`);
  return token;
}

async function askCode(
  base: string,
  token: string,
  tokenFile: string,
): Promise<{ code: string; expiresAt: string }> {
  let res: Response;
  try {
    res = await fetch(`${base}/api/login-code`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: osUserName() }),
      signal: AbortSignal.timeout(ASK_TIMEOUT_MS),
      redirect: "error",
    });
  } catch (err) {
    const why = (err as Error & { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    throw new CliExit(
      EXIT_UNREACHABLE,
      `the controller's HTTP server at ${base} does not answer (${why}): is mesh up still running?`,
    );
  }
  let answer: LoginCodeAnswer;
  try {
    answer = (await res.json()) as LoginCodeAnswer;
  } catch {
    throw new CliExit(EXIT_REFUSED, `${base} answered ${res.status} without JSON: is it a mesh controller?`);
  }
  if (res.status === 401 || res.status === 403)
    throw new CliExit(
      EXIT_REFUSED,
      `the controller at ${base} refused the operator token in ${tokenFile}: it is not this mesh's ` +
        `(${answer.error ?? res.status})`,
    );
  if (
    !res.ok ||
    answer.ok !== true ||
    typeof answer.code !== "string" ||
    typeof answer.expiresAt !== "string"
  )
    throw new CliExit(
      EXIT_REFUSED,
      `the controller at ${base} gave no login code (${res.status}): ${answer.error ?? "no reason given"}`,
    );
  return { code: answer.code, expiresAt: answer.expiresAt };
}
