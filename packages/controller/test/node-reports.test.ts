// What the controller keeps of a node's report: only well-formed module entries, and a module's
// metrics URL only when it is a web address the dashboard may show as a link.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseReport } from "@mesh/controller";

const AT = new Date("2026-11-30T12:00:00.000Z");
const report = (modules: unknown[]): Uint8Array =>
  new TextEncoder().encode(JSON.stringify({ node: "node-a", generation: 2, modules }));

describe("a node's report", () => {
  it("keeps each module's metrics URL when it is an http(s) URL without credentials", () => {
    const parsed = parseReport(
      "node-a",
      report([
        {
          name: "postgres",
          state: "running",
          restarts: 0,
          log: "/l",
          metrics: "http://127.0.0.1:41234/metrics",
        },
        { name: "redis", state: "running", restarts: 0, log: "/l", metrics: "https://10.0.0.2:9464/metrics" },
        { name: "notes", state: "running", restarts: 0, log: "/l" },
      ]),
      AT,
    );
    assert.deepEqual(
      parsed?.modules.map((m) => [m.name, m.metrics]),
      [
        ["postgres", "http://127.0.0.1:41234/metrics"],
        ["redis", "https://10.0.0.2:9464/metrics"],
        ["notes", undefined],
      ],
    );
  });

  it("drops a metrics value that is not a web address, keeping the module", () => {
    const bad = [
      "javascript:alert(1)",
      "data:text/html,<b>x</b>",
      "http://admin:pw@127.0.0.1:1/metrics",
      "<script>",
      42,
      { href: "http://127.0.0.1:1/metrics" },
    ];
    const parsed = parseReport(
      "node-a",
      report(bad.map((metrics, i) => ({ name: `m${i}`, state: "running", restarts: 0, log: "", metrics }))),
      AT,
    );
    assert.equal(parsed?.modules.length, bad.length);
    for (const m of parsed?.modules ?? []) assert.equal("metrics" in m, false, m.name);
  });

  it("keeps where a provider says it serves only when it is a host and a port", () => {
    const provider = (module: string, serves: unknown) => ({
      module,
      answered: true,
      problem: null,
      askedAt: AT.toISOString(),
      lastPassAt: null,
      contributionsProblem: null,
      counts: {},
      failing: [],
      waiting: null,
      serves,
    });
    const parsed = parseReport(
      "node-a",
      new TextEncoder().encode(
        JSON.stringify({
          node: "node-a",
          generation: 2,
          modules: [],
          providers: [
            provider("postgres", { host: "127.0.0.1", port: 5433 }),
            provider("redis", { host: "evil.example/path?x", port: 6379 }),
            provider("mariadb", { host: "127.0.0.1", port: 99_999 }),
            provider("s3", "127.0.0.1:7480"),
          ],
        }),
      ),
      AT,
    );
    assert.deepEqual(
      parsed?.providers?.map((p) => [p.module, p.serves]),
      [
        ["postgres", { host: "127.0.0.1", port: 5433 }],
        ["redis", undefined],
        ["mariadb", undefined],
        ["s3", undefined],
      ],
    );
  });
});
