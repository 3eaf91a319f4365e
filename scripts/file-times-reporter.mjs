// A node:test reporter beside the spec one: at the end it prints how long each test file took
// (slowest first), so a file that grows slow is seen in every run, and one plain closing line,
// "N passed, N failed, N skipped", that scripts and CI read.
import { relative } from "node:path";

export default async function* fileTimes(source) {
  const files = new Map();
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  for await (const event of source) {
    const data = event.data ?? {};
    // A file run in its own process is reported as a test named by its path.
    const isFile = data.file !== undefined && data.name === data.file && data.nesting === 0;
    if (event.type === "test:complete" && isFile) {
      files.set(data.file, { ms: data.details?.duration_ms ?? 0, ok: data.details?.passed !== false });
      continue;
    }
    if (isFile || data.details?.type === "suite") continue;
    if (event.type === "test:pass") {
      if (data.skip !== undefined || data.todo !== undefined) skipped++;
      else passed++;
    } else if (event.type === "test:fail") failed++;
  }
  const rows = [...files].sort((a, b) => b[1].ms - a[1].ms);
  yield `\n== time per test file (${rows.length} files)\n`;
  for (const [file, { ms, ok }] of rows) {
    yield `${(ms / 1000).toFixed(1).padStart(7)} s  ${ok ? "   " : "✗  "}${relative(process.cwd(), file)}\n`;
  }
  yield `\n${passed} passed, ${failed} failed, ${skipped} skipped\n`;
}
