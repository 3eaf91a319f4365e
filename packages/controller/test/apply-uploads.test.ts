// The parts of an apply too large for one bus message: kept by upload until its apply, which gets
// the text only when every part is there and matches the digest it names; bounded in number and
// time, so parts never sent on fill nothing.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import {
  APPLY_MAX_UPLOADS,
  APPLY_PART_CHARS,
  APPLY_UPLOAD_TTL_MS,
  ApplyUploadError,
  ApplyUploads,
  applyParts,
} from "../src/apply-uploads.ts";

const sha = (text: string): string => createHash("sha256").update(text).digest("hex");

void describe("an apply in parts", () => {
  const text = "x".repeat(APPLY_PART_CHARS * 2 + 5) + "é🙂";
  const parts = applyParts(text);

  void it("gives back the text whole, whatever order its parts came in, once", () => {
    assert.equal(parts.length, 3);
    const uploads = new ApplyUploads();
    for (const i of [2, 0, 1]) uploads.take("upload-one", i, parts.length, parts[i]);
    assert.equal(uploads.finish("upload-one", parts.length, sha(text)), text);
    assert.throws(
      () => uploads.finish("upload-one", parts.length, sha(text)),
      /no part of upload upload-one/,
    );
  });

  void it("refuses an apply with a part missing, or whose text does not match its digest", () => {
    const uploads = new ApplyUploads();
    uploads.take("upload-two", 0, 3, parts[0]);
    uploads.take("upload-two", 2, 3, parts[2]);
    assert.throws(() => uploads.finish("upload-two", 3, sha(text)), /1 of 3 parts missing/);
    for (const [i, p] of parts.entries()) uploads.take("upload-two", i, 3, p);
    assert.throws(() => uploads.finish("upload-two", 3, sha("other")), /does not match its sha256/);
  });

  void it("refuses a part that is not one: a bad id, index, count or size", () => {
    const uploads = new ApplyUploads();
    assert.throws(() => uploads.take("../x", 0, 1, ""), ApplyUploadError);
    assert.throws(() => uploads.take("upload-bad", 1, 1, ""), /not one of the upload's 1/);
    assert.throws(() => uploads.take("upload-bad", 0, 100_000, ""), /count from 1/);
    assert.throws(() => uploads.take("upload-bad", 0, 1, "y".repeat(APPLY_PART_CHARS + 1)), /at most/);
    uploads.take("upload-bad", 0, 2, "a");
    assert.throws(() => uploads.take("upload-bad", 1, 3, "b"), /has 2 parts, not 3/);
  });

  void it("keeps a few uploads at once, each a few minutes", () => {
    let now = 0;
    const uploads = new ApplyUploads(() => now);
    for (let i = 0; i <= APPLY_MAX_UPLOADS; i++) uploads.take(`upload-${i}x`, 0, 1, "t");
    assert.throws(
      () => uploads.finish("upload-0x", 1, sha("t")),
      /no part of upload/,
      "the oldest was dropped",
    );
    assert.equal(uploads.finish("upload-1x", 1, sha("t")), "t");
    now = APPLY_UPLOAD_TTL_MS + 1;
    assert.throws(() => uploads.finish("upload-2x", 1, sha("t")), /no part of upload/, "past its time");
  });
});
