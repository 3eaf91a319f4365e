// Whether a provider of this node has applied a consumer's password, asked of its control socket
// (`status`, whose consumers name a tag of the password their backend last accepted). An app that
// does not know the mesh is handed a password only once this says yes: it never holds a password
// its backend would refuse. A provider whose answer is malformed says no to every consumer of its
// own (their apps keep the password they run with) and nothing of any other provider's.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "@mesh/bus";
import { toolAnswerBytes, type PlanEntry } from "@mesh/manifest";
import { ToolError } from "@mesh/sdk";
import { callControl, ControlAnswerError, NoProviderListeningError, passwordTag } from "@mesh/sdk/provider";
import { whatOf, type MisbehavingModules } from "./misbehaving-modules.ts";
import type { GateAnswer, PasswordGate } from "./module-launch.ts";
import { moduleControlPath } from "./module-launch.ts";
import { checkModuleSocket, UnsafeModuleFileError } from "./safe-open.ts";

/** How long one ask waits for a provider's control socket. */
export const PASSWORD_GATE_TIMEOUT_MS = 3_000;

/** How the gate asks, and where it counts a provider that answers badly. */
export interface PasswordGateOptions {
  /** How long one ask waits (default `PASSWORD_GATE_TIMEOUT_MS`). */
  readonly timeoutMs?: number;
  /** The node's book of misbehaving modules; absent, a bad answer is only a "not yet". */
  readonly misbehaving?: MisbehavingModules;
  /** How many consumers the delivery gives `provider`: its status may be larger by so much. */
  consumers?(provider: string): number;
}

/**
 * A gate that asks each provider module of the node under `stateDir`, at its control socket,
 * whether the backend took the password: yes when its `status` (parsed against the tool's schema)
 * lists the login active with the password's tag. Never throws: a provider that cannot be asked,
 * or answers badly, is "not yet", with the reason.
 */
export function providerPasswordGate(stateDir: string, options: PasswordGateOptions = {}): PasswordGate {
  const timeoutMs = options.timeoutMs ?? PASSWORD_GATE_TIMEOUT_MS;
  return async (entry: PlanEntry, password: string): Promise<GateAnswer> => {
    const provider = entry.provider;
    const path = moduleControlPath(stateDir, provider);
    try {
      if ((await checkModuleSocket(path)) === "missing")
        return { applied: false, why: `nothing listens at its control socket ${path} yet` };
    } catch (err) {
      return { applied: false, why: err instanceof UnsafeModuleFileError ? err.message : String(err) };
    }
    let status;
    try {
      status = await callControl(
        path,
        { tool: "status", who: "agent" },
        { timeoutMs, maxBytes: toolAnswerBytes("status", options.consumers?.(provider) ?? 0) },
      );
    } catch (err) {
      if (err instanceof NoProviderListeningError)
        return { applied: false, why: `nothing listens at its control socket ${path} yet` };
      if (err instanceof ToolError) {
        options.misbehaving?.good(provider, "status");
        return { applied: false, why: `it refused status (${err.code})` };
      }
      if (err instanceof ControlAnswerError) {
        options.misbehaving?.failed(provider, "status", err);
        return { applied: false, why: `its answer to status was not used: ${whatOf(err)}` };
      }
      return { applied: false, why: `its control socket did not answer (${(err as Error).name})` };
    }
    options.misbehaving?.good(provider, "status");
    const consumer = status.consumers.find((c) => c.login === entry.login);
    if (consumer === undefined) return { applied: false, why: `it does not list ${entry.login} yet` };
    if (consumer.state === "failing") return { applied: false, why: `${entry.login} is failing there` };
    if (consumer.applied !== passwordTag(password))
      return {
        applied: false,
        why: `its backend has not taken the new password of ${entry.login} yet`,
        overlaps: status.overlaps === true,
      };
    return { applied: true };
  };
}

/** `<state>/confirmed-passwords.json`, 0600: the tag of each consumer's password its provider confirmed. */
export function confirmedPasswordsPath(stateDir: string): string {
  return join(stateDir, "confirmed-passwords.json");
}

/**
 * The passwords this node's providers have confirmed applied, kept in the node's state as tags
 * (never the passwords), by provider and login. After a restart a password confirmed before is
 * handed over at once, even while its provider cannot be asked or cannot reach its backend (a
 * wrong admin URL): its backend took it, and only a rotation changes it. A tag that cannot be read
 * back is only "not confirmed": the gate asks again.
 */
export class ConfirmedPasswords {
  readonly #path: string;
  #tags: Map<string, string> | undefined;
  #writing: Promise<void> = Promise.resolve();

  constructor(stateDir: string) {
    this.#path = confirmedPasswordsPath(stateDir);
  }

  /** Whether `provider` confirmed the password whose tag is `tag` for `login`. */
  async has(provider: string, login: string, tag: string): Promise<boolean> {
    return (await this.#read()).get(`${provider}/${login}`) === tag;
  }

  /** Keeps that `provider` confirmed `tag` for `login`; a write that fails is only not kept. */
  async confirm(provider: string, login: string, tag: string): Promise<void> {
    const tags = await this.#read();
    const key = `${provider}/${login}`;
    if (tags.get(key) === tag) return;
    tags.set(key, tag);
    const text = `${JSON.stringify(Object.fromEntries([...tags].sort()), null, 1)}\n`;
    this.#writing = this.#writing.then(() =>
      writeFileAtomic(this.#path, text, 0o600).then(
        () => undefined,
        () => undefined,
      ),
    );
    await this.#writing;
  }

  async #read(): Promise<Map<string, string>> {
    if (this.#tags !== undefined) return this.#tags;
    const tags = new Map<string, string>();
    try {
      const raw = JSON.parse(await readFile(this.#path, "utf8")) as unknown;
      if (typeof raw === "object" && raw !== null && !Array.isArray(raw)) {
        for (const [key, tag] of Object.entries(raw)) {
          if (typeof tag === "string" && /^[A-Za-z0-9_-]{1,64}$/.test(tag) && key.length <= 200)
            tags.set(key, tag);
        }
      }
    } catch {
      // Missing or unreadable: nothing confirmed yet.
    }
    this.#tags ??= tags;
    return this.#tags;
  }
}

/**
 * `gate`, remembering in `confirmed` what it says yes to: a password confirmed before (in this run
 * or an earlier one) is applied without asking; any other is asked of `gate`.
 */
export function rememberingGate(gate: PasswordGate, confirmed: ConfirmedPasswords): PasswordGate {
  return async (entry: PlanEntry, password: string): Promise<GateAnswer> => {
    const tag = passwordTag(password);
    if (await confirmed.has(entry.provider, entry.login, tag)) return { applied: true };
    const answer = await gate(entry, password);
    if (answer.applied) await confirmed.confirm(entry.provider, entry.login, tag);
    return answer;
  };
}
