// The exit codes of `mesh`, stable for scripts: what each means in general, and what it means for
// each command. This is the one place they are written; every command's help shows its own from
// here (cli.ts adds them), and README's "Scripting" section repeats the general list.

import { TOOL_GROUPS, TOOL_NAMES } from "@mesh/manifest/tools";

/** Done as asked (for `mesh up`, `mesh agent` and `mesh provider`: stopped cleanly by Ctrl-C or SIGTERM). */
export const EXIT_OK = 0;
/** Refused or failed: the mesh or a provider said no, a check found errors, a part could not start. */
export const EXIT_REFUSED = 1;
/** The command line or a setting is wrong, or a deletion or approval was not confirmed. */
export const EXIT_USAGE = 2;
/** Nothing answered: no mesh, controller, agent or provider where one was asked. */
export const EXIT_UNREACHABLE = 3;
/** `mesh plan --detailed-exitcode`: planned, and applying it would change something. */
export const EXIT_PLAN_CHANGES = 4;
/** `mesh apply`, `mesh fleet rollback`: the stored revision moved since the plan; nothing was applied. */
export const EXIT_STALE_REVISION = 5;

/** `mesh rotate`: rotated, and its provider had not applied the new password when `--wait` ran out. */
export const EXIT_NOT_APPLIED = 6;

/** What an exit code means, one entry per code a command can end with. */
export type ExitCodeMeanings = Readonly<Partial<Record<number, string>>>;

/** What each code means whatever the command: `mesh --help` shows this. */
export const EXIT_CODE_MEANINGS: ExitCodeMeanings = {
  [EXIT_OK]: "done as asked (mesh up, agent, provider: stopped cleanly by Ctrl-C or SIGTERM)",
  [EXIT_REFUSED]:
    "refused or failed: the mesh or a provider said no, explain denied, check found errors, or a part could not start",
  [EXIT_USAGE]:
    "usage error: a missing or bad argument, flag or setting, or a deletion or approval not confirmed",
  [EXIT_UNREACHABLE]: "nothing answered: no mesh, controller, agent or provider where one was asked",
  [EXIT_PLAN_CHANGES]: "mesh plan --detailed-exitcode only: applying the plan would change something",
  [EXIT_STALE_REVISION]:
    "mesh apply and mesh fleet rollback only: the stored revision moved since the plan; nothing applied",
  [EXIT_NOT_APPLIED]:
    "mesh rotate only: rotated, but the provider had not applied the new password when --wait ran out",
};

const TOOL: ExitCodeMeanings = {
  [EXIT_OK]: "done",
  [EXIT_REFUSED]:
    "refused: by the provider, or (through the mesh) by the controller or the module's agent;\n" +
    "the message and its code are printed on standard error",
  [EXIT_USAGE]: "usage error, or a deletion or approval that was not confirmed",
  [EXIT_UNREACHABLE]:
    "nothing answered: no provider at the control socket, or (through the mesh) no controller,\n" +
    "no agent on the module's node, or no provider behind it",
};

const ASKS_THE_MESH = (answered: string, refused: string): ExitCodeMeanings => ({
  [EXIT_OK]: answered,
  [EXIT_REFUSED]: refused,
  [EXIT_USAGE]: "usage error",
  [EXIT_UNREACHABLE]: "no mesh answers (start one with mesh up, or give --state)",
});

/**
 * What each code means for each command, by the command's words after `mesh` (`""` is `mesh`
 * itself). A command missing here is shown the general meanings, and the help test fails.
 */
export const COMMAND_EXIT_CODES: Readonly<Record<string, ExitCodeMeanings>> = {
  "": EXIT_CODE_MEANINGS,
  provider: {
    [EXIT_OK]: "stopped cleanly by Ctrl-C or SIGTERM",
    [EXIT_REFUSED]: "the provider could not start (or its control socket is taken)",
    [EXIT_USAGE]: "a setting is missing or bad",
  },
  tool: TOOL,
  // Every tool in the table, and the word that groups two-word ones (`tool retire`).
  ...Object.fromEntries(
    [...Object.keys(TOOL_GROUPS), ...TOOL_NAMES].map((name) => [`tool ${name}`, TOOL] as const),
  ),
  up: {
    [EXIT_OK]: "stopped cleanly by Ctrl-C or SIGTERM",
    [EXIT_REFUSED]: "the fleet was refused, or a part could not start",
    [EXIT_USAGE]: "usage error: a node not in the fleet, a bad --http, or a token file that cannot be used",
  },
  controller: {
    [EXIT_OK]: "stopped cleanly by Ctrl-C or SIGTERM",
    [EXIT_REFUSED]:
      "the fleet was refused, the state directory is locked, or the bus refused or did not answer",
    [EXIT_USAGE]: "usage error: a bad --bus, --advertise or --http, or a token file that cannot be used",
  },
  agent: {
    [EXIT_OK]: "stopped cleanly by Ctrl-C or SIGTERM",
    [EXIT_REFUSED]: "the agent could not start: its join was refused or the bus cannot be reached",
    [EXIT_USAGE]: "usage error: no --node, a bad --bus, or a join token file that cannot be read",
  },
  rotate: {
    ...ASKS_THE_MESH(
      "rotated, and the provider has applied the new password (or --wait 0: rotated, not waited for)",
      "the controller refused the rotation (the message says why)",
    ),
    [EXIT_UNREACHABLE]:
      "no mesh answers, or the bus cannot store the new password now: nothing changed, try again",
    [EXIT_NOT_APPLIED]:
      "rotated, but the provider had not applied the new password when --wait ran out: the consumer\n" +
      "keeps its old password until it does; mesh status and the provider's log say why",
  },
  status: ASKS_THE_MESH("answered", "the controller's answer could not be used"),
  completion: {
    [EXIT_OK]: "the script was printed",
    [EXIT_USAGE]: "usage error: a shell other than bash or zsh",
  },
  explain: {
    [EXIT_OK]: "allowed",
    [EXIT_REFUSED]: "denied (the line that decides it is printed)",
    [EXIT_USAGE]: "usage error, or a fleet file or manifest that cannot be read",
  },
  check: {
    [EXIT_OK]: "no errors (warnings may have been printed)",
    [EXIT_REFUSED]: "at least one error",
    [EXIT_USAGE]: "usage error: a bad flag, an unreadable fleet file, or no modules to check",
  },
  ledger: {
    ...ASKS_THE_MESH(
      "the ledger was shown (it may have no entries yet)",
      "the controller refused: no such module, or its ledger cannot be read",
    ),
    [EXIT_USAGE]: "usage error: a bad --limit",
  },
  dashboard: {
    [EXIT_OK]: "the login link was printed",
    [EXIT_REFUSED]: "the controller refused the operator token, or gave no login code",
    [EXIT_USAGE]:
      "usage error: a bad --url, or an operator token file this user cannot read (run it as root)",
    [EXIT_UNREACHABLE]: "no mesh has run with this state, or its controller's HTTP server does not answer",
  },
  logs: {
    [EXIT_OK]: "the log was shown (with -f: until Ctrl-C or SIGTERM)",
    [EXIT_REFUSED]: "the module has no log there (the message says where it looked and what to do)",
    [EXIT_USAGE]: "usage error: a bad module name or --lines, or a module on several nodes without --node",
  },
  "bus-config": {
    [EXIT_OK]: "written: one configuration per server",
    [EXIT_REFUSED]:
      "could not write them: the authority file is damaged, openssl failed, or a file could not be written",
    [EXIT_USAGE]:
      "usage error: a --server that is not NAME=HOST:CLIENT_PORT:CLUSTER_PORT, or two servers sharing a name or port",
  },
  "join-token": {
    ...ASKS_THE_MESH(
      "the token was printed or written",
      "the controller refused: the node is not in the fleet, or the token could not be stored now",
    ),
    [EXIT_USAGE]: "usage error: an --advertise that is not HOST or HOST:PORT",
  },
  backup: {
    [EXIT_OK]: "written: the file (0600) holds what mesh restore needs",
    [EXIT_REFUSED]:
      "the backup failed (the bus refused a read, or the stopped mesh's bus could not start): nothing was written",
    [EXIT_USAGE]: "usage error: no --out, its directory missing, or no mesh's state in --state",
    [EXIT_UNREACHABLE]: "the bus does not answer (the running mesh's, or the --bus servers)",
  },
  restore: {
    [EXIT_OK]: "restored: mesh up on the state directory serves the backup's fleet",
    [EXIT_REFUSED]:
      "refused: the state directory or the bus already holds a mesh, or the restore failed (the message says where)",
    [EXIT_USAGE]: "usage error: the file is not a whole mesh backup, is of a newer format, or a bad flag",
    [EXIT_UNREACHABLE]: "the --bus servers do not answer",
  },
  apply: {
    [EXIT_OK]: "applied (or the mesh served this fleet already): the revision served is printed",
    [EXIT_REFUSED]: "the controller refused it (the message says why), or its answer could not be used",
    [EXIT_USAGE]: "the fleet file is refused (its problems are printed), or a usage error",
    [EXIT_UNREACHABLE]: "no mesh answers (give --state or --bus), or no controller leads now",
    [EXIT_STALE_REVISION]:
      "the stored revision moved since the plan (both revisions are named): nothing applied; plan again, or --force",
  },
  fleet: EXIT_CODE_MEANINGS,
  "fleet history": ASKS_THE_MESH("the history was shown", "the controller could not read it"),
  "fleet show": ASKS_THE_MESH("the revision was shown", "the revision is not kept"),
  "fleet rollback": {
    ...ASKS_THE_MESH(
      "rolled back: that revision's fleet is applied as a new revision",
      "refused (the message says why)",
    ),
    [EXIT_STALE_REVISION]:
      "the stored revision moved since the plan (both revisions are named): nothing applied; plan again, or --force",
  },
  plan: {
    [EXIT_OK]: "planned (with --detailed-exitcode: planned, and nothing would change)",
    [EXIT_REFUSED]: "the controller's answer could not be used",
    [EXIT_USAGE]: "the fleet file is refused (its problems are printed), or a usage error",
    [EXIT_UNREACHABLE]:
      "a mesh has run with this state directory but does not answer (--empty plans without it)",
    [EXIT_PLAN_CHANGES]: "with --detailed-exitcode: planned, and something would change",
  },
};

/** The "Exit codes:" block of the help of the command `path` (its words after `mesh`). */
export function exitCodesHelp(path: string): string {
  const meanings = COMMAND_EXIT_CODES[path] ?? EXIT_CODE_MEANINGS;
  const lines = Object.entries(meanings).map(
    ([code, meaning]) => `  ${code}  ${String(meaning).replaceAll("\n", "\n     ")}`,
  );
  return `\nExit codes:\n${lines.join("\n")}`;
}

/** Ends a command with an exit code and, unless empty, a message for standard error. */
export class CliExit extends Error {
  override name = "CliExit";
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}
