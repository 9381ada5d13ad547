import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CONNECT_TIMEOUT_MS,
  Connection,
  LOST_AFTER,
  SESSION_CHECK_MS,
  SIGNED_OUT_CODE,
  silenceLimitMs,
  socketUrl,
} from "../../static/js/task/connection.js";
import { FakeClock, FakeSocket } from "./fakes.mjs";

const HEARTBEAT_MS = 10000;
const CEILINGS = [500, 1000, 2000, 4000, 8000, 10000];

function page({ ended = false, random = () => 1, network = { online: true } } = {}) {
  const clock = new FakeClock();
  const sockets = [];
  const states = [];
  const received = [];
  let seq = 7;
  const stats = { reconnects: 0 };
  const connection = new Connection({
    url: (after) => `ws://host/ws/tasks/t/?after=${after}`,
    resumeAfter: () => seq,
    heartbeatMs: HEARTBEAT_MS,
    ceilings: CEILINGS,
    clock,
    random,
    openSocket: (url) => {
      const socket = new FakeSocket(url);
      sockets.push(socket);
      return socket;
    },
    sessionEnded: () => Promise.resolve(ended),
    online: () => network.online,
    received: (data) => {
      received.push(data);
      seq += 1;
    },
    changed: (change) => states.push(change),
    stats,
  });
  const last = () => sockets[sockets.length - 1];
  const state = () => states[states.length - 1];
  return { clock, sockets, states, received, stats, connection, last, state };
}

test("the socket resumes after the last seq received", () => {
  const { connection, last } = page();
  connection.start();
  assert.equal(last().url, "ws://host/ws/tasks/t/?after=7");
  last().open();
  last().message("<template data-batch data-seq=8></template>");
  last().drop();
  connection.tryNow();
  assert.equal(last().url, "ws://host/ws/tasks/t/?after=8");
});

test("the address follows the page's scheme and carries the seq", () => {
  assert.equal(
    socketUrl("/ws/tasks/t/", 3, "https://example.org/tasks/t/"),
    "wss://example.org/ws/tasks/t/?after=3"
  );
  assert.equal(
    socketUrl("/ws/tasks/t/", 0, "http://127.0.0.1:8000/x"),
    "ws://127.0.0.1:8000/ws/tasks/t/?after=0"
  );
});

test("open is live; a close waits, then tries again", () => {
  const { clock, connection, sockets, last, state } = page({ random: () => 0 });
  connection.start();
  last().open();
  assert.equal(state().state, "live");
  last().drop();
  assert.deepEqual(state(), { state: "reconnecting", phase: "waiting", retryAt: 250 });
  clock.advance(249);
  assert.equal(sockets.length, 1);
  clock.advance(1);
  assert.equal(sockets.length, 2);
  assert.deepEqual(state(), { state: "reconnecting", phase: "trying", retryAt: null });
  last().open();
  assert.equal(state().state, "live");
});

test("five failed tries in a row are lost; it goes on trying; a message resets the count", () => {
  const { clock, connection, sockets, last, state, stats } = page();
  connection.start();
  last().open();
  for (let failure = 1; failure <= LOST_AFTER; failure += 1) {
    last().drop();
    assert.equal(state().state, failure < LOST_AFTER ? "reconnecting" : "lost");
    clock.advance(state().retryAt - clock.now());
    last().open(); // open, but closed again before any message
  }
  assert.equal(stats.reconnects, LOST_AFTER);
  last().drop();
  assert.equal(state().state, "lost");
  assert.equal(state().retryAt - clock.now(), 10000); // the last ceiling repeats
  clock.advance(10000);
  assert.equal(sockets.length, LOST_AFTER + 2);
  last().open();
  last().message("batch");
  last().drop();
  assert.equal(state().state, "reconnecting");
  assert.equal(state().retryAt - clock.now(), 500);
});

test("Try now brings the scheduled try forward, and only then", () => {
  const { connection, sockets, last, state } = page();
  connection.start();
  connection.tryNow(); // a try is under way: nothing to bring forward
  assert.equal(sockets.length, 1);
  last().open();
  last().drop();
  connection.tryNow();
  assert.equal(sockets.length, 2);
  assert.equal(state().phase, "trying");
  connection.tryNow();
  assert.equal(sockets.length, 2);
});

test("a refused handshake waits for the session check; an ended session stops it", async () => {
  const { clock, connection, sockets, last, state } = page({ ended: true, random: () => 0 });
  connection.start();
  last().drop(); // refused: never opened
  assert.equal(state().retryAt - clock.now(), SESSION_CHECK_MS);
  await Promise.resolve();
  await Promise.resolve();
  assert.deepEqual(state(), { state: "signed-out", phase: null, retryAt: null });
  clock.advance(3600_000);
  assert.equal(sockets.length, 1);
  assert.equal(state().state, "signed-out");
});

test("a socket closed because its session ended is signed out, and tries no more", async () => {
  const { clock, connection, sockets, last, state, stats } = page({ ended: true });
  connection.start();
  last().open();
  last().message("batch");
  last().drop(SIGNED_OUT_CODE);
  assert.deepEqual(state(), { state: "reconnecting", phase: "trying", retryAt: null });
  await Promise.resolve();
  await Promise.resolve();
  assert.deepEqual(state(), { state: "signed-out", phase: null, retryAt: null });
  clock.advance(3600_000);
  assert.equal(sockets.length, 1);
  assert.equal(stats.reconnects, 0);
});

test("closed for an ended session, a page whose browser holds a valid one opens again", async () => {
  // The session's key was renewed (a password change in this browser, a new login): the
  // check says it may read the task, and a socket opens at once with the new cookie.
  const { connection, sockets, last, state } = page({ ended: false });
  connection.start();
  last().open();
  last().message("batch");
  last().drop(SIGNED_OUT_CODE);
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(sockets.length, 2);
  last().open();
  assert.equal(state().state, "live");
  // Closed so again before a word came through: signed out, not asked again in a loop.
  last().drop(SIGNED_OUT_CODE);
  assert.deepEqual(state(), { state: "signed-out", phase: null, retryAt: null });
  assert.equal(sockets.length, 2);
});

test("closed for an ended session, a page that cannot ask is signed out", async () => {
  const { connection, sockets, last, state } = page();
  connection.sessionEnded = () => Promise.reject(new Error("the server is away"));
  connection.start();
  last().open();
  last().drop(SIGNED_OUT_CODE);
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(state().state, "signed-out");
  assert.equal(sockets.length, 1);
});

test("a session still valid keeps trying after a refused handshake", async () => {
  const { clock, connection, sockets, last, state } = page({ ended: false });
  connection.start();
  last().drop();
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(state().state, "reconnecting");
  clock.advance(SESSION_CHECK_MS);
  assert.equal(sockets.length, 2);
});

test("a silent socket is replaced after the heartbeat's silence limit, not before", () => {
  const { clock, connection, sockets, last, state, stats } = page();
  const limit = silenceLimitMs(HEARTBEAT_MS);
  assert.ok(limit > 2 * HEARTBEAT_MS, "two heartbeats missed is not yet a dead connection");
  connection.start();
  last().open();
  clock.advance(HEARTBEAT_MS);
  last().message("heartbeat");
  clock.advance(limit);
  assert.equal(sockets.length, 1);
  clock.advance(1000);
  assert.equal(sockets.length, 2);
  assert.ok(sockets[0].closed);
  assert.equal(stats.reconnects, 1);
  assert.equal(state().state, "reconnecting");
  sockets[0].drop(); // the old socket's close, late: it schedules nothing
  assert.equal(state().phase, "trying");
});

test("a handshake that hangs is replaced", () => {
  const { clock, connection, sockets } = page();
  connection.start();
  clock.advance(CONNECT_TIMEOUT_MS);
  assert.equal(sockets.length, 1);
  clock.advance(1000);
  assert.equal(sockets.length, 2);
});

test("once the task ended, a close is not a lost connection", () => {
  const { clock, connection, sockets, last, state } = page();
  connection.start();
  last().open();
  connection.end();
  assert.equal(state().state, "live");
  assert.ok(sockets[0].closed);
  clock.advance(3600_000);
  assert.equal(sockets.length, 1);
});

test("offline is said within a second, nothing is tried, and back online it resumes at once", () => {
  const network = { online: true };
  const { clock, connection, sockets, last, state } = page({ network });
  connection.start();
  last().open();
  last().message("<template data-batch data-seq=8></template>");
  const cut = last();

  network.online = false; // the socket itself stays open, silent: the browser knows better
  clock.advance(1000);
  assert.deepEqual(state(), { state: "reconnecting", phase: "offline", retryAt: null });
  assert.equal(cut.closed, true);
  clock.advance(120000); // no try is spent while there is no network, none reaches "lost"
  assert.equal(sockets.length, 1);
  assert.equal(state().phase, "offline");

  network.online = true;
  clock.advance(1000); // not the next scheduled try, up to 10 s away: now
  assert.equal(sockets.length, 2);
  assert.equal(last().url, "ws://host/ws/tasks/t/?after=8");
  last().open();
  assert.equal(state().state, "live");
});

test("going offline between tries cancels the scheduled one", () => {
  const network = { online: true };
  const { clock, connection, sockets, last, state } = page({ network });
  connection.start();
  last().open();
  clock.advance(900);
  last().drop(); // a try is scheduled, at 1,400 ms
  network.online = false;
  clock.advance(100); // the browser's word is read at 1,000 ms
  assert.equal(state().phase, "offline");
  clock.advance(60000);
  assert.equal(sockets.length, 1);
});
