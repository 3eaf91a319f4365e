// A module that knows the mesh, in plain JavaScript against the packed @mesh/sdk: it says
// `greeting.said` every second and hears its own, writing the last one it heard to $HOME/heard.
// The agent sets MESH_BUS_CREDS once the controller has issued the module its bus credential, and
// starts the module again with it; until then there is nothing to say the greeting on.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectModuleBus } from "@mesh/sdk";

if ((process.env.MESH_BUS_CREDS ?? "") === "") {
  console.log("greeter: no bus credential yet; the agent starts me again with one");
  setInterval(() => {}, 60_000);
} else {
  const bus = await connectModuleBus({ waitForServer: true });
  bus.on("greeter.greeting.said", (event) => {
    console.log(`greeter: heard ${JSON.stringify(event.body)} from ${event.source}`);
    writeFileSync(join(process.env.HOME ?? ".", "heard"), `${JSON.stringify(event.body)}\n`);
  });
  await bus.flush();
  let count = 0;
  const timer = setInterval(() => bus.emit("greeting.said", { text: "hello", count: ++count }), 1000);
  process.on("SIGTERM", () => {
    clearInterval(timer);
    void bus.close().then(() => process.exit(0));
  });
}
