// The status line: htmx swaps it in (#task-status) from the server's messages; this keeps
// what the page adds to it in step: the running time, the time the model's reading should
// take yet, and the quiet writer's line.

export const TERMINAL = ["succeeded", "failed", "cancelled", "reconciliation_required"];
export const INCOMPLETE = ["failed", "cancelled", "reconciliation_required"];
const QUIET_MS = 15000; // no text for this long while writing: the status line says so

/** Return "42 s" or "3 min 05 s". */
export function elapsedWords(ms) {
  const seconds = Math.floor(ms / 1000);
  return seconds < 60
    ? `${seconds} s`
    : `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
}

/** Return what the reading's time left says, as the server words it: "about 20 s left",
 * "about 3 min left", "almost done"; past the estimate, that it takes longer. */
export function timeLeftWords(seconds) {
  if (seconds <= -1) {
    return "taking longer than expected";
  }
  if (seconds < 1) {
    return "almost done";
  }
  return seconds < 90
    ? `about ${Math.round(seconds)} s left`
    : `about ${Math.round(seconds / 60)} min left`;
}

export class StatusLine {
  constructor(root, { now, every = (callback, ms) => globalThis.setInterval(callback, ms) }) {
    this.root = root;
    this.now = now;
    this.every = every; // a timer that repeats (the tests' clock)
    this.elapsed = root.querySelector("[data-elapsed]");
    this.elapsedBase = null; // the time since submit the status line was rendered with
    this.elapsedSince = 0; // when it was swapped in
    this.elapsedFrom = null; // that status line's element
    this.lineSince = now(); // when the current status line was swapped in
    this.textAt = now(); // the last text written
  }

  get status() {
    const line = this.root.querySelector("[data-task-status]");
    return line ? line.dataset.taskStatus : "";
  }

  get ended() {
    return TERMINAL.includes(this.status);
  }

  /** Start the clocks: the running time, and (while `listening()`: text shown, the socket
   * followed) the check for a quiet writer. */
  start(listening) {
    this.sync();
    this.every(() => {
      this.renderElapsed();
      this.renderTimeLeft();
      this.quietCheck(listening());
    }, 1000);
  }

  /** Text was written: the report is being written. */
  written() {
    this.textAt = this.now();
    this.setStage("writing", "writing the report");
  }

  setStage(value, words) {
    const stage = this.root.querySelector("#task-status [data-stage]");
    if (stage && (stage.dataset.stage !== value || stage.textContent !== words)) {
      stage.dataset.stage = value;
      stage.textContent = words;
    }
  }

  // No text for a while: say what the page is waiting for, not "writing the report".
  quietCheck(listening) {
    if (this.status !== "running" || !listening) {
      return;
    }
    const quiet = Math.floor((this.now() - this.textAt) / 1000);
    if (quiet * 1000 >= QUIET_MS) {
      this.setStage(
        "quiet",
        `no new text for ${quiet} s — waiting for the writer, or for a worker to take over…`
      );
    }
  }

  /** Follow a status line htmx swapped in: its time since submit is the count's base
   * (the server's clock; a new attempt does not start it again). */
  sync() {
    const line = this.root.querySelector("[data-task-status]");
    if (line === this.elapsedFrom) {
      return; // the same status line: keep counting
    }
    this.elapsedFrom = line;
    this.lineSince = this.now();
    const ms = line && line.dataset.elapsedMs;
    if (ms === undefined || ms === null || ms === "") {
      this.elapsedBase = null;
      this.elapsed.hidden = true;
      return;
    }
    this.elapsedBase = Number(ms);
    this.elapsedSince = this.now();
    this.elapsed.hidden = false;
    this.renderElapsed();
  }

  /** While the model reads: count down the time left the status line was rendered with. */
  renderTimeLeft() {
    const eta = this.root.querySelector("#task-status [data-reading-eta]");
    if (!eta || eta.dataset.etaS === undefined) {
      return;
    }
    const left = Number(eta.dataset.etaS) - (this.now() - this.lineSince) / 1000;
    const words = timeLeftWords(left);
    if (eta.textContent !== words) {
      eta.textContent = words;
    }
  }

  renderElapsed() {
    if (this.elapsedBase !== null) {
      const ms = this.elapsedBase + this.now() - this.elapsedSince;
      this.elapsed.textContent = `submitted ${elapsedWords(ms)} ago`;
    }
  }
}
