// A provisioner over a MemoryAdapter under a FakeClock, with everything it says captured.
import { chmod, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  FakeClock,
  runProvisioner,
  type ActionEntry,
  type ProvisionerHandle,
  type ProvisionerOptions,
  type StandingEvent,
} from "@mesh/sdk";
import { MemoryAdapter } from "@mesh/testkit";

export const IFACE = "postgres-database";

export interface Fixture {
  readonly dir: string;
  readonly receives: string;
  readonly clock: FakeClock;
  readonly adapter: MemoryAdapter;
  readonly handle: ProvisionerHandle;
  readonly lines: string[];
  readonly events: { event: StandingEvent; body: Readonly<Record<string, unknown>> }[];
  readonly actions: ActionEntry[];
  /** Writes the contributions file atomically with these consumers (and their secrets). */
  ask(logins: readonly string[], extra?: Record<string, Record<string, unknown>>): Promise<void>;
  /** Writes raw text as the contributions file. */
  writeRaw(text: string): Promise<void>;
  writeSecret(login: string, password: string): Promise<void>;
  passwordOf(login: string): string;
  /** Moves the clock one `every` on (the periodic timer fires) and waits for that pass. */
  periodic(times?: number): Promise<void>;
  /** Runs a pass as a file change would. */
  watchPass(): Promise<void>;
  stateOf(login: string): string | undefined;
  restart(options?: Partial<ProvisionerOptions>): Promise<Fixture>;
  close(): Promise<void>;
}

const EVERY = 5_000;

/** Makes a fixture; `options` override the harness settings (watching is off unless asked). */
export async function makeFixture(
  options: Partial<ProvisionerOptions> = {},
  initial: readonly string[] = [],
  shared?: { dir: string; adapter: MemoryAdapter; clock: FakeClock; passwords: Map<string, string> },
  own?: MemoryAdapter,
): Promise<Fixture> {
  const dir = shared?.dir ?? (await mkdtemp(join(tmpdir(), "mesh-harness-")));
  const receives = join(dir, "contributions.json");
  const clock = shared?.clock ?? new FakeClock();
  const adapter = shared?.adapter ?? own ?? new MemoryAdapter();
  const passwords = shared?.passwords ?? new Map<string, string>();
  const lines: string[] = [];
  const events: Fixture["events"] = [];
  const actions: ActionEntry[] = [];

  const writeAtomic = async (path: string, text: string): Promise<void> => {
    const tmp = `${path}.tmp-${Math.random().toString(36).slice(2)}`;
    await writeFile(tmp, text, { mode: 0o600 });
    await rename(tmp, path);
  };
  const writeSecret = async (login: string, password: string): Promise<void> => {
    passwords.set(login, password);
    await writeAtomic(join(dir, `${login}.secret`), `${password}\n`);
    await chmod(join(dir, `${login}.secret`), 0o600);
  };
  const ask = async (logins: readonly string[], extra: Record<string, Record<string, unknown>> = {}) => {
    for (const login of logins) {
      if (!passwords.has(login))
        await writeSecret(login, `pw-${login}-'"\\$$-ü-${Math.random().toString(36).slice(2)}`);
    }
    const given = logins.map((as) => ({
      as,
      secret: join(dir, `${as}.secret`),
      node: "n1",
      values: {},
      ...extra[as],
    }));
    await writeAtomic(receives, JSON.stringify({ requirement: IFACE, given }));
  };

  if (initial.length > 0) await ask(initial);
  const handle = runProvisioner(IFACE, adapter, {
    receives,
    clock,
    watch: false,
    every: EVERY,
    logger: {
      info: (m) => lines.push(`info ${m}`),
      warn: (m) => lines.push(`warn ${m}`),
      error: (m) => lines.push(`error ${m}`),
    },
    announcer: { announce: (event, body) => events.push({ event, body }) },
    actions: { append: (e) => actions.push(e) },
    ...options,
  });
  await handle.ready;

  const fixture: Fixture = {
    dir,
    receives,
    clock,
    adapter,
    handle,
    lines,
    events,
    actions,
    ask,
    writeRaw: (text) => writeAtomic(receives, text),
    writeSecret,
    passwordOf: (login) => passwords.get(login) ?? "",
    async periodic(times = 1) {
      for (let i = 0; i < times; i++) {
        clock.advance(options.every ?? EVERY);
        await handle.idle();
      }
    },
    watchPass: () => handle.pass("watch"),
    stateOf: (login) => handle.status().consumers.find((c) => c.login === login)?.state,
    async restart(more = {}) {
      await handle.stop();
      return makeFixture({ ...options, ...more }, [], { dir, adapter, clock, passwords });
    },
    async close() {
      await handle.stop();
      if (!shared) await rm(dir, { recursive: true, force: true });
    },
  };
  return fixture;
}
