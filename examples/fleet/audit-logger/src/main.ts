// The audit logger: subscribes to every event on the bus (`**`) and appends each one it hears as a
// JSON line to its own file, so a person can read back what the mesh said and when. It holds no
// permission but to listen: its credential, compiled from module.json, lets it publish nothing.
//
// The file is $AUDIT_LOG, else events.jsonl in its home, the module's own writable directory.
import { mkdir, open, type FileHandle } from "node:fs/promises";
import { dirname, join } from "node:path";
import { clip, connectModuleBus, type Logger, type ModuleEvent } from "@mesh/sdk";

const NAME = process.env["MESH_MODULE"] || "audit-logger";
const STOP_GRACE_MS = 5_000;

function say(text: string): void {
  console.log(`${NAME}: ${text}`);
}

const logger: Logger = {
  info: (m) => say(m),
  warn: (m) => say(`warning: ${m}`),
  error: (m) => console.error(`${NAME}: error: ${m}`),
};

/**
 * Where the events go: AUDIT_LOG, else its home. Under the mesh, HOME is the module's own writable
 * directory in the node's state (the agent sets it, with MESH_STATE_DIR); the module directory
 * above it is the agent's, which a module running as its own user cannot write.
 */
function logPath(): string {
  const given = process.env["AUDIT_LOG"];
  if (given !== undefined && given !== "") return given;
  const home = process.env["HOME"];
  if (process.env["MESH_STATE_DIR"] === undefined || home === undefined || home === "") {
    throw new Error(
      `AUDIT_LOG is not set and ${NAME} is not run by a mesh agent (which sets MESH_STATE_DIR and HOME ` +
        `for every module): start ${NAME} with \`mesh up\`, or set AUDIT_LOG to the file to write`,
    );
  }
  return join(home, "events.jsonl");
}

/** One line of the file: when it was heard, where from, and the body as it came. */
function lineOf(event: ModuleEvent): string {
  const { subject, source, via, event: name, body } = event;
  return `${JSON.stringify({ at: new Date().toISOString(), subject, source, via, event: name, body })}\n`;
}

async function run(): Promise<void> {
  const path = logPath();
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const file: FileHandle = await open(path, "a", 0o600);
  const bus = await connectModuleBus({ logger });

  // Handed one event at a time, so the lines are in the order heard.
  const subscription = bus.on("**", async (event) => {
    await file.write(lineOf(event));
    say(`${event.source}.${event.event} (${event.via}) ${clip(JSON.stringify(event.body))}`);
  });
  await bus.flush();
  say(`listening to every event (**); writing each to ${path}`);

  await new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      say(`stopping (${signal})`);
      // Closing a connection to a server that went away can hang; stopping must not.
      setTimeout(() => process.exit(0), STOP_GRACE_MS).unref();
      resolve();
    };
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
  });
  await subscription.stop();
  await bus.close();
  const { delivered, refused, handlerErrors } = bus.stats();
  await file.close();
  say(
    `wrote ${delivered - handlerErrors} event${delivered - handlerErrors === 1 ? "" : "s"}; ` +
      `refused ${refused.notJson + refused.tooLarge + refused.wrongSubject} malformed message(s)`,
  );
}

run().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`${NAME}: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
