// The oidc provider as the conformance kit sees it: a private Glewlwyd, and the ways to look at it
// from outside the adapter. "Logging in" is what a consumer of an OIDC client does: a
// client_credentials token request with its client id and secret. An OIDC client keeps no data of
// its own; the "data" the kit writes and reads back is the client's display name, which a person
// sets on the server and the mesh keeps across creates, retirement and coming back.
import type { Provision } from "@mesh/sdk";
import { providerTarget, startGlewlwyd, type ConformanceTarget, type GlewlwydServer } from "@mesh/testkit";
import { DEFAULT_VALUES, provider } from "../src/index.ts";

/** What a token request answered: the status and, on success, the access token. */
export interface TokenAnswer {
  readonly status: number;
  readonly accessToken?: string | undefined;
}

/** Asks `server` for a client_credentials token as `clientId` with `secret` (HTTP Basic). */
export async function requestToken(
  server: GlewlwydServer,
  clientId: string,
  secret: string,
  scopes: readonly string[] = DEFAULT_VALUES.scopes,
): Promise<TokenAnswer> {
  const response = await fetch(server.tokenUrl, {
    method: "POST",
    headers: {
      authorization: `Basic ${Buffer.from(`${clientId}:${secret}`, "utf8").toString("base64")}`,
      "content-type": "application/x-www-form-urlencoded",
    },
    body: new URLSearchParams({ grant_type: "client_credentials", scope: scopes.join(" ") }).toString(),
    signal: AbortSignal.timeout(15_000),
  });
  const body = (await response.json().catch(() => ({}))) as { access_token?: unknown };
  return {
    status: response.status,
    accessToken: typeof body.access_token === "string" ? body.access_token : undefined,
  };
}

/** Whether `clientId` with `secret` gets a token: true on 200, false when refused (401/403). */
export async function getsToken(
  server: GlewlwydServer,
  clientId: string,
  secret: string,
  scopes?: readonly string[],
): Promise<boolean> {
  const { status } = await requestToken(server, clientId, secret, scopes);
  if (status === 200) return true;
  if (status === 401 || status === 403) return false;
  throw new Error(`the token endpoint answered ${status} to ${clientId}`);
}

/** The scopes a provision asks for, as the adapter reads them. */
export function scopesOf(p: Provision): readonly string[] {
  const scopes = p.values["scopes"];
  return Array.isArray(scopes) ? (scopes as string[]) : DEFAULT_VALUES.scopes;
}

/** The client as the admin API answers it; undefined when there is none. */
export async function clientOf(
  server: GlewlwydServer,
  id: string,
): Promise<Record<string, unknown> | undefined> {
  const reply = await server.admin("GET", `/client/${encodeURIComponent(id)}`);
  if (reply.status === 404) return undefined;
  if (reply.status !== 200) throw new Error(`GET /client/${id} answered ${reply.status}`);
  return reply.body as Record<string, unknown>;
}

/** Writes the whole client back with `change` applied (Glewlwyd's PUT replaces the record). */
export async function changeClient(
  server: GlewlwydServer,
  id: string,
  change: Record<string, unknown>,
): Promise<void> {
  const client = await clientOf(server, id);
  if (client === undefined) throw new Error(`no client ${id} to change`);
  delete client["source"];
  const reply = await server.admin("PUT", `/client/${encodeURIComponent(id)}`, { ...client, ...change });
  if (reply.status !== 200) throw new Error(`PUT /client/${id} answered ${reply.status}`);
}

/** This provider's conformance target. */
export const target: ConformanceTarget = providerTarget(provider, async () => {
  const server = await startGlewlwyd();
  return {
    adminUrl: server.adminUrl,
    canLogin: (p, password = p.password) => getsToken(server, p.as, password, scopesOf(p)),
    keepsNoData: true,
    async writeData(p, marker) {
      await changeClient(server, p.as, { name: marker });
    },
    async readData(p) {
      const name = (await clientOf(server, p.as))?.["name"];
      return typeof name === "string" ? name : undefined;
    },
    async canReachOther(p, other) {
      // Its own secret under the other's client id, for a token and for an introspection; and its
      // own token on the admin API, to read or change the other's client.
      const reached: boolean[] = [await getsToken(server, other.as, p.password, scopesOf(other))];
      const introspect = await fetch(server.introspectionUrl, {
        method: "POST",
        headers: {
          authorization: `Basic ${Buffer.from(`${other.as}:${p.password}`).toString("base64")}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: "token=x",
      });
      await introspect.arrayBuffer();
      reached.push(introspect.status === 200);
      const { accessToken } = await requestToken(server, p.as, p.password, scopesOf(p));
      for (const [method, body] of [
        ["GET", undefined],
        ["PUT", JSON.stringify({ client_id: other.as, enabled: false })],
      ] as const) {
        const response = await fetch(`${server.baseUrl}/api/client/${other.as}`, {
          method,
          headers: { authorization: `Bearer ${accessToken ?? ""}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body }),
        });
        await response.arrayBuffer();
        reached.push(response.status === 200);
      }
      return reached.some((r) => r);
    },
    async changePassword(as, password) {
      await changeClient(server, as, { password });
    },
    async dropLogin(as) {
      const reply = await server.admin("DELETE", `/client/${encodeURIComponent(as)}`);
      if (reply.status !== 200) throw new Error(`DELETE /client/${as} answered ${reply.status}`);
    },
    async createForeign(as, password) {
      const reply = await server.admin("POST", "/client/", {
        client_id: as,
        name: "made by hand",
        description: "made by a person on the admin page",
        enabled: true,
        confidential: true,
        password,
        scope: ["api.read"],
        authorization_type: ["client_credentials"],
        token_endpoint_auth_method: ["client_secret_basic", "client_secret_post"],
      });
      if (reply.status !== 200) throw new Error(`POST /client/ for ${as} answered ${reply.status}`);
    },
    hostileValues: [
      { redirect_uris: ["javascript:alert(1)"] },
      { redirect_uris: ["https://app.example/cb#steal"] },
      { redirect_uris: ["https://app.example/cb\r\nSet-Cookie: x=1"] },
      { redirect_uris: ["/relative/callback"] },
      { redirect_uris: "https://app.example/cb" },
      { scopes: ["g_admin"] },
      { scopes: ["api.read' OR '1'='1"] },
      { scopes: ["api.read", "api.read"] },
      { scopes: [] },
      { grant_types: ["password"] },
      { grant_types: ["authorization_code"] },
      { grant_types: [{ $ne: null }] },
      // Not a value this provider takes: never sent anywhere, the client is made as plain.
      { description: 'mesh:conformance-neighbour {"state":"active"}', enabled: false },
    ],
    plainValues: {},
    async stop() {
      await server.stop();
    },
  };
});
