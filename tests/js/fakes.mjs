// A clock the tests move by hand, and sockets that do what the test says.

export class FakeClock {
  constructor() {
    this.time = 0;
    this.timers = new Map();
    this.nextId = 1;
  }

  now = () => this.time;

  setTimeout = (callback, ms) => this.add(callback, ms, 0);
  setInterval = (callback, ms) => this.add(callback, ms, ms);
  clearTimeout = (id) => this.timers.delete(id);
  clearInterval = (id) => this.timers.delete(id);

  add(callback, ms, every) {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + ms, callback, every });
    return id;
  }

  /** Move time on by `ms`, running every timer that falls due, in order. */
  advance(ms) {
    const end = this.time + ms;
    for (;;) {
      let due = null;
      for (const [id, timer] of this.timers) {
        if (timer.at <= end && (!due || timer.at < due[1].at)) {
          due = [id, timer];
        }
      }
      if (!due) {
        break;
      }
      const [id, timer] = due;
      this.time = timer.at;
      if (timer.every) {
        timer.at += timer.every;
      } else {
        this.timers.delete(id);
      }
      timer.callback();
    }
    this.time = end;
  }
}

export class FakeSocket {
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.closed = false;
  }

  open() {
    this.readyState = 1;
    this.onopen?.();
  }

  message(data) {
    this.onmessage?.({ data });
  }

  /** The server closed it (with `code`, else as a lost connection), or the handshake was
   * refused. */
  drop(code = 1006) {
    this.readyState = 3;
    this.onclose?.({ code });
  }

  close() {
    this.readyState = 3;
    this.closed = true;
  }
}
