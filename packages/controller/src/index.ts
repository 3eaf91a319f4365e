/**
 * @mesh/controller: turns the fleet file into each node's delivery — the plan it takes part in and
 * the passwords it needs, each sealed to that node — and enrolls nodes.
 */
export * from "./authority-file.ts";
export * from "./controller-keys.ts";
export * from "./write-file-atomic.ts";
