// The task page, live (docs/pages.md). The page owns its socket to
// /ws/tasks/<id>/?after=<seq>: each message's batch of text goes to the streamed text, one
// animation frame at a time; the rest of the message is htmx's out-of-band swaps (the
// status line, the outcome), and what this script adds to the page follows the status
// they bring. Reconnecting resumes after the last seq received: nothing is shown twice
// and nothing is missed.
//
// The waits between tries can be shortened for tests: a list of milliseconds set as
// window.reportlineReconnectMs before this script runs replaces RETRY_CEILINGS_MS.

import { Actions } from "./actions.js";
import { Announcer } from "./announce.js";
import { RETRY_CEILINGS_MS } from "./backoff.js";
import { accept, readMessage } from "./batch.js";
import { Citations } from "./citations.js";
import { Connection, socketUrl } from "./connection.js";
import { ConnectionLine } from "./connection-line.js";
import { firstTextReporter } from "./first-text.js";
import { Follow } from "./follow.js";
import { EndNotice } from "./notify.js";
import { handleRefusals } from "./refusals.js";
import { followShares } from "./share.js";
import { INCOMPLETE, StatusLine } from "./status.js";
import { Coalescer, StreamText } from "./stream.js";
import { TabTitle } from "./tab-title.js";

const root = document.querySelector("[data-live]");
if (root && window.htmx) {
  start(root);
}

function start(root) {
  const now = () => performance.now();
  // Counters for tests and the curious: DOM text writes stay bounded by frames.
  const stats = { messages: 0, deltas: 0, textWrites: 0, flushes: 0, reconnects: 0 };
  window.reportline = { stats };
  handleRefusals(document);
  followShares(document);

  const streamElement = root.querySelector("[data-report-stream]");
  const text = new StreamText(streamElement, root.querySelector("[data-earlier-attempts]"));
  const status = new StatusLine(root, { now });
  const follow = new Follow(root, text);
  const actions = new Actions(root, { status, text });
  const announcer = new Announcer(root, root.querySelector("[data-announcer]"));
  const retryForm = root.querySelector("[data-retry]");
  const firstTextShown = firstTextReporter(root);
  let receivedSeq = Number(root.dataset.seq) || 0;
  const citationDialog = document.querySelector("[data-citation-dialog]");
  if (citationDialog) {
    new Citations(root, citationDialog);
  }

  const coalescer = new Coalescer(text, {
    requestFrame: (callback) => requestAnimationFrame(callback),
    stats,
    writing: (write) => follow.around(write),
    written: () => {
      status.written();
      firstTextShown();
    },
  });

  const line = new ConnectionLine(
    root.querySelector("[data-connection]"),
    root.querySelector("[data-announcer]"),
    { now, worker: root.dataset.worker }
  );
  const tabTitle = new TabTitle(document, root.dataset.documentName || document.title);
  const endNotice = new EndNotice(document, root.querySelector("[data-action=notify]"), {
    api: window.Notification,
    name: root.dataset.documentName || document.title,
  });
  const connection = new Connection({
    url: (after) => socketUrl(root.dataset.socketUrl, after, window.location.href),
    resumeAfter: () => receivedSeq,
    heartbeatMs: Number(root.dataset.heartbeatMs),
    ceilings: window.reportlineReconnectMs || RETRY_CEILINGS_MS,
    clock: {
      now,
      setTimeout: (callback, ms) => setTimeout(callback, ms),
      clearTimeout: (timer) => clearTimeout(timer),
      setInterval: (callback, ms) => setInterval(callback, ms),
      clearInterval: (timer) => clearInterval(timer),
    },
    openSocket: (url) => new WebSocket(url),
    sessionEnded: () => sessionEnded(root.dataset.taskUrl),
    online: () => navigator.onLine,
    received: receive,
    changed: (change) => line.show(change),
    stats,
  });

  function receive(message) {
    const batch = readMessage(message);
    const fresh = batch && accept(batch, receivedSeq);
    if (!fresh) {
      return; // no batch, or an old message: its status lines would go back in time
    }
    stats.messages += 1;
    // Before the rendered report replaces the text: where the reader is in it.
    const succeeded = batch.swaps.querySelector('[data-task-status="succeeded"]');
    const place = succeeded ? follow.place() : null;
    for (const item of fresh.items) {
      if (!item.starts) {
        stats.deltas += 1;
      }
      coalescer.push(item);
    }
    receivedSeq = fresh.seq;
    root.dataset.seq = String(receivedSeq);
    if (batch.html) {
      window.htmx.swap(root, batch.html, { swapStyle: "none" });
      sync(place);
    }
  }

  // Bring what this script owns in line with the status htmx just swapped in.
  function sync(place) {
    const value = status.status;
    root.dataset.state = value;
    const replaced = value === "succeeded" && !streamElement.hidden;
    if (replaced) {
      coalescer.flush();
      streamElement.hidden = true;
    }
    if (INCOMPLETE.includes(value)) {
      coalescer.flush();
      if (retryForm) {
        // Offered only where running the same documents again can help (data-remedy).
        const remedy = root.querySelector("[data-incomplete]")?.dataset.remedy;
        retryForm.hidden = remedy !== "retry";
      }
    }
    if (status.ended) {
      streamElement.removeAttribute("aria-busy"); // the text is whole: read it at will
      actions.ended(value);
      tabTitle.ended(value);
      endNotice.ended(value);
      connection.end();
    }
    status.sync();
    announcer.follow();
    if (replaced) {
      // Last: whatever above the report changed size (the status line's clocks and
      // buttons going) has changed, so the reader's place is measured where it ends up.
      follow.keep(place);
    }
  }

  announcer.follow(); // the state the reader arrives on: said by the page itself
  line.tryNow.addEventListener("click", () => connection.tryNow());
  status.start(() => Boolean(text.data) && !connection.over);
  if (root.dataset.socketUrl) {
    connection.start();
  }

  if (text.data) {
    requestAnimationFrame(firstTextShown); // the page arrived with text already
  }
  // Arriving on the page: start from its title, for keyboards and screen readers.
  const title = document.querySelector("[data-task-title]");
  if (title && !document.activeElement.closest("form")) {
    title.focus({ preventScroll: true });
  }
}

// Ask whether this session may still read the task: a refused handshake looks the same
// whether the server is restarting or the session ended.
async function sessionEnded(taskUrl) {
  const response = await fetch(taskUrl, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  return [401, 403, 404].includes(response.status);
}
