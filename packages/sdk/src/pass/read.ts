// Reading what is asked: the contributions file (read again when it may have changed, parsed again
// only when its text did), which files the watcher said changed, and from that, which consumers
// this pass looks at.

import type { Contribution, ContributionsRead } from "../contributions-file.ts";
import { parseContributionsYielding, readContributionsText } from "../contributions-file.ts";
import { YieldTimer, yieldToEventLoop } from "../concurrency.ts";
import { watchKey } from "../watcher.ts";
import type { PassContext, PassKind } from "./context.ts";

/**
 * What a pass is asked: the file could not be used (`problem`), or the entries to look at (null:
 * none changed and none is unsettled, so nothing is looked at).
 */
export type Asked =
  | { readonly ok: false; readonly problem: string }
  | { readonly ok: true; readonly lookAt: readonly Contribution[] | null };

/** Reads the contributions file and the watcher's news into the book. */
export class ReadStage {
  /** Files the watcher said changed since the last pass took them. */
  #dirty = new Set<string>();
  /** Which logins read each secret file (by `watchKey`). */
  #bySecret = new Map<string, string | string[]>();
  /** The last contributions file read: its text and what it gave. */
  #raw: string | undefined;
  #read: ContributionsRead | undefined;
  readonly #receivesKey: string;

  constructor(private readonly ctx: PassContext) {
    this.#receivesKey = watchKey(ctx.receives);
  }

  /** A watched file changed: the next pass reads it. */
  changed(path: string): void {
    this.#dirty.add(path);
  }

  async run(kind: PassKind, now: number): Promise<Asked> {
    const dirty = this.#dirty;
    this.#dirty = new Set();
    for (const path of this.ctx.watcher?.reopen() ?? []) dirty.add(path);
    const { read, changed } = await this.#readFile(kind, dirty);
    if (!read.ok) return read;
    return { ok: true, lookAt: this.#lookAt(read.given, changed, dirty, now) };
  }

  /**
   * What this pass looks at: entries that changed, secrets that changed, and whoever is not yet
   * applied as asked. Unwatched, that is everyone.
   */
  #lookAt(
    given: readonly Contribution[],
    changed: readonly string[],
    dirty: ReadonlySet<string>,
    now: number,
  ): readonly Contribution[] | null {
    const { book, watcher } = this.ctx;
    if (watcher === undefined) return given;
    const todo = new Set(changed);
    for (const login of book.unsettled()) todo.add(login);
    for (const login of book.rotating()) {
      const rotation = book.get(login)?.rotation;
      if (rotation === undefined || rotation.until <= now || rotation.password === undefined) todo.add(login);
    }
    const touched = (path: string): void => {
      const logins = this.#bySecret.get(path);
      if (typeof logins === "string") todo.add(logins);
      else if (logins) for (const login of logins) todo.add(login);
    };
    for (const path of dirty) touched(path);
    for (const path of watcher.unwatched()) touched(path);
    if (todo.size === 0) return null;
    return given.filter((g) => todo.has(g.as));
  }

  /**
   * The contributions file as it is now: read again at each periodic pass and when the watcher
   * said it changed (or it is not watched), and parsed again only when its text changed. Returns the
   * logins whose entry is new or changed.
   */
  async #readFile(
    kind: PassKind,
    dirty: ReadonlySet<string>,
  ): Promise<{ read: ContributionsRead; changed: string[] }> {
    const { book, watcher, receives, iface, secretsDir } = this.ctx;
    // A periodic pass reads the file whatever the watcher said: a change it missed is seen there.
    const unchanged =
      kind === "watch" &&
      this.#read !== undefined &&
      watcher !== undefined &&
      watcher.watching(this.#receivesKey) &&
      !dirty.has(this.#receivesKey);
    if (unchanged && this.#read) return { read: this.#read, changed: [] };
    const text = await readContributionsText(receives);
    if (!text.ok) {
      this.#raw = undefined;
      this.#read = text;
      return { read: text, changed: [] };
    }
    if (text.raw === this.#raw && this.#read) return { read: this.#read, changed: [] };
    const read = await parseContributionsYielding(text.raw, receives, iface);
    this.#raw = text.raw;
    this.#read = read;
    if (!read.ok) return { read, changed: [] };

    const changed: string[] = [];
    const asked = new Set<string>();
    const bySecret = new Map<string, string | string[]>();
    const turns = new YieldTimer();
    for (const g of read.given) {
      if (turns.due()) await yieldToEventLoop();
      asked.add(g.as);
      if (book.asked(g)) changed.push(g.as);
      // The entry's own string where it is the same (nearly always): one string per consumer, not two.
      const named = watchKey(g.secret);
      const key = named === g.secret ? g.secret : named;
      const was = bySecret.get(key);
      if (was === undefined) bySecret.set(key, g.as);
      else if (typeof was === "string") bySecret.set(key, [was, g.as]);
      else was.push(g.as);
    }
    const gone: string[] = [];
    for (const r of book.records()) if (r.asked !== undefined && !asked.has(r.login)) gone.push(r.login);
    for (const login of gone) book.unasked(login);
    this.#bySecret = bySecret;
    // Only secrets that can be read are watched: an entry naming /etc/shadow or /dev/zero sets no
    // watch on /etc or /dev.
    watcher?.watchFiles([
      receives,
      ...read.given.map((g) => g.secret).filter((secret) => secretsDir.mayHold(secret)),
    ]);
    return { read, changed };
  }
}
