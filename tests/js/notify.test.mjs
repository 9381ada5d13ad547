import assert from "node:assert/strict";
import { test } from "node:test";

import { EndNotice, shouldNotify } from "../../static/js/task/notify.js";

class FakeNotification {
  static permission = "default";
  static shown = [];
  static asked = 0;

  static async requestPermission() {
    FakeNotification.asked += 1;
    FakeNotification.permission = "granted";
    return "granted";
  }

  constructor(title, options) {
    FakeNotification.shown.push({ title, ...options });
  }
}

class FakeButton extends EventTarget {
  hidden = true;
}

function reset(permission) {
  FakeNotification.permission = permission;
  FakeNotification.shown = [];
  FakeNotification.asked = 0;
}

test("only a hidden page that followed the task, with permission, notifies", () => {
  assert.equal(shouldNotify({ hidden: true, permission: "granted", followed: true }), true);
  assert.equal(shouldNotify({ hidden: false, permission: "granted", followed: true }), false);
  assert.equal(shouldNotify({ hidden: true, permission: "default", followed: true }), false);
  assert.equal(shouldNotify({ hidden: true, permission: "denied", followed: true }), false);
  assert.equal(shouldNotify({ hidden: true, permission: "granted", followed: false }), false);
});

test("permission is asked from the button only, and the end of the task is notified", async () => {
  reset("default");
  const button = new FakeButton();
  const notice = new EndNotice({ hidden: true }, button, { api: FakeNotification, name: "harbour.pdf" });
  assert.equal(button.hidden, false);
  assert.equal(FakeNotification.asked, 0); // not on load

  button.dispatchEvent(new Event("click"));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(FakeNotification.asked, 1);
  assert.equal(button.hidden, true);

  notice.ended("succeeded");
  notice.ended("succeeded");
  assert.deepEqual(FakeNotification.shown, [
    { title: "Reportline", body: "harbour.pdf: the report is ready." },
  ]);
});

test("a page opened on a task already ended, or looked at, notifies nothing", () => {
  reset("granted");
  new EndNotice({ hidden: true }, null, { api: FakeNotification, name: "a.pdf" }).ended("failed");
  new EndNotice({ hidden: false }, new FakeButton(), { api: FakeNotification, name: "a.pdf" }).ended(
    "failed"
  );
  assert.deepEqual(FakeNotification.shown, []);
});
