import assert from "node:assert/strict";
import { test } from "node:test";

import { Coalescer, coalesce } from "../../static/js/task/stream.js";

const delta = (seq, text, attempt = 1) => ({ seq, attempt, text, starts: false });
const start = (seq, attempt) => ({ seq, attempt, text: "", starts: true });

test("text of one attempt becomes one write", () => {
  assert.deepEqual(coalesce([delta(1, "a"), delta(2, "b"), delta(3, "c")], 1), {
    steps: [{ text: "abc" }],
    seq: 3,
  });
});

test("a later attempt's start splits the text, in event order", () => {
  const items = [delta(4, "old"), start(5, 2), delta(6, "new")];
  assert.deepEqual(coalesce(items, 1).steps, [{ text: "old" }, { attempt: 2 }, { text: "new" }]);
});

test("an attempt already shown does not start again", () => {
  assert.deepEqual(coalesce([start(3, 2), delta(4, "x", 2)], 2).steps, [{ text: "x" }]);
  assert.deepEqual(coalesce([], 2), { steps: [], seq: 0 });
});

/** The streamed text, as the page holds it, and a frame the test runs by hand. */
function page() {
  const text = {
    attempt: 1,
    data: "",
    seq: 0,
    earlier: [],
    write(words) {
      this.data += words;
    },
    startAttempt(number) {
      if (this.data) {
        this.earlier.push(this.data);
      }
      this.data = "";
      this.attempt = number;
    },
  };
  const frames = [];
  const stats = { flushes: 0, textWrites: 0 };
  let writes = 0;
  const coalescer = new Coalescer(text, {
    requestFrame: (callback) => frames.push(callback),
    stats,
    written: () => {
      writes += 1;
    },
  });
  const frame = () => frames.splice(0).forEach((callback) => callback());
  return { text, frames, stats, coalescer, frame, writes: () => writes };
}

test("the first text is written at once, the rest once per frame", () => {
  const { text, frames, stats, coalescer, frame, writes } = page();
  coalescer.push(delta(1, "Hel"));
  assert.equal(text.data, "Hel");
  assert.equal(text.seq, 1);
  for (let seq = 2; seq <= 50; seq += 1) {
    coalescer.push(delta(seq, "l"));
  }
  assert.equal(text.data, "Hel");
  assert.equal(frames.length, 1); // one frame asked for, however much arrives
  frame();
  assert.equal(text.data, `Hel${"l".repeat(49)}`);
  assert.equal(text.seq, 50);
  assert.equal(stats.textWrites, 2);
  assert.equal(writes(), 2);
});

test("a new attempt moves the text so far aside before its own text", () => {
  const { text, coalescer, frame } = page();
  coalescer.push(delta(1, "first try"));
  coalescer.push(start(2, 2));
  coalescer.push(delta(3, "second", 2));
  frame();
  assert.deepEqual(text.earlier, ["first try"]);
  assert.equal(text.data, "second");
  assert.equal(text.attempt, 2);
});
