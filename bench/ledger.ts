// What writing a module's ledger costs: `ModuleLedger.append` over the module's own confined ledger
// connection (its checks — JSON only, no password-like field — then a JetStream publish that waits
// for the stream's acknowledgement) against a raw JetStream publish of the same bytes to the same
// kind of stream (another module's ledger, file storage) on the same server, by a connection that
// may do anything. One at a time (each append awaited, as the journal follower and the tool runner
// append) and pipelined (64 in flight). A third way splits what the rest costs: the same publish as
// the ledger's (its expected-stream header, to its own stream) on the module's confined connection,
// without the ledger's checks. Goal: ledger ≥ 0.8× raw at 64 in flight.
//
//   node --import tsx bench/ledger.ts          (MESH_BENCH_LEDGER_N=2000 and MESH_BENCH_ROUNDS=15 to change)

import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ledgerInboxPrefix,
  ledgerPermissions,
  ledgerStreamName,
  ledgerSubject,
  ModuleLedger,
  newUserKeys,
  readLedger,
  type BusAuthority,
  type BusPermissions,
} from "@mesh/bus";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { startNats } from "@mesh/testkit";
import {
  envInt,
  fmtRatio,
  median,
  now,
  onCleanup,
  printResult,
  runBench,
  say,
  table,
  verdict,
} from "./lib.ts";

const PIPELINE = 64;
const GOAL = 0.8;

/** An action entry of the size the harness writes. */
function entry(i: number): Record<string, unknown> {
  return {
    action: "created",
    login: `app_${String(i).padStart(6, "0")}`,
    interface: "postgres-database",
    who: "provisioner",
    at: new Date().toISOString(),
    why: "notes asks for postgres-database and the backend did not hold it",
  };
}

async function connectAs(
  url: string,
  authority: BusAuthority,
  name: string,
  permissions: BusPermissions,
  inboxPrefix?: string,
): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({ name, publicKey: keys.publicKey, permissions });
  const nc = await connectBus({
    servers: url,
    creds: credsFor(jwt, keys.seed),
    name,
    ...(inboxPrefix !== undefined ? { inboxPrefix } : {}),
  });
  onCleanup(() => closeBus(nc));
  return nc;
}

/** Appends per second: `n` calls of `send`, at most `inFlight` at once. */
async function rate(n: number, inFlight: number, send: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) await send(next++);
  };
  const started = now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return n / ((now() - started) / 1000);
}

runBench("ledger", async () => {
  const n = envInt("MESH_BENCH_LEDGER_N", 2_000);
  const rounds = envInt("MESH_BENCH_ROUNDS", 15);
  const authority = await createAuthority();
  const server = await startNats({ config: authority.serverConfig() });
  onCleanup(() => server.stop());
  const everything: BusPermissions = { pub: { allow: [">"] }, sub: { allow: [">"] } };
  const admin = await connectAs(server.url, authority, "controller", everything);
  await ensureLedger(admin, "bench");
  await ensureLedger(admin, "raw");

  const ledgerNc = await connectAs(
    server.url,
    authority,
    "bench-ledger",
    ledgerPermissions("bench"),
    ledgerInboxPrefix("bench"),
  );
  const ledger = new ModuleLedger(ledgerNc, "bench");
  const js = jetstream(admin);
  const rawSubject = ledgerSubject("raw", "action");
  const viaLedger = (i: number) => ledger.append("action", entry(i));
  // The same bytes the ledger stores: the entry with its kind first.
  const raw = (i: number) => js.publish(rawSubject, JSON.stringify({ kind: "action", ...entry(i) }));
  // The ledger's publish without its checks: same connection, subject, header and stream.
  const confinedJs = jetstream(ledgerNc, { timeout: 10_000 });
  const benchSubject = ledgerSubject("bench", "action");
  const bare = (i: number) =>
    confinedJs.publish(benchSubject, JSON.stringify({ kind: "action", ...entry(i) }), {
      expect: { streamName: ledgerStreamName("bench") },
    });

  say(`ledger: warming up, then ${rounds} rounds of ${n} appends each way, alternating`);
  await rate(200, 1, viaLedger);
  await rate(200, 1, raw);
  const seen = {
    ledger: [] as number[],
    raw: [] as number[],
    ledgerPiped: [] as number[],
    rawPiped: [] as number[],
    barePiped: [] as number[],
  };
  for (let r = 0; r < rounds; r++) {
    // Which goes first changes each round, so a neighbour's burst weighs on both alike.
    const steps: [number[], number, (i: number) => Promise<unknown>][] = [
      [seen.raw, 1, raw],
      [seen.ledger, 1, viaLedger],
      [seen.rawPiped, PIPELINE, raw],
      [seen.ledgerPiped, PIPELINE, viaLedger],
      [seen.barePiped, PIPELINE, bare],
    ];
    if (r % 2 === 1) steps.reverse();
    for (const [into, inFlight, send] of steps) into.push(await rate(n, inFlight, send));
  }
  const stored = (await readLedger(admin, "bench", { limit: 1 }))[0]?.seq ?? 0;
  const expected = 200 + rounds * n * 3;
  if (stored !== expected)
    throw new Error(`the ledger holds ${stored} entries, not the ${expected} appended`);

  const row = (how: string, ledgerRate: number, rawRate: number): (string | number)[] => [
    how,
    Math.round(ledgerRate),
    Math.round(rawRate),
    fmtRatio(ledgerRate / rawRate),
  ];
  const one = { ledger: median(seen.ledger), raw: median(seen.raw) };
  const piped = { ledger: median(seen.ledgerPiped), raw: median(seen.rawPiped) };
  const bareRate = median(seen.barePiped);
  const pipedRatio = piped.ledger / piped.raw;
  printResult(
    "ledger",
    [
      `one module's ledger, nats-server ${server.url} (file storage); median of ${rounds} rounds of ${n} appends;`,
      `an entry is one action (~${JSON.stringify({ kind: "action", ...entry(0) }).length} bytes of JSON).`,
      `ledger = ModuleLedger.append on the module's confined ledger connection (checks + JetStream publish, acked);`,
      `raw = JetStream publish of the same bytes to another module's ledger stream by an unconfined connection.`,
      "",
      table(
        ["appends", "ledger /s", "raw /s", "ledger/raw"],
        [row("one at a time", one.ledger, one.raw), row(`${PIPELINE} in flight`, piped.ledger, piped.raw)],
      ),
      "",
      `ledger/raw at ${PIPELINE} in flight: ${verdict(fmtRatio(pipedRatio), `≥ ${GOAL}×`, pipedRatio >= GOAL)}`,
      `where the rest goes, at ${PIPELINE} in flight: the ledger's own publish without its checks (confined`,
      `connection, expected-stream header) ${Math.round(bareRate)}/s = ${fmtRatio(bareRate / piped.raw)} raw, and the`,
      `checks (JSON only, no password-like field or value) take the ledger from there to ${fmtRatio(piped.ledger / bareRate)}`,
      `of that publish (a ratio above 1× or a share below 0 is the rounds' noise, not a gain)`,
      `every round at ${PIPELINE} in flight, ledger/raw: ${seen.ledgerPiped
        .map((l, i) => fmtRatio(l / (seen.rawPiped[i] ?? Number.NaN)))
        .join(", ")}`,
    ].join("\n"),
  );
});
