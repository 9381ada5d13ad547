import assert from "node:assert/strict";
import { test } from "node:test";

import { accept } from "../../static/js/task/batch.js";

const delta = (seq, text, attempt = 1) => ({ seq, attempt, text, starts: false });

test("a batch adds the items after the seq received, and ends at its own seq", () => {
  const batch = { seq: 9, items: [delta(5, "a"), delta(6, "b"), delta(7, "c")] };
  assert.deepEqual(accept(batch, 5), { items: [delta(6, "b"), delta(7, "c")], seq: 9 });
});

test("a heartbeat moves nothing", () => {
  assert.deepEqual(accept({ seq: 5, items: [] }, 5), { items: [], seq: 5 });
});

test("an older message is refused whole: its status lines would go back in time", () => {
  assert.equal(accept({ seq: 4, items: [delta(4, "a")] }, 5), null);
});
