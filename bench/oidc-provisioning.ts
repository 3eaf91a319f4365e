// What the oidc provider costs over doing the same by hand: N new OIDC clients through the harness
// and the adapter, against a plain script making the same admin calls (read the client, find none,
// make it with its secret) with the same API key at the same concurrency (the harness's 8). Same
// private Glewlwyd; each way has its own N client ids. The script runs in two halves around the
// provider's run, so whatever drifts on the server over the run weighs on both alike. Afterwards
// every client is checked once with holdsMany, which must mint no token.
//
//   node --import tsx bench/oidc-provisioning.ts   (MESH_BENCH_CONSUMERS=200 to change N)

import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { runProvisioner, type Provision } from "@mesh/sdk";
import {
  DEFAULT_VALUES,
  fetchHttpClient,
  OidcClientAdapter,
  ReadWriteLock,
  resolveOidcConfig,
  type HttpClient,
} from "@mesh/provider-oidc";
import { startGlewlwyd, type GlewlwydServer } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const IFACE = "oidc-client";
const INSTANCE = "bench";
const CONCURRENCY = 8;
const GOAL = 1.2;
const never = new AbortController().signal;

/** An HTTP client that counts its requests by method and path shape. */
function countingHttp(): HttpClient & { kinds: Map<string, number>; calls: () => number } {
  const inner = fetchHttpClient(30_000);
  const kinds = new Map<string, number>();
  const http = (request: Parameters<HttpClient>[0]) => {
    const path = new URL(request.url).pathname.replace(/\/client\/[a-z0-9_]+$/, "/client/<id>");
    const kind = `${request.method} ${path}`;
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    return inner(request);
  };
  return Object.assign(http, { kinds, calls: () => [...kinds.values()].reduce((a, b) => a + b, 0) });
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function eachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** How many writes the plain script had to try again. */
let retries = 0;

/**
 * The by-hand way: the same admin calls the adapter makes for a new client, 8 clients at a time;
 * with `lock`, writes one at a time as the adapter does, without it overlapping.
 */
async function rawRun(
  server: GlewlwydServer,
  key: string,
  logins: readonly string[],
  lock: ReadWriteLock | undefined,
): Promise<number> {
  const api = `${server.baseUrl}/api`;
  const call = async (method: string, path: string, body?: unknown): Promise<number> => {
    const send = () =>
      fetch(`${api}${path}`, {
        method,
        headers: {
          authorization: `token ${key}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const response = lock === undefined ? await send() : await lock.run(method !== "GET", send);
    await response.arrayBuffer();
    return response.status;
  };
  const started = now();
  if ((await call("GET", "/scope/api.read")) !== 200) throw new Error("the scope api.read is missing");
  await eachLimited(logins, CONCURRENCY, async (login) => {
    const body = {
      client_id: login,
      name: login,
      description: `mesh:raw {"v":1,"state":"active","derived":{}}`,
      enabled: true,
      confidential: true,
      password: mintPassword(),
      scope: DEFAULT_VALUES.scopes,
      redirect_uri: [],
      authorization_type: DEFAULT_VALUES.grant_types,
      token_endpoint_auth_method: ["client_secret_basic", "client_secret_post"],
    };
    // As the adapter must: SQLite refuses overlapping writes now and then (500), so read and try again.
    for (let attempt = 1; ; attempt++) {
      const found = await call("GET", `/client/${login}`);
      const status =
        found === 404 ? await call("POST", "/client/", body) : await call("PUT", `/client/${login}`, body);
      if (status === 200) break;
      if (status < 500 || attempt >= 4) throw new Error(`making client ${login} answered ${status}`);
      retries++;
      await new Promise((r) => setTimeout(r, attempt * (25 + Math.random() * 100)));
    }
  });
  return now() - started;
}

/** How many of `logins` Glewlwyd holds without all their properties (scope, grant, auth method). */
async function broken(server: GlewlwydServer, logins: readonly string[]): Promise<number> {
  let count = 0;
  await eachLimited(logins, CONCURRENCY, async (login) => {
    const client = (await server.admin("GET", `/client/${login}`)).body as
      Record<string, unknown> | undefined;
    const full =
      Array.isArray(client?.["scope"]) &&
      (client["scope"] as unknown[]).length === 1 &&
      Array.isArray(client["authorization_type"]) &&
      (client["authorization_type"] as unknown[]).length === 1 &&
      Array.isArray(client["token_endpoint_auth_method"]) &&
      (client["token_endpoint_auth_method"] as unknown[]).length === 2;
    if (!full) count++;
  });
  return count;
}

function tokensIssued(server: GlewlwydServer): number {
  const out = spawnSync(
    "sqlite3",
    [join(server.dir, "glewlwyd.db"), "SELECT count(*) FROM gpo_access_token"],
    {
      encoding: "utf8",
    },
  );
  return Number(out.stdout.trim());
}

runBench("oidc-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 200);
  const half = Math.floor(n / 2);

  say("oidc-provisioning: starting a private Glewlwyd");
  const server = await startGlewlwyd();
  onCleanup(() => server.stop());
  const http = countingHttp();
  const logger = quietLogger();
  const adapter = new OidcClientAdapter(
    http,
    resolveOidcConfig({ adminUrl: server.adminUrl, instance: INSTANCE }),
    logger,
  );
  // The script's API key is made once, untimed, as the adapter's is on its first call.
  const madeKey = await fetch(`${server.baseUrl}/api/auth/`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username: "admin", password: server.adminPassword }),
  });
  const cookie = (madeKey.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
  const key = (
    (await (await fetch(`${server.baseUrl}/api/key/`, { method: "POST", headers: { cookie } })).json()) as {
      key: string;
    }
  ).key;

  const rawA = Array.from({ length: half }, (_, i) => loginOf("raw", i, 4));
  const rawB = Array.from({ length: n - half }, (_, i) => loginOf("raw", half + i, 4));
  say(`oidc-provisioning: plain script, first ${rawA.length} clients`);
  const rawAMs = await rawRun(server, key, rawA, new ReadWriteLock());

  const dir = await tempDir("oidc");
  const file = new ContributionsFile(dir, IFACE);
  await file.write();
  const logins = Array.from({ length: n }, (_, i) => loginOf("mesh", i, 4));
  const created = new Set<string>();
  let lastAt = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (allDone = resolve));
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    instance: INSTANCE,
    concurrency: CONCURRENCY,
    logger,
    actions: {
      append(entry) {
        if (entry.action !== "created") return;
        created.add(entry.login);
        lastAt = now();
        if (created.size === logins.length) allDone();
      },
    },
  });
  onCleanup(() => handle.stop());
  await handle.ready; // the first pass over nobody: the API key is made here, untimed
  http.kinds.clear();
  say(`oidc-provisioning: harness + adapter, ${n} clients written at once (concurrency ${CONCURRENCY})`);
  const renamedAt = await file.add(logins);
  const timeout = setTimeout(allDone, 600_000);
  await done;
  clearTimeout(timeout);
  const providerMs = lastAt - renamedAt;
  const providerKinds = new Map(http.kinds);
  const providerCalls = http.calls();
  await handle.stop();

  say(`oidc-provisioning: plain script, last ${rawB.length} clients`);
  const rawBMs = await rawRun(server, key, rawB, new ReadWriteLock());
  const rawMs = rawAMs + rawBMs;
  const overlap = Array.from({ length: n }, (_, i) => loginOf("ovl", i, 4));
  say(`oidc-provisioning: plain script with overlapping writes, ${n} clients`);
  const overlapMs = await rawRun(server, key, overlap, undefined);
  const overlapBroken = await broken(server, overlap);
  const rawBroken = await broken(server, [...rawA, ...rawB]);

  say(`oidc-provisioning: holdsMany over the ${n} clients`);
  const before = tokensIssued(server);
  http.kinds.clear();
  const provisions: Provision[] = logins.map((as) => ({
    as,
    password: file.passwordOf(as),
    values: {},
    derived: {},
  }));
  const t = now();
  const answers = await adapter.holdsMany(provisions, never);
  const verifyMs = now() - t;
  const held = [...answers.values()].filter((a) => a === true).length;
  const verifyKinds = new Map(http.kinds);
  const minted = tokensIssued(server) - before;

  const ratio = providerMs / rawMs;
  const perKind = (kinds: ReadonlyMap<string, number>): string =>
    [...kinds].map(([k, c]) => `${k} ${(c / n).toFixed(2)}`).join(", ");
  printResult(
    "oidc-provisioning",
    [
      `${n} new confidential OIDC clients (client_id the login, the minted secret, client_credentials, scope api.read)`,
      `Glewlwyd ${server.baseUrl} (SQLite; the server hashes each secret with PBKDF2), the same admin for both, concurrency ${CONCURRENCY}.`,
      "",
      table(
        ["way", "wall", "per client", "HTTP requests", "clients left broken"],
        [
          [
            "harness + adapter (a pass set off by the file)",
            fmtMs(providerMs),
            fmtMs(providerMs / n),
            providerCalls,
            n - held,
          ],
          [
            "plain script, same admin calls, writes one at a time",
            fmtMs(rawMs),
            fmtMs(rawMs / n),
            2 * n + 2,
            rawBroken,
          ],
          [
            "plain script, writes overlapping (not a baseline)",
            fmtMs(overlapMs),
            fmtMs(overlapMs / n),
            "",
            overlapBroken,
          ],
        ],
      ),
      "",
      `adapter per client: ${perKind(providerKinds)}`,
      `writes refused by SQLite (500) and tried again by the plain scripts: ${retries}`,
      `ratio harness/plain: ${fmtRatio(ratio)}; goal ≤ ${GOAL}×: ${ratio <= GOAL ? "met" : "not met"}`,
      "Both ways run reads together and writes one at a time: Glewlwyd on SQLite has no busy timeout, so",
      "overlapping writes fail part-way (the last row: clients left without their scope or grant, some",
      "answered 200); the PBKDF2 hash of each secret is computed inside the write, so writes bound the wall.",
      "",
      `verification: holdsMany over ${n} clients in ${fmtMs(verifyMs)} (${fmtMs(verifyMs / n)} per client), ` +
        `${held} held, ${minted} tokens minted; requests: ${[...verifyKinds].map(([k, c]) => `${k} ${c}`).join(", ")}`,
      logger.warnings.length + logger.errors.length > 0
        ? `adapter said: ${[...logger.errors, ...logger.warnings].slice(0, 3).join(" | ")}`
        : "adapter warnings: none",
    ].join("\n"),
  );
  if (created.size !== n || held !== n || minted !== 0) {
    say(`created ${created.size}, held ${held} of ${n}, ${minted} tokens minted by the checks`);
    process.exitCode = 1;
  }
});
