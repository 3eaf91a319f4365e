// The authority's keys derive their key pair once and sign natively: the signatures, public and
// private keys must be nkeys' own, byte for byte, or the server would refuse every JWT they sign.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { createAccount, createOperator, createUser, fromPublic } from "@nats-io/nkeys";
import { signingKey } from "../src/signing-keys.ts";

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
