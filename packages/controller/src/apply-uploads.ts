// A fleet applied with its manifests can be larger than one NATS message (1 MiB by default). Such an
// apply comes in parts, as deliveries and the stored fleet are kept: `mesh apply` sends the fleet's
// source in parts on the apply subject, each answered when taken, then the apply itself naming the
// upload, how many parts it has and the sha256 of their text. The leading controller keeps the
// parts it was sent for a few minutes, a bounded number at once, and applies only a whole upload
// whose text matches its digest.
import { createHash } from "node:crypto";

/** How many characters of the source one part carries: with JSON's escaping, well under 1 MiB. */
export const APPLY_PART_CHARS = 128 * 1024;
/** The most parts one upload may have (with `APPLY_PART_CHARS`, 32 Mi characters). */
export const APPLY_MAX_PARTS = 256;
/** How many uploads are kept at once; a newer one drops the oldest. */
export const APPLY_MAX_UPLOADS = 4;
/** How long the parts of an upload not applied are kept. */
export const APPLY_UPLOAD_TTL_MS = 5 * 60_000;

const UPLOAD_ID = /^[A-Za-z0-9_-]{8,64}$/;

/** An upload's part or its apply that cannot be taken; said to the requester as it is. */
export class ApplyUploadError extends Error {
  override name = "ApplyUploadError";
}

interface Upload {
  readonly parts: (string | undefined)[];
  readonly started: number;
}

/** The parts of the uploads being sent, by upload id. */
export class ApplyUploads {
  readonly #uploads = new Map<string, Upload>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Takes part `part` (from 0) of `parts` of upload `id`.
   * @throws ApplyUploadError for an id, index, count or text that is not one, or a count that
   * differs from the upload's first part's.
   */
  take(id: unknown, part: unknown, parts: unknown, text: unknown): void {
    this.#expire();
    const upload = uploadId(id);
    if (typeof parts !== "number" || !Number.isSafeInteger(parts) || parts < 1 || parts > APPLY_MAX_PARTS)
      throw new ApplyUploadError(`an apply's parts must be a count from 1 to ${APPLY_MAX_PARTS}`);
    if (typeof part !== "number" || !Number.isSafeInteger(part) || part < 0 || part >= parts)
      throw new ApplyUploadError(`part ${String(part)} is not one of the upload's ${parts}`);
    if (typeof text !== "string" || text.length > APPLY_PART_CHARS)
      throw new ApplyUploadError(`an apply's part must be text of at most ${APPLY_PART_CHARS} characters`);
    let kept = this.#uploads.get(upload);
    if (kept === undefined) {
      kept = { parts: new Array<string | undefined>(parts).fill(undefined), started: this.#now() };
      this.#uploads.set(upload, kept);
      while (this.#uploads.size > APPLY_MAX_UPLOADS) {
        const oldest = this.#uploads.keys().next().value;
        if (oldest === undefined) break;
        this.#uploads.delete(oldest);
      }
    }
    if (kept.parts.length !== parts)
      throw new ApplyUploadError(`upload ${upload} has ${kept.parts.length} parts, not ${parts}`);
    kept.parts[part] = text;
  }

  /**
   * The text of upload `id`, whole, when its `parts` are all here and match `sha256`; the upload is
   * then forgotten (an apply is sent once).
   * @throws ApplyUploadError naming what is missing or does not match: send the apply again.
   */
  finish(id: unknown, parts: unknown, sha256: unknown): string {
    this.#expire();
    const upload = uploadId(id);
    const kept = this.#uploads.get(upload);
    if (kept === undefined)
      throw new ApplyUploadError(
        `no part of upload ${upload} is here (a controller that took up the lead since, or parts kept ` +
          `past ${APPLY_UPLOAD_TTL_MS / 60_000} minutes): nothing was applied; apply again`,
      );
    this.#uploads.delete(upload);
    const missing = kept.parts.flatMap((p, i) => (p === undefined ? [i] : []));
    if (kept.parts.length !== parts || missing.length > 0)
      throw new ApplyUploadError(
        `upload ${upload} is not whole (${missing.length} of ${kept.parts.length} parts missing): ` +
          `nothing was applied; apply again`,
      );
    const text = kept.parts.join("");
    if (createHash("sha256").update(text).digest("hex") !== sha256)
      throw new ApplyUploadError(
        `upload ${upload} does not match its sha256: nothing was applied; apply again`,
      );
    return text;
  }

  #expire(): void {
    const now = this.#now();
    for (const [id, u] of this.#uploads) if (now - u.started > APPLY_UPLOAD_TTL_MS) this.#uploads.delete(id);
  }
}

function uploadId(id: unknown): string {
  if (typeof id !== "string" || !UPLOAD_ID.test(id))
    throw new ApplyUploadError("an apply's upload must be named by 8 to 64 letters, digits, - or _");
  return id;
}

/** Splits `text` into the parts an upload sends. */
export function applyParts(text: string): string[] {
  const parts: string[] = [];
  for (let at = 0; at < text.length; at += APPLY_PART_CHARS)
    parts.push(text.slice(at, at + APPLY_PART_CHARS));
  return parts.length === 0 ? [""] : parts;
}
