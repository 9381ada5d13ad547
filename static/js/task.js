/*
 * The task page, live.
 *
 * The htmx ws extension holds the socket to /ws/tasks/<id>/?after=<seq>. Each message
 * opens with <template data-batch data-seq=N> (the seq of the last event it covers),
 * holding the text events in order; this file takes those out of the message, buffers
 * their text and writes it to the page at most once per animation frame, into one Text
 * node (the first text of an attempt at once). The rest of the message is htmx out-of-band swaps (status line, outcome).
 *
 * Reconnecting resumes after the last seq received, so nothing is shown twice and
 * nothing is missed; the wait between tries doubles from 0.5 s to 10 s, with jitter.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-live]");
  if (!root || !window.htmx) {
    return;
  }

  var TERMINAL = ["succeeded", "failed", "cancelled", "reconciliation_required"];
  var RETRY_MIN_MS = 500;
  var RETRY_MAX_MS = 10000;

  var taskId = root.dataset.taskId;
  var stream = root.querySelector("[data-report-stream]");
  var earlier = root.querySelector("[data-earlier-attempts]");
  var connection = root.querySelector("[data-connection]");
  var elapsed = root.querySelector("[data-elapsed]");
  var cancelOutcome = root.querySelector("[data-cancel-outcome]");
  var announcer = root.querySelector("[data-announcer]");

  // Counters for tests and the curious: DOM text writes stay bounded by frames.
  var stats = { messages: 0, deltas: 0, textWrites: 0, flushes: 0, reconnects: 0 };
  window.reportline = { stats: stats };

  // --- the text, one animation frame at a time ----------------------------------------

  stream.normalize();
  var textNode = stream.firstChild;
  if (!textNode || textNode.nodeType !== Node.TEXT_NODE) {
    textNode = stream.appendChild(document.createTextNode(""));
  }
  var shownAttempt = Number(stream.dataset.attempt) || 0;
  var receivedSeq = Number(root.dataset.seq) || 0;
  var pending = []; // {attempt, text, seq}, in event order
  var frameRequested = false;

  function enqueue(item) {
    pending.push(item);
    if (item.text && !textNode.data) {
      flush(); // the first text is what the user waits for: it does not wait for a frame
      return;
    }
    if (!frameRequested) {
      frameRequested = true;
      requestAnimationFrame(flush);
    }
  }

  function flush() {
    frameRequested = false;
    stats.flushes += 1;
    var items = pending;
    pending = [];
    var text = "";
    var seq = 0;
    for (var i = 0; i < items.length; i++) {
      var item = items[i];
      if (item.attempt > shownAttempt) {
        if (text) {
          write(text);
          text = "";
        }
        startAttempt(item.attempt);
      }
      text += item.text;
      seq = item.seq;
    }
    if (text) {
      write(text);
    }
    if (seq) {
      stream.dataset.seq = String(seq);
    }
  }

  function write(text) {
    textNode.appendData(text);
    stats.textWrites += 1;
    firstTextShown();
    var stage = root.querySelector("#task-status [data-stage]");
    if (stage && stage.dataset.stage !== "writing") {
      stage.dataset.stage = "writing";
      stage.textContent = "writing the report";
    }
  }

  // docs/lifecycle.md: a new attempt replaces the text shown; the earlier one stays, as its own.
  function startAttempt(number) {
    if (textNode.data) {
      var details = document.createElement("details");
      details.className = "attempt";
      details.dataset.attempt = String(shownAttempt);
      var summary = document.createElement("summary");
      summary.textContent = "Attempt " + shownAttempt + " — interrupted";
      var body = document.createElement("div");
      body.className = "report-text";
      body.textContent = textNode.data;
      details.append(summary, body);
      earlier.append(details);
      textNode.data = "";
    }
    shownAttempt = number;
    stream.dataset.attempt = String(number);
  }

  // --- messages ------------------------------------------------------------------------

  function receive(html) {
    var holder = document.createElement("template");
    holder.innerHTML = html;
    var batch = holder.content.querySelector("template[data-batch]");
    if (!batch) {
      return html;
    }
    var batchSeq = Number(batch.dataset.seq);
    if (batchSeq < receivedSeq) {
      return ""; // an old message: its status swaps would go back in time
    }
    stats.messages += 1;
    var items = batch.content.children;
    for (var i = 0; i < items.length; i++) {
      var item = items[i];
      var seq = Number(item.dataset.seq);
      if (seq <= receivedSeq) {
        continue; // already have it
      }
      receivedSeq = seq;
      var attempt = Number(item.dataset.attempt) || 0;
      if (item.hasAttribute("data-delta")) {
        stats.deltas += 1;
        enqueue({ attempt: attempt, text: item.content.textContent, seq: seq });
      } else if (item.hasAttribute("data-attempt-start")) {
        enqueue({ attempt: attempt, text: "", seq: seq });
      }
    }
    receivedSeq = Math.max(receivedSeq, batchSeq);
    root.dataset.seq = String(receivedSeq);
    failures = 0;
    batch.remove();
    return holder.innerHTML;
  }

  htmx.defineExtension("reportline-stream", {
    transformResponse: function (text, xhr, elt) {
      return elt === root ? receive(text) : text;
    },
  });

  root.addEventListener("htmx:wsAfterMessage", sync);

  function currentStatus() {
    var status = root.querySelector("[data-task-status]");
    return status ? status.dataset.taskStatus : "";
  }

  function isTerminal() {
    return TERMINAL.indexOf(currentStatus()) >= 0;
  }

  // Bring what this file owns in line with the status htmx just swapped in.
  function sync() {
    var status = currentStatus();
    root.dataset.state = status;
    if (status === "succeeded") {
      stream.hidden = true;
    }
    if (cancelRequested && TERMINAL.indexOf(status) >= 0) {
      cancelOutcome.textContent =
        status === "cancelled"
          ? "Cancelled."
          : status === "succeeded"
            ? "The report finished before the cancel took effect."
            : "The task ended before the cancel took effect.";
    }
    syncElapsed();
  }

  // --- the connection ------------------------------------------------------------------

  var failures = 0; // closes since the last message; reset by every message
  var countdown = 0;

  htmx.createWebSocket = function (url) {
    var resume = new URL(url, window.location.href);
    resume.searchParams.set("after", String(receivedSeq));
    var socket = new WebSocket(resume.toString());
    socket.binaryType = htmx.config.wsBinaryType;
    return socket;
  };

  function retryDelay() {
    if (isTerminal()) {
      return RETRY_MAX_MS; // nothing more to come: the server will only close again
    }
    var ceiling = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * Math.pow(2, failures));
    failures += 1;
    stats.reconnects += 1;
    var delay = ceiling / 2 + (Math.random() * ceiling) / 2;
    showCountdown(delay);
    return delay;
  }

  // The extension retries after abnormal closes (1006, 1011, 1012, 1013) using this.
  htmx.config.wsReconnectDelay = retryDelay;

  function showCountdown(delay) {
    var until = performance.now() + delay;
    clearInterval(countdown);
    function tick() {
      var seconds = Math.max(1, Math.ceil((until - performance.now()) / 1000));
      var text = "Connection lost — reconnecting in " + seconds + " s";
      if (connection.textContent !== text) {
        connection.textContent = text;
      }
    }
    if (connection.hidden) {
      // Said once to screen readers; the countdown itself is not a live region.
      announcer.textContent = "Connection lost. Reconnecting.";
    }
    tick();
    connection.hidden = false;
    countdown = setInterval(tick, 250);
  }

  root.addEventListener("htmx:wsConnecting", function () {
    if (!connection.hidden) {
      clearInterval(countdown);
      connection.textContent = "Reconnecting…";
    }
  });

  root.addEventListener("htmx:wsOpen", function () {
    clearInterval(countdown);
    if (!connection.hidden) {
      announcer.textContent = "Reconnected.";
    }
    connection.hidden = true;
    connection.textContent = "";
  });

  root.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail.event.code;
    if (isTerminal() || [1006, 1011, 1012, 1013].indexOf(code) >= 0) {
      return; // finished, or the extension is already scheduling a retry
    }
    // Any other close before the end (a server going away, say): try again too.
    var wrapper = event.detail.socketWrapper;
    setTimeout(function () {
      if (!isTerminal()) {
        wrapper.reconnect();
      }
    }, retryDelay());
  });

  // --- cancel --------------------------------------------------------------------------

  var cancelRequested = false;

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
    } catch (error) {
      return "";
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action=cancel]");
    if (!button) {
      return;
    }
    event.preventDefault();
    button.disabled = true;
    cancelRequested = true;
    cancelOutcome.textContent = "Cancelling…";
    fetch(button.dataset.url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    })
      .then(function (response) {
        return response.json().then(function (body) {
          return { status: response.status, body: body };
        });
      })
      .then(function (result) {
        if (result.status === 202) {
          if (result.body.status === "cancelled") {
            cancelOutcome.textContent = "Cancelled.";
          } else if (!isTerminal()) {
            cancelOutcome.textContent = "Cancel requested — stopping the report…";
          }
        } else if (result.status === 409) {
          cancelOutcome.textContent =
            currentStatus() === "succeeded" || /succeeded/.test(result.body.error.message)
              ? "The report finished before the cancel took effect."
              : "The task ended before the cancel took effect.";
        } else {
          throw new Error(result.body.error ? result.body.error.message : "");
        }
      })
      .catch(function (error) {
        cancelRequested = false;
        button.disabled = false;
        cancelOutcome.textContent =
          (error && error.message) || "The cancel did not reach the server; try again.";
      });
  });

  // --- submit to first text on screen (docs/api.md: frontend_first_text_ms) -------------------

  var timingKey = "reportline:submitted:" + taskId;
  var timingDone = false;

  function firstTextShown() {
    if (timingDone) {
      return;
    }
    timingDone = true;
    var submitted = Number(window.sessionStorage.getItem(timingKey));
    if (!submitted) {
      return;
    }
    window.sessionStorage.removeItem(timingKey);
    var ms = performance.timeOrigin + performance.now() - submitted;
    if (!(ms >= 0)) {
      return;
    }
    fetch(root.dataset.timingUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ frontend_first_text_ms: Math.round(ms) }),
    }).catch(function () {});
  }

  if (textNode.data) {
    requestAnimationFrame(firstTextShown); // the page arrived with text already
  }

  // --- elapsed time of a running attempt ---------------------------------------------

  var elapsedBase = null;
  var elapsedSince = 0;
  var elapsedFrom = null; // the status element the count started from

  function syncElapsed() {
    var status = root.querySelector("[data-task-status]");
    if (status === elapsedFrom) {
      return; // the same status line: keep counting
    }
    elapsedFrom = status;
    var ms = status && status.dataset.elapsedMs;
    if (ms === undefined || ms === null || ms === "") {
      elapsedBase = null;
      elapsed.hidden = true;
      return;
    }
    elapsedBase = Number(ms);
    elapsedSince = performance.now();
    elapsed.hidden = false;
    renderElapsed();
  }

  function renderElapsed() {
    if (elapsedBase === null) {
      return;
    }
    var seconds = Math.floor((elapsedBase + performance.now() - elapsedSince) / 1000);
    var text =
      seconds < 60
        ? seconds + " s"
        : Math.floor(seconds / 60) + " min " + String(seconds % 60).padStart(2, "0") + " s";
    elapsed.textContent = "running for " + text;
  }

  syncElapsed();
  setInterval(renderElapsed, 1000);
})();
