import assert from "node:assert/strict";
import { test } from "node:test";

import { announcement } from "../../static/js/task/announce.js";

const state = (status, detail = "", reason = "") => ({ status, detail, reason });

test("the start and each end are said once", () => {
  assert.equal(
    announcement(state("queued", "next in line"), state("running", "writing the report")),
    "Started: the report appears below as it is written."
  );
  assert.equal(announcement(state("running", "writing the report"), state("running", "x")), "");
  assert.equal(announcement(state("finalizing"), state("succeeded")), "The report is ready.");
  assert.equal(
    announcement(state("running"), state("cancelled", "", "Cancelled by you.")),
    "The report was stopped. Cancelled by you."
  );
  assert.equal(
    announcement(state("running"), state("failed", "provider error", "The provider failed.")),
    "The report failed. The provider failed."
  );
  assert.equal(announcement(state("failed"), state("failed")), "");
});

test("a queued task's place in line is said when it moves, and only then", () => {
  assert.equal(
    announcement(state("queued", "3rd in line"), state("queued", "next in line")),
    "Queued — next in line."
  );
  assert.equal(announcement(state("queued", "next in line"), state("queued", "next in line")), "");
});
