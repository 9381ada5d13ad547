// [data-connection]: says where the connection stands, with "Try now" once it is lost and
// a link to log in once the session ended (docs/pages.md). What it says of the report
// while the connection is lost depends on where the report is written (the page's
// data-worker): by workers of their own, it goes on; by the web server itself
// ("embedded"), it goes on only once that server is back.

const SIGNED_OUT = "You were signed out. The report goes on; log in again to follow it.";
// The server is up, whoever writes the report: only this browser is cut off.
const OFFLINE =
  "You are offline. The report goes on; the page catches up as soon as the network is back.";

export class ConnectionLine {
  constructor(element, announcer, { now, worker = "separate" }) {
    this.element = element;
    this.worker = worker;
    this.announcer = announcer;
    this.now = now;
    this.text = element.querySelector("[data-connection-text]");
    this.login = element.querySelector("[data-login]");
    this.tryNow = element.querySelector("[data-action=reconnect]");
    this.countdown = 0;
  }

  /** Render a change of the connection's state (see Connection). */
  show({ state, phase, retryAt }) {
    clearInterval(this.countdown);
    const wasShown = !this.element.hidden;
    if (state === "live") {
      if (wasShown && phase !== "ended") {
        this.announcer.textContent = "Reconnected.";
      }
      this.set(state, "");
    } else if (state === "signed-out") {
      this.set(state, SIGNED_OUT);
      this.announcer.textContent = "You were signed out.";
    } else if (phase === "waiting") {
      if (!wasShown) {
        // Said once to screen readers; the countdown itself is not a live region.
        this.announcer.textContent = "Connection lost. Reconnecting.";
      }
      const tick = () =>
        this.set(state, waitingWords(state, retryAt - this.now(), this.worker));
      tick();
      this.countdown = setInterval(tick, 250);
    } else if (phase === "offline") {
      if (!wasShown) {
        this.announcer.textContent = "You are offline.";
      }
      this.set(state, OFFLINE);
    } else if (phase === "silent") {
      this.set(state, "No word from the server — reconnecting…");
    } else {
      this.set(state, state === "lost" ? "Connection lost — trying again now…" : "Reconnecting…");
    }
  }

  set(state, words) {
    this.element.dataset.connection = state;
    if (this.text.textContent !== words) {
      this.text.textContent = words;
    }
    this.element.hidden = state === "live";
    this.login.hidden = state !== "signed-out";
    this.tryNow.hidden = state !== "lost";
  }
}

const GOES_ON = {
  separate: "The report goes on without you.",
  embedded: "If the server is down, the report goes on once it is back.",
};

function waitingWords(state, leftMs, worker) {
  const seconds = Math.max(1, Math.ceil(leftMs / 1000));
  return state === "lost"
    ? `Connection lost — still trying, next in ${seconds} s. ${GOES_ON[worker] || GOES_ON.separate}`
    : `Connection lost — reconnecting in ${seconds} s`;
}
