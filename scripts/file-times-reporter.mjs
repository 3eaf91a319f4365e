// A node:test reporter beside the spec one: at the end it prints how long each test file took
// (slowest first), so a file that grows slow is seen in every run, then each failed test's name and
// the start of its error (a CI log is often read from its tail only, far from the spec reporter's
// own account), and one plain closing line, "N passed, N failed, N skipped", that scripts and CI read.
import { relative } from "node:path";

export default async function* fileTimes(source) {
  const files = new Map();
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  const failures = [];
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
    } else if (event.type === "test:fail") {
      failed++;
      failures.push({ name: data.name, file: data.file, error: data.details?.error });
    }
  }
  const rows = [...files].sort((a, b) => b[1].ms - a[1].ms);
  yield `\n== time per test file (${rows.length} files)\n`;
  for (const [file, { ms, ok }] of rows) {
    yield `${(ms / 1000).toFixed(1).padStart(7)} s  ${ok ? "   " : "✗  "}${relative(process.cwd(), file)}\n`;
  }
  if (failures.length > 0) yield `\n== failed tests (${failures.length})\n`;
  for (const { name, file, error } of failures.slice(0, 10)) {
    const where = file === undefined ? "" : ` (${relative(process.cwd(), file)})`;
    yield `\n✗ ${name}${where}\n${indent(describe(error))}\n`;
  }
  yield `\n${passed} passed, ${failed} failed, ${skipped} skipped\n`;
}

/**
 * What the test threw (node:test wraps it, as the cause of its own error), at most 40 lines and
 * 4,000 characters.
 */
function describe(error) {
  if (error === undefined || error === null) return "(no error was reported)";
  const thrown = error.cause ?? error;
  const text = String(thrown.message ?? thrown).trimEnd();
  const lines = text.split("\n");
  const kept = lines.slice(0, 40).join("\n").slice(0, 4_000);
  return kept.length < text.length ? `${kept}\n…` : kept;
}

function indent(text) {
  return text.replace(/^/gm, "    ");
}
