// A provider's status says where it serves its consumers (its admin URL's host and port, as the
// harness is given it), and the answer stays what the tool's schema accepts; without it, it says
// nothing of it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { statusReportSchema } from "@mesh/manifest";
import { makeFixture } from "./harness-fixture.ts";

void describe("a provider's status", () => {
  void it("says where it serves when the harness is given it, in an answer the schema accepts", async () => {
    const f = await makeFixture({ serves: { host: "127.0.0.1", port: 5433 } }, ["app_one"]);
    try {
      await f.periodic();
      const status = f.handle.status();
      assert.deepEqual(status.serves, { host: "127.0.0.1", port: 5433 });
      const parsed = statusReportSchema.safeParse(JSON.parse(JSON.stringify(status)));
      assert.equal(parsed.success, true);
      assert.deepEqual(parsed.data?.serves, { host: "127.0.0.1", port: 5433 });
    } finally {
      await f.close();
    }
  });

  void it("says nothing of where it serves when it was not told", async () => {
    const f = await makeFixture({}, ["app_one"]);
    try {
      await f.periodic();
      assert.equal("serves" in f.handle.status(), false);
    } finally {
      await f.close();
    }
  });
});
