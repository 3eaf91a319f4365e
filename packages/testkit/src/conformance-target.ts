import type { Logger, Provision, ProviderAdapter, ProviderModule } from "@mesh/sdk";
import { recordingLogger } from "./recording-logger.ts";

/**
 * What the conformance kit needs from one provider to check it against its real server. Each
 * provider supplies one in `providers/<name>/test/conformance-target.ts`; the kit loops over them.
 */
export interface ConformanceTarget {
  /** The provider's name, as in `mesh provider <name>` (for example "postgres"). */
  readonly name: string;
  /** The interface it provides (for example "postgres-database"). */
  readonly interface: string;
  /** Starts a real server of its own (authentication on, free loopback port). */
  start(): Promise<TargetServer>;
}

/** A running server the kit drives, seen from outside the adapter. */
export interface TargetServer {
  /**
   * A new adapter for this server whose marks name `instance`, as the provider's `create…Adapter`
   * makes it. The kit runs it inside the sdk's guard, as the harness does, and closes it.
   */
  makeAdapter(instance: string): ProviderAdapter;
  /** Whether `as` can log in with `password` right now (false when the server refuses it). */
  canLogin(p: Provision, password?: string): Promise<boolean>;
  /** As the consumer, stores `marker` in its resource (a row, a key...). */
  writeData(p: Provision, marker: string): Promise<void>;
  /** As the admin, reads back what `writeData` stored; undefined when it is gone. */
  readData(p: Provision): Promise<string | undefined>;
  /** As the consumer, tries to read or write the data of `other`; true if the server allowed it. */
  canReachOther(p: Provision, other: Provision): Promise<boolean>;
  /** Drift behind the mesh's back: sets another password for `as`. */
  changePassword(as: string, password: string): Promise<void>;
  /** Drift behind the mesh's back: removes the login (its data may stay). */
  dropLogin(as: string): Promise<void>;
  /** Makes a login (and resource) the mesh did not make. */
  createForeign(as: string, password: string): Promise<void>;
  /** Values that try to break out of quoting; each must be refused or reach the server quoted. */
  readonly hostileValues: readonly Readonly<Record<string, unknown>>[];
  /**
   * The awkward passwords this backend can take, when not all of `AWKWARD_PASSWORDS` (an S3 secret
   * key is printable ASCII); the adapter must refuse the others in words.
   */
  readonly awkwardPasswords?: readonly string[];
  /** Values a plain consumer asks for (for example `{}`). */
  readonly plainValues: Readonly<Record<string, unknown>>;
  /** Stops the server, keeping its data, for tests of a backend that goes away (optional). */
  halt?(): Promise<void>;
  /** Starts a halted server again where it was (optional, with `halt`). */
  resume?(): Promise<void>;
  /**
   * Whether a consumer holds no data of its own (an OIDC client): `writeData` then stores what a
   * person may add to the resource itself, and `delete` must report 0 bytes freed.
   */
  readonly keepsNoData?: boolean;
  /** Restarts the server with nothing kept that it does not persist (Redis without an ACL file). */
  restartEmpty?(): Promise<void>;
  /** Stops the server and removes its files. */
  stop(): Promise<void>;
}

/** A provider's server as its target starts it: a `TargetServer` whose adapters the kit makes. */
export interface ProviderServer extends Omit<TargetServer, "makeAdapter"> {
  /** The admin URL the provider is given, as `mesh provider` gives it. */
  readonly adminUrl: string;
  /** Every adapter's logger; a new `recordingLogger()` for each when absent. */
  readonly logger?: Logger | undefined;
}

/**
 * The conformance target of `provider`: named as the provider module names itself, and making each
 * adapter with the module's own `createAdapter`, as `mesh provider <name>` does.
 */
export function providerTarget(
  provider: ProviderModule,
  start: () => Promise<ProviderServer>,
): ConformanceTarget {
  return {
    name: provider.name,
    interface: provider.interface,
    async start(): Promise<TargetServer> {
      const server = await start();
      return {
        ...server,
        makeAdapter: (instance) =>
          provider.createAdapter({
            adminUrl: server.adminUrl,
            instance,
            logger: server.logger ?? recordingLogger(),
          }),
      };
    },
  };
}
