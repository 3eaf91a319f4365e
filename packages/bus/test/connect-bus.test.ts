import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { freePort, until } from "@mesh/testkit";
import {
  BusTlsError,
  BusUnreachableError,
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  newUserKeys,
  openState,
} from "@mesh/bus";
import { explainBusError } from "../src/connect-bus.ts";
import { EVERYTHING, recordingLogger, startBusServer, untilItWorks, type BusServer } from "./bus-server.ts";

void describe("connectBus", () => {
  let bus: BusServer;
  let creds: Uint8Array;
  before(async () => {
    bus = await startBusServer();
    const keys = newUserKeys();
    const jwt = await bus.authority.issueUser({
      name: "agent",
      publicKey: keys.publicKey,
      permissions: EVERYTHING,
    });
    creds = credsFor(jwt, keys.seed);
  });
  after(async () => {
    await bus.stop();
  });

  void it("refuses a tls:// URL given without a CA before connecting, naming --bus-ca", async () => {
    await assert.rejects(
      connectBus({ servers: ["tls://127.0.0.1:1"], creds, name: "agent" }),
      (err: unknown) => {
        assert.ok(err instanceof BusTlsError);
        assert.equal(err.problem, "no-ca");
        assert.match(err.message, /uses TLS and no bus CA was given: pass .*--bus-ca FILE/);
        return true;
      },
    );
  });

  void it("says a server certificate for another address is one, with the fix", () => {
    const tlsError = Object.assign(
      new Error(
        "Hostname/IP does not match certificate's altnames: IP: 10.0.0.9 is not in the cert's list: 10.0.0.1",
      ),
      { code: "ERR_TLS_CERT_ALTNAME_INVALID" },
    );
    const explained = explainBusError(tlsError, "node-2", "tls://10.0.0.9:4222");
    assert.ok(explained instanceof BusTlsError);
    assert.equal(explained.problem, "wrong-name");
    assert.match(explained.message, /is not for the address node-2 used .* mesh bus-config --server/);
  });

  void it("says plainly when no server answers at the address", async () => {
    const port = await freePort();
    await assert.rejects(
      connectBus({ servers: `nats://127.0.0.1:${port}`, creds, name: "agent" }),
      (err: unknown) => {
        assert.ok(err instanceof BusUnreachableError);
        assert.equal(
          err.message,
          `agent could not reach the bus at nats://127.0.0.1:${port}: check that ` +
            "nats-server is running there and that the address and port are right",
        );
        return true;
      },
    );
  });

  void it("reconnects by itself after the server restarts, and says so", async () => {
    const log = recordingLogger();
    const nc = await connectBus({ servers: bus.server.url, creds, name: "agent", log });
    try {
      await bus.server.restart();
      await until("reconnect", () =>
        log.lines.some((l) => l.startsWith("info: agent is connected to the bus again")),
      );
      assert.ok(
        log.lines.some((l) => l.startsWith("warn: agent lost the bus at")),
        log.lines.join("\n"),
      );
      const state = await untilItWorks(() => openState<string>(nc, "after-restart"));
      await untilItWorks(() => state.put("k", "v"));
      assert.equal(await state.get("k"), "v");
    } finally {
      await closeBus(nc);
      await closeBus(nc);
    }
    assert.equal(nc.isClosed(), true);
  });

  void it("waits for a server that is not up yet when asked to", async () => {
    let connecting: ReturnType<typeof connectBus> | undefined;
    await bus.server.restart({
      whileDown: async () => {
        connecting = connectBus({ servers: bus.server.url, creds, name: "early", waitForServer: true });
        await new Promise((r) => setTimeout(r, 300));
      },
    });
    assert.ok(connecting);
    const nc = await connecting;
    await nc.flush();
    await closeBus(nc);
  });

  void it("reads the creds again at each reconnect when given a function", async () => {
    let reads = 0;
    const nc = await connectBus({
      servers: bus.server.url,
      creds: () => {
        reads++;
        return creds;
      },
      name: "agent",
    });
    const before = reads;
    await bus.server.restart();
    await until("the creds to be read again", () => reads > before);
    await closeBus(nc);
  });

  void it("says the credentials were refused when a restarted server no longer trusts them", async () => {
    const log = recordingLogger();
    const nc = await connectBus({ servers: bus.server.url, creds, name: "agent", log });
    const stranger = await createAuthority();
    try {
      await bus.server.restart({ config: stranger.serverConfig() });
      await until("the client to give up on refused credentials", () => nc.isClosed(), 60);
      await until("the error", () =>
        log.lines.some((l) => l.startsWith("error: agent's bus connection closed")),
      );
      assert.ok(
        log.lines.some((l) => l.includes("refused agent's credentials") && l.includes("enroll again")),
        log.lines.join("\n"),
      );
    } finally {
      await bus.server.restart({ config: bus.authority.serverConfig() });
    }
  });
});
