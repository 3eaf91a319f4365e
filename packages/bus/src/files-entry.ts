/**
 * @mesh/bus/files: writing a file whole or not at all (a temporary beside it, renamed over it), with
 * its mode and owner set before it is seen. It loads node's own modules and nothing else, so a
 * provider or a module writes its files without bringing in the bus's keys, sealing or JWT code.
 * `writeFileAtomic` and `readFileIfExists` are also on `@mesh/bus`, for the controller and the CLI.
 *
 * ```ts
 * import { writeFileAtomic } from "@mesh/bus/files";
 * await writeFileAtomic("/run/mesh/metrics-url", "http://127.0.0.1:9464/metrics\n", 0o644);
 * ```
 */
export {
  FileWriteError,
  readFileIfExists,
  writeFileAtomic,
  type FileOwner,
  type WriteOutcome,
} from "./write-file-atomic.ts";
