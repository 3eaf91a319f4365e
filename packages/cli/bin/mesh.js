#!/usr/bin/env node
// The mesh command: the built JavaScript under dist/, run by plain node (no TypeScript compiled at
// start-up). `npm ci` builds it (the workspace's `prepare`); `npm run build` does it again.
import { existsSync, readFileSync, statSync } from "node:fs";

// `mesh --version` alone needs none of the program: it answers before the program is loaded (the
// same lines the program's own --version prints: the version from the same package.json, then the
// state format and protocol, from the one small module that names them).
const asked = process.argv.slice(2);
if (asked.length === 1 && (asked[0] === "--version" || asked[0] === "-V")) {
  const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  const { formatsLine } = await import("@mesh/manifest/versions");
  process.stdout.write(`${version}\n${formatsLine()}\n`);
  process.exit(0);
}

// The bundle (scripts/bundle.mjs, the second half of `npm run build`) when there is one: the same
// program in a few files, which loads faster and holds less; else what tsc built. Also what tsc
// built when tsc has built again since the bundle was made (`npx tsc -b` alone): the build info of
// every workspace, listed in built-from.json, is then newer than the bundle (in the checkout only).
const bundled = new URL("../bundle/main.js", import.meta.url);

/** Whether the bundle is there and no workspace was built since it was made. */
function bundleCurrent() {
  const made = statSync(bundled, { throwIfNoEntry: false })?.mtimeMs;
  const from = new URL("../bundle/built-from.json", import.meta.url);
  if (made === undefined || !existsSync(from)) return false;
  const infos = JSON.parse(readFileSync(from, "utf8"));
  return infos.every((info) => {
    const built = statSync(new URL(info, bundled), { throwIfNoEntry: false });
    return built === undefined || built.mtimeMs <= made;
  });
}

const main = bundleCurrent() ? bundled : new URL("../dist/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(
    `mesh is not built: ${main.pathname} is missing. Run \`npm run build\` (or \`npm ci\`) in the checkout.\n`,
  );
  process.exit(1);
}
await import(main.href);
