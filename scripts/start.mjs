#!/usr/bin/env node
// `npm start`: installs what is missing, then runs the one-machine demonstration of a whole mesh
// (`npm start -- provider`: the Postgres provider alone).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ensureInstalled } from "./ensure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
ensureInstalled(root);
const r = spawnSync(
  process.execPath,
  [
    // The sources of @mesh/* (their "source" export), as the test files and demos import them.
    "--conditions=source",
    "--import",
    "tsx",
    process.argv[2] === "provider" ? "examples/one-machine-postgres/demo.ts" : "examples/one-machine/demo.ts",
  ],
  {
    cwd: root,
    stdio: "inherit",
  },
);
process.exit(r.status ?? 1);
