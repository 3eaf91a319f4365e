import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { InvalidDurationError, MAX_DURATION_MS, formatDuration, parseDuration } from "@mesh/sdk";

describe("parseDuration", () => {
  it("reads each unit into milliseconds", () => {
    assert.equal(parseDuration("250ms"), 250);
    assert.equal(parseDuration("5s"), 5_000);
    assert.equal(parseDuration("90s"), 90_000);
    assert.equal(parseDuration("1m"), 60_000);
    assert.equal(parseDuration("1h"), 3_600_000);
  });

  it("adds up combined units such as 1h30m and 1m30s500ms", () => {
    assert.equal(parseDuration("1h30m"), 5_400_000);
    assert.equal(parseDuration("1m30s500ms"), 90_500);
  });

  it("reads fractions and ignores surrounding spaces", () => {
    assert.equal(parseDuration("1.5s"), 1_500);
    assert.equal(parseDuration("  5s\n"), 5_000);
  });

  it("refuses a plain number and says how to write one with a unit", () => {
    assert.throws(
      () => parseDuration("5"),
      (err: unknown) =>
        err instanceof InvalidDurationError &&
        err.text === "5" &&
        /ambiguous/.test(err.message) &&
        /5s/.test(err.message),
    );
  });

  it("refuses zero, negative, empty and unit-less or unknown forms", () => {
    for (const text of ["0s", "0ms", "-5s", "", "   ", "5 s", "5sec", "1m30", "s", "5d", "1e3ms", "0.1ms"]) {
      assert.throws(() => parseDuration(text), InvalidDurationError, text);
    }
  });

  it("refuses a duration longer than a timer can wait", () => {
    assert.throws(() => parseDuration("600h"), /longer than a timer can wait/);
    assert.equal(parseDuration(`${MAX_DURATION_MS}ms`), MAX_DURATION_MS);
  });
});

describe("formatDuration", () => {
  it("writes the largest units first and drops empty ones", () => {
    assert.equal(formatDuration(5_400_000), "1h30m");
    assert.equal(formatDuration(5_000), "5s");
    assert.equal(formatDuration(250), "250ms");
    assert.equal(formatDuration(1_500), "1s500ms");
    assert.equal(formatDuration(0), "0ms");
  });

  it("writes what parseDuration reads back to the same milliseconds", () => {
    for (const ms of [1, 999, 1_000, 61_001, 3_600_000, 86_399_999, MAX_DURATION_MS]) {
      assert.equal(parseDuration(formatDuration(ms)), ms);
    }
  });
});
