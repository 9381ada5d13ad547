// The text while it streams: buffered, and written to the page at most once per animation
// frame, into one Text node (never once per token); the first text at once.

/**
 * Plan one write of `items` (in event order) to text showing attempt `shownAttempt`:
 * return the steps, {text} to append or {attempt} when a later attempt starts, and the
 * seq of the last item (0 when none). Consecutive text becomes one step.
 */
export function coalesce(items, shownAttempt) {
  const steps = [];
  let text = "";
  let seq = 0;
  let attempt = shownAttempt;
  for (const item of items) {
    if (item.attempt > attempt) {
      if (text) {
        steps.push({ text });
        text = "";
      }
      attempt = item.attempt;
      steps.push({ attempt });
    }
    text += item.text;
    seq = item.seq;
  }
  if (text) {
    steps.push({ text });
  }
  return { steps, seq };
}

/**
 * Hold the items that arrive and hand them to `text` once per animation frame.
 * `text` is a StreamText or anything with the same `attempt`, `data`, `seq`, `write(text)`
 * and `startAttempt(number)`. Each write runs inside `writing` (which may look at the page
 * before and after it), then `written` is called.
 */
export class Coalescer {
  constructor(text, { requestFrame, stats, writing = (write) => write(), written = () => {} }) {
    this.text = text;
    this.requestFrame = requestFrame;
    this.stats = stats;
    this.writing = writing;
    this.written = written;
    this.pending = [];
    this.frameRequested = false;
  }

  push(item) {
    this.pending.push(item);
    if (item.text && !this.text.data) {
      this.flush(); // the first text is what the reader waits for: it does not wait for a frame
      return;
    }
    if (!this.frameRequested) {
      this.frameRequested = true;
      this.requestFrame(() => this.flush());
    }
  }

  flush() {
    this.frameRequested = false;
    this.stats.flushes += 1;
    const { steps, seq } = coalesce(this.pending, this.text.attempt);
    this.pending = [];
    for (const step of steps) {
      if (step.text) {
        this.writing(() => this.text.write(step.text));
        this.stats.textWrites += 1;
        this.written();
      } else {
        this.text.startAttempt(step.attempt);
      }
    }
    if (seq) {
      this.text.seq = seq;
    }
  }
}

/** The streamed text on the page ([data-report-stream]) and the earlier attempts' texts. */
export class StreamText {
  constructor(element, earlier) {
    this.element = element;
    this.earlier = earlier;
    element.normalize();
    let node = element.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) {
      node = element.appendChild(document.createTextNode(""));
    }
    this.node = node;
    this.attempt = Number(element.dataset.attempt) || 0;
  }

  get data() {
    return this.node.data;
  }

  set seq(seq) {
    this.element.dataset.seq = String(seq);
  }

  write(text) {
    this.node.appendData(text);
  }

  // docs/lifecycle.md: a new attempt replaces the text shown; the earlier one stays, as its own.
  startAttempt(number) {
    if (this.node.data) {
      const details = document.createElement("details");
      details.className = "attempt";
      details.dataset.attempt = String(this.attempt);
      const summary = document.createElement("summary");
      summary.textContent = "Earlier try — interrupted";
      const body = document.createElement("div");
      body.className = "report-text";
      body.textContent = this.node.data;
      details.append(summary, body);
      this.earlier.append(details);
      this.node.data = "";
    }
    this.attempt = number;
    this.element.dataset.attempt = String(number);
  }
}
