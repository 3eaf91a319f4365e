// Progress for a wait of more than a second: said on a terminal's standard error, wiped when the
// wait ends, never said to a pipe. The waits end when the test has seen what it waits for, not
// after a set time.
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import type { CliIo } from "../src/io.ts";
import { withProgress } from "../src/progress.ts";

function recorder(errIsTTY: boolean): {
  io: CliIo;
  said: () => string;
  seen: (pattern: RegExp) => Promise<void>;
} {
  let said = "";
  const waiters: (() => void)[] = [];
  const io: CliIo = {
    out: () => assert.fail("progress is never on standard output"),
    err: (text) => {
      said += text;
      for (const w of waiters) w();
    },
    env: {},
    stdin: Readable.from([]),
    errIsTTY,
  };
  const seen = (pattern: RegExp): Promise<void> =>
    new Promise((resolve) => {
      const check = (): void => {
        if (pattern.test(said)) resolve();
      };
      waiters.push(check);
      check();
    });
  return { io, said: () => said, seen };
}

describe("progress", () => {
  it("says on a terminal what is awaited and for how long, then wipes the line", async () => {
    const { io, said, seen } = recorder(true);
    const answer = await withProgress(io, "waiting for postgres to answer status", async () => {
      // Rewritten once a second: wait for the second time it is said.
      await seen(/(\rwaiting for postgres to answer status… \d+ s *){2}/);
      return 42;
    });
    assert.equal(answer, 42);
    const text = said();
    assert.match(text, /^\rwaiting for postgres to answer status… [1-9]\d* s/);
    // The last thing written blanks the line out and returns to its start.
    assert.match(text, /\r {39,}\r$/);
    assert.doesNotMatch(text, /\n/, "one line, rewritten, never a new one");
  });

  it("writes a line said during the wait over the progress line, on a terminal and to a pipe", async () => {
    const { io, said, seen } = recorder(true);
    await withProgress(io, "waiting for the controller", async (say) => {
      await seen(/\rwaiting for the controller… \d+ s/);
      say("note: no controller answered through nats://a:4222");
      // The progress line comes back after it, on a line of its own.
      await seen(/nats:\/\/a:4222 *\n\rwaiting for the controller… \d+ s/);
    });
    assert.match(said(), /\rnote: no controller answered through nats:\/\/a:4222 *\n/);
    const pipe = recorder(false);
    await withProgress(pipe.io, "waiting", (say) => Promise.resolve(say("note: left a server")));
    assert.equal(pipe.said(), "note: left a server\n");
  });

  it("says nothing for a wait shorter than a second", async () => {
    const { io, said } = recorder(true);
    assert.equal(await withProgress(io, "quick", () => Promise.resolve("done")), "done");
    assert.equal(said(), "");
  });

  it("says nothing to a pipe however long the wait", async () => {
    const { io, said } = recorder(false);
    const { io: tty, seen } = recorder(true);
    // The same wait on a terminal shows progress; the piped one, run alongside, must not.
    await Promise.all([
      withProgress(io, "waiting", () => seen(/waiting… \d+ s/)),
      withProgress(tty, "waiting", () => seen(/waiting… \d+ s/)),
    ]);
    assert.equal(said(), "");
  });

  it("passes a failure on, and still wipes its line", async () => {
    const { io, said, seen } = recorder(true);
    await assert.rejects(
      withProgress(io, "waiting", async () => {
        await seen(/waiting… \d+ s/);
        throw new Error("nothing answered");
      }),
      /nothing answered/,
    );
    assert.match(said(), /\r +\r$/);
  });
});
