import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type Node } from "yaml";
import { fieldPath } from "./problem.ts";

/** A key written twice in one mapping: YAML and JSON parsers would silently keep the last one. */
export interface DuplicateKey {
  /** Path of the mapping that holds the key twice. */
  readonly path: readonly (string | number)[];
  readonly key: string;
  /** Lines of every occurrence, in order. */
  readonly lines: readonly number[];
}

/**
 * Where each field of a YAML or JSON document was written, so that a problem found after parsing
 * (by a schema, or by checking a fleet) can still name its line. JSON is read as YAML for this:
 * a JSON document is YAML 1.2 flow, and the YAML parser keeps positions.
 */
export class SourcePositions {
  private constructor(
    /** Line of every field by dotted path (`modules.notes.node`): where its key is written. */
    readonly lines: ReadonlyMap<string, number>,
    readonly duplicates: readonly DuplicateKey[],
  ) {}

  /** Reads positions from a document already parsed with `counter`. */
  static of(doc: Document, counter: LineCounter): SourcePositions {
    const lines = new Map<string, number>();
    const duplicates: DuplicateKey[] = [];
    const lineAt = (offset: number): number => counter.linePos(offset).line;
    const walk = (node: unknown, path: (string | number)[]): void => {
      if (isAlias(node) || !node || typeof node !== "object") return;
      const range = (node as Node).range;
      const at = fieldPath(path);
      if (range && !lines.has(at)) lines.set(at, lineAt(range[0]));
      if (isMap(node)) {
        const seen = new Map<string, number[]>();
        for (const pair of node.items) {
          const keyNode = pair.key;
          const key = isScalar(keyNode) ? String(keyNode.value) : String(keyNode);
          const child = [...path, key];
          if (isScalar(keyNode) && keyNode.range) {
            const keyLine = lineAt(keyNode.range[0]);
            if (!lines.has(fieldPath(child))) lines.set(fieldPath(child), keyLine);
            seen.set(key, [...(seen.get(key) ?? []), keyLine]);
          }
          walk(pair.value, child);
        }
        for (const [key, where] of seen) if (where.length > 1) duplicates.push({ path, key, lines: where });
      } else if (isSeq(node)) {
        node.items.forEach((item, i) => walk(item, [...path, i]));
      }
    };
    walk(doc.contents, []);
    return new SourcePositions(lines, duplicates);
  }

  /** Parses `text` (YAML or JSON) only for positions; never throws. */
  static parse(text: string): SourcePositions {
    const counter = new LineCounter();
    const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: false, prettyErrors: false });
    return SourcePositions.of(doc, counter);
  }

  /** Line of the field at `path`, or of the nearest enclosing field written in the file. */
  lineOf(path: readonly PropertyKey[]): number | undefined {
    return nearestLine(this.lines, path);
  }

  /** Line (1-based) of a character offset in `text`. */
  static lineOfOffset(text: string, offset: number): number {
    let line = 1;
    for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
    return line;
  }
}

/** Line of the field at `path` in `lines`, or of the nearest enclosing field that has one. */
export function nearestLine(
  lines: ReadonlyMap<string, number>,
  path: readonly PropertyKey[],
): number | undefined {
  for (let n = path.length; n >= 0; n--) {
    const line = lines.get(fieldPath(path.slice(0, n)));
    if (line !== undefined) return line;
  }
  return undefined;
}
