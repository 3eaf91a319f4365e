#!/usr/bin/env node
// `npm start`: installs what is missing (only what the tour runs: no chromium, no Prometheus), then
// runs the one-machine demonstration of a whole mesh (`npm start -- provider`: the Postgres provider
// alone). On a terminal the demonstration stays up after its tour until Ctrl-C; otherwise (CI, tests)
// it ends after the tour.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ensureInstalled } from "./ensure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
ensureInstalled(root, { groups: ["start"] });
// Ctrl-C reaches the whole foreground group: the demonstration stops its mesh and servers and ends,
// and this waits for it rather than dying first and leaving the shell to a stopping demonstration.
process.on("SIGINT", () => {});
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
