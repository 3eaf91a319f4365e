// Colours only for a person at a terminal: never in a pipe, never with NO_COLOR, and when
// FORCE_COLOR asks for them. Decided in this process for each rule, then once through the real
// `mesh` with its real streams: a pipe, and a pseudo-terminal made by `script`.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { NO_PAINT, paintFor, stripColour, takesColour } from "../src/colour.ts";
import { formatTable } from "../src/format.ts";
import type { CliIo } from "../src/io.ts";
import { formatStatus } from "../src/status-command.ts";
import { MESH_BIN, cleanEnv, meshInProcess as mesh, runMesh } from "./run-mesh.ts";

const ESC = "\u001b[";
const root = fileURLToPath(new URL("../../../", import.meta.url));
const FLEET = `${root}examples/fleet/mesh.yaml`;
// Denied: notes does not declare this event, so the answer is "denied", coloured red on a terminal.
const DENIED = ["explain", "notes", "publish", "mesh.events.notes.not.declared", "--fleet", FLEET];

const io = (tty: boolean, env: Record<string, string> = {}): CliIo => ({
  out: () => {},
  err: () => {},
  env,
  stdin: Readable.from([]),
  outIsTTY: tty,
  errIsTTY: tty,
});

describe("colours", () => {
  it("are on for a terminal, off for a pipe, off with NO_COLOR or TERM=dumb, and forced by FORCE_COLOR", () => {
    const cases: [boolean, Record<string, string>, boolean][] = [
      [true, {}, true],
      [false, {}, false],
      [true, { NO_COLOR: "1" }, false],
      [true, { NO_COLOR: "" }, true], // no-color.org: only a non-empty value counts
      [true, { TERM: "dumb" }, false],
      [false, { FORCE_COLOR: "1" }, true],
      [false, { FORCE_COLOR: "" }, true],
      [false, { FORCE_COLOR: "1", NO_COLOR: "1" }, true],
      [true, { FORCE_COLOR: "0" }, false],
      [true, { FORCE_COLOR: "false" }, false],
    ];
    for (const [tty, env, expected] of cases) {
      assert.equal(takesColour(io(tty, env), "out"), expected, `tty ${tty}, ${JSON.stringify(env)}`);
    }
    assert.equal(takesColour({ ...io(false), outIsTTY: true }, "err"), false, "each stream is its own");
    assert.equal(paintFor(io(false), "out"), NO_PAINT);
    assert.equal(paintFor(io(true), "out").red("failing"), `${ESC}31mfailing${ESC}39m`);
  });

  it("mark what needs a person in mesh status, and the text is the same without them", () => {
    const answer = {
      nodes: [
        { name: "node-a", enrolled: false, modules: [{ name: "notes", state: "crashing", restarts: 3 }] },
      ],
      consumers: [],
      failing: [
        {
          provider: "postgres",
          interface: "postgres-database",
          consumer: "notes",
          class: "unreachable",
          since: "2026-03-01T12:00:00.000Z",
          attempts: 4,
          error: "connection refused",
        },
      ],
      fleet: { file: "/x/mesh.yaml", readAt: "2026-03-01T12:00:00.000Z", refused: ["a bad line"] },
    };
    const now = Date.parse("2026-03-01T12:30:00Z");
    const plain = formatStatus(answer, now);
    const coloured = formatStatus(answer, now, paintFor(io(true), "out"));
    assert.doesNotMatch(plain, /\u001b/);
    assert.equal(stripColour(coloured), plain);
    assert.ok(coloured.includes(`${ESC}31m${ESC}1mFAILING:`), "FAILING in bold red");
    assert.ok(coloured.includes(`${ESC}31mREFUSED${ESC}39m`), "a refused fleet in red");
    assert.ok(coloured.includes(`${ESC}33mnot enrolled${ESC}39m`), "a node not enrolled in yellow");
    assert.ok(coloured.includes(`${ESC}31mcrashing`), "a crashing module in red");
  });

  it("never shift a table's columns", () => {
    const rows = [
      ["app_umami", "active", "-"],
      ["app_gitea", "failing", "credentials-rejected"],
    ];
    const red = paintFor(io(true), "out").red;
    const coloured = formatTable(["LOGIN", "STATE", "CLASS"], rows, (cell, _r, column) =>
      column === 1 && cell === "failing" ? red(cell) : cell,
    );
    assert.ok(coloured.includes(`${ESC}31mfailing${ESC}39m`));
    assert.equal(stripColour(coloured), formatTable(["LOGIN", "STATE", "CLASS"], rows));
  });

  it("follow the environment in the command line itself: stdout and the error: of stderr", async () => {
    const tty = await mesh(DENIED, io(true));
    assert.equal(tty.code, 1);
    assert.ok(tty.stdout.startsWith(`${ESC}31mdenied${ESC}39m: `), JSON.stringify(tty.stdout));

    const noColour = await mesh(DENIED, io(true, { NO_COLOR: "1" }));
    assert.equal(noColour.stdout, stripColour(tty.stdout));
    assert.doesNotMatch(noColour.stdout, /\u001b/);

    const piped = await mesh(DENIED, io(false));
    assert.equal(piped.stdout, noColour.stdout);

    const forced = await mesh(DENIED, io(false, { FORCE_COLOR: "1" }));
    assert.equal(forced.stdout, tty.stdout);

    const error = await mesh(["ledger", "x", "--limit", "0"], io(true));
    assert.equal(error.code, 2);
    assert.ok(error.stderr.startsWith(`${ESC}31merror:${ESC}39m --limit 0`), JSON.stringify(error.stderr));
    const unknown = await mesh(["stauts"], io(true));
    assert.ok(
      unknown.stderr.startsWith(`${ESC}31merror:${ESC}39m unknown command`),
      JSON.stringify(unknown.stderr),
    );
    const plainError = await mesh(["ledger", "x", "--limit", "0"], io(false));
    assert.ok(plainError.stderr.startsWith("error: --limit 0"));
  });

  it("reach a real mesh's pipe only when FORCE_COLOR asks, and its terminal unless NO_COLOR says no", async (t) => {
    const onTerminal = (env: Record<string, string>): Promise<string> => {
      const quote = (word: string): string => `'${word.replaceAll("'", "'\\''")}'`;
      const command = [process.execPath, MESH_BIN, ...DENIED].map(quote).join(" ");
      const child = spawn("script", ["-qec", command, "/dev/null"], {
        env: cleanEnv(env),
        stdio: ["ignore", "pipe", "pipe"],
      });
      let output = "";
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
      return new Promise((resolve) => child.on("close", () => resolve(output)));
    };
    const hasScript = spawnSync("script", ["--version"]).status === 0;
    const [piped, forced, terminal, terminalNoColour] = await Promise.all([
      runMesh(DENIED),
      runMesh(DENIED, { FORCE_COLOR: "1" }),
      hasScript ? onTerminal({}) : Promise.resolve(undefined),
      hasScript ? onTerminal({ NO_COLOR: "1" }) : Promise.resolve(undefined),
    ]);
    assert.equal(piped.code, 1, piped.stderr);
    assert.match(piped.stdout, /^denied: /);
    assert.doesNotMatch(piped.stdout + piped.stderr, /\u001b/, "no escape codes in a pipe");
    assert.ok(forced.stdout.startsWith(`${ESC}31mdenied${ESC}39m: `), "FORCE_COLOR=1 colours a pipe");
    if (terminal === undefined || terminalNoColour === undefined) {
      t.skip("script(1) is not installed: no pseudo-terminal to run mesh on");
      return;
    }
    assert.ok(terminal.includes(`${ESC}31mdenied${ESC}39m: `), `on a terminal: ${JSON.stringify(terminal)}`);
    assert.match(terminalNoColour, /denied: /);
    assert.doesNotMatch(terminalNoColour, /\u001b\[\d+m/, "NO_COLOR=1 on a terminal: no colours");
  });
});
