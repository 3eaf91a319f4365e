// The nonce signed by Node's Ed25519 is what nats.js's own authenticator sends, byte for byte: the
// same JWT, the same public nkey and the same signature, for keys made as the mesh makes them. A
// real server accepting connections made with it is connect-bus.test.ts's part.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { credsAuthenticator as natsCredsAuthenticator } from "@nats-io/transport-node";
import { createAuthority, credsFor, newUserKeys, type BusAuthority, type UserKeys } from "@mesh/bus";
import { credsAuthenticator } from "../src/creds-auth.ts";

/** A user's keys and creds file, made as the mesh makes them, allowed nothing. */
async function userCreds(
  authority: BusAuthority,
  name = "user",
): Promise<{ keys: UserKeys; jwt: string; creds: Uint8Array }> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name,
    publicKey: keys.publicKey,
    permissions: { pub: { allow: [] }, sub: { allow: [] } },
  });
  return { keys, jwt, creds: credsFor(jwt, keys.seed) };
}

void describe("credsAuthenticator", () => {
  it("gives the JWT, the public nkey and the signature nats.js gives, for many keys and nonces", async () => {
    const authority = await createAuthority();
    for (let i = 0; i < 20; i++) {
      const { keys, jwt, creds } = await userCreds(authority, `user-${i}`);
      const nonce = randomBytes(1 + (i % 16)).toString("base64url");
      const ours = credsAuthenticator(creds)(nonce);
      assert.deepEqual(ours, natsCredsAuthenticator(creds)(nonce));
      assert.deepEqual(ours, { jwt, nkey: keys.publicKey, sig: (ours as { sig: string }).sig });
      // Read again from a function at each (re)connect, as a creds file rewritten on disk is.
      assert.deepEqual(credsAuthenticator(() => creds)(nonce), ours);
    }
  });

  it("signs nothing when the server sends no nonce, as nats.js does", async () => {
    const { creds } = await userCreds(await createAuthority());
    assert.deepEqual(credsAuthenticator(creds)(), natsCredsAuthenticator(creds)());
  });

  it("refuses contents that are not a user's creds, and a seed whose checksum is wrong", async () => {
    assert.throws(
      () => credsAuthenticator(new TextEncoder().encode("no creds here"))("n"),
      /unable to parse credentials/,
    );
    const { keys, creds } = await userCreds(await createAuthority());
    const text = new TextDecoder().decode(creds);
    // One character of the seed's key changed: its checksum no longer holds.
    const other = keys.seed[20] === "A" ? "B" : "A";
    const damaged = text.replace(keys.seed, `${keys.seed.slice(0, 20)}${other}${keys.seed.slice(21)}`);
    assert.throws(
      () => credsAuthenticator(new TextEncoder().encode(damaged))("n"),
      /unable to parse credentials/,
    );
  });
});
