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
 * [data-connection] always says where the connection stands: a socket silent for longer
 * than the server's heartbeat allows is replaced, after five failed tries in a row the
 * page says the connection is lost and offers "Try now" (it keeps trying meanwhile), and
 * a refused handshake asks whether the session ended (then the page says so and stops
 * trying).
 *
 * The schedule of tries can be shortened for tests: a list of waits in milliseconds set
 * as window.reportlineReconnectMs before this file runs replaces RETRY_CEILINGS_MS.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-live]");
  if (!root || !window.htmx) {
    return;
  }

  var TERMINAL = ["succeeded", "failed", "cancelled", "reconciliation_required"];
  // The longest wait before each try after a close: the n-th try waits between half and
  // all of the n-th ceiling, at random; the last ceiling repeats for every later try.
  var RETRY_CEILINGS_MS = window.reportlineReconnectMs || [500, 1000, 2000, 4000, 8000, 10000];

  var taskId = root.dataset.taskId;
  var stream = root.querySelector("[data-report-stream]");
  var earlier = root.querySelector("[data-earlier-attempts]");
  var connection = root.querySelector("[data-connection]");
  var elapsed = root.querySelector("[data-elapsed]");
  var cancelOutcome = root.querySelector("[data-cancel-outcome]");
  var announcer = root.querySelector("[data-announcer]");
  var retryForm = root.querySelector("[data-retry]");
  var statusBar = root.querySelector("[data-status-bar]");
  var jump = root.querySelector("[data-action=jump-latest]");
  var INCOMPLETE = ["failed", "cancelled", "reconciliation_required"];
  var QUIET_MS = 15000; // no text for this long while writing: the status line says so
  var heardAt = performance.now(); // the last message from the server
  var textAt = performance.now(); // the last text written

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

  // CommonMark's backslash escapes are for the renderer, not the reader of plain text.
  // A backslash that ends a batch waits for the next, which says what it escapes.
  var MARKDOWN_ESCAPE = /\\([!-\/:-@\[-`{-~])/g;
  var carried = "";

  function readable(text) {
    text = carried + text;
    var trailing = /\\+$/.exec(text);
    carried = trailing && trailing[0].length % 2 === 1 ? "\\" : "";
    if (carried) {
      text = text.slice(0, -1);
    }
    return text.replace(MARKDOWN_ESCAPE, "$1");
  }

  function atBottom() {
    var page = document.documentElement;
    return window.innerHeight + window.scrollY >= page.scrollHeight - 48;
  }

  function write(text) {
    var following = atBottom();
    textNode.appendData(readable(text));
    stats.textWrites += 1;
    textAt = performance.now();
    firstTextShown();
    setStage("writing", "writing the report");
    if (following) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    } else {
      jump.hidden = false; // the reader scrolled up to read: do not pull them down
    }
  }

  function setStage(value, words) {
    var stage = root.querySelector("#task-status [data-stage]");
    if (stage && (stage.dataset.stage !== value || stage.textContent !== words)) {
      stage.dataset.stage = value;
      stage.textContent = words;
    }
  }

  // No text for a while: say what the page is waiting for, not "writing the report".
  function quietCheck(now) {
    if (currentStatus() !== "running" || !textNode.data) {
      return;
    }
    var quiet = Math.floor((now - textAt) / 1000);
    if (quiet * 1000 >= QUIET_MS) {
      setStage("quiet", "no new text for " + quiet + " s — waiting for the writer, or for a worker to take over…");
    }
  }

  jump.addEventListener("click", function () {
    window.scrollTo(0, document.documentElement.scrollHeight);
    jump.hidden = true;
  });

  window.addEventListener("scroll", function () {
    if (!jump.hidden && atBottom()) {
      jump.hidden = true;
    }
  }, { passive: true });

  // docs/lifecycle.md: a new attempt replaces the text shown; the earlier one stays, as its own.
  function startAttempt(number) {
    if (textNode.data) {
      var details = document.createElement("details");
      details.className = "attempt";
      details.dataset.attempt = String(shownAttempt);
      var summary = document.createElement("summary");
      summary.textContent = "Earlier try — interrupted";
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
    heardAt = performance.now();
    if (holder.content.querySelector('[data-task-status="succeeded"]')) {
      anchor = readingAnchor(); // before the rendered report replaces the text
    }
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
    if (status === "succeeded" && !stream.hidden) {
      flush();
      stream.hidden = true;
      jump.hidden = true;
      keepReading(anchor);
      anchor = null;
    }
    if (INCOMPLETE.indexOf(status) >= 0) {
      flush();
      if (carried) {
        textNode.appendData(carried); // the text ended: a lone backslash is just that
        carried = "";
      }
      if (retryForm) {
        retryForm.hidden = false;
      }
    }
    if (cancelRequested && TERMINAL.indexOf(status) >= 0) {
      // The status line and the notice say "cancelled": this line speaks only of a race.
      cancelOutcome.textContent =
        status === "cancelled"
          ? ""
          : status === "succeeded"
            ? "The report finished before the cancel took effect."
            : "The task ended before the cancel took effect.";
    }
    if (TERMINAL.indexOf(status) >= 0) {
      setConnection("live", "");
    }
    syncElapsed();
  }

  // --- keeping the reader's place when the rendered report replaces the text --------

  var anchor = null;

  function words(text) {
    return text.replace(/[#*_`|>\\-]+/g, " ").replace(/\s+/g, " ").trim();
  }

  // Return the line of plain text at the top of the reader's view, and where it is.
  function readingAnchor() {
    if (stream.hidden || !textNode.data) {
      return null;
    }
    var top = statusBar.getBoundingClientRect().bottom + 8;
    var box = stream.getBoundingClientRect();
    if (box.bottom < top || box.top > window.innerHeight) {
      return null; // the reader is not looking at the text
    }
    var y = Math.max(top, box.top + 4);
    var range = document.caretRangeFromPoint
      ? document.caretRangeFromPoint(box.left + 24, y)
      : null;
    var offset = range && range.startContainer === textNode ? range.startOffset : 0;
    var data = textNode.data;
    var lineStart = data.lastIndexOf("\n", offset - 1) + 1;
    var lines = data.slice(lineStart).split("\n");
    for (var i = 0; i < lines.length; i++) {
      var line = words(lines[i]);
      if (line.length >= 12) {
        return { text: line.slice(0, 40), y: y, fraction: (y - box.top) / box.height };
      }
    }
    return null;
  }

  // The rendered report, as swapped in last (each swap replaces the element).
  function renderedReport() {
    return root.querySelector("[data-report-rendered]");
  }

  function keepReading(place) {
    if (!place) {
      return;
    }
    var report = renderedReport();
    var blocks = report.querySelectorAll("h1, h2, h3, h4, p, li, td, th");
    for (var i = 0; i < blocks.length; i++) {
      if (words(blocks[i].textContent).indexOf(place.text) >= 0) {
        window.scrollBy(0, blocks[i].getBoundingClientRect().top - place.y);
        return;
      }
    }
    var box = report.getBoundingClientRect();
    window.scrollBy(0, box.top + place.fraction * box.height - place.y);
  }

  // --- the connection (docs/pages.md: data-connection) -------------------------------

  var SILENCE_MS = 25000; // the server sends something at least every 10 s
  var CONNECT_TIMEOUT_MS = 10000; // a handshake that hangs (a cut network) is replaced
  var LOST_AFTER = 5; // failed tries in a row before the page says the connection is lost
  var failures = 0; // closes since the last message; reset by every message
  var countdown = 0;
  var retryTimer = 0;
  var retryWrapper = null; // the closed socket's wrapper, while a try is scheduled
  var current = null; // the socket in use
  var currentOpened = false;
  var createdAt = 0;
  var wrapper = null; // the extension's socket wrapper, to replace a silent socket
  var signedOut = false;
  var connectionText = connection.querySelector("[data-connection-text]");
  var loginLink = connection.querySelector("[data-login]");
  var tryNow = connection.querySelector("[data-action=reconnect]");

  function setConnection(state, text) {
    connection.dataset.connection = state;
    if (connectionText.textContent !== text) {
      connectionText.textContent = text;
    }
    connection.hidden = state === "live";
    loginLink.hidden = state !== "signed-out";
    tryNow.hidden = state !== "lost";
  }

  // A stand-in for a socket once the session has ended: the extension may still have a
  // retry scheduled, and nothing more may be sent to the server.
  function closedSocket() {
    return {
      readyState: 3,
      OPEN: 1,
      addEventListener: function () {},
      close: function () {},
      send: function () {},
    };
  }

  htmx.createWebSocket = function (url) {
    if (signedOut) {
      return closedSocket();
    }
    var resume = new URL(url, window.location.href);
    resume.searchParams.set("after", String(receivedSeq));
    var socket = new WebSocket(resume.toString());
    socket.binaryType = htmx.config.wsBinaryType;
    current = socket;
    currentOpened = false;
    createdAt = performance.now();
    return socket;
  };

  function retryDelay() {
    var ceiling = RETRY_CEILINGS_MS[Math.min(failures, RETRY_CEILINGS_MS.length - 1)];
    failures += 1;
    stats.reconnects += 1;
    var delay = ceiling / 2 + (Math.random() * ceiling) / 2;
    if (!currentOpened) {
      // A refused handshake may mean the session ended: the check answers before the next try.
      delay = Math.max(delay, 1500);
    }
    showCountdown(delay);
    return delay;
  }

  // Every try after a close is scheduled here, so that "Try now" can bring it forward.
  function scheduleRetry(socketWrapper) {
    clearTimeout(retryTimer);
    retryWrapper = socketWrapper;
    retryTimer = setTimeout(retryNow, retryDelay());
  }

  function retryNow() {
    clearTimeout(retryTimer);
    var closed = retryWrapper;
    retryWrapper = null;
    if (closed && !isTerminal() && !signedOut) {
      closed.reconnect();
    }
  }

  // The extension would schedule a try of its own after an abnormal close (1006, 1011,
  // 1012, 1013), one that nothing can cancel: it is given the longest wait a timer can
  // have, and scheduleRetry's try comes first.
  htmx.config.wsReconnectDelay = function () {
    return 2147483647;
  };

  tryNow.addEventListener("click", function () {
    if (!retryWrapper) {
      return; // a try is already under way
    }
    clearInterval(countdown);
    setConnection("lost", "Connection lost — trying again now…");
    retryNow();
  });

  function showCountdown(delay) {
    var until = performance.now() + delay;
    var state = failures >= LOST_AFTER ? "lost" : "reconnecting";
    clearInterval(countdown);
    function tick() {
      if (signedOut) {
        return;
      }
      var seconds = Math.max(1, Math.ceil((until - performance.now()) / 1000));
      setConnection(
        state,
        state === "lost"
          ? "Connection lost — still trying, next in " + seconds + " s. The report goes on without you."
          : "Connection lost — reconnecting in " + seconds + " s"
      );
    }
    if (connection.hidden) {
      // Said once to screen readers; the countdown itself is not a live region.
      announcer.textContent = "Connection lost. Reconnecting.";
    }
    tick();
    countdown = setInterval(tick, 250);
  }

  // Ask whether this session may still read the task: a refused handshake looks the same
  // whether the server is restarting or the session ended.
  function checkSession() {
    fetch(root.dataset.taskUrl, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        if (response.status === 401 || response.status === 403 || response.status === 404) {
          signOut();
        }
      })
      .catch(function () {}); // the server is away: keep trying
  }

  function signOut() {
    signedOut = true;
    clearInterval(countdown);
    setConnection("signed-out", "You were signed out. The report goes on; log in again to follow it.");
    announcer.textContent = "You were signed out.";
    if (current && current.readyState <= 1) {
      current.onclose = null;
      current.close();
    }
  }

  // Replace a socket that carries nothing (a network that vanished without closing it).
  function replaceSocket() {
    if (!wrapper || signedOut) {
      return;
    }
    var old = current;
    if (old) {
      old.onclose = null; // its close must not schedule a second replacement
      old.onerror = null;
    }
    stats.reconnects += 1;
    setConnection("reconnecting", "No word from the server — reconnecting…");
    wrapper.reconnect();
    if (old && old.readyState <= 1) {
      old.close();
    }
  }

  setInterval(function () {
    if (signedOut || isTerminal() || !current) {
      return;
    }
    var now = performance.now();
    if (currentOpened && now - heardAt > SILENCE_MS) {
      replaceSocket();
    } else if (!currentOpened && current.readyState === 0 && now - createdAt > CONNECT_TIMEOUT_MS) {
      replaceSocket();
    }
    quietCheck(now);
  }, 1000);

  root.addEventListener("htmx:wsConnecting", function () {
    if (!connection.hidden && !signedOut) {
      clearInterval(countdown);
      if (connection.dataset.connection === "lost") {
        setConnection("lost", "Connection lost — trying again now…");
      } else {
        setConnection("reconnecting", "Reconnecting…");
      }
    }
  });

  root.addEventListener("htmx:wsOpen", function (event) {
    wrapper = event.detail.socketWrapper;
    currentOpened = true;
    heardAt = performance.now();
    clearInterval(countdown);
    if (!connection.hidden) {
      announcer.textContent = "Reconnected.";
    }
    setConnection("live", "");
  });

  root.addEventListener("htmx:wsClose", function (event) {
    var socket = event.detail.event.target;
    if (socket !== current) {
      return; // a replaced socket
    }
    if (isTerminal()) {
      setConnection("live", ""); // everything has arrived: nothing more to follow
      return;
    }
    if (!currentOpened) {
      checkSession();
    }
    // Any close before the end (a dropped network, a server going away): try again.
    scheduleRetry(event.detail.socketWrapper);
  });

  // --- cancel --------------------------------------------------------------------------

  var cancelRequested = false;
  var statusRegion = root.querySelector("[data-status-region]");

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
        statusRegion.focus({ preventScroll: true });
        if (result.status === 202) {
          if (result.body.status === "cancelled") {
            cancelOutcome.textContent = ""; // the status line says it, once
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

  // --- copy and download of the text -------------------------------------------------

  function shownText() {
    var report = renderedReport();
    return report.hidden ? textNode.data : report.innerText;
  }

  function copyOutcome(words) {
    var outcome = root.querySelector("[data-copy-outcome]");
    if (outcome) {
      outcome.textContent = words;
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action=copy], [data-action=download-partial]");
    if (!button) {
      return;
    }
    if (button.dataset.action === "download-partial") {
      var link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([textNode.data], { type: "text/markdown" }));
      link.download = root.dataset.reportFilename.replace(/\.md$/, "-partial.md");
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(function () {
        URL.revokeObjectURL(link.href);
      }, 1000);
      return;
    }
    navigator.clipboard.writeText(shownText()).then(
      function () {
        copyOutcome("Copied.");
      },
      function () {
        copyOutcome("Copying was refused by the browser; select the text instead.");
      }
    );
  });

  // Arriving on the page: start from its title, for keyboards and screen readers.
  var title = document.querySelector("[data-task-title]");
  if (title && !document.activeElement.closest("form")) {
    title.focus({ preventScroll: true });
  }
})();
