// What `npm test` and `npm start` need before they can run: the npm dependencies and, for the real
// servers the tests start, Debian's postgresql, redis-server, mariadb-server, nats-server and glewlwyd
// (with sqlite3 to load its schema), Debian's chromium for the dashboard's browser tests, and
// Debian's prometheus and its Postgres, Redis and MySQL exporters, which the example fleet runs as
// apps that do not know the mesh (installed without recommends: no node exporter, no services).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: "inherit", ...opts });
  return r.status === 0;
}

function onPath(bin) {
  return spawnSync("sh", ["-c", `command -v ${bin}`], { stdio: "ignore" }).status === 0;
}

function hasInitdb() {
  if (onPath("initdb")) return true;
  const base = "/usr/lib/postgresql";
  return existsSync(base) && readdirSync(base).some((v) => existsSync(join(base, v, "bin", "initdb")));
}

/** The Debian packages that are missing, by what each provides. */
export function missingPackages() {
  const missing = [];
  if (!hasInitdb()) missing.push("postgresql");
  if (!onPath("redis-server")) missing.push("redis-server");
  if (!onPath("mariadbd") && !existsSync("/usr/sbin/mariadbd")) missing.push("mariadb-server");
  if (!onPath("nats-server") && !existsSync("/usr/sbin/nats-server")) missing.push("nats-server");
  if (!existsSync("/usr/bin/chromium")) missing.push("chromium");
  // The s3 provider's tests run a private Ceph cluster: monitor, OSD, RADOS Gateway and their tools.
  if (!onPath("radosgw")) missing.push("radosgw");
  if (!onPath("ceph-mon")) missing.push("ceph-mon");
  if (!onPath("ceph-osd")) missing.push("ceph-osd");
  if (!onPath("radosgw-admin") || !onPath("monmaptool")) missing.push("ceph-common");
  if (!onPath("glewlwyd") && !existsSync("/usr/bin/glewlwyd")) missing.push("glewlwyd");
  if (!onPath("sqlite3")) missing.push("sqlite3");
  for (const pkg of [
    "prometheus",
    "prometheus-postgres-exporter",
    "prometheus-redis-exporter",
    "prometheus-mysqld-exporter",
  ]) {
    if (!existsSync(`/usr/bin/${pkg}`)) missing.push(pkg);
  }
  return missing;
}

/**
 * Builds the workspace to JavaScript (`tsc -b`, incremental: a second run with nothing changed takes
 * about a second), so what the mesh spawns with plain node is never older than its sources.
 */
export function build(root) {
  if (
    !run(
      process.execPath,
      [join(root, "node_modules", "typescript", "bin", "tsc"), "-b", "tsconfig.build.json"],
      { cwd: root },
    )
  ) {
    console.error("the build failed (tsc -b tsconfig.build.json): the errors are above");
    process.exit(1);
  }
}

/**
 * Installs npm dependencies when absent, builds the workspace, and installs Debian's servers when
 * missing (as root).
 */
export function ensureInstalled(root, { servers = true } = {}) {
  if (!existsSync(join(root, "node_modules", ".package-lock.json"))) {
    console.log("== installing npm dependencies (npm ci)");
    if (!run("npm", ["ci", "--no-audit", "--no-fund"], { cwd: root })) process.exit(1);
  }
  build(root);
  if (!servers) return;
  const missing = missingPackages();
  if (missing.length === 0) return;
  if (process.getuid?.() !== 0) {
    console.error(
      `missing Debian packages: ${missing.join(", ")}. Install them with\n` +
        `  sudo apt-get install -y ${missing.join(" ")}\nand run this again.`,
    );
    process.exit(1);
  }
  console.log(`== installing Debian packages: ${missing.join(", ")}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  if (!run("apt-get", ["update"], { env })) process.exit(1);
  if (!run("apt-get", ["install", "-y", "--no-install-recommends", ...missing], { env })) process.exit(1);
}
