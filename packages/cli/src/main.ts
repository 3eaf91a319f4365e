// The `mesh` executable (bin/mesh.js imports this). Exits once what it wrote has reached the pipe.

import { runCli } from "./cli.ts";

// A reader that stops early (`mesh status | head`) closes the pipe: that is no error of the mesh.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(0);
  throw err;
});

const code = await runCli(process.argv.slice(2));
const flushed = (stream: NodeJS.WriteStream): Promise<void> =>
  new Promise((resolve) => {
    stream.write("", () => resolve());
  });
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
