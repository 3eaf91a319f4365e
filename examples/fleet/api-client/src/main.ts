// The api-client app: a consumer of `oidc-client`. It reads the issuer's discovery document, then
// every few seconds gets an access token with client_credentials (its login is the client id, its
// password the secret) and verifies the token's signature, issuer and client id against the keys
// the server publishes (its JWKS), with jose. A refused secret ends the session, so the app reads
// its credential again: after `mesh rotate` it carries on with the new secret.
import { createRemoteJWKSet, jwtVerify } from "jose";
import { main, type Credential, type Session } from "../../lib/consumer.ts";

/** What the app reads from the issuer's discovery document. */
interface Discovery {
  readonly issuer: string;
  readonly token_endpoint: string;
  readonly jwks_uri: string;
}

/** The secret was refused: the session ends and the credential is read again. */
class TokenRefusedError extends Error {
  override name = "TokenRefusedError";
  constructor(
    readonly clientId: string,
    status: number,
  ) {
    super(`the token endpoint refused client ${clientId} (${status}); reading the credential again`);
  }
}

async function discover(credential: Credential): Promise<Discovery> {
  // The credential names the discovery document; an older one only its issuer, or its URL.
  const issuer = credential.links["issuer"] ?? credential.url.replace(/\/\/[^@/]*@/, "//");
  const url = credential.links["discovery"] ?? `${issuer}/.well-known/openid-configuration`;
  const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  if (response.status !== 200) throw new Error(`the discovery document ${url} answered ${response.status}`);
  const doc = (await response.json()) as Partial<Discovery>;
  if (
    typeof doc.issuer !== "string" ||
    typeof doc.token_endpoint !== "string" ||
    typeof doc.jwks_uri !== "string"
  ) {
    throw new Error(`the discovery document ${url} names no issuer, token_endpoint or jwks_uri`);
  }
  return doc as Discovery;
}

async function connect(credential: Credential): Promise<Session> {
  const discovery = await discover(credential);
  const keys = createRemoteJWKSet(new URL(discovery.jwks_uri));
  const scopes = Array.isArray(credential.values["scopes"]) ? (credential.values["scopes"] as string[]) : [];
  const basic = Buffer.from(`${credential.login}:${credential.password}`, "utf8").toString("base64");
  const getToken = async (): Promise<string> => {
    const response = await fetch(discovery.token_endpoint, {
      method: "POST",
      headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "client_credentials", scope: scopes.join(" ") }).toString(),
      signal: AbortSignal.timeout(5_000),
    });
    const body = (await response.json().catch(() => ({}))) as { access_token?: unknown };
    if (response.status === 401 || response.status === 403)
      throw new TokenRefusedError(credential.login, response.status);
    if (response.status !== 200 || typeof body.access_token !== "string") {
      throw new Error(`the token endpoint answered ${response.status}`);
    }
    return body.access_token;
  };
  // The first token is asked for here, so a secret the server does not take yet means "not yet".
  let token: string | undefined = await getToken();
  return {
    async step() {
      const access = token ?? (await getToken());
      token = undefined;
      const { payload, protectedHeader } = await jwtVerify(access, keys, { issuer: discovery.issuer });
      if (payload["client_id"] !== credential.login) {
        throw new Error(`the token was issued to ${String(payload["client_id"])}, not ${credential.login}`);
      }
      const left = typeof payload.exp === "number" ? Math.round(payload.exp - Date.now() / 1000) : undefined;
      return (
        `got a token for ${String(payload["scope"] ?? "(no scope)")}, signature verified (${protectedHeader.alg}, ` +
        `key ${protectedHeader.kid ?? "?"}) against ${discovery.jwks_uri}${left === undefined ? "" : `; valid ${left}s`}`
      );
    },
    async close() {},
  };
}

main({ name: "api-client", interface: "oidc-client", connect });
