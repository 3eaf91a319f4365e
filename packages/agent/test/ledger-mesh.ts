// A real nats-server under the mesh's authority, with what the controller does for ledgers: it
// makes a module's ledger, issues the module's ledger credential, and reads the history back.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ledgerPermissions,
  newUserKeys,
  readLedger,
  writeFileAtomic,
  type BusAuthority,
  type LedgerRecord,
} from "@mesh/bus";
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";

import type { LedgerCredential } from "../src/module-keys.ts";

export type { LedgerCredential };

export interface LedgerMesh {
  readonly server: NatsServer;
  readonly authority: BusAuthority;
  /** A directory for the test's files, removed by `stop()`. */
  readonly dir: string;
  /**
   * Creates `module`'s ledger (unless `made` is false: the controller makes it beside the
   * credential, maybe later) and issues a credential confined to it.
   */
  credentialFor(module: string, options?: { readonly made?: boolean }): Promise<LedgerCredential>;
  /** Creates `module`'s ledger, as the controller does in the background. */
  makeLedger(module: string): Promise<void>;
  /** Writes the `ledgers` secret at `file` atomically, as the agent does. */
  writeLedgers(file: string, ledgers: Readonly<Record<string, LedgerCredential>> | string): Promise<void>;
  /** The newest entries of `module`'s history, read as the controller reads them. */
  history(module: string, limit?: number): Promise<LedgerRecord[]>;
  stop(): Promise<void>;
}

export async function startLedgerMesh(): Promise<LedgerMesh> {
  const authority = await createAuthority();
  const server = await startNats({ config: authority.serverConfig() });
  const dir = await mkdtemp(join(tmpdir(), "mesh-agent-ledger-"));
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: "controller",
    publicKey: keys.publicKey,
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] }, allowResponses: true },
  });
  const controller: NatsConnection = await connectBus({
    servers: server.url,
    creds: credsFor(jwt, keys.seed),
    name: "controller",
  });
  return {
    server,
    authority,
    dir,
    async credentialFor(module, options = {}) {
      if (options.made !== false) await ensureLedger(controller, module);
      const user = newUserKeys();
      const issued = await authority.issueUser({
        name: `${module}-ledger`,
        publicKey: user.publicKey,
        permissions: ledgerPermissions(module),
      });
      return { jwt: issued, seed: user.seed };
    },
    makeLedger: (module) => ensureLedger(controller, module),
    async writeLedgers(file, ledgers) {
      await writeFileAtomic(file, typeof ledgers === "string" ? ledgers : JSON.stringify(ledgers));
    },
    history: (module, limit = 1_000) => readLedger(controller, module, { limit }),
    async stop() {
      await closeBus(controller);
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
