import assert from "node:assert/strict";
import { test } from "node:test";

import { ConnectionLine } from "../../static/js/task/connection-line.js";

function fakeLine() {
  const part = () => ({ hidden: true, textContent: "" });
  const parts = {
    "[data-connection-text]": part(),
    "[data-login]": part(),
    "[data-action=reconnect]": part(),
  };
  return { hidden: true, dataset: {}, querySelector: (selector) => parts[selector] };
}

for (const [worker, words] of [
  ["separate", "The report goes on without you."],
  ["embedded", "If the server is down, the report goes on once it is back."],
]) {
  test(`a lost connection says what becomes of the report: ${worker} workers`, (t) => {
    t.mock.timers.enable({ apis: ["setInterval"] });
    const element = fakeLine();
    const line = new ConnectionLine(element, { textContent: "" }, { now: () => 0, worker });

    line.show({ state: "lost", phase: "waiting", retryAt: 5000 });

    assert.equal(line.text.textContent, `Connection lost — still trying, next in 5 s. ${words}`);
    assert.equal(line.tryNow.hidden, false);
  });
}

test("offline says so, once to a screen reader, and that the report goes on", () => {
  const element = fakeLine();
  const announcer = { textContent: "" };
  const line = new ConnectionLine(element, announcer, { now: () => 0, worker: "embedded" });

  line.show({ state: "reconnecting", phase: "offline", retryAt: null });

  assert.equal(element.dataset.connection, "reconnecting");
  assert.equal(element.hidden, false);
  assert.match(line.text.textContent, /^You are offline\. The report goes on/);
  assert.equal(announcer.textContent, "You are offline.");
  assert.equal(line.tryNow.hidden, true);
});
