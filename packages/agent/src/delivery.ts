// What the controller delivers to one node, checked before anything is written from it: a value
// in the node's bucket is data from the bus, and a wrong shape must stop the agent from writing,
// not make it write something half-right.
import { isAbsolute } from "node:path";
import {
  isInterfaceName,
  isModuleLimits,
  isModuleName,
  ListenAddressError,
  LOGIN_PATTERN,
  MANIFEST_MAX_BYTES,
  parseListenAddress,
  type Delivery,
} from "@mesh/manifest";

/** A delivery that is not what the controller writes, or not for this node; nothing of it is applied. */
export class InvalidDeliveryError extends Error {
  override name = "InvalidDeliveryError";
  constructor(
    readonly node: string,
    readonly field: string,
    why: string,
  ) {
    super(
      `the delivery for node ${node} is refused: ${field} ${why}; nothing of it was applied and the ` +
        `node keeps its last good files (the controller must publish a good delivery)`,
    );
  }
}

// Three base64url parts; the server checks the signature, the agent only that it is shaped like one.
const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const USER_KEY = /^U[A-Z2-7]{55}$/;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Checks that `value` is a delivery for `node` and returns it typed.
 * @throws InvalidDeliveryError naming the first field that is wrong.
 */
export function parseDelivery(value: unknown, node: string): Delivery {
  const bad = (field: string, why: string): never => {
    throw new InvalidDeliveryError(node, field, why);
  };
  if (!isObject(value)) return bad("the value", "is not an object");
  if (value["node"] !== node) bad("node", `is ${JSON.stringify(value["node"])}, not ${node}`);
  const generation = value["generation"];
  if (typeof generation !== "number" || !Number.isSafeInteger(generation) || generation < 0) {
    bad("generation", "is not a whole number");
  }
  const term = value["term"];
  if (term !== undefined && (typeof term !== "number" || !Number.isSafeInteger(term) || term < 0)) {
    bad("term", "is not a whole number");
  }
  const fleetFile = value["fleetFile"];
  if (typeof fleetFile !== "string") bad("fleetFile", "is not a path");

  const modules = value["modules"];
  if (!Array.isArray(modules)) return bad("modules", "is not a list");
  const names = new Set<string>();
  modules.forEach((m: unknown, i) => {
    if (!isObject(m) || !isModuleName(m["name"])) return bad(`modules[${i}].name`, "is not a module name");
    if (typeof m["manifest"] !== "string" || !isAbsolute(m["manifest"])) {
      bad(`modules[${i}].manifest`, "is not an absolute path");
    }
    // Only its kind and size here: its content is validated as a manifest when the module is
    // started, so one bad manifest keeps that module from starting, not the node from its delivery.
    const text = m["manifestText"];
    if (text !== undefined && (typeof text !== "string" || Buffer.byteLength(text) > MANIFEST_MAX_BYTES)) {
      bad(`modules[${i}].manifestText`, `is not a manifest's text of at most ${MANIFEST_MAX_BYTES} bytes`);
    }
    if (names.has(m["name"])) bad(`modules[${i}].name`, `repeats ${m["name"]}`);
    if (m["metrics"] !== undefined) {
      if (typeof m["metrics"] !== "string") bad(`modules[${i}].metrics`, "is not HOST:PORT");
      try {
        parseListenAddress(m["metrics"] as string);
      } catch (err) {
        if (!(err instanceof ListenAddressError)) throw err;
        bad(`modules[${i}].metrics`, `is not HOST:PORT (${err.reason})`);
      }
    }
    const env = m["env"];
    if (env !== undefined && (!isObject(env) || Object.values(env).some((v) => typeof v !== "string"))) {
      bad(`modules[${i}].env`, "is not an object of strings");
    }
    const admin = m["admin"];
    if (
      admin !== undefined &&
      !(isObject(admin) && (typeof admin["file"] === "string" || typeof admin["env"] === "string"))
    ) {
      bad(`modules[${i}].admin`, "is neither { file } nor { env }");
    }
    if (m["limits"] !== undefined && !isModuleLimits(m["limits"])) {
      bad(`modules[${i}].limits`, "is not { memory, pids, cpu, home } of positive numbers or null");
    }
    names.add(m["name"]);
  });

  const plan = value["plan"];
  if (!isObject(plan) || !Array.isArray(plan["instances"])) return bad("plan.instances", "is not a list");
  plan["instances"].forEach((inst: unknown, i) => {
    const at = `plan.instances[${i}]`;
    if (!isObject(inst)) return bad(at, "is not an object");
    if (!isModuleName(inst["provider"])) bad(`${at}.provider`, "is not a module name");
    if (!isInterfaceName(inst["interface"])) bad(`${at}.interface`, "is not an interface name");
    if (typeof inst["node"] !== "string") bad(`${at}.node`, "is not a node name");
    if (inst["endpoint"] !== undefined && !isObject(inst["endpoint"]))
      bad(`${at}.endpoint`, "is not an object");
    if (isObject(inst["endpoint"]) && !isObject(inst["endpoint"]["query"])) {
      bad(`${at}.endpoint.query`, "is not an object");
    }
    const consumers = inst["consumers"];
    if (!Array.isArray(consumers)) return bad(`${at}.consumers`, "is not a list");
    consumers.forEach((c: unknown, j) => {
      const cat = `${at}.consumers[${j}]`;
      if (!isObject(c)) return bad(cat, "is not an object");
      if (!isModuleName(c["consumer"])) bad(`${cat}.consumer`, "is not a module name");
      if (!isInterfaceName(c["interface"])) bad(`${cat}.interface`, "is not an interface name");
      if (typeof c["login"] !== "string" || !LOGIN_PATTERN.test(c["login"])) {
        bad(`${cat}.login`, "is not a valid login");
      }
      for (const key of ["consumerNode", "provider", "providerNode"]) {
        if (typeof c[key] !== "string") bad(`${cat}.${key}`, "is not a name");
      }
      if (!isObject(c["values"])) bad(`${cat}.values`, "is not an object");
      if (!isObject(c["derived"])) bad(`${cat}.derived`, "is not an object");
    });
  });

  const secrets = value["secrets"];
  if (!isObject(secrets)) return bad("secrets", "is not an object");
  for (const [key, box] of Object.entries(secrets)) {
    const [consumer, iface, extra] = key.split("/");
    if (!isModuleName(consumer) || !isInterfaceName(iface) || extra !== undefined) {
      bad(`secrets[${JSON.stringify(key)}]`, "is not keyed <consumer>/<interface>");
    }
    if (typeof box !== "string") bad(`secrets[${JSON.stringify(key)}]`, "is not a sealed box");
  }

  const cuts = value["cuts"];
  if (cuts !== undefined) {
    if (!Array.isArray(cuts)) return bad("cuts", "is not a list");
    for (const key of cuts as unknown[]) {
      if (typeof key !== "string" || !Object.hasOwn(secrets, key))
        bad(`cuts`, `names ${JSON.stringify(key)}, which is not a key of secrets`);
    }
  }

  const minted = value["minted"];
  if (minted !== undefined) {
    if (!isObject(minted)) return bad("minted", "is not an object");
    for (const [key, at] of Object.entries(minted)) {
      if (!Object.hasOwn(secrets, key))
        bad(`minted`, `names ${JSON.stringify(key)}, which is not a key of secrets`);
      if (typeof at !== "string" || Number.isNaN(Date.parse(at)))
        bad(`minted[${JSON.stringify(key)}]`, "is not an ISO 8601 time");
    }
  }

  const credentials = value["credentials"];
  if (credentials !== undefined) {
    if (!isObject(credentials)) return bad("credentials", "is not an object");
    for (const [module, credential] of Object.entries(credentials)) {
      const at = `credentials[${JSON.stringify(module)}]`;
      if (!names.has(module)) bad(at, "is for a module this node does not run");
      if (!isObject(credential)) return bad(at, "is not an object");
      for (const kind of ["bus", "ledger"]) {
        if (typeof credential[kind] !== "string" || !JWT.test(credential[kind])) {
          bad(`${at}.${kind}`, "is not a JWT");
        }
      }
    }
  }
  const replaceKeys = value["replaceKeys"];
  if (replaceKeys !== undefined) {
    if (!isObject(replaceKeys)) return bad("replaceKeys", "is not an object");
    for (const [module, key] of Object.entries(replaceKeys)) {
      const at = `replaceKeys[${JSON.stringify(module)}]`;
      if (!names.has(module)) bad(at, "is for a module this node does not run");
      if (typeof key !== "string" || !USER_KEY.test(key)) bad(at, "is not a user public key");
    }
  }
  return value as unknown as Delivery;
}
