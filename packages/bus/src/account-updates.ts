// Revocations that take effect without a restart: the controller pushes the mesh account's new JWT
// to the running nats-server as a claims update, over a connection of the system account. The
// server closes every connection whose JWT the new account JWT revokes, and refuses it from then on.
//
// Verified on Debian's nats-server 2.9.10 with `resolver: MEMORY` and `system_account` set: the
// server answers `$SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE` with "jwt updated" and applies it at
// once. One trap: a server on which no connection of the account was made since it started has not
// loaded the account yet; it answers "jwt update skipped", and would later load the account from its
// configuration's preload, revocations not included. A CONNZ request for the account makes the
// server load it, so a skipped update is sent again after one.
//
// The update lives in the running server's memory only. What survives a restart is the
// authority's `revocations` (kept in the authority file) written into the next `serverConfig()`.
import {
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
  type NatsConnection,
} from "@nats-io/transport-node";
import type { BusAuthority, BusPermissions } from "./authority.ts";
import { inboxSubjects } from "./subjects.ts";

/** The identity (and inbox, `inboxPrefix(ACCOUNT_UPDATER_IDENTITY)`) of the system connection that pushes account updates. */
export const ACCOUNT_UPDATER_IDENTITY = "account-updater";

const ANSWER_WITHIN_MS = 10_000;

/** Where the server takes an account's new JWT (`$SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE`), as a request. */
export function accountClaimsUpdateSubject(accountPublicKey: string): string {
  return `$SYS.REQ.ACCOUNT.${accountPublicKey}.CLAIMS.UPDATE`;
}

/** Where the server lists an account's connections (`$SYS.REQ.ACCOUNT.<account>.CONNZ`); asking loads the account. */
function accountConnzSubject(accountPublicKey: string): string {
  return `$SYS.REQ.ACCOUNT.${accountPublicKey}.CONNZ`;
}

/**
 * The permissions of the system user that pushes `authority`'s account JWT (issue it with
 * `authority.issueSystemUser`, connect it with `inboxPrefix(ACCOUNT_UPDATER_IDENTITY)`): update the
 * mesh account's claims, ask which connections it has, and get the answers. Nothing else of the
 * system account.
 */
export function accountUpdaterPermissions(authority: BusAuthority): BusPermissions {
  const account = authority.accountPublicKey;
  return {
    pub: { allow: [accountClaimsUpdateSubject(account), accountConnzSubject(account)] },
    sub: { allow: [inboxSubjects(ACCOUNT_UPDATER_IDENTITY)] },
  };
}

/** The server answered an account update with an error, or does not know the account. */
export class AccountClaimsRefusedError extends Error {
  override name = "AccountClaimsRefusedError";
  constructor(
    readonly account: string,
    /** What the server said. */
    readonly reason: string,
  ) {
    super(
      `the bus refused the mesh account's new JWT (${account}): ${reason}; check that nats-server runs ` +
        `this authority's serverConfig() (the same operator and account); until it takes the update, ` +
        `write serverConfig() again and reload the server to apply revocations`,
    );
  }
}

/** No server took the update: the connection is not a system account user allowed to send it, or the server did not answer. */
export class AccountUpdatesUnavailableError extends Error {
  override name = "AccountUpdatesUnavailableError";
  constructor(
    readonly account: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(
      `could not push the mesh account's new JWT (${account}) to the bus: ${why}; push on a connection of ` +
        `a system user (authority.issueSystemUser with accountUpdaterPermissions, inbox ` +
        `inboxPrefix("${ACCOUNT_UPDATER_IDENTITY}")) to a server whose config names the system account`,
      options,
    );
  }
}

/** Which server took the update. */
export interface AccountClaimsPushed {
  /** The server's name, as it reports it. */
  readonly server: string;
}

interface ServerReply {
  data?: { code?: number; message?: string };
  error?: { code?: number; description?: string };
  server?: { name?: string; id?: string };
}

/**
 * Sends `authority.accountJwt` (with every revocation so far) to the server `system` is connected
 * to, as a claims update, and checks its answer. Connections whose JWTs are now revoked are closed
 * by the server and refused from then on, without a restart or reload. In a cluster only the
 * answering server is checked. Call it after `revokeUser` (and after saving the revocations).
 * @throws AccountClaimsRefusedError when the server refuses the JWT or does not know the account;
 * AccountUpdatesUnavailableError when `system` may not send it or no server answers.
 */
export async function pushAccountClaims(
  system: NatsConnection,
  authority: BusAuthority,
  options: { timeoutMs?: number } = {},
): Promise<AccountClaimsPushed> {
  const account = authority.accountPublicKey;
  const timeout = options.timeoutMs ?? ANSWER_WITHIN_MS;
  const ask = async (subject: string, body: string): Promise<ServerReply> => {
    let text: string;
    try {
      text = (await system.request(subject, body, { timeout })).string();
    } catch (err) {
      throw new AccountUpdatesUnavailableError(account, whyUnanswered(err, subject), { cause: err });
    }
    try {
      return JSON.parse(text) as ServerReply;
    } catch {
      throw new AccountClaimsRefusedError(account, `the server's answer is not JSON: ${text.slice(0, 200)}`);
    }
  };
  const push = async (): Promise<{ skipped: boolean; server: string }> => {
    const reply = await ask(accountClaimsUpdateSubject(account), authority.accountJwt);
    if (reply.error !== undefined || reply.data === undefined) {
      throw new AccountClaimsRefusedError(account, reply.error?.description ?? "no answer data");
    }
    const server = reply.server?.name ?? reply.server?.id ?? "(unnamed)";
    const message = reply.data.message ?? "";
    if (/skipped/i.test(message)) return { skipped: true, server };
    if (reply.data.code !== 200 || !/updated/i.test(message)) {
      throw new AccountClaimsRefusedError(account, `it answered ${JSON.stringify(message)}`);
    }
    return { skipped: false, server };
  };

  let result = await push();
  if (result.skipped) {
    // The account is not loaded on this server; asking for its connections loads it (from the
    // config's preload), and the update then replaces that.
    await ask(accountConnzSubject(account), "");
    result = await push();
    if (result.skipped) {
      throw new AccountClaimsRefusedError(
        account,
        "it skipped the update because it does not know the account",
      );
    }
  }
  return { server: result.server };
}

function whyUnanswered(err: unknown, subject: string): string {
  const cause = err instanceof RequestError ? err.cause : err;
  if (cause instanceof NoRespondersError || (err instanceof RequestError && err.isNoResponders())) {
    return `nothing answers ${subject} on this connection (it is not a system account user, or the server has no system account)`;
  }
  if (cause instanceof PermissionViolationError || err instanceof PermissionViolationError) {
    return `this connection may not publish ${subject}`;
  }
  if (cause instanceof TimeoutError || err instanceof TimeoutError) {
    return `the server did not answer ${subject} in time`;
  }
  return `the request on ${subject} failed (${err instanceof Error ? err.message : String(err)})`;
}
