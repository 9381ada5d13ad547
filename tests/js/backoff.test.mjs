import assert from "node:assert/strict";
import { test } from "node:test";

import { RETRY_CEILINGS_MS, retryDelay } from "../../static/js/task/backoff.js";

test("each try waits between half and all of its ceiling, doubling to 10 s", () => {
  const shortest = RETRY_CEILINGS_MS.map((_, n) => retryDelay(RETRY_CEILINGS_MS, n, () => 0));
  const longest = RETRY_CEILINGS_MS.map((_, n) => retryDelay(RETRY_CEILINGS_MS, n, () => 1));
  assert.deepEqual(longest, [500, 1000, 2000, 4000, 8000, 10000]);
  assert.deepEqual(shortest, [250, 500, 1000, 2000, 4000, 5000]);
});

test("the last ceiling repeats for every later try", () => {
  assert.equal(retryDelay(RETRY_CEILINGS_MS, 40, () => 1), 10000);
  assert.equal(retryDelay([100, 600000], 9, () => 0.5), 450000);
});
