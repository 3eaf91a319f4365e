import type { ConformanceTarget } from "./conformance-target.ts";

/** Registers the conformance suite for one target with node's test runner. (Being written.) */
export function runConformance(_target: ConformanceTarget): void {}
