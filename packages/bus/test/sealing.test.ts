import assert from "node:assert/strict";
import { describe, it } from "node:test";
import sodium from "libsodium-wrappers";
import { InvalidPublicKeyError, mintPassword, newNodeKeys, seal, SealError, unseal } from "@mesh/bus";
import { hsalsa20, PASSWORD_BYTES } from "../src/sealing.ts";

void describe("sealing", () => {
  void it("a secret sealed to a node opens with that node's keys", async () => {
    const node = await newNodeKeys();
    const password = mintPassword();
    const box = await seal(password, node.publicKey);
    assert.match(box, /^[A-Za-z0-9_-]+$/);
    assert.equal(box.includes(password), false);
    assert.equal(await unseal(box, node), password);
  });

  void it("sealing the same secret twice gives different boxes that both open", async () => {
    const node = await newNodeKeys();
    const [a, b] = [await seal("same", node.publicKey), await seal("same", node.publicKey)];
    assert.notEqual(a, b);
    assert.equal(await unseal(a, node), "same");
    assert.equal(await unseal(b, node), "same");
  });

  void it("a box is libsodium's sealed box: crypto_box_seal_open opens it, and each has its own ephemeral key", async () => {
    await sodium.ready;
    const node = await newNodeKeys();
    const keys = [node.publicKey, node.privateKey].map((k) => new Uint8Array(Buffer.from(k, "base64url")));
    const message = "ünïcode and a password: " + mintPassword();
    const boxes = await Promise.all([1, 2, 3].map(() => seal(message, node.publicKey)));
    const bytes = boxes.map((b) => new Uint8Array(Buffer.from(b, "base64url")));
    for (const box of bytes) {
      assert.equal(box.length, sodium.crypto_box_SEALBYTES + Buffer.byteLength(message));
      const opened = sodium.crypto_box_seal_open(box, keys[0] as Uint8Array, keys[1] as Uint8Array);
      assert.equal(new TextDecoder().decode(opened), message);
    }
    const ephemerals = new Set(bytes.map((b) => Buffer.from(b.subarray(0, 32)).toString("hex")));
    assert.equal(ephemerals.size, 3);
  });

  void it("makes a box's key as crypto_box_beforenm does: HSalsa20 of the X25519 shared secret", async () => {
    await sodium.ready;
    for (let i = 0; i < 20; i++) {
      const [a, b] = [sodium.crypto_box_keypair(), sodium.crypto_box_keypair()];
      const shared = sodium.crypto_scalarmult(a.privateKey, b.publicKey);
      assert.deepEqual(hsalsa20(shared), sodium.crypto_box_beforenm(b.publicKey, a.privateKey));
    }
    assert.throws(() => hsalsa20(new Uint8Array(31)), RangeError);
  });

  void it("a box changed anywhere is refused as tampered with, never opened", async () => {
    const node = await newNodeKeys();
    const box = await seal("correct horse battery staple", node.publicKey);
    const bytes = Buffer.from(box, "base64url");
    for (const at of [0, 31, 32, 47, bytes.length - 1]) {
      const changed = Buffer.from(bytes);
      changed[at] = (changed[at] ?? 0) ^ 0x01;
      await assert.rejects(unseal(changed.toString("base64url"), node), (err: unknown) => {
        assert.ok(err instanceof SealError);
        assert.equal(err.failure, "tampered-or-not-for-this-node");
        assert.match(err.message, /tampered with or is not addressed to this node/);
        assert.equal(err.message.includes("correct horse"), false);
        return true;
      });
    }
  });

  void it("a box sealed to another node is refused", async () => {
    const [mine, theirs] = [await newNodeKeys(), await newNodeKeys()];
    const box = await seal("for them", theirs.publicKey);
    await assert.rejects(unseal(box, mine), (err: unknown) => {
      assert.ok(err instanceof SealError);
      assert.equal(err.publicKey, mine.publicKey);
      assert.match(err.message, /not addressed to this node/);
      return true;
    });
  });

  void it("a box that is not base64url or too short is refused as malformed", async () => {
    const node = await newNodeKeys();
    for (const box of ["", "not base64!", "AAAA", "a+b/"]) {
      await assert.rejects(unseal(box, node), (err: unknown) => {
        assert.ok(err instanceof SealError);
        assert.equal(err.failure, "malformed");
        return true;
      });
    }
  });

  void it("refuses to seal to something that is not a public key", async () => {
    const node = await newNodeKeys();
    await assert.rejects(seal("x", node.publicKey.slice(1)), InvalidPublicKeyError);
    await assert.rejects(seal("x", "hello world"), InvalidPublicKeyError);
  });

  void it("minted passwords carry 192 bits, are URL-safe and are never the same", () => {
    assert.ok(PASSWORD_BYTES * 8 >= 192);
    const minted = new Set<string>();
    for (let i = 0; i < 10_000; i++) {
      const password = mintPassword();
      assert.match(password, /^[A-Za-z0-9_-]{32}$/);
      assert.equal(encodeURIComponent(password), password);
      minted.add(password);
    }
    assert.equal(minted.size, 10_000);
  });
});
