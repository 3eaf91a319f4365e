// A real nats-server under the mesh's authentication, and a small stand-in for the controller's
// part of the contract: it makes join tokens, answers enrollment with the node's exact permissions,
// seals passwords to the enrolled node's key and publishes deliveries into the node's own bucket.
import { randomBytes } from "node:crypto";
import { startNats, type NatsServer } from "@mesh/testkit";
import {
  allReportsSubject,
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  enrollSubject,
  inboxSubjects,
  kvReadSubjects,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  reportSubject,
  seal,
  toolSubject,
  type BusAuthority,
} from "@mesh/bus";
import {
  DELIVERY_KEY,
  entryPartKey,
  modulePartKey,
  partFingerprint,
  type DeliveredModule,
  type Delivery,
  type DeliveryHead,
  type DeliveryPart,
  type Plan,
} from "@mesh/manifest";
import type { AgentReport } from "../src/agent-report.ts";

/** What the stand-in controller learnt from a node's enrollment. */
export interface Enrolled {
  readonly natsPublicKey: string;
  readonly sealPublicKey: string;
}

/** What a test publishes for a node; passwords are sealed to the node by `publish`. */
export interface DeliveryDraft {
  readonly generation: number;
  readonly modules: readonly DeliveredModule[];
  readonly plan: Plan;
  /** `${consumer}/${interface}` → password in the clear, or a box given as is (`{ box }`). */
  readonly secrets: Readonly<Record<string, string | { box: string }>>;
  /** The modules' credentials, as a controller that issues them sends (absent: one that does not). */
  readonly credentials?: Delivery["credentials"];
  /** The publishing controller's lease term (absent: a controller of before terms). */
  readonly term?: number;
  /** The publishing controller's protocol and release (absent: a controller of 0.1.0, which said none). */
  readonly protocol?: number;
  readonly release?: string;
}

export interface TestMesh {
  readonly server: NatsServer;
  readonly authority: BusAuthority;
  readonly enrolled: Map<string, Enrolled>;
  /** How many enrollments were accepted, all nodes together. */
  enrollments(): number;
  readonly reports: AgentReport[];
  /** A join token for `node` (the secret is checked at enrollment). */
  joinToken(node: string, options?: { secret?: string }): Promise<string>;
  /** Seals `draft`'s passwords to `node`'s key and puts the delivery in its bucket. */
  publish(node: string, draft: DeliveryDraft): Promise<Delivery>;
  /**
   * Puts `draft` in the node's bucket as the controller stores it: one key per module and per
   * consumer entry, then the head. The parts named in `withhold` are left out (the head names them).
   * Answers a function that writes the withheld parts.
   */
  publishInParts(
    node: string,
    draft: DeliveryDraft,
    withhold?: readonly string[],
  ): Promise<() => Promise<void>>;
  /** Writes `text` as it is (not JSON-encoded) under `key` of the node's bucket. */
  putRaw(node: string, key: string, text: string): Promise<void>;
  stop(): Promise<void>;
}

export async function startTestMesh(): Promise<TestMesh> {
  const authority = await createAuthority();
  const server = await startNats({ config: authority.serverConfig() });
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: "controller",
    publicKey: keys.publicKey,
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] }, allowResponses: true },
  });
  const nc = await connectBus({ servers: server.url, creds: credsFor(jwt, keys.seed), name: "controller" });
  const secrets = new Map<string, string>();
  const enrolled = new Map<string, Enrolled>();
  const reports: AgentReport[] = [];
  let enrollments = 0;

  nc.subscribe(allReportsSubject(), {
    callback: (_err, msg) => {
      reports.push(msg.json<AgentReport>());
    },
  });
  nc.subscribe(enrollSubject(), {
    callback: (_err, msg) => {
      void (async () => {
        const req = msg.json<{
          node: string;
          secret: string;
          natsPublicKey: string;
          sealPublicKey: string;
        }>();
        if (secrets.get(req.node) !== req.secret) {
          msg.respond(JSON.stringify({ ok: false, error: `node ${req.node}'s join secret is not right` }));
          return;
        }
        const bucket = nodeDeliveriesBucket(req.node);
        await openState(nc, bucket);
        const issued = await authority.issueUser({
          name: req.node,
          publicKey: req.natsPublicKey,
          permissions: {
            pub: { allow: [...kvReadSubjects(bucket), reportSubject(req.node)] },
            sub: { allow: [inboxSubjects(req.node), toolSubject(req.node)] },
            allowResponses: true,
          },
        });
        enrollments++;
        enrolled.set(req.node, { natsPublicKey: req.natsPublicKey, sealPublicKey: req.sealPublicKey });
        msg.respond(JSON.stringify({ ok: true, jwt: issued }));
      })();
    },
  });
  await nc.flush();

  const sealDraft = async (node: string, draft: DeliveryDraft): Promise<Delivery> => {
    const sealKey = enrolled.get(node)?.sealPublicKey;
    if (sealKey === undefined) throw new Error(`${node} has not enrolled`);
    const sealed: Record<string, string> = {};
    for (const [key, value] of Object.entries(draft.secrets)) {
      sealed[key] = typeof value === "string" ? await seal(value, sealKey) : value.box;
    }
    const delivery: Delivery = {
      node,
      generation: draft.generation,
      fleetFile: "/srv/mesh/mesh.yaml",
      modules: draft.modules,
      plan: draft.plan,
      secrets: sealed,
      ...(draft.credentials === undefined ? {} : { credentials: draft.credentials }),
      ...(draft.term === undefined ? {} : { term: draft.term }),
      ...(draft.protocol === undefined ? {} : { protocol: draft.protocol }),
      ...(draft.release === undefined ? {} : { release: draft.release }),
    };
    return delivery;
  };

  return {
    server,
    authority,
    enrolled,
    reports,
    enrollments: () => enrollments,
    async joinToken(node, options = {}) {
      const enrollKeys = newUserKeys();
      const enrollJwt = await authority.issueUser({
        name: `${node}-enroll`,
        publicKey: enrollKeys.publicKey,
        permissions: { pub: { allow: [enrollSubject()] }, sub: { allow: [inboxSubjects(node)] } },
      });
      const secret = randomBytes(18).toString("base64url");
      secrets.set(node, secret);
      const creds = new TextDecoder().decode(credsFor(enrollJwt, enrollKeys.seed));
      const token = { v: 1, node, servers: [server.url], creds, secret: options.secret ?? secret };
      return Buffer.from(JSON.stringify(token)).toString("base64url");
    },
    async publish(node, draft) {
      const delivery = await sealDraft(node, draft);
      const state = await openState<Delivery>(nc, nodeDeliveriesBucket(node));
      await state.put("delivery", delivery);
      return delivery;
    },
    async publishInParts(node, draft, withhold = []) {
      const delivery = await sealDraft(node, draft);
      const parts = new Map<string, DeliveryPart>();
      for (const module of delivery.modules) {
        const credential = delivery.credentials?.[module.name];
        parts.set(modulePartKey(module.name), {
          kind: "module",
          module,
          ...(credential === undefined ? {} : { credential }),
        });
      }
      for (const entry of delivery.plan.instances.flatMap((i) => i.consumers)) {
        const box = delivery.secrets[`${entry.consumer}/${entry.interface}`];
        if (box === undefined) continue;
        parts.set(entryPartKey(entry.consumer, entry.interface), {
          kind: "entry",
          entry,
          version: `v${draft.generation}`,
          sealPublicKey: enrolled.get(node)?.sealPublicKey ?? "",
          box,
        });
      }
      const state = await openState<unknown>(nc, nodeDeliveriesBucket(node));
      for (const [key, part] of parts) if (!withhold.includes(key)) await state.put(key, part);
      const head: DeliveryHead = {
        node,
        generation: delivery.generation,
        ...(delivery.term === undefined ? {} : { term: delivery.term }),
        fleetFile: delivery.fleetFile,
        instances: delivery.plan.instances.map(({ consumers: _consumers, ...instance }) => instance),
        parts: Object.fromEntries([...parts].map(([key, part]) => [key, partFingerprint(part)])),
        issuesCredentials: delivery.credentials !== undefined,
        ...(draft.protocol === undefined ? {} : { protocol: draft.protocol }),
        ...(draft.release === undefined ? {} : { release: draft.release }),
      };
      await state.put(DELIVERY_KEY, head);
      return async () => {
        for (const key of withhold) {
          const part = parts.get(key);
          if (part !== undefined) await state.put(key, part);
        }
      };
    },
    async putRaw(node, key, text) {
      nc.publish(`$KV.${nodeDeliveriesBucket(node)}.${key}`, text);
      await nc.flush();
    },
    async stop() {
      await closeBus(nc);
      await server.stop();
    },
  };
}

export { recordingLogger } from "@mesh/testkit";
