// The module credentials kept in step with the fleet: issued for each node's reported keys, and
// the ones no longer issued for revoked after the deliveries. A credential the bus cannot take now
// never holds back a delivery: it is tried again with the node's next report or the next change.
import type { BusLogger } from "@mesh/bus";
import type { FleetPlan } from "./fleet-plan.ts";
import type { ModuleCredentials } from "./module-credentials.ts";

/** Issues and revokes module credentials, saying what failed instead of throwing. */
export class CredentialSync {
  readonly #credentials: ModuleCredentials;
  readonly #log: BusLogger;

  constructor(credentials: ModuleCredentials, logger: BusLogger) {
    this.#credentials = credentials;
    this.#log = logger;
  }

  /** Issues `node`'s module credentials for `fleet`; a failure is logged, and the node's next report tries again. */
  async sync(node: string, fleet: FleetPlan, enrolled: boolean): Promise<void> {
    try {
      await this.#credentials.sync(node, fleet, enrolled);
    } catch (err) {
      this.#log.error(
        `the module credentials of node ${node} could not be issued (${(err as Error).message}); ` +
          `its next report tries again`,
      );
    }
  }

  /**
   * Revokes the module keys no longer issued for. Called after the deliveries, so a module gets
   * its new credential before its old one stops working; a failure is logged and tried again
   * with the next change.
   */
  async revokeRetired(): Promise<void> {
    try {
      const revoked = await this.#credentials.revokeRetired();
      if (revoked > 0) this.#log.info(`revoked ${revoked} module key(s) the controller no longer issues for`);
    } catch (err) {
      this.#log.error(
        `module keys no longer issued for could not be revoked yet (${(err as Error).message}); ` +
          `the controller tries again with the next change`,
      );
    }
  }
}
