// The templates of a manifest's run: what they may name, and what they render to.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Credential } from "../src/credential.ts";
import {
  namesModuleMetrics,
  namesScrapeToken,
  renderRunTemplate,
  RunTemplateError,
  runTemplateProblem,
  secretInterfaces,
} from "../src/run-template.ts";

const credential: Credential = {
  interface: "postgres-database",
  provider: "postgres",
  login: "wiki_postgres",
  passwordFile: "/var/lib/mesh/modules/wiki/passwords/postgres-database",
  endpoint: { scheme: "postgresql", host: "10.0.0.2", port: 5432, path: "/wiki" },
  url: "postgresql://wiki_postgres@10.0.0.2:5432/wiki",
  values: { name: "wiki" },
};
const values = {
  module: "wiki",
  dir: "/var/lib/mesh/modules/wiki/home",
  metrics: "127.0.0.1:0",
  files: { pgpass: "/var/lib/mesh/modules/wiki/files/pgpass" },
  needs: { "postgres-database": { credential, password: "p@ss/w:rd" } },
};
const scope = { needs: ["postgres-database"], files: ["pgpass"] };

describe("a run template", () => {
  it("renders a credential's fields, its values, the module's directory and its files", () => {
    assert.equal(
      renderRunTemplate(
        "{postgres-database.host}:{postgres-database.port}:{postgres-database.values.name}:{postgres-database.login}:{postgres-database.password}",
        values,
      ),
      "10.0.0.2:5432:wiki:wiki_postgres:p@ss/w:rd",
    );
    assert.equal(
      renderRunTemplate("{module.dir}/data {files.pgpass}", values),
      `${values.dir}/data ${values.files.pgpass}`,
    );
    assert.equal(renderRunTemplate("{postgres-database.path}", values), "/wiki");
  });

  it("gives the URL with the password in it, percent-encoded", () => {
    const url = new URL(renderRunTemplate("{postgres-database.url}", values));
    assert.equal(decodeURIComponent(url.password), "p@ss/w:rd");
    assert.equal(url.username, "wiki_postgres");
    assert.equal(url.pathname, "/wiki");
  });

  it("leaves every other brace as text, so a JSON or YAML file is written as it stands", () => {
    assert.equal(
      renderRunTemplate('{ "db": "{postgres-database.values.name}", "x": {} }', values),
      '{ "db": "wiki", "x": {} }',
    );
  });

  it("says which placeholder has no value at launch", () => {
    assert.throws(
      () => renderRunTemplate("{postgres-database.values.missing}", values),
      (err: unknown) => err instanceof RunTemplateError && /values\.missing/.test(err.message),
    );
  });

  it("names the interfaces whose password a template hands over", () => {
    assert.deepEqual(secretInterfaces("{postgres-database.url} {redis-namespace.login}"), [
      "postgres-database",
    ]);
    assert.deepEqual(secretInterfaces("{postgres-database.host}"), []);
  });

  it("is refused for an unknown field, a need the module has not, a file it does not render, or a password in args", () => {
    assert.match(
      runTemplateProblem("{postgres-database.pasword}", "env", scope) ?? "",
      /not a credential field/,
    );
    assert.match(
      runTemplateProblem("{redis-namespace.url}", "env", scope) ?? "",
      /does not need redis-namespace/,
    );
    assert.match(runTemplateProblem("{files.config}", "env", scope) ?? "", /not one of the files/);
    assert.match(runTemplateProblem("{module.home}", "env", scope) ?? "", /module's fields/);
    assert.match(runTemplateProblem("{postgres-database.password}", "args", scope) ?? "", /in args/);
    assert.match(runTemplateProblem("{postgres-database.url}", "args", scope) ?? "", /in args/);
    assert.equal(runTemplateProblem("--host={postgres-database.host}", "args", scope), undefined);
    assert.equal(runTemplateProblem("{postgres-database.password}", "files", scope), undefined);
  });

  it("names the mesh's scrape targets file where the node has one, and says why not where it has none", () => {
    assert.equal(runTemplateProblem('files: ["{mesh.targets}"]', "files", scope), undefined);
    assert.equal(runTemplateProblem("--sd={mesh.targets}", "args", scope), undefined);
    assert.match(
      runTemplateProblem("{mesh.config}", "files", scope) ?? "",
      /the mesh's fields are \{mesh\.targets\}/,
    );
    assert.match(runTemplateProblem("{mesh.targets.x}", "files", scope) ?? "", /the mesh's fields/);
    assert.deepEqual(secretInterfaces("{mesh.targets}"), []);
    assert.equal(
      renderRunTemplate('files: ["{mesh.targets}"]', {
        ...values,
        targets: "/var/lib/mesh/scrape/targets.json",
      }),
      'files: ["/var/lib/mesh/scrape/targets.json"]',
    );
    assert.throws(
      () => renderRunTemplate("{mesh.targets}", values),
      (err: unknown) =>
        err instanceof RunTemplateError && /controller of `mesh up` keeps it/.test(err.message),
    );
  });

  it("hands over the controller's scrape token in env and files, never in args, and says why not where the node has none", () => {
    assert.equal(runTemplateProblem("{mesh.scrape-token}", "files", scope), undefined);
    assert.equal(runTemplateProblem("Bearer {mesh.scrape-token}", "env", scope), undefined);
    assert.match(
      runTemplateProblem("--bearer={mesh.scrape-token}", "args", scope) ?? "",
      /puts \{mesh\.scrape-token\} \(a secret\) in args.*use run\.env or run\.files/,
    );
    assert.match(runTemplateProblem("{mesh.scrape-token.x}", "files", scope) ?? "", /the mesh's fields/);
    assert.equal(namesScrapeToken("{mesh.scrape-token}"), true);
    assert.equal(namesScrapeToken("{mesh.targets}"), false);
    assert.equal(renderRunTemplate("{mesh.scrape-token}", { ...values, scrapeToken: "tok-123" }), "tok-123");
    assert.throws(
      () => renderRunTemplate("{mesh.scrape-token}", values),
      (err: unknown) =>
        err instanceof RunTemplateError &&
        /has no value on this node/.test(err.message) &&
        !err.message.includes("tok-123"),
    );
  });

  it("tells a template that names where the app serves its metrics", () => {
    assert.equal(namesModuleMetrics("--web.listen-address={module.metrics}"), true);
    assert.equal(namesModuleMetrics("{module.dir}/data"), false);
    assert.equal(namesModuleMetrics("{ module.metrics }"), false);
  });
});
