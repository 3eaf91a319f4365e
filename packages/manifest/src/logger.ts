// The one logger every part of the mesh is handed: the bus's connections, the harness, the agent,
// the controller, the CLI. It lives on the lowest floor so that each of them can name it; the sdk
// offers it to authors as `Logger`, the bus's older name for it is `BusLogger`.

/** Where a part of the mesh says what it does, in sentences for an operator. Never given a secret. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}
