// A test process stopped by a signal (the runner's bound on a file, Ctrl-C, a CI job cancelled)
// leaves through `process.exit`, so that the server launchers' "exit" handlers stop the servers it
// started. A signal's default action ends the process without running them, and its servers run on.

const CODES = { SIGTERM: 143, SIGINT: 130, SIGHUP: 129 } as const;
let installed = false;

/** Makes SIGTERM, SIGINT and SIGHUP end this process through `process.exit` (once; idempotent). */
export function exitOnSignal(): void {
  if (installed) return;
  installed = true;
  for (const [signal, code] of Object.entries(CODES)) process.once(signal, () => process.exit(code));
}
