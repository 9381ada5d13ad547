// Following the text: while the reader is at the bottom the page follows it; scrolled up,
// it offers "Jump to the latest"; and when the rendered report replaces the text, the
// passage the reader was looking at stays on screen if they had scrolled up to read it,
// and the report opens at its title if they were following to the end.

const BOTTOM_SLACK_PX = 48;

/** Return the words of a line of Markdown or of rendered text, without its marks. */
export function words(text) {
  return text
    .replace(/[#*_`|>\\-]+/g, " ")
    .replace(/\s+/g, " ")
    .trim();
}

export class Follow {
  constructor(root, text) {
    this.root = root;
    this.text = text; // the StreamText
    this.jump = root.querySelector("[data-action=jump-latest]");
    this.statusBar = root.querySelector("[data-status-bar]");
    this.jump.addEventListener("click", () => {
      this.toBottom();
      this.jump.hidden = true;
    });
    window.addEventListener(
      "scroll",
      () => {
        if (!this.jump.hidden && this.atBottom()) {
          this.jump.hidden = true;
        }
      },
      { passive: true }
    );
  }

  atBottom() {
    const page = document.documentElement;
    return window.innerHeight + window.scrollY >= page.scrollHeight - BOTTOM_SLACK_PX;
  }

  toBottom() {
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  /** Run `write`, following the text when the reader was at the bottom. */
  around(write) {
    const following = this.atBottom();
    write();
    if (following) {
      this.toBottom();
    } else {
      this.jump.hidden = false; // the reader scrolled up to read: do not pull them down
    }
  }

  /** Return the line of text at the top of the reader's view, and where it is; `top`
   * when the reader was following the text to its end; null when they are elsewhere. */
  place() {
    const stream = this.text.element;
    const node = this.text.node;
    if (stream.hidden || !node.data) {
      return null;
    }
    if (this.atBottom()) {
      return { top: true };
    }
    const top = this.statusBar.getBoundingClientRect().bottom + 8;
    const box = stream.getBoundingClientRect();
    if (box.bottom < top || box.top > window.innerHeight) {
      return null; // the reader is not looking at the text
    }
    const y = Math.max(top, box.top + 4);
    const range = document.caretRangeFromPoint
      ? document.caretRangeFromPoint(box.left + 24, y)
      : null;
    const offset = range && range.startContainer === node ? range.startOffset : 0;
    const data = node.data;
    const lineStart = data.lastIndexOf("\n", offset - 1) + 1;
    for (const line of data.slice(lineStart).split("\n")) {
      const found = words(line);
      if (found.length >= 12) {
        return { text: found.slice(0, 40), y, fraction: (y - box.top) / box.height };
      }
    }
    return null;
  }

  /** The rendered report replaced the text: bring the reader's `place` back into view. */
  keep(place) {
    this.jump.hidden = true;
    if (!place) {
      return;
    }
    const report = this.root.querySelector("[data-report-rendered]");
    if (place.top) {
      // Below the sticky status bar (on a phone it no longer sticks), the report from its title.
      const bar = Math.max(0, this.statusBar.getBoundingClientRect().bottom);
      window.scrollBy(0, report.getBoundingClientRect().top - bar - 8);
      return;
    }
    for (const block of report.querySelectorAll("h1, h2, h3, h4, h5, h6, p, li, td, th")) {
      if (words(block.textContent).includes(place.text)) {
        window.scrollBy(0, block.getBoundingClientRect().top - place.y);
        return;
      }
    }
    const box = report.getBoundingClientRect();
    window.scrollBy(0, box.top + place.fraction * box.height - place.y);
  }
}
