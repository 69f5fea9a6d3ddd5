// The page's one WebSocket to the server: authentication, subscriptions, order entry, reconnects.
//
// Events (CustomEvent, the message in `detail`): "state" ({state, text}), "auth", "snapshot", "update",
// "resync", "order", "servererror", and "late" ({request, status, body}: the answer to a call that had
// already been given up on after REQUEST_TIMEOUT_MS). After every (re)connect the connection
// authenticates, subscribes to every symbol it holds, and sends again each request that has had no answer:
// orders carry a clientOrderId, so a resent order is answered with the original result rather than placed
// twice.

const BACKOFF_MS = [250, 500, 1000, 2000, 4000];
const BACKOFF_CAP_MS = 5000;
const PING_EVERY_MS = 15000;
const SILENT_LIMIT_MS = 45000;
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
    this.stats = { opened: 0, messages: 0 };
    setInterval(() => this.keepAlive(), PING_EVERY_MS);
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
    if (this.ws) {
      const old = this.ws;
      this.ws = null;
      old.onclose = old.onerror = old.onmessage = old.onopen = null;
      old.close(1000, "reconnecting");
    }
    this.open();
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

  setState(state, text) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, text } }));
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  send(msg) {
    if (!this.isOpen) return false;
    this.ws.send(JSON.stringify(msg));
    return true;
  }

  keepAlive() {
    if (!this.isOpen) return;
    if (Date.now() - this.lastHeard > SILENT_LIMIT_MS) {
      // Nothing heard, not even a pong: the connection is dead without having said so.
      this.ws.close(4000, "no answer to pings");
      return;
    }
    this.send({ op: "ping" });
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
   * Send an order-entry call ({op: "order" | "cancel" | "amend", ...}) and resolve with the server's
   * {status, body, resent} (`resent`: it went out on more than one connection, so an earlier attempt may
   * have done the work and its answer been lost). Sent now if connected, else on the next connect; resent
   * after a reconnect until answered. Unanswered after `requestTimeoutMs` it resolves with status 0 and
   * `late: true`; an answer that still comes on the same connection is then a "late" event.
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
