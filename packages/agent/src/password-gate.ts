// Whether a provider of this node has applied a consumer's password, asked of its control socket
// (`status`, whose consumers name a tag of the password their backend last accepted). An app that
// does not know the mesh is handed a password only once this says yes: it never holds a password
// its backend would refuse.
import type { PlanEntry } from "@mesh/manifest";
import { type StatusReport } from "@mesh/sdk";
import { callControl, NoProviderListeningError, passwordTag } from "@mesh/sdk/provider";
import type { GateAnswer, PasswordGate } from "./module-launch.ts";
import { moduleControlPath } from "./module-launch.ts";
import { checkModuleSocket, UnsafeModuleFileError } from "./safe-open.ts";

/** How long one ask waits for a provider's control socket. */
export const PASSWORD_GATE_TIMEOUT_MS = 3_000;

/**
 * A gate that asks each provider module of the node under `stateDir`, at its control socket,
 * whether the backend took the password: yes when its `status` lists the login active with the
 * password's tag. Never throws: a provider that cannot be asked is "not yet", with the reason.
 */
export function providerPasswordGate(stateDir: string, timeoutMs = PASSWORD_GATE_TIMEOUT_MS): PasswordGate {
  return async (entry: PlanEntry, password: string): Promise<GateAnswer> => {
    const path = moduleControlPath(stateDir, entry.provider);
    try {
      if ((await checkModuleSocket(path)) === "missing")
        return { applied: false, why: `nothing listens at its control socket ${path} yet` };
    } catch (err) {
      return { applied: false, why: err instanceof UnsafeModuleFileError ? err.message : String(err) };
    }
    let status: StatusReport | undefined;
    try {
      status = await callControl(path, { tool: "status", who: "agent" }, { timeoutMs });
    } catch (err) {
      if (err instanceof NoProviderListeningError)
        return { applied: false, why: `nothing listens at its control socket ${path} yet` };
      return { applied: false, why: `its control socket did not answer (${(err as Error).name})` };
    }
    const consumer = Array.isArray(status?.consumers)
      ? status.consumers.find((c) => c.login === entry.login)
      : undefined;
    if (consumer === undefined) return { applied: false, why: `it does not list ${entry.login} yet` };
    if (consumer.state === "failing") return { applied: false, why: `${entry.login} is failing there` };
    if (consumer.applied !== passwordTag(password))
      return { applied: false, why: `its backend has not taken the new password of ${entry.login} yet` };
    return { applied: true };
  };
}
