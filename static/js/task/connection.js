// The task's socket (docs/pages.md: data-connection): open it, resume after the last seq
// received, replace it when it goes silent, try again after a close with growing waits,
// and stop for good when the session ended or the task did. While the browser says it is
// offline it tries nothing, and tries at once when it is back. Nothing here touches the page:
// every change of state goes to `changed`, which the connection line renders.

import { retryDelay } from "./backoff.js";

export const CONNECT_TIMEOUT_MS = 10000; // a handshake that hangs (a cut network) is replaced
export const LOST_AFTER = 5; // failed tries in a row before the connection is called lost
// A refused handshake may mean the session ended: the check answers before the next try.
export const SESSION_CHECK_MS = 1500;
// The server's close when the session the socket opened with ended while it was open (a
// logout in another tab, a password change, sessions deleted): not a reason to try again.
export const SIGNED_OUT_CODE = 4401;
const WATCH_MS = 1000;

/**
 * Return how long a socket may carry nothing before it is replaced: the server sends
 * something at least every `heartbeatMs`, so two of them missed and half of one more is
 * not a slow network but a dead connection.
 */
export function silenceLimitMs(heartbeatMs) {
  return heartbeatMs * 2.5;
}

/** Return the socket's address for `path`, resuming after `after`. */
export function socketUrl(path, after, base) {
  const url = new URL(path, base);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("after", String(after));
  return url.toString();
}

/**
 * The connection's state, as [data-connection] says it: `state` is `live`, `reconnecting`,
 * `lost` or `signed-out` (null before anything was said); `phase` says why it is not live:
 * `waiting` (until `retryAt`, on the clock's time), `trying` (a socket is under way),
 * `silent` (the socket in use carried nothing for too long) or `offline` (the browser has
 * no network: nothing is tried until it has); a `live` one may be `ended` (the task ended:
 * nothing more to follow).
 */
export class Connection {
  constructor({
    url, // the socket's address, given the seq to resume after
    resumeAfter, // the seq received last
    heartbeatMs,
    ceilings,
    clock, // now(), setTimeout, clearTimeout, setInterval
    random = Math.random,
    openSocket, // a WebSocket for an address
    sessionEnded, // a promise: whether this page's session may no longer read the task
    online = () => true, // whether the browser has a network (navigator.onLine)
    received, // each message's data
    changed, // each change of state: {state, phase, retryAt}
    stats,
  }) {
    Object.assign(this, { url, resumeAfter, ceilings, clock, random, openSocket });
    Object.assign(this, { sessionEnded, online, received, changed, stats });
    this.silenceMs = silenceLimitMs(heartbeatMs);
    this.state = null;
    this.failures = 0; // failed tries since the last message
    this.socket = null; // the socket in use
    this.opened = false;
    this.openedAt = 0; // when the socket in use was created
    this.heardAt = 0; // the last message, or the socket's opening
    this.retryTimer = null; // the next try, while one is scheduled
    this.over = false; // the task ended or the session did: no more sockets
    this.signedOutBefore = false; // a close for an ended session since the last message
    this.offline = false; // the browser said it has no network: no socket, no try
  }

  start() {
    this.connect();
    this.watcher = this.clock.setInterval(() => this.watch(), WATCH_MS);
  }

  /** Bring the scheduled try forward ("Try now"); nothing when a try is under way. */
  tryNow() {
    if (this.retryTimer === null) {
      return;
    }
    this.clock.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.connect();
  }

  /** The task ended: everything has arrived, nothing more to follow. */
  end() {
    this.stop();
    this.say("live", "ended");
  }

  signOut() {
    this.stop();
    this.say("signed-out");
  }

  stop() {
    this.over = true;
    this.clock.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.watcher !== undefined) {
      this.clock.clearInterval(this.watcher);
    }
    this.drop();
  }

  say(state, phase = null, retryAt = null) {
    this.state = state;
    this.changed({ state, phase, retryAt });
  }

  connect() {
    if (this.over) {
      return;
    }
    const socket = this.openSocket(this.url(this.resumeAfter()));
    this.socket = socket;
    this.opened = false;
    this.openedAt = this.clock.now();
    socket.onopen = () => this.onOpen(socket);
    socket.onmessage = (event) => this.onMessage(socket, event.data);
    socket.onclose = (event) => this.onClose(socket, event?.code);
    if (this.state === "reconnecting" || this.state === "lost") {
      this.say(this.state, "trying");
    }
  }

  /** Forget the socket in use (its events no longer count) and close it. */
  drop() {
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = null;
      if (socket.readyState <= 1) {
        socket.close();
      }
    }
  }

  onOpen(socket) {
    if (socket !== this.socket) {
      return;
    }
    this.opened = true;
    this.heardAt = this.clock.now();
    this.say("live");
  }

  onMessage(socket, data) {
    if (socket !== this.socket) {
      return;
    }
    this.heardAt = this.clock.now();
    this.failures = 0;
    this.signedOutBefore = false;
    this.received(data);
  }

  onClose(socket, code) {
    if (socket !== this.socket || this.over) {
      return;
    }
    this.socket = null;
    if (code === SIGNED_OUT_CODE) {
      this.afterSignedOut();
      return;
    }
    if (!this.opened) {
      this.checkSession();
    }
    // Any close before the end (a dropped network, a server going away): try again.
    let delay = retryDelay(this.ceilings, this.failures, this.random);
    if (!this.opened) {
      delay = Math.max(delay, SESSION_CHECK_MS);
    }
    this.failures += 1;
    this.stats.reconnects += 1;
    this.retryTimer = this.clock.setTimeout(() => {
      this.retryTimer = null;
      this.connect();
    }, delay);
    const state = this.failures >= LOST_AFTER ? "lost" : "reconnecting";
    this.say(state, "waiting", this.clock.now() + delay);
  }

  // The server closed the socket because the session it opened with ended. Ask once whether
  // the page's session now may read the task: only when the browser holds a session still
  // valid under a new key (the password was changed in this browser, or it logged in
  // again) does a new socket open; otherwise, or when it cannot tell, it is signed out.
  // Once only until a message arrives on the new socket.
  afterSignedOut() {
    if (this.signedOutBefore) {
      this.signOut(); // closed so again before a word came through: never in a loop
      return;
    }
    this.signedOutBefore = true;
    this.say("reconnecting", "trying");
    this.sessionEnded().then(
      (ended) => {
        if (this.over) {
          return;
        }
        if (ended) {
          this.signOut();
        } else {
          this.connect();
        }
      },
      () => {
        if (!this.over) {
          this.signOut();
        }
      }
    );
  }

  // A refused handshake looks the same whether the server is restarting or the session
  // ended: ask which.
  checkSession() {
    this.sessionEnded().then(
      (ended) => {
        if (ended && !this.over) {
          this.signOut();
        }
      },
      () => {} // the server is away: keep trying
    );
  }

  /** Follow the browser's network, and replace a socket that carries nothing (a network
   * that vanished without closing it). */
  watch() {
    if (this.over) {
      return;
    }
    if (!this.online()) {
      if (!this.offline) {
        this.goOffline();
      }
      return;
    }
    if (this.offline) {
      this.offline = false; // back: at once, not at the next scheduled try
      this.connect();
      return;
    }
    const socket = this.socket;
    if (!socket) {
      return;
    }
    const now = this.clock.now();
    const silent = this.opened && now - this.heardAt > this.silenceMs;
    const hung =
      !this.opened && socket.readyState === 0 && now - this.openedAt > CONNECT_TIMEOUT_MS;
    if (silent || hung) {
      this.drop();
      this.stats.reconnects += 1;
      this.say("reconnecting", "silent");
      this.connect();
    }
  }

  // The socket of a browser without a network may stay open, silent, for as long as the
  // silence limit; and every try would fail. Say so now, and wait for the network.
  goOffline() {
    this.offline = true;
    this.clock.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.drop();
    this.say("reconnecting", "offline");
  }
}
