import assert from "node:assert/strict";
import { test } from "node:test";

import { TabTitle } from "../../static/js/task/tab-title.js";

class FakePage extends EventTarget {
  title = "harbour.pdf · Reportline";
  hidden = false;

  show(hidden) {
    this.hidden = hidden;
    this.dispatchEvent(new Event("visibilitychange"));
  }
}

test("a task that ends in a hidden tab says so in the tab's title", () => {
  const page = new FakePage();
  const tab = new TabTitle(page, "harbour.pdf");
  page.show(true);

  tab.ended("succeeded");

  assert.equal(page.title, "✓ Done · harbour.pdf");
});

test("the page's own title comes back once the tab is looked at", () => {
  const page = new FakePage();
  const tab = new TabTitle(page, "harbour.pdf");
  page.show(true);
  tab.ended("failed");
  assert.equal(page.title, "✕ Failed · harbour.pdf");

  page.show(false);

  assert.equal(page.title, "harbour.pdf · Reportline");
});

test("a task that ends while the reader watches leaves the title alone", () => {
  const page = new FakePage();
  const tab = new TabTitle(page, "harbour.pdf");

  tab.ended("cancelled");

  assert.equal(page.title, "harbour.pdf · Reportline");
});
