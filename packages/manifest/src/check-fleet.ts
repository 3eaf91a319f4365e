import type { Fleet, FleetModule } from "./fleet.ts";
import { deriveLogin } from "./login.ts";
import type { Manifest, Provided } from "./manifest.ts";
import { fieldPath, ProblemsError, type Problem, type ProblemCode } from "./problem.ts";
import { nearestLine } from "./source-positions.ts";
import { deriveValues, specValueProblems } from "./spec.ts";
import { templateKeys, TemplateError } from "./template.ts";

/** A fleet that does not hold together with its manifests; `problems` lists every reason. */
export class FleetCheckError extends ProblemsError {
  override name = "FleetCheckError";
}

/** One need of one consumer, bound to the provider that serves it. */
export interface Binding {
  readonly consumer: FleetModule;
  readonly interface: string;
  readonly provider: FleetModule;
  readonly provided: Provided;
  readonly login: string;
  /** The manifest's values for the need, overridden key by key by the fleet file's. */
  readonly values: Readonly<Record<string, unknown>>;
  readonly derived: Readonly<Record<string, unknown>>;
}

/** What checking a fleet found: every problem, and the needs that could be bound. */
export interface FleetAnalysis {
  readonly problems: readonly Problem[];
  readonly bindings: readonly Binding[];
}

function firstSentence(description: string | undefined): string | undefined {
  if (!description) return undefined;
  const sentence = (description.split(/(?<=[.;])\s/)[0] ?? description).replace(/[.;]$/, "");
  return sentence.length > 0 && sentence.length <= 80
    ? sentence.charAt(0).toLowerCase() + sentence.slice(1)
    : undefined;
}

/**
 * Checks `fleet` against the manifests of its modules and binds every need to its provider.
 * Which provider serves a need: the one the fleet names (`needs.<interface>.provider`), else the
 * one on the consumer's own node, else the only one in the fleet; several elsewhere and none named
 * is a problem asking the operator to choose. Never throws; `checkFleet` is the usual entry.
 */
export function analyzeFleet(fleet: Fleet, manifests: ReadonlyMap<string, Manifest>): FleetAnalysis {
  const problems: Problem[] = [];
  const bindings: Binding[] = [];
  const inFleet = (path: (string | number)[], code: ProblemCode, message: string, fix: string): void => {
    problems.push({
      code,
      file: fleet.file,
      line: nearestLine(fleet.lines, path),
      field: fieldPath(path),
      message,
      fix,
    });
  };

  const modules = [...fleet.modules.values()];
  const known = new Map<string, { module: FleetModule; manifest: Manifest }>();
  for (const m of modules) {
    const manifest = manifests.get(m.name);
    if (!manifest) {
      inFleet(
        ["modules", m.name, "manifest"],
        "manifest-missing",
        `was not read (${m.manifest})`,
        "read every module's manifest with loadFleetManifests before checking",
      );
      continue;
    }
    known.set(m.name, { module: m, manifest });
    // Without its admin URL a provider cannot start: said here, where the fleet is written, rather
    // than by a provider restarted with back-off for ever on its node.
    if (manifest.provides.size > 0 && manifest.takesAdminUrl && m.admin === undefined) {
      const variable = `MESH_${m.name.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_URL`;
      inFleet(
        ["modules", m.name],
        "admin-missing",
        `provides ${[...manifest.provides.keys()].join(", ")} and has no admin: its provider cannot reach its backend without an admin URL`,
        `add \`admin: { env: ${variable} }\` (a variable of the environment mesh up or mesh agent runs in) ` +
          `or \`admin: { file: /etc/mesh/${m.name}.url }\` (a 0600 file holding the URL) under modules.${m.name}; ` +
          `a provider that takes no admin URL says "adminUrl": false in its manifest`,
      );
    }
    if (!fleet.nodes.has(m.node)) {
      const nodes = [...fleet.nodes.keys()];
      inFleet(
        ["modules", m.name, "node"],
        "unknown-node",
        `is ${JSON.stringify(m.node)}, which is not a node of this fleet (${nodes.length > 0 ? `its nodes: ${nodes.join(", ")}` : "it has none"})`,
        `add ${m.node} under nodes:, or correct the name`,
      );
    }
    for (const iface of m.needs.keys()) {
      if (!manifest.needs.has(iface)) {
        const needed = [...manifest.needs.keys()];
        inFleet(
          ["modules", m.name, "needs", iface],
          "unknown-interface",
          `is not an interface ${m.name} needs (its manifest ${manifest.file} needs ${needed.length > 0 ? needed.join(", ") : "nothing"})`,
          "remove it, correct its spelling, or add the need to the module's manifest",
        );
      }
    }
    for (const iface of Object.keys(m.rotate ?? {})) {
      if (!manifest.needs.has(iface)) {
        const needed = [...manifest.needs.keys()];
        inFleet(
          ["modules", m.name, "rotate", iface],
          "unknown-interface",
          `is not an interface ${m.name} needs, so it has no password to rotate (its manifest ${manifest.file} needs ${needed.length > 0 ? needed.join(", ") : "nothing"})`,
          "remove it or correct its spelling",
        );
      }
    }
  }

  // Providers of each interface, and at most one per node: two on one node would leave its
  // consumers with no rule to choose by and the node with two owners of one interface.
  const providers = new Map<string, FleetModule[]>();
  for (const { module: m, manifest } of known.values()) {
    for (const iface of manifest.provides.keys()) {
      const list = providers.get(iface) ?? [];
      const twin = list.find((p) => p.node === m.node);
      if (twin) {
        inFleet(
          ["modules", m.name, "node"],
          "two-providers-on-node",
          `puts a second provider of ${iface} on node ${m.node} (${twin.name} provides it there already)`,
          "a node runs at most one provider of an interface: move one of them to another node, or remove it",
        );
      }
      list.push(m);
      providers.set(iface, list);
    }
  }

  const logins = new Map<string, { consumer: string; iface: string }>();
  // (provider, interface, unique value's key, the value) -> the consumer that asks for it first.
  const resources = new Map<string, { consumer: string; from: string }>();
  for (const { module: m, manifest } of known.values()) {
    for (const need of manifest.needs.values()) {
      const iface = need.interface;
      const fleetNeed = m.needs.get(iface);
      const needPath = ["modules", m.name, "needs", iface];
      const candidates = providers.get(iface) ?? [];
      let provider: FleetModule | undefined;
      if (fleetNeed?.provider !== undefined) {
        const named = fleet.modules.get(fleetNeed.provider);
        if (!named) {
          inFleet(
            [...needPath, "provider"],
            "wrong-provider",
            `is ${JSON.stringify(fleetNeed.provider)}, which is not a module of this fleet`,
            candidates.length > 0
              ? `name one of ${candidates.map((c) => c.name).join(", ")}`
              : "correct the name",
          );
          continue;
        }
        if (!candidates.includes(named)) {
          inFleet(
            [...needPath, "provider"],
            "wrong-provider",
            `is ${named.name}, which does not provide ${iface}`,
            candidates.length > 0
              ? `name one of ${candidates.map((c) => c.name).join(", ")}`
              : `add a module that provides ${iface}`,
          );
          continue;
        }
        provider = named;
      } else if (candidates.length === 0) {
        inFleet(
          ["modules", m.name],
          "no-provider",
          `needs ${iface} (its manifest says so), and no module of this fleet provides it`,
          `add a module that provides ${iface}, or remove the need from ${manifest.file}`,
        );
        continue;
      } else {
        const local = candidates.filter((c) => c.node === m.node);
        if (local.length > 1) continue; // reported above, as two providers on one node
        provider = local[0] ?? (candidates.length === 1 ? candidates[0] : undefined);
        if (!provider) {
          inFleet(
            ["modules", m.name],
            "ambiguous-provider",
            `needs ${iface}, which ${candidates.map((c) => `${c.name} (on ${c.node})`).join(" and ")} provide, none on its own node ${m.node}`,
            `choose one in the fleet file: needs: { ${iface}: { provider: ${candidates[0]?.name ?? "<module>"} } }`,
          );
          continue;
        }
      }
      const provided = known.get(provider.name)?.manifest.provides.get(iface);
      if (!provided) continue;

      const login = deriveLogin(m.name, iface);
      const clash = logins.get(login);
      if (clash) {
        inFleet(
          ["modules", m.name],
          "login-collision",
          `would log in to ${iface} as ${login}, the login ${clash.consumer} has for ${clash.iface}`,
          "rename one of the modules (a login is the module's name and the first word of the interface)",
        );
        continue;
      }
      logins.set(login, { consumer: m.name, iface });

      const values = { ...need.values, ...(fleetNeed?.values ?? {}) };
      let bad = false;
      for (const vp of specValueProblems(provided.spec, values)) {
        bad = true;
        const hint = firstSentence(provided.spec.get(vp.key)?.description);
        const message = `${vp.message}${hint && !vp.message.startsWith("is required") ? ` (${vp.key}: ${hint})` : ""}`;
        const inFleetFile = fleetNeed !== undefined && Object.hasOwn(fleetNeed.values, vp.key);
        const inManifest = Object.hasOwn(need.values, vp.key);
        const tail: (string | number)[] = vp.index === undefined ? [vp.key] : [vp.key, vp.index];
        if (inFleetFile || !inManifest) {
          inFleet(
            [...needPath, "values", ...tail],
            "bad-value",
            message,
            inFleetFile
              ? "fix the value"
              : `give it under ${fieldPath([...needPath, "values"])} in the fleet file`,
          );
        } else {
          const path = ["needs", iface, "values", ...tail];
          problems.push({
            code: "bad-value",
            file: manifest.file,
            line: nearestLine(manifest.lines, path),
            field: fieldPath(path),
            message,
            fix: `fix the value (or override it under ${fieldPath([...needPath, "values"])} in the fleet file)`,
          });
        }
      }
      if (bad) continue;

      let derived: Record<string, unknown>;
      try {
        derived = deriveValues(provided, values, login);
      } catch (err) {
        if (!(err instanceof TemplateError)) throw err;
        inFleet(
          [...needPath, "values", err.key],
          "endpoint-unresolved",
          `is needed by ${provider.name}'s ${iface} (${err.message}) and has no value`,
          "give it a value",
        );
        continue;
      }
      const have = { ...values, ...derived, login };
      const endpointKeys = provided.endpoint
        ? [
            provided.endpoint.path,
            ...provided.endpoint.query.values(),
            ...provided.endpoint.links.values(),
          ].flatMap(templateKeys)
        : [];
      const missing = [...new Set(endpointKeys)].filter((k) => !Object.hasOwn(have, k));
      for (const key of missing) {
        inFleet(
          [...needPath, "values", key],
          "endpoint-unresolved",
          `is needed to build ${m.name}'s URL for ${iface} and has no value or default`,
          "give it a value",
        );
      }
      if (missing.length > 0) continue;
      let shared = false;
      for (const [key, field] of provided.spec) {
        if (field.unique !== true || !Object.hasOwn(have, key)) continue;
        const value = (have as Record<string, unknown>)[key];
        const said = `${key} ${JSON.stringify(value)}`;
        const from = Object.hasOwn(values, key) ? "as it asks" : "its default";
        const resource = `${provider.name}\u0000${iface}\u0000${key}\u0000${JSON.stringify(value)}`;
        const first = resources.get(resource);
        if (first === undefined) {
          resources.set(resource, { consumer: m.name, from });
          continue;
        }
        shared = true;
        const message =
          `asks ${provider.name} for the ${iface} ${said} (${from}), which ${first.consumer} has already ` +
          `(${first.from}): two consumers would share one ${key}, and one of them would fail for ever`;
        const fix = `give ${m.name} or ${first.consumer} another ${key} under needs.${iface}.values in the fleet file`;
        const inFleetFile = fleetNeed !== undefined && Object.hasOwn(fleetNeed.values, key);
        if (inFleetFile || !Object.hasOwn(need.values, key)) {
          inFleet(
            inFleetFile ? [...needPath, "values", key] : ["modules", m.name],
            "resource-collision",
            message,
            fix,
          );
        } else {
          const path = ["needs", iface, "values", key];
          problems.push({
            code: "resource-collision",
            file: manifest.file,
            line: nearestLine(manifest.lines, path),
            field: fieldPath(path),
            message,
            fix,
          });
        }
      }
      if (shared) continue;
      bindings.push({ consumer: m, interface: iface, provider, provided, login, values, derived });
    }
  }
  return { problems, bindings };
}

/**
 * Every problem of `fleet` against the manifests of its modules (by fleet module name), not just
 * the first: a manifest not read, an unknown node, a need the fleet names that the module does not
 * have (an unknown interface), a need nobody provides, two providers of one interface on one node,
 * a need with several providers and no choice made, a chosen provider that does not provide it,
 * two needs deriving one login, values the provider's spec does not accept, a value the
 * provider's URL needs that nobody gives, and two consumers of one provider asking for the same
 * resource (a spec value marked `unique`, such as a database name, given or by default). An empty list means the fleet can be planned.
 */
export function checkFleet(fleet: Fleet, manifests: ReadonlyMap<string, Manifest>): Problem[] {
  return [...analyzeFleet(fleet, manifests).problems];
}
