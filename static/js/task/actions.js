// What the reader can do on the page: cancel, copy the report, download the partial text.
// An answer's error is read by its `code` (docs/api.md), never by its words.

const FINISHED_FIRST = "The report finished before the cancel took effect.";
const ENDED_FIRST = "The task ended before the cancel took effect.";

/** Return the cancel's outcome line once the task ended with `status` ("" when cancelled:
 * the status line and the notice say so). */
export function cancelOutcome(status) {
  if (status === "cancelled") {
    return "";
  }
  return status === "succeeded" ? FINISHED_FIRST : ENDED_FIRST;
}

export function csrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
  } catch {
    return "";
  }
}

export class Actions {
  constructor(root, { status, text }) {
    this.root = root;
    this.status = status; // the StatusLine
    this.text = text; // the StreamText
    this.outcome = root.querySelector("[data-cancel-outcome]");
    this.statusRegion = root.querySelector("[data-status-region]");
    this.cancelRequested = false;
    // Delegated: htmx swaps the buttons in and out with the status.
    const handlers = {
      cancel: (event, button) => this.cancel(event, button),
      copy: () => this.copy(),
      "copy-markdown": () => this.copyMarkdown(),
      "download-partial": () => this.downloadPartial(),
    };
    document.addEventListener("click", (event) => {
      const button = event.target.closest("[data-action]");
      const handler = button && handlers[button.dataset.action];
      if (handler) {
        handler(event, button);
      }
    });
  }

  /** The task ended (the status line says how): a cancel under way learns which end won. */
  ended(status) {
    if (this.cancelRequested) {
      this.outcome.textContent = cancelOutcome(status);
    }
  }

  async cancel(event, button) {
    event.preventDefault();
    button.disabled = true;
    this.cancelRequested = true;
    this.outcome.textContent = "Cancelling…";
    let answer;
    try {
      const response = await fetch(button.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
      });
      answer = { status: response.status, body: await response.json() };
    } catch {
      answer = null;
    }
    this.statusRegion.focus({ preventScroll: true });
    if (answer && answer.status === 202) {
      if (answer.body.status === "cancelled") {
        this.outcome.textContent = ""; // the status line says it, once
      } else if (!this.status.ended) {
        this.outcome.textContent = "Cancel requested — stopping the report…";
      }
    } else if (answer && answer.body.error && answer.body.error.code === "task_finished") {
      // The task ended first. Its status line says how, now or when it arrives.
      if (this.status.ended) {
        this.ended(this.status.status);
      }
    } else {
      this.cancelRequested = false;
      button.disabled = false;
      const error = answer && answer.body.error;
      this.outcome.textContent =
        (error && error.message) || "The cancel did not reach the server; try again.";
    }
  }

  copy() {
    const report = this.root.querySelector("[data-report-rendered]");
    const shown = report.hidden ? this.text.data : report.innerText;
    this.toClipboard(Promise.resolve(new Blob([shown], { type: "text/plain" })));
  }

  /** Copy the saved report as its Markdown, sources included: the download's own text. */
  copyMarkdown() {
    const link = this.root.querySelector('a[data-download][data-format="md"]');
    const saved = fetch(link.href, { credentials: "same-origin" }).then((answer) => {
      if (!answer.ok) {
        throw new Error(`HTTP ${answer.status}`);
      }
      return answer.text().then((text) => new Blob([text], { type: "text/plain" }));
    });
    this.toClipboard(saved, "Copied as Markdown.");
  }

  /** Write a text still on its way (a Blob promise) to the clipboard, and say how it went. */
  toClipboard(blob, done = "Copied.") {
    const line = this.root.querySelector("[data-copy-outcome]");
    const say = (words) => {
      if (line) {
        line.textContent = words;
      }
    };
    // A ClipboardItem takes the promise, so the copy keeps the click's permission while
    // the text is fetched.
    navigator.clipboard.write([new ClipboardItem({ "text/plain": blob })]).then(
      () => say(done),
      () => say("Copying was refused by the browser; select the text instead.")
    );
  }

  downloadPartial() {
    // A plan that stopped before its report's call wrote no text: its notes are the partial.
    const notes = this.root.querySelector("[data-plan-notes-text]");
    const partial = this.text.data || (notes ? notes.textContent : "");
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([partial], { type: "text/markdown" }));
    link.download = this.root.dataset.reportFilename.replace(/\.md$/, "-partial.md");
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }
}
