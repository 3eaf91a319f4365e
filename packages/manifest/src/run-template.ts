// The templates of a manifest's `run` (its `env` values, its `files` and its `args`), for an app that
// does not know the mesh: `{postgres-database.url}`, `{postgres-database.values.name}`,
// `{module.dir}`, `{files.pgpass}`, `{mesh.targets}`, `{mesh.scrape-token}`. A placeholder is a dotted name in braces; every other brace is
// text, so a rendered JSON or YAML file is written as it stands. Nothing else is expanded: a
// template reaches only the module's own credentials, its own directory and its own files.
import type { Credential } from "./credential.ts";

/** A credential's fields a template may name, after the interface: `{postgres-database.login}`. */
export const CREDENTIAL_FIELDS: readonly string[] = ["url", "login", "password", "host", "port", "path"];

/**
 * The fields that carry the password: `.password` and `.url` (the connection URL with the password
 * in it, as an app takes it). Never in `args`, which every user of the node reads in `ps`.
 */
export const SECRET_FIELDS: readonly string[] = ["url", "password"];

/** The module's own fields: its writable directory, its name, and where it serves its metrics. */
export const MODULE_FIELDS: readonly string[] = ["dir", "name", "metrics"];

/**
 * What the mesh keeps for a module to read: `targets`, the path of the Prometheus file_sd JSON that
 * lists every metrics endpoint of the fleet (the controller's, each provider's, each app's that
 * names `{module.metrics}`), rewritten as modules come and go; and `scrape-token`, the token the
 * controller's `/metrics` asks for (good for `/metrics` alone; a secret, so never in args).
 */
export const MESH_FIELDS: readonly string[] = ["targets", "scrape-token"];

/** The mesh's fields that are secrets: never in args. */
export const MESH_SECRET_FIELDS: readonly string[] = ["scrape-token"];

/** Whether `template` names `{mesh.scrape-token}`. */
export function namesScrapeToken(template: string): boolean {
  return runPlaceholders(template).some((p) => p.root === "mesh" && p.field === "scrape-token");
}

/** Whether `template` names `{mesh.targets}`: the module reads the fleet's scrape targets. */
export function namesMeshTargets(template: string): boolean {
  return runPlaceholders(template).some((p) => p.root === "mesh" && p.field === "targets");
}

/** Whether `template` names `{module.metrics}`: the app serves its metrics where the mesh says. */
export function namesModuleMetrics(template: string): boolean {
  return runPlaceholders(template).some((p) => p.root === "module" && p.field === "metrics");
}

// A dotted name: the interface (or `module`, `files`) and one or two parts after it. A brace
// around anything else (`{ "a": 1 }`) is not a placeholder.
const PLACEHOLDER = /\{([a-z][a-z0-9-]*(?:\.[A-Za-z0-9_-]+){1,2})\}/g;

/** A `run` template that cannot be rendered at launch: it names something the module has not got. */
export class RunTemplateError extends Error {
  override name = "RunTemplateError";
  constructor(
    readonly module: string,
    readonly placeholder: string,
    reason: string,
  ) {
    super(`module ${module}'s run template {${placeholder}} ${reason}`);
  }
}

/** Where a template sits: `args` may not carry a secret. */
export type RunTemplatePlace = "env" | "files" | "args";

/** What a module's templates may name: its needs and its rendered files. */
export interface RunTemplateScope {
  readonly needs: readonly string[];
  readonly files: readonly string[];
}

/** One placeholder, read. */
export interface RunPlaceholder {
  readonly text: string;
  /** An interface, `module`, `mesh` or `files`. */
  readonly root: string;
  readonly field: string;
  /** The value's key after `values.`. */
  readonly key?: string;
}

/** The placeholders of `template`, in order. */
export function runPlaceholders(template: string): RunPlaceholder[] {
  return [...template.matchAll(PLACEHOLDER)].map((m) => {
    const text = m[1] ?? "";
    const [root = "", field = "", key] = text.split(".");
    return key === undefined ? { text, root, field } : { text, root, field, key };
  });
}

/** The interfaces whose password `template` hands over (through `.password` or `.url`). */
export function secretInterfaces(template: string): string[] {
  return runPlaceholders(template)
    .filter(
      (p) =>
        p.root !== "module" && p.root !== "mesh" && p.root !== "files" && SECRET_FIELDS.includes(p.field),
    )
    .map((p) => p.root);
}

/**
 * Why `template`, placed in `place`, is not valid for a module with `scope`, or undefined: every
 * placeholder names a need of the module (with a known field), the module itself or one of its
 * files, and none in `args` hands over a password.
 */
export function runTemplateProblem(
  template: string,
  place: RunTemplatePlace,
  scope: RunTemplateScope,
): string | undefined {
  for (const p of runPlaceholders(template)) {
    const name = `{${p.text}}`;
    if (p.root === "module") {
      if (p.key !== undefined || !MODULE_FIELDS.includes(p.field))
        return `names ${name}: the module's fields are ${MODULE_FIELDS.map((f) => `{module.${f}}`).join(", ")}`;
      continue;
    }
    if (p.root === "mesh") {
      if (p.key !== undefined || !MESH_FIELDS.includes(p.field))
        return `names ${name}: the mesh's fields are ${MESH_FIELDS.map((f) => `{mesh.${f}}`).join(", ")}`;
      if (place === "args" && MESH_SECRET_FIELDS.includes(p.field))
        return `puts ${name} (a secret) in args, which every user of the node can read in ps: use run.env or run.files`;
      continue;
    }
    if (p.root === "files") {
      if (p.key !== undefined || !scope.files.includes(p.field))
        return `names ${name}, which is not one of the files this run renders (${
          scope.files.length === 0 ? "it renders none" : scope.files.map((f) => `{files.${f}}`).join(", ")
        })`;
      continue;
    }
    if (!scope.needs.includes(p.root))
      return `names ${name}, but the module does not need ${p.root} (its needs: ${
        scope.needs.length === 0 ? "none" : scope.needs.join(", ")
      })`;
    if (p.field === "values") {
      if (p.key === undefined) return `names ${name}: say which value, like {${p.root}.values.name}`;
      continue;
    }
    if (p.key !== undefined || !CREDENTIAL_FIELDS.includes(p.field))
      return `names ${name}, which is not a credential field (${CREDENTIAL_FIELDS.map((f) => `.${f}`).join(", ")}, .values.<name>)`;
    if (place === "args" && SECRET_FIELDS.includes(p.field))
      return `puts ${name} (a password) in args, which every user of the node can read in ps`;
  }
  return undefined;
}

/** What a module's templates are rendered from, at launch. */
export interface RunTemplateValues {
  readonly module: string;
  readonly dir: string;
  readonly metrics: string;
  /** The scrape targets file the mesh keeps on this node (`{mesh.targets}`); absent: none here. */
  readonly targets?: string;
  /** The controller's scrape token on this node (`{mesh.scrape-token}`); absent: none here. */
  readonly scrapeToken?: string;
  /** File name -> the path it is rendered to. */
  readonly files: Readonly<Record<string, string>>;
  /** Interface -> its credential, and its password when a template hands it over. */
  readonly needs: Readonly<Record<string, { readonly credential: Credential; readonly password?: string }>>;
}

/** `credential`'s connection URL with `password` in it (percent-encoded). */
export function urlWithPassword(credential: Credential, password: string): string | undefined {
  if (credential.url === undefined) return undefined;
  const url = new URL(credential.url);
  url.password = password;
  return url.toString();
}

/**
 * `template` with each placeholder filled from `values`.
 * @throws RunTemplateError when a placeholder names what the module has not got (a value it did not
 * ask for, a password not delivered yet, a field its provider's endpoint does not give).
 */
export function renderRunTemplate(template: string, values: RunTemplateValues): string {
  return template.replace(PLACEHOLDER, (_whole, text: string) => {
    const [root = "", field = "", key] = text.split(".");
    const fail = (why: string): never => {
      throw new RunTemplateError(values.module, text, why);
    };
    if (root === "module") {
      if (field === "dir") return values.dir;
      if (field === "name") return values.module;
      if (field === "metrics") return values.metrics;
      return fail("is not a field of the module");
    }
    if (root === "mesh") {
      if (field === "targets" && values.targets !== undefined) return values.targets;
      if (field === "scrape-token" && values.scrapeToken !== undefined) return values.scrapeToken;
      return fail(
        field === "targets"
          ? "has no file on this node: the controller of `mesh up` keeps it on its own machine, so run " +
              "this module on a node of that mesh up, or list fixed metrics ports (the fleet's metrics:) " +
              "in its configuration"
          : field === "scrape-token"
            ? "has no value on this node: the controller of `mesh up` hands it to the modules of its own " +
              "machine, so run this module on a node of that mesh up, or give it a copy of " +
              "<state>/controller/scrape.token in a file of its own"
            : "is not a field of the mesh",
      );
    }
    if (root === "files") {
      const path = Object.hasOwn(values.files, field) ? values.files[field] : undefined;
      return path ?? fail("is not a file this run renders");
    }
    const need = Object.hasOwn(values.needs, root) ? values.needs[root] : undefined;
    if (need === undefined) return fail(`has no credential: ${root} is not delivered to this module`);
    const { credential, password } = need;
    const value = ((): unknown => {
      switch (field) {
        case "values":
          return key !== undefined && Object.hasOwn(credential.values, key)
            ? credential.values[key]
            : undefined;
        case "login":
          return credential.login;
        case "password":
          return password;
        case "url":
          return password === undefined ? undefined : urlWithPassword(credential, password);
        case "host":
          return credential.endpoint?.host;
        case "port":
          return credential.endpoint?.port;
        case "path":
          return credential.endpoint?.path;
        default:
          return undefined;
      }
    })();
    if (value === undefined || value === null) return fail("has no value in the module's credential");
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean")
      return fail("is not a single value (a string, number or boolean)");
    return String(value);
  });
}
