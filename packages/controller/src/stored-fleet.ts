// The last fleet the controller served, kept in its desired-state bucket, so a controller that
// restarts while the fleet file is broken keeps serving what it served (nothing retired by a typo).
import type { FleetPlan } from "./fleet-plan.ts";

/** The key of the last good fleet in the desired-state bucket. */
export const STORED_FLEET_KEY = "fleet";

/** Reads a stored fleet, or undefined when the value is not one. */
export function parseStoredFleet(value: unknown): FleetPlan | undefined {
  const v = value as Partial<FleetPlan> | null | undefined;
  if (
    typeof v?.fleetFile !== "string" ||
    typeof v.readAt !== "string" ||
    !Array.isArray(v.nodes) ||
    !Array.isArray(v.modules) ||
    !Array.isArray(v.plan?.instances)
  ) {
    return undefined;
  }
  return v as FleetPlan;
}
