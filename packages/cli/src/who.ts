import { userInfo } from "node:os";

/**
 * The name of the person at the keyboard, as the operating system knows them: sent with every tool
 * request so the provider's action log says who asked.
 */
export function osUserName(): string {
  try {
    return userInfo().username;
  } catch {
    // A uid with no passwd entry (common in containers).
    return process.env["USER"] ?? process.env["LOGNAME"] ?? `uid ${process.getuid?.() ?? "unknown"}`;
  }
}
