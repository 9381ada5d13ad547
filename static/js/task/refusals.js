// The forms htmx posts on this page (the share controls) can be refused. The server then
// answers 4xx with the form's own section, the reason in it; htmx leaves every 4xx answer
// out of the page by default, so a refused form looked as if nothing had happened. Here
// an answer that is the target's own section is swapped in whatever its status, and any
// other failure (a stale tab's 403, a server error, no answer at all) is said in the
// target, where the press was.

export const STALE =
  "This page is out of date: you signed in again elsewhere, or your session ended. Reload the page and try again.";
export const UNREACHABLE =
  "The server could not be reached. Check your connection and try again.";

/** Return what to say when a form's request failed with HTTP `status`. */
export function refusalWords(status) {
  if (status === 401 || status === 403) {
    return STALE;
  }
  if (status === 429) {
    return "Too many requests for now. Wait a moment and try again.";
  }
  return `That did not work (HTTP ${status}). Try again, or reload the page.`;
}

/** Return whether `html` is `target`'s own section: its first element has target's id. */
export function isSectionOf(target, html) {
  if (!target || !target.id || typeof html !== "string") {
    return false;
  }
  const template = target.ownerDocument.createElement("template");
  template.innerHTML = html;
  const first = template.content.firstElementChild;
  return first !== null && first.id === target.id;
}

function say(target, words) {
  if (!target) {
    return;
  }
  let line = target.querySelector("[data-request-error]");
  if (!line) {
    line = target.ownerDocument.createElement("p");
    line.className = "notice notice-error";
    line.setAttribute("role", "alert");
    line.dataset.requestError = "";
    (target.querySelector("details") || target).append(line);
  }
  line.textContent = words;
}

export function handleRefusals(doc) {
  doc.addEventListener("htmx:beforeSwap", (event) => {
    const detail = event.detail;
    if (detail.xhr.status < 400) {
      return;
    }
    if (detail.xhr.status < 500 && isSectionOf(detail.target, detail.serverResponse)) {
      detail.shouldSwap = true; // the refusal, said in the section itself
      detail.isError = false;
      return;
    }
    say(detail.target, refusalWords(detail.xhr.status));
  });
  doc.addEventListener("htmx:sendError", (event) => {
    say(event.detail.target || event.detail.elt, UNREACHABLE);
  });
}
