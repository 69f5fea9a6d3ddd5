// The page's one WebSocket to the server: authentication, subscriptions, order entry, reconnects.
//
// Events (CustomEvent, the message in `detail`): "state" ({state, text, resumed}), "auth", "snapshot", "update",
// "resync", "order", "servererror", and "late" ({request, status, body}: the answer to a call that had
// already been given up on after REQUEST_TIMEOUT_MS). After every (re)connect the connection
// authenticates, subscribes to every symbol it holds, and sends again each request that has had no answer:
// orders carry a clientOrderId, so a resent order is answered with the original result rather than placed
// twice.
//
// A server that stops answering without closing the socket (a frozen process, a hung host) is noticed
// from silence: any message counts as life. After `pingAfterMs` with nothing heard the page sends a ping;
// once that ping has gone unanswered until `staleAfterMs` of silence, the state is "stalled" ("No answer
// for 8 s"), and back to "open" by itself as soon as anything arrives; after `closeAfterMs` the socket is
// given up and opened again. A handshake unanswered for `connectTimeoutMs` is retried the same way.

const BACKOFF_MS = [250, 500, 1000, 2000, 4000];
const BACKOFF_CAP_MS = 5000;
const PING_AFTER_MS = 5000; // silence before the page asks for a pong
const STALE_AFTER_MS = 8000; // silence before the page says the server is not answering
const CLOSE_AFTER_MS = 18000; // silence before the socket is closed and opened again
const CONNECT_TIMEOUT_MS = 10000; // a handshake unanswered this long is given up and retried
const WATCH_EVERY_MS = 250;
const REQUEST_TIMEOUT_MS = 20000;
const decoder = new TextDecoder();

export class Connection extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.token = "";
    this.symbols = new Set();
    this.ws = null;
    this.state = "connecting";
    this.attempt = 0;
    this.nextId = 1;
    this.pending = new Map(); // id -> {msg, resolve, timer, sends, timedOut}
    this.requestTimeoutMs = REQUEST_TIMEOUT_MS;
    this.retryTimer = null;
    this.countdown = null;
    this.lastHeard = 0;
    this.pingAt = 0; // when the ping for the current silence went out (before lastHeard: none yet)
    this.openingAt = 0; // when the socket being opened was created
    this.stalledText = "";
    // Shortened by the tests, read on every check.
    this.timing = {
      pingAfterMs: PING_AFTER_MS,
      staleAfterMs: STALE_AFTER_MS,
      closeAfterMs: CLOSE_AFTER_MS,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
    };
    this.stats = { opened: 0, messages: 0, pings: 0 };
    setInterval(() => this.watch(), WATCH_EVERY_MS);
    addEventListener("online", () => {
      if (!this.isOpen) this.reconnectNow();
    });
  }

  /** Connect (again) as this account; "" connects without authenticating (market data only). */
  start(token) {
    if (token !== this.token) {
      // Unanswered calls belong to the old account: never resend them as the new one.
      for (const [id, req] of this.pending) {
        clearTimeout(req.timer);
        req.resolve({ status: 0, body: { error: "the account changed before the server answered" } });
        this.pending.delete(id);
      }
    }
    this.token = token;
    this.reconnectNow();
  }

  reconnectNow() {
    clearTimeout(this.retryTimer);
    clearInterval(this.countdown);
    this.drop(1000, "reconnecting");
    this.open();
  }

  /** Let go of the socket without waiting for its close handshake (a frozen server never answers it). */
  drop(code, reason) {
    if (!this.ws) return;
    const old = this.ws;
    this.ws = null;
    old.onclose = old.onerror = old.onmessage = old.onopen = null;
    old.close(code, reason);
  }

  open() {
    this.setState("connecting", this.attempt ? `Reconnecting (attempt ${this.attempt + 1})…` : "Connecting…");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (err) {
      this.scheduleRetry(String(err));
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.openingAt = Date.now();
    ws.onopen = () => {
      this.attempt = 0;
      this.stats.opened += 1;
      this.lastHeard = Date.now();
      if (this.token) this.send({ op: "auth", token: this.token });
      if (this.symbols.size) this.send({ op: "subscribe", symbols: [...this.symbols] });
      for (const [id, req] of this.pending) {
        // A call given up on is not sent again (the user was told to check); its answer cannot come now.
        if (req.timedOut) this.pending.delete(id);
        else if (this.send(req.msg)) req.sends += 1;
      }
      this.setState("open", "Live");
    };
    ws.onmessage = (ev) => this.receive(ev.data);
    ws.onerror = () => {
      /* the close event follows and says the rest */
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.scheduleRetry(ev.reason || (ev.code === 1006 ? "connection lost" : `closed (${ev.code})`));
    };
  }

  scheduleRetry(why) {
    const base = this.attempt < BACKOFF_MS.length ? BACKOFF_MS[this.attempt] : BACKOFF_CAP_MS;
    const delay = Math.round(base * (1 + Math.random() * 0.25));
    this.attempt += 1;
    const due = Date.now() + delay;
    const show = () => {
      const secs = Math.max(0, Math.ceil((due - Date.now()) / 1000));
      this.setState("offline", `Offline: ${why}. Retrying in ${secs} s`);
    };
    show();
    clearInterval(this.countdown);
    this.countdown = setInterval(show, 1000);
    this.retryTimer = setTimeout(() => {
      clearInterval(this.countdown);
      this.open();
    }, delay);
  }

  /** `resumed`: back to "open" on the same socket after a silence (nothing was missed). */
  setState(state, text, resumed = false) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, text, resumed } }));
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  send(msg) {
    if (!this.isOpen) return false;
    this.ws.send(JSON.stringify(msg));
    return true;
  }

  /**
   * The silence check, every WATCH_EVERY_MS. Stalled and closed are judged by how long the ping has gone
   * unanswered as well as by the silence: a background tab's timers may run a minute late, and a quiet
   * market sends nothing, so silence alone is no proof.
   */
  watch() {
    const now = Date.now();
    const t = this.timing;
    if (this.ws && this.ws.readyState === WebSocket.CONNECTING) {
      if (now - this.openingAt >= t.connectTimeoutMs) {
        this.drop(4000, "no answer to the handshake");
        this.scheduleRetry("no answer from the server");
      }
      return;
    }
    if (!this.isOpen) return;
    const silent = now - this.lastHeard;
    if (silent >= t.pingAfterMs && this.pingAt <= this.lastHeard) {
      this.pingAt = now;
      this.stats.pings += 1;
      this.send({ op: "ping" });
    }
    const unanswered = this.pingAt > this.lastHeard ? now - this.pingAt : 0;
    if (silent >= t.closeAfterMs && unanswered >= t.closeAfterMs - t.pingAfterMs) {
      // Nothing heard, not even a pong: the connection is dead without having said so.
      this.drop(4000, "no answer to pings");
      this.scheduleRetry(`no answer for ${Math.floor(silent / 1000)} s`);
      return;
    }
    if (silent >= t.staleAfterMs && unanswered >= t.staleAfterMs - t.pingAfterMs) {
      const text = `No answer for ${Math.floor(silent / 1000)} s`;
      if (this.state !== "stalled" || this.stalledText !== text) {
        this.stalledText = text;
        this.setState("stalled", text);
      }
    }
  }

  subscribe(symbol) {
    this.symbols.add(symbol);
    this.send({ op: "subscribe", symbols: [symbol] });
  }

  /** Ask again for a snapshot: after a gap in the feed's sequence numbers. */
  resubscribe(symbol) {
    this.send({ op: "subscribe", symbols: [symbol] });
  }

  unsubscribe(symbol) {
    if (this.symbols.delete(symbol)) this.send({ op: "unsubscribe", symbols: [symbol] });
  }

  /** Stop subscribing to a symbol on reconnects without telling the server (it no longer lists it). */
  forget(symbol) {
    this.symbols.delete(symbol);
  }

  /**
   * Send an order-entry call ({op: "order" | "cancel" | "amend" | "cancelAll", ...}) and resolve with the
   * server's {status, body, resent} (`resent`: it went out on more than one connection, so an earlier
   * attempt may have done the work and its answer been lost). Sent now if connected, else on the next
   * connect; resent after a reconnect until answered. Unanswered after `requestTimeoutMs` it resolves with
   * status 0 and `late: true`; an answer that still comes on the same connection is then a "late" event.
   */
  request(msg) {
    const id = this.nextId++;
    const full = { ...msg, id };
    return new Promise((resolve) => {
      const req = { msg: full, resolve, timer: null, sends: 0, timedOut: false };
      req.timer = setTimeout(() => {
        req.timedOut = true;
        resolve({ status: 0, body: { error: "no answer from the server yet: check My open orders", late: true } });
      }, this.requestTimeoutMs);
      this.pending.set(id, req);
      if (this.send(full)) req.sends += 1;
    });
  }

  /** Hand an answer to whoever asked: the waiting call, or a "late" event when it was given up on. */
  answer(id, status, body) {
    const req = this.pending.get(id);
    this.pending.delete(id);
    clearTimeout(req.timer);
    if (req.timedOut) {
      this.dispatchEvent(new CustomEvent("late", { detail: { request: req.msg, status, body } }));
    } else {
      req.resolve({ status, body, resent: req.sends > 1 });
    }
  }

  receive(data) {
    this.lastHeard = Date.now();
    this.stats.messages += 1;
    if (this.state === "stalled") this.setState("open", "Live", true); // any message is life
    let msg;
    try {
      // The protocol promises text frames; binary ones holding the same UTF-8 JSON are read too.
      msg = JSON.parse(typeof data === "string" ? data : decoder.decode(data));
    } catch {
      return;
    }
    switch (msg.type) {
      case "result":
        if (this.pending.has(msg.id)) this.answer(msg.id, msg.status, msg.body);
        return;
      case "pong":
        return;
      case "error":
        if (msg.id !== undefined && this.pending.has(msg.id)) {
          this.answer(msg.id, msg.status || 400, msg);
          return;
        }
        this.dispatchEvent(new CustomEvent("servererror", { detail: msg }));
        return;
      case "auth":
      case "snapshot":
      case "update":
      case "resync":
      case "order":
        this.dispatchEvent(new CustomEvent(msg.type, { detail: msg }));
        return;
      default:
        return;
    }
  }
}
