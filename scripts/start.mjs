#!/usr/bin/env node
// `npm start`: installs what is missing, then runs the one-machine demonstration.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ensureInstalled } from "./ensure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
ensureInstalled(root);
const r = spawnSync(process.execPath, ["--import", "tsx", "examples/one-machine-postgres/demo.ts"], {
  cwd: root,
  stdio: "inherit",
});
process.exit(r.status ?? 1);
