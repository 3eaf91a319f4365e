// A real nats-server under the mesh's decentralized authentication, for the bus tests.
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  connectBus,
  createAuthority,
  credsFor,
  newUserKeys,
  type BusAuthority,
  type BusLogger,
  type BusPermissions,
} from "@mesh/bus";

/** A running server and the authority it trusts. */
export interface BusServer {
  readonly server: NatsServer;
  readonly authority: BusAuthority;
  /** Connects as a new user with `permissions`; `identity` also names its inbox. */
  connectAs(
    identity: string,
    permissions: BusPermissions,
    options?: { inboxPrefix?: string; log?: BusLogger },
  ): Promise<NatsConnection>;
  stop(): Promise<void>;
}

/** Everything: the controller's permissions. */
export const EVERYTHING: BusPermissions = { pub: { allow: [">"] }, sub: { allow: [">"] } };

export async function startBusServer(): Promise<BusServer> {
  const authority = await createAuthority();
  const server = await startNats({ config: authority.serverConfig() });
  const connections: NatsConnection[] = [];
  return {
    server,
    authority,
    async connectAs(identity, permissions, options = {}) {
      const keys = newUserKeys();
      const jwt = await authority.issueUser({ name: identity, publicKey: keys.publicKey, permissions });
      const nc = await connectBus({
        servers: server.url,
        creds: credsFor(jwt, keys.seed),
        name: identity,
        ...options,
      });
      connections.push(nc);
      return nc;
    },
    async stop() {
      await Promise.all(connections.map((nc) => nc.close()));
      await server.stop();
    },
  };
}

export { recordingLogger } from "@mesh/testkit";

/**
 * Runs `attempt` until it succeeds: right after a restart JetStream may not answer yet, and a
 * loaded machine makes that window long.
 */
export async function untilItWorks<T>(attempt: () => Promise<T>, withinMs = 30_000): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
