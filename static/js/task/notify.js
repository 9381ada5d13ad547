// A browser notification when a task the page was following ends while the page is hidden,
// beside the tab's title that says the same (tab-title.js). The permission is asked for only
// when the reader presses "Notify me when done", never on load (docs/pages.md).

const ENDINGS = {
  succeeded: "is ready",
  failed: "failed",
  cancelled: "was cancelled",
  reconciliation_required: "needs an administrator",
};

/** Whether the end of a task is notified: nobody is looking, the reader allowed it, and
 * the page was following the task as it ran (not opened on one already ended). */
export function shouldNotify({ hidden, permission, followed }) {
  return Boolean(hidden && followed) && permission === "granted";
}

export class EndNotice {
  /** `page` is the document (or a stand-in), `button` the page's "Notify me when done"
   * (absent when the task had already ended), `api` the browser's Notification, if any. */
  constructor(page, button, { api, name }) {
    this.page = page;
    this.button = button;
    this.api = api;
    this.name = name;
    this.followed = Boolean(button);
    if (!button || !api) {
      return;
    }
    this.show();
    button.addEventListener("click", async () => {
      await api.requestPermission();
      this.show();
    });
  }

  /** Offer the button while the reader has not answered the browser's question yet. */
  show() {
    this.button.hidden = this.api.permission !== "default";
  }

  /** The task ended with `status`: notify if nobody is looking and it was allowed. */
  ended(status) {
    const notify = shouldNotify({
      hidden: this.page.hidden,
      permission: this.api?.permission,
      followed: this.followed,
    });
    this.followed = false; // one notification per task
    if (this.button) {
      this.button.hidden = true;
    }
    if (notify) {
      new this.api("Reportline", { body: `${this.name}: the report ${ENDINGS[status] || "ended"}.` });
    }
  }
}
