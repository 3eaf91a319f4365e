import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  allReportsSubject,
  assertNodeName,
  deliverySubject,
  enrollSubject,
  inboxPrefix,
  inboxSubjects,
  isValidNodeName,
  kvReadSubjects,
  nodeDeliveriesBucket,
  reportSubject,
  toolSubject,
} from "@mesh/bus";
import {
  InvalidBucketNameError,
  InvalidIdentityError,
  InvalidNodeNameError,
  kvStreamName,
  nodeSubjects,
} from "../src/subjects.ts";
import { kvWriteSubjects } from "../src/kv-permissions.ts";

const HOSTILE = [
  "",
  "n1.n2",
  "n1.>",
  ">",
  "*",
  "n*",
  "n 1",
  "n1\n",
  "N1",
  "1n",
  "-n",
  "n_1",
  "n1\t",
  "a".repeat(42),
];

void describe("subjects", () => {
  void it("derives each control-plane subject from a node name", () => {
    assert.equal(deliverySubject("n1"), "mesh.node.n1.deliveries");
    assert.equal(toolSubject("web-2"), "mesh.node.web-2.tool");
    assert.equal(nodeSubjects("n1"), "mesh.node.n1.>");
    assert.equal(reportSubject("n1"), "mesh.report.n1");
    assert.equal(allReportsSubject(), "mesh.report.*");
    assert.equal(enrollSubject(), "mesh.enroll");
    assert.equal(inboxPrefix("n1"), "_INBOX.n1");
    assert.equal(inboxSubjects("n1"), "_INBOX.n1.>");
    assert.equal(nodeDeliveriesBucket("n1"), "mesh-node-n1");
    assert.equal(kvStreamName("mesh-node-n1"), "KV_mesh-node-n1");
  });

  void it("accepts names up to 41 characters of a-z, 0-9 and -, starting with a letter", () => {
    for (const name of ["n", "n1", "web-2", "a".repeat(41)]) assert.equal(assertNodeName(name), name);
  });

  void it("refuses a hostile node name before it can widen a subject", () => {
    for (const name of HOSTILE) {
      assert.equal(isValidNodeName(name), false, JSON.stringify(name));
      assert.throws(() => deliverySubject(name), InvalidNodeNameError);
      assert.throws(() => nodeSubjects(name), InvalidNodeNameError);
      assert.throws(() => toolSubject(name), InvalidNodeNameError);
      assert.throws(() => reportSubject(name), InvalidNodeNameError);
      assert.throws(() => nodeDeliveriesBucket(name), InvalidNodeNameError);
      assert.throws(() => inboxPrefix(name), InvalidIdentityError);
    }
    assert.equal(isValidNodeName(undefined), false);
    assert.throws(() => assertNodeName(42), /node name "42" is not valid/);
  });

  void it("builds KV permissions that name only the one bucket's stream", () => {
    const read = kvReadSubjects("mesh-node-n1");
    assert.ok(read.includes("$JS.API.STREAM.MSG.GET.KV_mesh-node-n1"));
    for (const subject of read) assert.match(subject, /KV_mesh-node-n1(\.>)?$/);
    assert.deepEqual(kvWriteSubjects("mesh-node-n1"), [...read, "$KV.mesh-node-n1.>"]);
    for (const bad of ["a.b", "a*", ">", "a b", ""])
      assert.throws(() => kvReadSubjects(bad), InvalidBucketNameError);
  });
});
