import assert from "node:assert/strict";
import { test } from "node:test";

import { countable, planWords } from "../../static/js/upload/estimate.js";

const SIZES = { callChars: 357_000, partChars: 357_000, maxCalls: 64 };

test("documents that fit one call need no word", () => {
  assert.equal(planWords(100_000, SIZES), "");
});

test("documents past one call are said to be read in parts, before anything is sent", () => {
  const words = planWords(5_000_000, SIZES);
  assert.match(words, /^About 5,000,000 characters: more than one call of the model reads/);
  assert.match(words, /read in about 15 parts/);
  assert.match(planWords(5_000_000, SIZES, true), /^At least 5,000,000 characters/);
});

test("documents that one call of notes reads whole are read in two steps, not in 1 part", () => {
  const words = planWords(400_000, { callChars: 357_000, partChars: 450_000, maxCalls: 64 });
  assert.match(words, /so they will be read in two steps: notes on them first/);
  assert.doesNotMatch(words, /1 parts/);
});

test("documents past the calls a report may make are said to be refused", () => {
  assert.match(planWords(30_000_000, SIZES), /about 86 calls .* over the limit of 64, so they would be refused/);
});

test("only text and HTML are counted in the browser", () => {
  assert.deepEqual(
    ["a.TXT", "b.md", "c.html", "d.pdf", "e.docx"].map(countable),
    ["text", "text", "html", "", ""]
  );
});
