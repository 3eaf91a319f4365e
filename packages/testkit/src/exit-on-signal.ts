// A test process stopped by a signal (the runner's bound on a file, Ctrl-C, a CI job cancelled)
// leaves through `process.exit`, so that the server launchers' "exit" handlers stop the servers it
// started. A signal's default action ends the process without running them, and its servers run on.

const CODES = { SIGTERM: 143, SIGINT: 130, SIGHUP: 129 } as const;
let installed = false;
let withdrawn = false;

/**
 * Makes SIGTERM, SIGINT and SIGHUP end this process through `process.exit` (once; idempotent),
 * after every other listener of that signal has run: a test's own cleanup on a signal (the cluster
 * test removes its network namespaces) is not cut short by the testkit's, registered first.
 */
export function exitOnSignal(): void {
  if (installed) return;
  installed = true;
  for (const [signal, code] of Object.entries(CODES))
    process.once(signal, () =>
      setImmediate(() => {
        if (!withdrawn) process.exit(code);
      }),
    );
}

/**
 * For a process that ends itself on a signal after an orderly stop of its own (a demonstration that
 * stops its mesh, then its servers): the testkit no longer exits on SIGTERM, SIGINT or SIGHUP. Its
 * servers are still stopped when the process exits.
 */
export function stopOnSignalsYourself(): void {
  withdrawn = true;
}
