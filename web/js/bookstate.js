// A symbol's book as the feed describes it: the protocol's rules (docs/protocol.md), with no DOM, so that
// node runs them against the same cases as the Python client (tests/cases/book_rules.json).

/**
 * One symbol's book, kept from a snapshot and the updates after it.
 * snapshot() and apply() answer what came of a message: "ok" (applied, the book whole), "part" (applied,
 * more parts of the same message to come), "waiting" (no snapshot held: ignored) or "gap" (an update's
 * prevSeq is not the seq held, or a part is missing): the caller then asks for a fresh snapshot and the
 * book ignores updates until it arrives.
 */
export class BookState {
  constructor(symbol) {
    this.symbol = symbol;
    this.seq = null; // null: waiting for a snapshot
    this.more = 0; // parts still to come of a message sent in parts (0: the book is whole)
    this.deeper = false; // a deep book's snapshot: its deeper levels still to come, as updates
    this.bids = new Map(); // price -> [qty, orders]
    this.asks = new Map();
  }

  snapshot(msg) {
    this.seq = msg.seq;
    this.more = msg.more || 0;
    this.deeper = msg.deeper === true;
    this.bids = new Map(msg.bids.map(([p, q, n]) => [p, [q, n]]));
    this.asks = new Map(msg.asks.map(([p, q, n]) => [p, [q, n]]));
    return this.more || this.deeper ? "part" : "ok";
  }

  apply(msg) {
    if (this.seq === null) return "waiting";
    // A part continues its message: its prevSeq and seq are both the seq that message brought.
    if (msg.prevSeq !== this.seq || (this.more > 0 && msg.seq !== this.seq)) {
      this.reset();
      return "gap";
    }
    this.seq = msg.seq;
    setLevels(this.bids, msg.bids || []);
    setLevels(this.asks, msg.asks || []);
    if (this.deeper) {
      // The symbol's other updates come between the deeper levels; the last of those says deeper false.
      if (msg.deeper === false) this.deeper = false;
      return this.deeper ? "part" : "ok";
    }
    if (this.more > 0) {
      this.more -= 1;
      return this.more ? "part" : "ok";
    }
    this.more = msg.more || 0;
    return this.more ? "part" : "ok";
  }

  /** Wait for a fresh snapshot: after a resync, or a connection lost (whatever is held may be stale). */
  reset() {
    this.seq = null;
    this.more = 0;
    this.deeper = false;
  }

  /** Whether the levels are current: a snapshot is held, with every part of its latest message. */
  get live() {
    return this.seq !== null && this.more === 0 && !this.deeper;
  }

  /** Best first: bids high to low, asks low to high, at most `depth` of each. */
  levels(depth) {
    const bids = [...this.bids].sort((a, b) => b[0] - a[0]).slice(0, depth);
    const asks = [...this.asks].sort((a, b) => a[0] - b[0]).slice(0, depth);
    return { bids: withTotals(bids), asks: withTotals(asks) };
  }

  bestBid() {
    let best = null;
    for (const p of this.bids.keys()) if (best === null || p > best) best = p;
    return best;
  }

  bestAsk() {
    let best = null;
    for (const p of this.asks.keys()) if (best === null || p < best) best = p;
    return best;
  }

  /**
   * What a market order of `qty` on `side` would meet on the other side: {shown: {levels, qty, last}} for
   * the `depth` levels on screen, {all: {levels, qty, last}} for the whole side, and `reach`, the last
   * price it would trade at (null when the side holds less than qty).
   */
  sweep(side, qty, depth) {
    const other = side === "buy"
      ? [...this.asks].sort((a, b) => a[0] - b[0])
      : [...this.bids].sort((a, b) => b[0] - a[0]);
    const sum = (levels) => ({
      levels: levels.length,
      qty: levels.reduce((total, [, [q]]) => total + q, 0),
      last: levels.length ? levels.at(-1)[0] : null,
    });
    let left = qty;
    let reach = null;
    for (const [price, [q]] of other) {
      reach = price;
      left -= q;
      if (left <= 0) break;
    }
    return { shown: sum(other.slice(0, depth)), all: sum(other), reach: left <= 0 ? reach : null };
  }

  /**
   * What a limit order of `qty` on `side` at `limit` would take at once: {levels, qty, reach, rest}, the
   * other side's levels it trades at (best first, none past its price), how much, the last price, and
   * what is left over (to rest, or be cancelled).
   */
  take(side, limit, qty) {
    const other = side === "buy"
      ? [...this.asks].sort((a, b) => a[0] - b[0])
      : [...this.bids].sort((a, b) => b[0] - a[0]);
    let left = qty;
    let levels = 0;
    let reach = null;
    for (const [price, [q]] of other) {
      if (left <= 0 || (side === "buy" ? price > limit : price < limit)) break;
      levels += 1;
      reach = price;
      left -= Math.min(q, left);
    }
    return { levels, qty: qty - left, reach, rest: left };
  }
}

function setLevels(side, levels) {
  for (const [price, qty, orders] of levels) {
    if (qty === 0) side.delete(price);
    else side.set(price, [qty, orders]);
  }
}

function withTotals(levels) {
  let total = 0;
  return levels.map(([price, [qty, orders]]) => {
    total += qty;
    return { price, qty, orders, total };
  });
}
