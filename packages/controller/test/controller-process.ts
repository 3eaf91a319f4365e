// A controller in a process of its own, for a test to kill with -9: it starts over the state
// directory it is given (with the authority saved there), says "started", and rotates a password
// each time it reads `rotate CONSUMER INTERFACE` on stdin, answering with what happened (`rotated`,
// or the error's name). Run: node --conditions=source --import tsx controller-process.ts STATE FLEET URL
import { createInterface } from "node:readline";
import { quietLogger } from "@mesh/testkit";
import { loadOrCreateAuthority, startController } from "@mesh/controller";

const [stateDir, fleetFile, server] = process.argv.slice(2);
if (stateDir === undefined || fleetFile === undefined || server === undefined) {
  throw new Error("usage: controller-process.ts STATE_DIR FLEET_FILE NATS_URL");
}
const controller = await startController({
  stateDir,
  fleetFile,
  servers: [server],
  authority: await loadOrCreateAuthority(stateDir),
  logger: quietLogger,
  watch: false,
});
process.stdout.write("started\n");
for await (const line of createInterface({ input: process.stdin })) {
  const [command, consumer, iface] = line.trim().split(" ");
  if (command !== "rotate" || consumer === undefined || iface === undefined) continue;
  const outcome = await controller.rotate(consumer, iface).then(
    () => "rotated",
    (err: unknown) => (err as Error).name,
  );
  process.stdout.write(`${outcome}\n`);
}
