// What a screen reader hears of the task's progress, through the page's one polite live
// region ([data-announcer]): its start, its place in line while it waits, and its end, each
// once. The status line itself is not a live region: it changes with every event and the
// page rewrites parts of it every second (the reading's countdown, the quiet writer's
// seconds), which would be read aloud again and again. Nor is the streamed text: it grows
// many times a second.

import { TERMINAL } from "./status.js";

/** Return the words to announce when the task's state goes from `previous` to `current`
 * ({status, detail, reason}), or "" when there is nothing new to say. */
export function announcement(previous, current) {
  const { status, detail, reason } = current;
  if (previous && previous.status === status) {
    // Only a queued task's place in line (or the provider's next try) is news meanwhile.
    return status === "queued" && detail && detail !== previous.detail ? `Queued — ${detail}.` : "";
  }
  const why = reason ? ` ${reason}` : "";
  switch (status) {
    case "queued":
      return detail ? `Queued — ${detail}.` : "Queued.";
    case "running":
      return "Started: the report appears below as it is written.";
    case "finalizing":
      return "Checking and saving the report.";
    case "succeeded":
      return "The report is ready.";
    case "cancelled":
      return `The report was stopped.${why}`;
    case "failed":
      return `The report failed.${why}`;
    case "reconciliation_required":
      return `The report ended unfinished.${why}`;
    default:
      return "";
  }
}

export class Announcer {
  constructor(root, region) {
    this.root = root;
    this.region = region;
    this.state = null; // what the page showed when it was last followed
  }

  /** The status line was swapped in: say what changed, once. Arriving on a task on its
   * way says where it stands (after the title the page focuses); arriving on an ended one
   * says nothing: the page is what it is, to be read. */
  follow() {
    const current = this.read();
    const arrivedEnded = !this.state && TERMINAL.includes(current.status);
    const words = arrivedEnded ? "" : announcement(this.state, current);
    this.state = current;
    if (words && this.region) {
      this.region.textContent = words;
    }
  }

  read() {
    const line = this.root.querySelector("[data-task-status]");
    const detail = line && line.querySelector(".status-detail");
    const reason = this.root.querySelector("[data-incomplete] .incomplete-reason");
    return {
      status: line ? line.dataset.taskStatus : "",
      detail: squeeze(detail && detail.textContent),
      reason: squeeze(reason && reason.textContent),
    };
  }
}

function squeeze(text) {
  return (text || "").replace(/\s+/g, " ").trim();
}
