// Plain-text tables and sizes for people; `--json` gives scripts the raw answers instead.

/** Colours a table's cell (see `paintFor`); given the cell's text, its row (0: the first under the header) and column. */
export type CellStyle = (cell: string, row: number, column: number) => string;

/**
 * Rows as aligned columns under a header; the last column is not padded. Newlines become spaces.
 * `style` colours a data cell after its width is measured, so colours never shift the columns.
 */
export function formatTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  style?: CellStyle,
): string {
  const clean = (cell: string): string => cell.replace(/\s*\n\s*/g, " ");
  const all = [header, ...rows].map((row) => row.map(clean));
  const widths = header.map((_, i) => Math.max(...all.map((row) => (row[i] ?? "").length)));
  return all
    .map((row, r) => {
      const last = row.length - 1;
      const cells = row.map((cell, i) => {
        const coloured = r === 0 || style === undefined ? cell : style(cell, r - 1, i);
        return i === last ? coloured : coloured + " ".repeat(Math.max(0, (widths[i] ?? 0) - cell.length));
      });
      // Only the padding at the end of the line goes: a coloured last cell keeps its closing escape.
      return cells.join("  ").replace(/ +$/, "");
    })
    .join("\n");
}

/** A value as `--json` prints it: indented by two spaces, one newline at the end. */
export function formatJson(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

const UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"] as const;

/** A byte count in binary units for people: `512 bytes`, `7.5 MiB`, `1.2 GiB`. */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) return `${bytes} ${bytes === 1 ? "byte" : "bytes"}`;
  const shown = value >= 100 ? value.toFixed(0) : value.toFixed(1).replace(/\.0$/, "");
  return `${shown} ${UNITS[unit]}`;
}

/** An ISO 8601 time shown to the second, in UTC; `-` for none; anything else as it is. */
export function formatTime(iso: string | null | undefined): string {
  if (iso === null || iso === undefined || iso === "") return "-";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  return at.toISOString().replace(/\.\d{3}Z$/, "Z");
}

export { maskDeep, maskUrls } from "@mesh/sdk/redact";
