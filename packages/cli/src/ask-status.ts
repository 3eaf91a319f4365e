// `mesh status`'s action: ask the running controller (every controller's word on who leads beside
// its answer), and print the answer masked, as text or as JSON. Loaded by `mesh status` alone, with
// what it needs and nothing of the rest of the program (see status-flags.ts).
import { STATUS_SUBJECT } from "@mesh/bus/subjects";
import { paintFor } from "./colour.ts";
import { askControllers, busOverride, stateDirOf, type BusFlags } from "./controller-request.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { formatStatus, maskedAnswer, type StatusAnswer } from "./status-command.ts";

/** `mesh status`'s flags, as Commander collects them (and as `plainStatusFlags` reads them). */
export type StatusFlags = { state?: string; json?: boolean } & BusFlags;

/**
 * Asks the mesh whose state `flags.state` names (else $MESH_STATE_DIR, else ./.mesh-state) for its
 * status and prints it on `io.out`.
 * @throws CliExit (usage) for a bad --bus URL or --bus-ca file; (unreachable) when no mesh ran
 * there or no controller answers (see `askControllers`).
 */
export async function askStatus(flags: StatusFlags, io: CliIo): Promise<void> {
  const state = stateDirOf(flags.state, io);
  const bus = busOverride(flags);
  const { answer, controllers } = await askControllers<StatusAnswer>(state, STATUS_SUBJECT, "{}", {
    name: "mesh status",
    io,
    waiting: `waiting for the controller of the mesh in ${state}`,
    ...bus,
  });
  const masked = maskedAnswer({ ...answer, controllers: [...controllers] });
  io.out(flags.json === true ? formatJson(masked) : formatStatus(masked, Date.now(), paintFor(io, "out")));
}
