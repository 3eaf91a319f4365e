// What a rotation costs the apps that use the password, per backend, through a real `mesh up`
// (test/rotation-mesh.ts: real PostgreSQL, Redis, MariaDB and Ceph's RADOS Gateway for S3, their
// providers, and per backend two apps logging in every 100 ms, each attempt a new connection counted
// once with no retry): one app re-reads its credential and password files before each login, one
// reads its password once and is restarted on a new one (onNewPassword: restart). Each consumer is
// rotated N times with `mesh rotate` (the provider holds both passwords while it drains, where its
// backend can), then N times with `mesh rotate --now` (a plain cut-over: the old password refused at
// once), the baseline in the same run. Per backend it prints the failed logins per app kind and
// way, and the time of each phase as the provider's status and the node's files show it, polled
// every 100 ms: asked → the provider says the new password is valid (add), → the consumer's password
// file holds it and the restarted app runs again (deliver), → the old password goes (drain, then
// remove).
// Goal: 0 failed logins for the app that re-reads, with `mesh rotate`.
//
//   npm run build && node --conditions=source --import tsx bench/rotation.ts
//   MESH_BENCH_ROTATIONS=3             rotations of each consumer per way
//   MESH_BENCH_ROTATION_GRACE=6s       how long the old password stays valid (the providers' grace)
//   MESH_BENCH_BACKENDS=postgres,redis,mariadb,s3

import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { secondSecretPath, secretPath } from "@mesh/manifest";
import { until } from "@mesh/testkit";
import {
  ROTATION_BACKENDS,
  RotationMesh,
  type Attempt,
  type RotationApp,
  type RotationBackend,
} from "../test/rotation-mesh.ts";
import {
  envInt,
  fmtMs,
  median,
  onCleanup,
  printResult,
  runBench,
  say,
  sleep,
  table,
  verdict,
} from "./lib.ts";

const ROTATIONS = envInt("MESH_BENCH_ROTATIONS", 3);
const GRACE = process.env["MESH_BENCH_ROTATION_GRACE"] ?? "6s";
const POLL_MS = 100;
/** How long one rotation of every consumer may take before the run is called failed. */
const ROUND_TIMEOUT_S = 120;

type Way = "overlap" | "now";
const WAYS: readonly Way[] = ["overlap", "now"];
const WAY_NAME: Record<Way, string> = { overlap: "mesh rotate", now: "mesh rotate --now" };

/** When each step of one consumer's rotation was seen, in ms after it was asked. */
interface Seen {
  readonly app: RotationApp;
  readonly way: Way;
  added?: number;
  file?: number;
  restarted?: number;
  removed?: number;
}

const root = fileURLToPath(new URL("..", import.meta.url));

function backendsAsked(): RotationBackend[] {
  const names = (process.env["MESH_BENCH_BACKENDS"] ?? "postgres,redis,mariadb,s3")
    .split(",")
    .map((n) => n.trim())
    .filter((n) => n !== "");
  return names.map((n) => {
    const b = (ROTATION_BACKENDS as Record<string, RotationBackend>)[n];
    if (b === undefined)
      throw new Error(
        `MESH_BENCH_BACKENDS names ${n}; the rotation app knows ${Object.keys(ROTATION_BACKENDS).join(", ")}`,
      );
    return b;
  });
}

// One rotation of `app`'s consumer, watched until the old password is gone and the app has it.
async function rotateOnce(mesh: RotationMesh, app: RotationApp, way: Way): Promise<Seen> {
  const before = (await mesh.consumerStatus(app))?.applied;
  const node = join(mesh.state, "nodes", "node-a");
  // Where logins alternate (Postgres, S3), a rotation writes the other login's password file.
  const files = [secretPath, secondSecretPath].map((path) => path(node, app.module, app.backend.iface));
  const readSecret = async () =>
    (await Promise.all(files.map((f) => readFile(f, "utf8").catch(() => "")))).join("\n");
  const secretBefore = await readSecret();
  const t0 = Date.now();
  const seen: Seen = { app, way };
  const run = mesh.rotate(app, ...(way === "now" ? ["--now"] : []));
  const deadline = t0 + ROUND_TIMEOUT_S * 1000;
  for (;;) {
    const at = Date.now() - t0;
    const c = await mesh.consumerStatus(app);
    if (c !== undefined && c.applied !== before) {
      seen.added ??= at;
      if (c.rotation === undefined) seen.removed ??= at;
    }
    if (seen.file === undefined && (await readSecret()) !== secretBefore) seen.file = at;
    if (app.mode === "once" && seen.restarted === undefined) {
      const started = (await mesh.attempts(app)).find((a) => a.event === "start" && a.at >= t0);
      if (started !== undefined) seen.restarted = started.at - t0;
    }
    const delivered = app.mode === "once" ? seen.restarted !== undefined : seen.file !== undefined;
    if (seen.removed !== undefined && delivered) break;
    if (Date.now() > deadline)
      throw mesh.said(
        new Error(`${app.module}'s rotation (${WAY_NAME[way]}) not over in ${ROUND_TIMEOUT_S} s`),
      );
    await sleep(POLL_MS);
  }
  const answer = await run;
  if (answer.code !== 0)
    throw new Error(`mesh rotate ${app.module} failed: ${answer.stdout}${answer.stderr}`);
  return seen;
}

function failures(
  attempts: readonly Attempt[],
  from: number,
  to: number,
): { failed: number; logins: number } {
  const logins = attempts.filter((a) => a.ok !== undefined && a.at >= from && a.at < to);
  return { failed: logins.filter((a) => a.ok === false).length, logins: logins.length };
}

runBench("rotation", async () => {
  if (!existsSync(join(root, "packages", "cli", "dist"))) {
    throw new Error("mesh up runs from dist/: run `npm run build` first");
  }
  const backends = backendsAsked();
  say(`starting ${backends.map((b) => b.backend).join(", ")} and mesh up (grace ${GRACE})`);
  const mesh = await RotationMesh.start({ backends, grace: GRACE });
  onCleanup(() => mesh.stop());
  await until(
    "every app to log in",
    async () => {
      for (const app of mesh.apps)
        if (!(await mesh.attempts(app)).some((a) => a.ok === true)) return undefined;
      return true;
    },
    { seconds: 180, everyMs: 200 },
  ).catch((err: unknown) => {
    throw mesh.said(err);
  });

  const windows = new Map<Way, { from: number; to: number }>();
  const seen: Seen[] = [];
  for (const way of WAYS) {
    const from = Date.now();
    for (let round = 1; round <= ROTATIONS; round++) {
      say(`${WAY_NAME[way]}: round ${round} of ${ROTATIONS}, every consumer at once`);
      seen.push(...(await Promise.all(mesh.apps.map((app) => rotateOnce(mesh, app, way)))));
    }
    // A last stretch of logins with only the newest password valid.
    await sleep(1_000);
    windows.set(way, { from, to: Date.now() });
  }

  const attempts = new Map<string, Attempt[]>();
  for (const app of mesh.apps) attempts.set(app.module, await mesh.attempts(app));
  const failedRows: string[][] = [];
  const verdicts: string[] = [];
  for (const b of backends) {
    for (const mode of ["reread", "once"] as const) {
      const app = mesh.apps.find((a) => a.backend === b && a.mode === mode) as RotationApp;
      const cells = WAYS.map((way) => {
        const w = windows.get(way) as { from: number; to: number };
        const f = failures(attempts.get(app.module) ?? [], w.from, w.to);
        return { ...f, text: `${f.failed} / ${f.logins}` };
      });
      failedRows.push([
        b.backend,
        mode === "reread" ? "re-reads before each login" : "reads once, restarted",
        ...cells.map((c) => c.text),
      ]);
      if (mode === "reread") {
        const overlap = cells[0] as { failed: number };
        verdicts.push(
          `${b.backend}: ${verdict(`${overlap.failed} failed logins for the app that re-reads with mesh rotate`, "0", overlap.failed === 0)}` +
            `; --now (baseline): ${(cells[1] as { failed: number }).failed}`,
        );
      }
    }
  }

  const phaseRows: string[][] = [];
  const med = (xs: (number | undefined)[]): string => {
    const known = xs.filter((x): x is number => x !== undefined);
    return known.length === 0 ? "-" : fmtMs(median(known));
  };
  for (const b of backends) {
    for (const way of WAYS) {
      const mine = seen.filter((s) => s.app.backend === b && s.way === way);
      phaseRows.push([
        b.backend,
        WAY_NAME[way],
        med(mine.map((s) => s.added)),
        med(mine.filter((s) => s.app.mode === "reread").map((s) => s.file)),
        med(mine.filter((s) => s.app.mode === "once").map((s) => s.restarted)),
        med(
          mine.map((s) =>
            s.removed !== undefined && s.added !== undefined ? s.removed - s.added : undefined,
          ),
        ),
        med(mine.map((s) => s.removed)),
      ]);
    }
  }

  printResult(
    "rotation",
    [
      `${ROTATIONS} rotations of each consumer per way, providers' grace ${GRACE}; apps log in every 100 ms.`,
      "",
      "Failed logins / attempts (from the first rotation of a way to 1 s after its last):",
      table(["backend", "app", WAY_NAME.overlap, `${WAY_NAME.now} (baseline)`], failedRows),
      "",
      "Phases, median over the rotations of both consumers, each from `mesh rotate` unless said:",
      "  add: the provider's status names the new password applied (valid; beside the old one while",
      "  it drains); deliver: the consumer's password file holds it (app that re-reads) and the app that",
      "  reads once runs again; drain: from add until the old password goes; remove: when it went.",
      table(["backend", "way", "add", "deliver: file", "deliver: restarted", "drain", "remove"], phaseRows),
      "",
      ...verdicts,
    ].join("\n"),
  );
  if (mesh.up.output().match(/:\/\/[^@\s/]*:[^@\s/]+@/) !== null)
    throw new Error("mesh up printed a URL with a password in it");
});
