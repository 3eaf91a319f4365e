// One agent of node n1 on a test mesh (a real nats-server and the stand-in controller of
// test-mesh.ts) with the test fleet written beside it: what most agent tests begin with.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recordingLogger, type RecordingLogger } from "@mesh/testkit";
import { startAgent, type Agent, type StartAgentOptions } from "../src/index.ts";
import { type AgentTimings } from "../src/node-agent.ts";
import { writeTestFleet, type TestFleet } from "./test-fleet.ts";
import { startTestMesh, type TestMesh } from "./test-mesh.ts";

/** Timings short enough for a test: a report every 500 ms, a retry every 200 ms, a 2 s stop grace. */
export const FAST_AGENT: Partial<AgentTimings> = { reportEveryMs: 500, retryMs: 200, stopGraceMs: 2_000 };

/** The mesh, the fleet, the state directory and the running agent; `stop()` removes all of it. */
export interface OneAgent {
  readonly mesh: TestMesh;
  readonly fleet: TestFleet;
  readonly stateDir: string;
  readonly agent: Agent;
  stop(): Promise<void>;
}

/** What `startOneAgent` may be told; everything has a default. */
export interface OneAgentOptions {
  readonly logger?: RecordingLogger;
  readonly timings?: Partial<AgentTimings>;
  readonly env?: StartAgentOptions["env"];
}

/** Starts a test mesh, writes the test fleet and starts node n1's agent, enrolled with its token. */
export async function startOneAgent(options: OneAgentOptions = {}): Promise<OneAgent> {
  const mesh = await startTestMesh();
  const made: string[] = [];
  try {
    const fleet = await writeTestFleet(await mkdtemp(join(tmpdir(), "mesh-agent-fleet-")));
    made.push(fleet.dir);
    const stateDir = await mkdtemp(join(tmpdir(), "mesh-agent-state-"));
    made.push(stateDir);
    const agent = await startAgent({
      node: "n1",
      stateDir,
      joinToken: await mesh.joinToken("n1"),
      logger: options.logger ?? recordingLogger(),
      timings: options.timings ?? FAST_AGENT,
      ...(options.env === undefined ? {} : { env: options.env }),
    });
    return {
      mesh,
      fleet,
      stateDir,
      agent,
      async stop() {
        await agent.stop();
        await mesh.stop();
        for (const dir of made) await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await mesh.stop();
    for (const dir of made) await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
