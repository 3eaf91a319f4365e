// What a plan is made of, apart from how it is derived (plan.ts): the credential and the run
// templates read these shapes, and must not reach the fleet's checks through them.

/** Where a consumer reaches a provider: the manifest's endpoint with its host settled. */
export interface Endpoint {
  readonly scheme: string;
  readonly host: string;
  readonly port?: number | undefined;
  /** A template (`"/{name}"`), filled per consumer. */
  readonly path: string;
  /** Query parameters, each value a template. */
  readonly query: Readonly<Record<string, string>>;
  /** Named path templates on the same host and port (see `EndpointTemplate.links`); absent when none. */
  readonly links?: Readonly<Record<string, string>> | undefined;
  /**
   * True when the fleet names no `endpoint:` for the provider, so this is the manifest's default:
   * where the running provider reports it serves (its admin URL) takes its place in consumers'
   * credentials. Absent when the fleet wrote one (a public address, maybe), which is kept.
   */
  readonly defaulted?: true | undefined;
}

/** One consumer of one provided interface, with everything the mesh derived for it. */
export interface PlanEntry {
  readonly consumer: string;
  readonly consumerNode: string;
  /** The consumer node's address, when the fleet gives one. */
  readonly consumerAt?: string | undefined;
  readonly interface: string;
  readonly login: string;
  /** What the consumer asks for: its manifest's values, overridden by the fleet file's. */
  readonly values: Readonly<Record<string, unknown>>;
  /** What the mesh derived for it: spec defaults it did not override, and the provider's `derives`. */
  readonly derived: Readonly<Record<string, unknown>>;
  readonly provider: string;
  readonly providerNode: string;
  /** Its provider alternates two logins per consumer at each rotation (`Provided.alternatesLogins`). */
  readonly alternates?: true | undefined;
  /**
   * Where logins alternate: the consumer's password is on its second login (`secondLogin(login)`)
   * now. Set by the controller in a delivery, from the password it delivers; absent: on `login`.
   */
  readonly slot?: 1 | undefined;
}

/** One interface one provider module provides, and every consumer it serves (maybe none). */
export interface PlanInstance {
  readonly provider: string;
  readonly node: string;
  readonly interface: string;
  /** Undefined when the provider's manifest declares no endpoint. */
  readonly endpoint?: Endpoint | undefined;
  readonly consumers: readonly PlanEntry[];
}

/** What the controller delivers: every provided interface instance with its consumers. */
export interface Plan {
  /** Sorted by provider, then interface; consumers by name. */
  readonly instances: readonly PlanInstance[];
}
