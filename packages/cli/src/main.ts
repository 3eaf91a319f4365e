// The `mesh` executable (bin/mesh.js imports this). Exits once what it wrote has reached the pipe.

import { runCli } from "./cli.ts";

const code = await runCli(process.argv.slice(2));
const flushed = (stream: NodeJS.WriteStream): Promise<void> =>
  new Promise((resolve) => {
    stream.write("", () => resolve());
  });
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
