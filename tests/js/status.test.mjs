import assert from "node:assert/strict";
import { test } from "node:test";

import { StatusLine, timeLeftWords } from "../../static/js/task/status.js";
import { FakeClock } from "./fakes.mjs";

test("the time left is worded as the server words it", () => {
  assert.equal(timeLeftWords(20.4), "about 20 s left");
  assert.equal(timeLeftWords(200), "about 3 min left");
  assert.equal(timeLeftWords(0.5), "almost done");
  assert.equal(timeLeftWords(-5), "taking longer than expected");
});

/** A status line as the server renders it while the model reads, `etaS` seconds to go. */
function readingPage(etaS) {
  const eta = { dataset: { etaS: String(etaS) }, textContent: "about 30 s left" };
  const line = { dataset: { taskStatus: "running", elapsedMs: "5000" } };
  const elapsed = { hidden: true, textContent: "" };
  const found = {
    "[data-task-status]": line,
    "[data-elapsed]": elapsed,
    "#task-status [data-reading-eta]": eta,
  };
  return { eta, elapsed, root: { querySelector: (selector) => found[selector] ?? null } };
}

test("the reading's time left counts down between the server's lines", () => {
  const clock = new FakeClock();
  const page = readingPage(30);
  const status = new StatusLine(page.root, { now: clock.now, every: clock.setInterval });
  status.start(() => false);
  clock.advance(10_000);
  assert.equal(page.eta.textContent, "about 20 s left");
  assert.equal(page.elapsed.textContent, "submitted 15 s ago");
  clock.advance(25_000);
  assert.equal(page.eta.textContent, "taking longer than expected");
});
