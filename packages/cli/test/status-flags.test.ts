// `mesh status …` read without Commander (status-flags.ts): every command line it takes gives the
// flags Commander gives the status command's action, and anything else is left to the program.
// In this process: the program is built, its status action replaced by one that keeps its flags.
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import { programFor } from "../src/cli.ts";
import type { CliIo } from "../src/io.ts";
import { plainStatusFlags } from "../src/status-flags.ts";

const quietIo: CliIo = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };

/** The flags Commander hands `mesh status`'s action for `argv` (the words after `mesh`). */
async function commanderFlags(argv: readonly string[]): Promise<Record<string, unknown>> {
  const program = await programFor(argv, quietIo);
  const status = program.commands.find((c) => c.name() === "status");
  assert.ok(status, "the program has mesh status");
  let seen: Record<string, unknown> | undefined;
  status.action((flags: Record<string, unknown>) => {
    seen = flags;
  });
  await program.parseAsync([...argv], { from: "user" });
  assert.ok(seen, `Commander ran mesh status's action for ${argv.join(" ")}`);
  return seen;
}

describe("mesh status read without Commander", () => {
  for (const argv of [
    ["status"],
    ["status", "--json"],
    ["status", "--state", "/var/lib/mesh"],
    ["status", "--state=/var/lib/mesh", "--json"],
    ["status", "--json", "--state", "a", "--state", "b"],
    ["status", "--bus", "nats://10.0.0.2:4222"],
    ["status", "--bus=nats://a:4222,nats://b:4222", "--bus", "tls://c:4222", "--bus-ca", "ca.pem"],
    ["status", "--bus-ca=ca.pem", "--bus-ca", "other.pem", "--json", "--json"],
    ["status", "--state", "dir with spaces", "--bus", "not a url"],
  ]) {
    it(`takes mesh ${argv.join(" ")} with Commander's flags`, async () => {
      const plain = plainStatusFlags(argv);
      assert.ok(plain !== undefined, "read without Commander");
      assert.deepEqual({ ...plain }, { ...(await commanderFlags(argv)) });
    });
  }

  for (const argv of [
    [],
    ["--version"],
    ["up"],
    ["stat"],
    ["status", "--help"],
    ["status", "-h"],
    ["status", "-V"],
    ["status", "--version"],
    ["status", "extra"],
    ["status", "--"],
    ["status", "--state"],
    ["status", "--state="],
    ["status", "--state", "--json"],
    ["status", "--state=-x"],
    ["status", "--json=yes"],
    ["status", "--jsonx"],
    ["status", "--sta", "dir"],
    ["status", "--constructor", "x"],
    ["status", "--bus-ca"],
    ["--state", "dir", "status"],
  ]) {
    it(`leaves mesh ${argv.join(" ")} to the program`, () => {
      assert.equal(plainStatusFlags(argv), undefined);
    });
  }
});
