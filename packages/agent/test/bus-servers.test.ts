// An agent joined from another machine keeps the bus URLs it last used, and learns the cluster's
// other servers from the INFO of the one it reached (`connect_urls`), so a restart finds the bus
// even when that one server is gone.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createAuthority, type BusAuthority } from "@mesh/bus";
import { freePort, startNats, type NatsServer, until, quietLogger } from "@mesh/testkit";
import { startAgent, type Agent } from "../src/index.ts";
import { identityFiles, loadOrMakeIdentity, writeBusServers, writeNodeCreds } from "../src/node-identity.ts";

describe("the bus servers an agent keeps", { timeout: 120_000 }, () => {
  let authority: BusAuthority;
  let a: NatsServer;
  let b: NatsServer;
  let stateDir: string;
  let agent: Agent | undefined;

  before(async () => {
    authority = await createAuthority();
    const [routeA, routeB] = [await freePort(), await freePort()];
    const clustered = (name: string, listen: number, other: number) => () =>
      authority.serverConfig({ serverName: name }) +
      `cluster { name: "mesh", listen: "127.0.0.1:${listen}", routes: ["nats-route://127.0.0.1:${other}"] }\n`;
    [a, b] = await Promise.all([
      startNats({ config: clustered("a", routeA, routeB) }),
      startNats({ config: clustered("b", routeB, routeA) }),
    ]);
    stateDir = await mkdtemp(join(tmpdir(), "mesh-bus-servers-"));
    // A node that enrolled before: its keys, its credentials, and the one server it used.
    const files = identityFiles(stateDir);
    const { identity } = await loadOrMakeIdentity(files);
    const jwt = await authority.issueUser({
      name: "n1",
      publicKey: identity.nats.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] }, allowResponses: true },
    });
    await writeNodeCreds(files, jwt, identity);
    await writeBusServers(files, [a.url]);
  });

  after(async () => {
    await agent?.stop();
    await Promise.all([a?.stop(), b?.stop()]);
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  void it("keeps the URL it used and adds the cluster's other servers from connect_urls", async () => {
    agent = await startAgent({ node: "n1", stateDir, logger: quietLogger, timings: { retryMs: 200 } });
    const kept = await until(
      "the other server in bus.json",
      async () => {
        const { servers } = JSON.parse(await readFile(identityFiles(stateDir).bus, "utf8")) as {
          servers: string[];
        };
        return servers.includes(`nats://127.0.0.1:${b.port}`) ? servers : undefined;
      },
      60,
    );
    assert.equal(kept[0], a.url, "the URL it used comes first");
  });
});
