import type { Plan } from "./plan.ts";
import { secondLogin } from "./login.ts";
import { providerSecretPath, receivesPath } from "./state-paths.ts";

/** One consumer in a contributions file: a credential grant the provider's harness applies. */
export interface ContributionEntry {
  /** The derived login. */
  readonly as: string;
  /** Where logins alternate: the login that takes the password now, when it is not `as`. */
  readonly login?: string;
  /** The provider's copy of the consumer's password, on the provider's node (`providerSecretPath`). */
  readonly secret: string;
  /** The consumer's node. */
  readonly node: string;
  /** The consumer node's address, when the fleet gives one. */
  readonly at?: string;
  readonly values: Readonly<Record<string, unknown>>;
  readonly derived: Readonly<Record<string, unknown>>;
}

/** The contributions file's contents, exactly as the agent writes them (DESIGN §2). */
export interface Contributions {
  readonly requirement: string;
  readonly given: readonly ContributionEntry[];
}

/** A contributions file to write: where, and what. */
export interface ContributionsFile {
  readonly interface: string;
  /** `receivesPath(stateDir, provider, interface)`. */
  readonly path: string;
  readonly contents: Contributions;
}

/**
 * The contributions files the agent on `provider`'s node writes: one per interface `provider`
 * provides in `plan`, each listing every consumer (an empty `given` when none), with secret paths
 * under that node's `stateDir`. Empty when `provider` provides nothing in the plan.
 * @throws StateDirError when `stateDir` is not absolute.
 */
export function contributionsFor(plan: Plan, provider: string, stateDir: string): ContributionsFile[] {
  return plan.instances
    .filter((instance) => instance.provider === provider)
    .map((instance) => ({
      interface: instance.interface,
      path: receivesPath(stateDir, provider, instance.interface),
      contents: {
        requirement: instance.interface,
        given: instance.consumers.map((c) => ({
          as: c.login,
          // Where logins alternate and the password is on the second login, the provider is told so.
          ...(c.alternates === true && c.slot === 1 ? { login: secondLogin(c.login) } : {}),
          secret: providerSecretPath(stateDir, provider, c.consumer, c.interface),
          node: c.consumerNode,
          ...(c.consumerAt === undefined ? {} : { at: c.consumerAt }),
          values: c.values,
          derived: c.derived,
        })),
      },
    }));
}
