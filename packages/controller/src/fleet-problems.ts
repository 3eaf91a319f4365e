// The problems a refused fleet file has, as the errors carry them and as `mesh status` shows them.
import { formatProblem, type Problem } from "@mesh/manifest";

/** The problems `err` carries (a `FleetRefusedError`'s or a manifest error's), or none. */
export function problemsOf(err: unknown): readonly Problem[] {
  const problems = (err as { problems?: unknown }).problems;
  return Array.isArray(problems) ? (problems as Problem[]) : [];
}

/** One line per problem, or the error's message when it lists none. */
export function linesOf(err: unknown, problems: readonly Problem[]): string[] {
  return problems.length > 0 ? problems.map(formatProblem) : [(err as Error).message];
}
