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
