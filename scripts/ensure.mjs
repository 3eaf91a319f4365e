// What `npm test` and `npm start` need before they can run: the npm dependencies and, for the real
// servers the tests start, Debian's postgresql, redis-server, mariadb-server, nats-server, Ceph and
// glewlwyd (with sqlite3 to load its schema), Debian's chromium for the dashboard's browser tests,
// and Debian's prometheus and its Postgres, Redis and MySQL exporters, which the example fleet runs
// as apps that do not know the mesh, and Debian's Alertmanager, which the alert rules' test runs
// (installed without recommends: no node exporter, no services). `npm start` installs only what its
// tour runs (the "start" group).
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

/**
 * Who needs what: `start` is what `npm start`'s tour runs (the embedded bus, and the backends of its
 * four providers: PostgreSQL, Redis, Ceph's RADOS Gateway and Glewlwyd with sqlite3 for its schema);
 * `test` is everything `npm test` runs besides (MariaDB, chromium for the dashboard's browser tests,
 * Prometheus, its exporters and Alertmanager).
 */
export const GROUPS = ["start", "test"];

/** Each Debian package, whether it is there, and which groups need it. */
function packages() {
  const both = ["start", "test"];
  const tests = ["test"];
  const usrBin = (pkg) => ({ pkg, there: () => existsSync(`/usr/bin/${pkg}`), for: tests });
  return [
    { pkg: "postgresql", there: hasInitdb, for: both },
    { pkg: "redis-server", there: () => onPath("redis-server"), for: both },
    {
      pkg: "mariadb-server",
      there: () => onPath("mariadbd") || existsSync("/usr/sbin/mariadbd"),
      for: tests,
    },
    {
      pkg: "nats-server",
      there: () => onPath("nats-server") || existsSync("/usr/sbin/nats-server"),
      for: both,
    },
    { pkg: "chromium", there: () => existsSync("/usr/bin/chromium"), for: tests },
    // The s3 provider's backend is a private Ceph cluster: monitor, OSD, RADOS Gateway and their tools.
    { pkg: "radosgw", there: () => onPath("radosgw"), for: both },
    { pkg: "ceph-mon", there: () => onPath("ceph-mon"), for: both },
    { pkg: "ceph-osd", there: () => onPath("ceph-osd"), for: both },
    { pkg: "ceph-common", there: () => onPath("radosgw-admin") && onPath("monmaptool"), for: both },
    { pkg: "glewlwyd", there: () => onPath("glewlwyd") || existsSync("/usr/bin/glewlwyd"), for: both },
    { pkg: "sqlite3", there: () => onPath("sqlite3"), for: both },
    // systemd-analyze, which verifies the units in deploy/systemd.
    { pkg: "systemd", there: () => onPath("systemd-analyze"), for: tests },
    usrBin("prometheus"),
    usrBin("prometheus-postgres-exporter"),
    usrBin("prometheus-redis-exporter"),
    usrBin("prometheus-mysqld-exporter"),
    usrBin("prometheus-alertmanager"),
  ];
}

/** The Debian packages the given groups need, there or not. */
export function packagesOf(groups = GROUPS) {
  return packages()
    .filter((p) => p.for.some((g) => groups.includes(g)))
    .map((p) => p.pkg);
}

/** The Debian packages that are missing, of those the given groups need (default: all). */
export function missingPackages(groups = GROUPS) {
  return packages()
    .filter((p) => p.for.some((g) => groups.includes(g)) && !p.there())
    .map((p) => p.pkg);
}

/**
 * Builds the workspace to JavaScript (`tsc -b`, incremental: a second run with nothing changed takes
 * about a second) and bundles what the mesh spawns with plain node (scripts/bundle.mjs, a few
 * seconds), so that is never older than its sources.
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
  // What the providers' module.json and bin/mesh.js run: the bundles made from what tsc just built.
  if (!run(process.execPath, [join(root, "scripts", "bundle.mjs")], { cwd: root })) {
    console.error("the build failed (node scripts/bundle.mjs): the errors are above");
    process.exit(1);
  }
}

/**
 * Installs npm dependencies when absent, builds the workspace, and installs the Debian packages
 * `groups` need when missing (as root; see `GROUPS`; default all, as `npm test` needs).
 */
export function ensureInstalled(root, { servers = true, groups = GROUPS } = {}) {
  if (!existsSync(join(root, "node_modules", ".package-lock.json"))) {
    console.log("== installing npm dependencies (npm ci)");
    if (!run("npm", ["ci", "--no-audit", "--no-fund"], { cwd: root })) process.exit(1);
  }
  build(root);
  if (!servers) return;
  const missing = missingPackages(groups);
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
