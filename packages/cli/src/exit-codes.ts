// The exit codes of `mesh`, stable for scripts and said in every command's help.

/** Done as asked (for `mesh provider`: stopped cleanly by Ctrl-C or SIGTERM). */
export const EXIT_OK = 0;
/** The provider refused the tool, or could not start. */
export const EXIT_REFUSED = 1;
/** The command line or a setting is wrong, or a deletion was not confirmed. */
export const EXIT_USAGE = 2;
/** No provider answered at the control socket. */
export const EXIT_UNREACHABLE = 3;

/** `mesh plan --detailed-exitcode`: planned, and applying it would change something. */
export const EXIT_PLAN_CHANGES = 4;

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
