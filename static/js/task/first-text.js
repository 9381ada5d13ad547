// Submit to first text on screen, measured by the browser (docs/api.md: frontend_first_text_ms):
// the upload form noted when it was submitted; the first text shown reports the time once.

import { csrfToken } from "./actions.js";

export function firstTextReporter(root) {
  const key = `reportline:submitted:${root.dataset.taskId}`;
  let done = false;
  return function firstTextShown() {
    if (done) {
      return;
    }
    done = true;
    const submitted = Number(window.sessionStorage.getItem(key));
    if (!submitted) {
      return;
    }
    window.sessionStorage.removeItem(key);
    const ms = performance.timeOrigin + performance.now() - submitted;
    if (!(ms >= 0)) {
      return;
    }
    fetch(root.dataset.timingUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ frontend_first_text_ms: Math.round(ms) }),
    }).catch(() => {});
  };
}
