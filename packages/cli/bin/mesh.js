#!/usr/bin/env node
// The mesh command: the built JavaScript under dist/, run by plain node (no TypeScript compiled at
// start-up). `npm ci` builds it (the workspace's `prepare`); `npm run build` does it again.
import { existsSync } from "node:fs";

const main = new URL("../dist/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(
    `mesh is not built: ${main.pathname} is missing. Run \`npm run build\` (or \`npm ci\`) in the checkout.\n`,
  );
  process.exit(1);
}
await import(main.href);
