import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  contributionsFor,
  credentialFor,
  credentialPath,
  credentialsFor,
  derivePlan,
  receivesPath,
  secretPath,
  providerSecretPath,
  moduleHomePath,
  StateDirError,
  type PlanEntry,
} from "@mesh/manifest";
import { InvalidNameError } from "../src/names.ts";
import { TemplateError } from "../src/template.ts";
import { consumer, fleetOf, POSTGRES, REDIS } from "./fixtures.ts";

const STATE = "/var/lib/mesh";

const FLEET = `nodes:
  db: { address: db.internal }
  app: {}
modules:
  postgres: { manifest: ./p.json, node: db, admin: { env: MESH_ADMIN } }
  redis: { manifest: ./r.json, node: app, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: app
    needs: { postgres-database: { values: { name: notes } } }
  blog: { manifest: ./b.json, node: db }
`;

function plan() {
  const { fleet, manifests } = fleetOf(FLEET, {
    postgres: POSTGRES,
    redis: REDIS,
    notes: consumer("notes", { "postgres-database": {}, "redis-namespace": {} }),
    blog: consumer("blog", { "postgres-database": { extensions: ["pgcrypto"] } }),
  });
  return derivePlan(fleet, manifests);
}

describe("state paths", () => {
  it("places each file under the node's state directory by module and interface", () => {
    assert.equal(
      receivesPath(STATE, "postgres", "postgres-database"),
      "/var/lib/mesh/modules/postgres/receives/postgres-database.json",
    );
    assert.equal(
      secretPath(STATE, "notes", "postgres-database"),
      "/var/lib/mesh/modules/notes/passwords/postgres-database",
    );
    assert.equal(
      providerSecretPath(STATE, "postgres", "notes", "postgres-database"),
      "/var/lib/mesh/modules/postgres/secrets/notes.postgres-database",
    );
    assert.equal(moduleHomePath(STATE, "notes"), "/var/lib/mesh/modules/notes/home");
    assert.equal(
      credentialPath(STATE, "notes", "postgres-database"),
      "/var/lib/mesh/modules/notes/credentials/postgres-database.json",
    );
  });

  it("refuses a name that could leave its directory, and a relative state directory", () => {
    for (const fn of [receivesPath, secretPath, credentialPath]) {
      for (const [m, i] of [
        ["..", "x"],
        ["../etc", "x"],
        ["a/b", "x"],
        ["notes", "../../passwd"],
        ["notes", "x/y"],
        ["notes", "."],
      ] as const) {
        assert.throws(() => fn(STATE, m, i), InvalidNameError, `${fn.name}(${m}, ${i})`);
      }
      assert.throws(() => fn("state", "notes", "x"), StateDirError);
    }
  });
});

describe("derivePlan", () => {
  it("lists each provided interface with its consumers, their nodes, logins, values and derived values", () => {
    assert.deepEqual(plan(), {
      instances: [
        {
          provider: "postgres",
          node: "db",
          interface: "postgres-database",
          endpoint: {
            scheme: "postgresql",
            host: "db.internal",
            port: 5432,
            path: "/{name}",
            query: {},
            defaulted: true,
          },
          consumers: [
            {
              consumer: "blog",
              consumerNode: "db",
              consumerAt: "db.internal",
              interface: "postgres-database",
              login: "blog_postgres",
              values: { extensions: ["pgcrypto"] },
              derived: { name: "blog_postgres" },
              provider: "postgres",
              providerNode: "db",
            },
            {
              consumer: "notes",
              consumerNode: "app",
              consumerAt: undefined,
              interface: "postgres-database",
              login: "notes_postgres",
              values: { name: "notes" },
              derived: {},
              provider: "postgres",
              providerNode: "db",
            },
          ],
        },
        {
          provider: "redis",
          node: "app",
          interface: "redis-namespace",
          endpoint: { scheme: "redis", host: "127.0.0.1", port: 6379, path: "", query: {}, defaulted: true },
          consumers: [
            {
              consumer: "notes",
              consumerNode: "app",
              consumerAt: undefined,
              interface: "redis-namespace",
              login: "notes_redis",
              values: {},
              derived: { prefix: "notes_redis:" },
              provider: "redis",
              providerNode: "app",
            },
          ],
        },
      ],
    });
  });

  it("derives the same plan, in the same order, whatever order the fleet lists modules in", () => {
    const reversed = FLEET.replace(
      /modules:\n([\s\S]*)$/,
      (_all, body: string) =>
        `modules:\n${body
          .split(/\n(?=  \S)/)
          .map((s) => s.trimEnd())
          .reverse()
          .join("\n")}\n`,
    );
    assert.notEqual(reversed, FLEET);
    const { fleet, manifests } = fleetOf(reversed, {
      postgres: POSTGRES,
      redis: REDIS,
      notes: consumer("notes", { "postgres-database": {}, "redis-namespace": {} }),
      blog: consumer("blog", { "postgres-database": { extensions: ["pgcrypto"] } }),
    });
    assert.equal(JSON.stringify(derivePlan(fleet, manifests)), JSON.stringify(plan()));
  });

  it("keeps a provider nobody uses in the plan with no consumers, so its file lists nobody", () => {
    const { fleet, manifests } = fleetOf(
      "nodes: { a: {} }\nmodules:\n  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }\n",
      {
        postgres: POSTGRES,
      },
    );
    const p = derivePlan(fleet, manifests);
    assert.deepEqual(
      p.instances.map((i) => i.consumers.length),
      [0],
    );
    assert.equal(
      JSON.stringify(contributionsFor(p, "postgres", STATE)[0]?.contents),
      '{"requirement":"postgres-database","given":[]}',
    );
  });
});

describe("contributionsFor", () => {
  it("gives the exact file the agent writes for a provider: requirement and one grant per consumer", () => {
    const files = contributionsFor(plan(), "postgres", "/srv/db-state");
    assert.equal(files.length, 1);
    assert.equal(files[0]?.path, "/srv/db-state/modules/postgres/receives/postgres-database.json");
    assert.equal(
      JSON.stringify(files[0]?.contents),
      JSON.stringify({
        requirement: "postgres-database",
        given: [
          {
            as: "blog_postgres",
            secret: "/srv/db-state/modules/postgres/secrets/blog.postgres-database",
            node: "db",
            at: "db.internal",
            values: { extensions: ["pgcrypto"] },
            derived: { name: "blog_postgres" },
          },
          {
            as: "notes_postgres",
            secret: "/srv/db-state/modules/postgres/secrets/notes.postgres-database",
            node: "app",
            values: { name: "notes" },
            derived: {},
          },
        ],
      }),
    );
  });

  it("gives nothing for a module that provides nothing", () => {
    assert.deepEqual(contributionsFor(plan(), "notes", STATE), []);
  });
});

describe("credentialFor", () => {
  it("builds a consumer's credential: login, password file, endpoint and a URL without the password", () => {
    const files = credentialsFor(plan(), "notes", "/srv/app-state");
    assert.deepEqual(
      files.map((f) => f.path),
      [
        "/srv/app-state/modules/notes/credentials/postgres-database.json",
        "/srv/app-state/modules/notes/credentials/redis-namespace.json",
      ],
    );
    assert.deepEqual(files[0]?.contents, {
      interface: "postgres-database",
      provider: "postgres",
      login: "notes_postgres",
      passwordFile: "/srv/app-state/modules/notes/passwords/postgres-database",
      endpoint: { scheme: "postgresql", host: "db.internal", port: 5432, path: "/notes" },
      url: "postgresql://notes_postgres@db.internal:5432/notes",
      values: { name: "notes" },
    });
    assert.equal(files[1]?.contents.url, "redis://notes_redis@127.0.0.1:6379");
    assert.deepEqual(files[1]?.contents.values, { prefix: "notes_redis:" });
  });

  it("fills the path from a derived default when the consumer gave none", () => {
    const blog = credentialsFor(plan(), "blog", STATE)[0];
    assert.equal(blog?.contents.url, "postgresql://blog_postgres@db.internal:5432/blog_postgres");
  });

  const entry: PlanEntry = {
    consumer: "notes",
    consumerNode: "n",
    interface: "postgres-database",
    login: "notes_postgres",
    values: { name: "a b/c?d" },
    derived: {},
    provider: "postgres",
    providerNode: "n",
  };

  it("percent-encodes values in the URL, brackets an IPv6 host, and takes the endpoint the controller gives", () => {
    const credential = credentialFor(
      entry,
      {
        scheme: "postgresql",
        host: "::1",
        port: 6543,
        path: "/{name}",
        query: { application_name: "{login}", sslmode: "require" },
      },
      STATE,
    );
    assert.equal(
      credential.url,
      "postgresql://notes_postgres@[::1]:6543/a%20b%2Fc%3Fd?application_name=notes_postgres&sslmode=require",
    );
  });

  it("leaves out endpoint and URL when the provider declares no endpoint", () => {
    const credential = credentialFor(entry, undefined, STATE);
    assert.equal(credential.url, undefined);
    assert.equal(credential.endpoint, undefined);
    assert.equal(credential.passwordFile, "/var/lib/mesh/modules/notes/passwords/postgres-database");
  });

  it("refuses an endpoint naming a value the consumer does not have", () => {
    assert.throws(
      () => credentialFor(entry, { scheme: "x", host: "h", path: "/{bucket}", query: {} }, STATE),
      (err: unknown) => err instanceof TemplateError && err.key === "bucket",
    );
  });
});

describe("a provider's endpoint in the fleet file", () => {
  it("overrides the manifest's host and port, so consumers reach the server where it really listens", () => {
    const { fleet, manifests } = fleetOf(
      `nodes:
  db: {}
modules:
  postgres: { manifest: ./p.json, node: db, admin: { env: MESH_ADMIN }, endpoint: { host: 10.0.0.7, port: 5433 } }
  notes: { manifest: ./n.json, node: db, needs: { postgres-database: { values: { name: notes } } } }
`,
      { postgres: POSTGRES, notes: consumer("notes", { "postgres-database": {} }) },
    );
    const instance = derivePlan(fleet, manifests).instances.find((i) => i.provider === "postgres");
    assert.equal(instance?.endpoint?.host, "10.0.0.7");
    assert.equal(instance?.endpoint?.port, 5433);
  });

  it("refuses a port that is not one", () => {
    assert.throws(
      () =>
        fleetOf(
          `nodes:\n  db: {}\nmodules:\n  postgres: { manifest: ./p.json, node: db, admin: { env: MESH_ADMIN }, endpoint: { port: 70000 } }\n`,
          { postgres: POSTGRES },
        ),
      /endpoint/,
    );
  });

  it("refuses a host that would change the consumers' URL beyond the host", () => {
    for (const host of ['"evil@10.0.0.7"', '"10.0.0.7/other"', '"db?x=1"', '"a b"']) {
      assert.throws(
        () =>
          fleetOf(
            `nodes:\n  db: {}\nmodules:\n  postgres: { manifest: ./p.json, node: db, admin: { env: MESH_ADMIN }, endpoint: { host: ${host} } }\n`,
            { postgres: POSTGRES },
          ),
        /endpoint\.host/,
        host,
      );
    }
  });
});

describe("an endpoint's named links", () => {
  const OIDC = {
    name: "oidc",
    provides: {
      "oidc-client": {
        receives: "/run/mesh/oidc-client.json",
        spec: {},
        endpoint: {
          scheme: "http",
          port: 4593,
          path: "/api/oidc",
          links: { issuer: "/api/oidc", discovery: "/api/oidc/.well-known/openid-configuration" },
        },
      },
    },
  };

  it("puts each link into the credential as a URL on the provider's host, without the login", () => {
    const { fleet, manifests } = fleetOf(
      `nodes:
  idp: { address: idp.internal }
modules:
  oidc: { manifest: ./o.json, node: idp, admin: { env: MESH_ADMIN } }
  shop: { manifest: ./s.json, node: idp, admin: { env: MESH_ADMIN } }
`,
      { oidc: OIDC, shop: consumer("shop", { "oidc-client": {} }) },
    );
    const [file] = credentialsFor(derivePlan(fleet, manifests), "shop", STATE);
    assert.equal(file?.contents.login, "shop_oidc");
    assert.deepEqual(file?.contents.links, {
      issuer: "http://idp.internal:4593/api/oidc",
      discovery: "http://idp.internal:4593/api/oidc/.well-known/openid-configuration",
    });
    assert.equal(file?.contents.url, "http://shop_oidc@idp.internal:4593/api/oidc");
  });

  it("refuses a link that is not a path", () => {
    const bad = structuredClone(OIDC);
    (bad.provides["oidc-client"].endpoint.links as Record<string, string>)["issuer"] = "http://elsewhere";
    assert.throws(
      () =>
        fleetOf(
          "nodes:\n  a: {}\nmodules:\n  oidc: { manifest: ./o.json, node: a, admin: { env: MESH_ADMIN } }\n",
          { oidc: bad },
        ),
      /links\.issuer/,
    );
  });
});
