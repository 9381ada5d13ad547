// The tab's title says how a task ended while the tab is hidden ("✓ Done · harbour.pdf"),
// so that a report finished in a background tab is seen from the tab strip; the page's
// own title comes back once the tab is looked at again (docs/pages.md).

const MARKS = {
  succeeded: "✓ Done",
  failed: "✕ Failed",
  cancelled: "Cancelled",
  timeout: "✕ Timed out",
  reconciliation_required: "Needs an administrator",
};

export class TabTitle {
  /** `page` is the document (or a stand-in): title, hidden, and visibilitychange events. */
  constructor(page, name) {
    this.page = page;
    this.name = name;
    this.original = page.title;
    page.addEventListener("visibilitychange", () => {
      if (!page.hidden) {
        page.title = this.original;
      }
    });
  }

  /** The task ended with `status`: say so in the tab's title if nobody is looking. */
  ended(status) {
    if (this.page.hidden) {
      this.page.title = `${MARKS[status] || "Ended"} · ${this.name}`;
    }
  }
}
