// The authority's keys derive their key pair once and sign natively: the signatures, public and
// private keys must be nkeys' own, byte for byte, or the server would refuse every JWT they sign.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { createAccount, createOperator, createUser, fromPublic, fromSeed } from "@nats-io/nkeys";
import { credsFor, InvalidUserKeyError } from "../src/authority.ts";
import { newUserKeyPair, signingKey } from "../src/signing-keys.ts";

void describe("a signing key", () => {
  void it("signs, and names its keys, exactly as nkeys does", () => {
    for (const kp of [createOperator(), createAccount(), createUser()]) {
      const fast = signingKey(kp);
      assert.equal(fast.getPublicKey(), kp.getPublicKey());
      assert.deepEqual(fast.getPrivateKey(), kp.getPrivateKey());
      assert.deepEqual(fast.getSeed(), kp.getSeed());
      for (const size of [0, 1, 64, 1000]) {
        const input = randomBytes(size);
        const sig = fast.sign(input);
        assert.deepEqual(sig, kp.sign(input));
        assert.equal(fromPublic(kp.getPublicKey()).verify(input, sig), true);
        assert.equal(fast.verify(input, sig), true);
      }
    }
  });

  void it("is the same key when wrapped twice", () => {
    const once = signingKey(createAccount());
    assert.equal(signingKey(once), once);
  });
});

void describe("a new user key pair", () => {
  void it("has the public key nkeys derives from its seed", () => {
    for (let i = 0; i < 50; i++) {
      const { publicKey, seed } = newUserKeyPair();
      assert.match(publicKey, /^U[A-Z2-7]{55}$/);
      assert.match(seed, /^SU[A-Z2-7]{56}$/);
      assert.equal(fromSeed(new TextEncoder().encode(seed)).getPublicKey(), publicKey);
    }
  });

  void it("is a different pair each time", () => {
    const seen = new Set(Array.from({ length: 20 }, () => newUserKeyPair().publicKey));
    assert.equal(seen.size, 20);
  });

  void it("goes into a creds file, and a seed of another kind does not", () => {
    const { seed } = newUserKeyPair();
    assert.match(new TextDecoder().decode(credsFor("a.b.c", seed)), new RegExp(seed));
    const account = new TextDecoder().decode(createAccount().getSeed());
    assert.throws(() => credsFor("a.b.c", account), InvalidUserKeyError);
    // A character inside the seed (the last one carries padding bits too): its checksum no longer holds.
    const damaged = `${seed.slice(0, 10)}${seed[10] === "A" ? "B" : "A"}${seed.slice(11)}`;
    assert.throws(() => credsFor("a.b.c", damaged), InvalidUserKeyError);
  });
});
