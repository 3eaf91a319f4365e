// A real nats-server under the mesh's authority, a controller on it, and agents reduced to what the
// controller sees of them: enrolling with a join token and reading their own bucket.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  enrollSubject,
  inboxPrefix,
  newNodeKeys,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  unseal,
  type BusAuthority,
  type NodeKeys,
  type UserKeys,
  decodeJoinToken,
} from "@mesh/bus";
import {
  DELIVERY_KEY,
  readDelivery,
  startController,
  type Controller,
  type Delivery,
  type EnrollReply,
} from "@mesh/controller";
import { controllerPermissions } from "../src/node-permissions.ts";
import { type LeaseTimings } from "../src/controller-lease.ts";
import { recordingLogger, startNats, type NatsServer, type RecordingLogger } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";

export { recordingLogger, type RecordingLogger } from "@mesh/testkit";

/**
 * The lease's timings for tests with two controllers, a quarter of the real ones: renewed every
 * 0.5 s, given up after 1.5 s, taken over after 2.5 s. Not shorter: on a loaded machine a renewal
 * can take some hundreds of milliseconds, and a leader that lapses by accident would make a test flaky.
 */
export const FAST_LEASE: LeaseTimings = { renewEveryMs: 500, stepDownAfterMs: 1_500, takeOverAfterMs: 2_500 };

/** A connection to `url` that may publish and subscribe to anything in the account (a test's own eyes). */
export async function connectAsAdmin(
  authority: BusAuthority,
  url: string,
  name: string,
): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name,
    publicKey: keys.publicKey,
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
  });
  return connectBus({ servers: [url], creds: credsFor(jwt, keys.seed), name });
}

/** A connection to `url` under a controller's credential issued by `authority`, as a controller has. */
export async function connectAsController(authority: BusAuthority, url: string): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: "controller",
    publicKey: keys.publicKey,
    permissions: controllerPermissions(),
  });
  return connectBus({ servers: [url], creds: credsFor(jwt, keys.seed), name: "controller" });
}

/** A bus, and controllers started on it, all torn down by `stop()`. */
export interface TestMesh {
  readonly nats: NatsServer;
  readonly authority: BusAuthority;
  readonly stateDir: string;
  readonly log: RecordingLogger;
  /** Starts a controller on the bus for `fleetFile`, in the mesh's state dir. */
  startController(fleetFile: string, options?: { watch?: boolean }): Promise<Controller>;
  /** Closes every connection and controller, stops the server and removes the state dir. */
  stop(): Promise<void>;
}

/** Starts a nats-server configured by a new authority. */
export async function startTestMesh(): Promise<TestMesh> {
  const authority = await createAuthority();
  const nats = await startNats({ config: authority.serverConfig() });
  const stateDir = await mkdtemp(join(tmpdir(), "mesh-controller-state-"));
  const log = recordingLogger();
  const controllers: Controller[] = [];
  return {
    nats,
    authority,
    stateDir,
    log,
    async startController(fleetFile, options = {}) {
      const controller = await startController({
        stateDir,
        fleetFile,
        servers: [nats.url],
        authority,
        logger: log,
        watch: options.watch ?? false,
      });
      controllers.push(controller);
      return controller;
    },
    async stop() {
      await Promise.all(controllers.map((c) => c.stop()));
      await Promise.all(openConnections.splice(0).map((nc) => closeBus(nc)));
      await nats.stop();
      await rm(stateDir, { recursive: true, force: true });
    },
  };
}

const openConnections: NatsConnection[] = [];

/** An enrolled node as its agent would be: its keys and a connection with its own creds. */
export interface TestNode {
  readonly node: string;
  readonly natsKeys: UserKeys;
  readonly sealKeys: NodeKeys;
  readonly nc: NatsConnection;
  /** The node's delivery as its own credentials read it. */
  delivery(): Promise<Delivery | undefined>;
  /** Every secret of its delivery, opened with its own key: `consumer/interface` -> password. */
  passwords(): Promise<Record<string, string>>;
}

/**
 * Asks to enroll with `token` as its agent would (its own key pairs, its own inbox) and returns
 * the controller's reply as it came.
 */
export async function requestEnrollment(
  token: string,
  change: { node?: string; secret?: string } = {},
  given?: { nats: UserKeys; seal: NodeKeys },
): Promise<EnrollReply> {
  const keys = given ?? { nats: newUserKeys(), seal: await newNodeKeys() };
  const t = decodeJoinToken(token);
  const nc = await connectBus({
    servers: t.servers,
    creds: new TextEncoder().encode(t.creds),
    name: t.node,
    inboxPrefix: inboxPrefix(t.node),
  });
  try {
    const reply = await nc.request(
      enrollSubject(),
      JSON.stringify({
        node: change.node ?? t.node,
        secret: change.secret ?? t.secret,
        natsPublicKey: keys.nats.publicKey,
        sealPublicKey: keys.seal.publicKey,
      }),
      { timeout: 30_000 },
    );
    return reply.json<EnrollReply>();
  } finally {
    await closeBus(nc);
  }
}

/**
 * Enrolls with `token` and connects with the credentials the controller issued.
 * @throws Error with the controller's refusal when it refuses.
 */
export async function enrollNode(token: string): Promise<TestNode> {
  const t = decodeJoinToken(token);
  const natsKeys = newUserKeys();
  const sealKeys = await newNodeKeys();
  const reply = await requestEnrollment(token, {}, { nats: natsKeys, seal: sealKeys });
  if (!reply.ok) throw new Error(reply.error);
  const nc = await connectBus({
    servers: t.servers,
    creds: credsFor(reply.jwt, natsKeys.seed),
    name: t.node,
    inboxPrefix: inboxPrefix(t.node),
  });
  openConnections.push(nc);
  const delivery = async (): Promise<Delivery | undefined> => {
    const bucket = await openState<unknown>(nc, nodeDeliveriesBucket(t.node), { create: false });
    const head = await bucket.get(DELIVERY_KEY);
    // A head whose parts are not all written yet is no delivery yet.
    return head === undefined ? undefined : (await readDelivery(head, (key) => bucket.get(key))).delivery;
  };
  return {
    node: t.node,
    natsKeys,
    sealKeys,
    nc,
    delivery,
    async passwords() {
      const d = await delivery();
      const out: Record<string, string> = {};
      for (const [key, box] of Object.entries(d?.secrets ?? {})) out[key] = await unseal(box, sealKeys);
      return out;
    },
  };
}

/** A test mesh serving the test fleet (fleet-dir.ts), with some of its nodes enrolled. */
export interface FleetMesh<N extends readonly string[]> {
  readonly mesh: TestMesh;
  readonly fleet: FleetDir;
  readonly controller: Controller;
  /** The enrolled nodes, in the order asked. */
  readonly nodes: { readonly [K in keyof N]: TestNode };
  /** Stops the mesh and removes the fleet directory. */
  stop(): Promise<void>;
}

/** Starts a bus and a controller for a fresh test fleet, and enrolls `nodes` with their join tokens. */
export async function startFleetMesh<const N extends readonly string[]>(nodes: N): Promise<FleetMesh<N>> {
  const mesh = await startTestMesh();
  const fleet = await makeFleetDir();
  const controller = await mesh.startController(fleet.fleetFile);
  const enrolled: TestNode[] = [];
  for (const node of nodes) enrolled.push(await enrollNode(await controller.joinToken(node)));
  return {
    mesh,
    fleet,
    controller,
    nodes: enrolled as unknown as { readonly [K in keyof N]: TestNode },
    async stop() {
      await mesh.stop();
      await rm(fleet.dir, { recursive: true, force: true });
    },
  };
}
