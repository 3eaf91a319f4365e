/**
 * @mesh/bus/subjects: the bus's subject and bucket names, and the codes of the replies a tool call
 * through the mesh may get, with nothing else loaded (not even the NATS client): what a command
 * needs to define itself and to name what it asks. Everything here is also exported by `@mesh/bus`.
 */
export * from "./subjects.ts";
export * from "./tool-codes.ts";
