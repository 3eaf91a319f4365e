import type { ConformanceTarget } from "@mesh/testkit";

/** This provider's conformance target (being written). */
export const target: ConformanceTarget | undefined = undefined;
