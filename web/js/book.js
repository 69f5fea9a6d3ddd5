// The order book: its state as the feed describes it, and the table that shows it.

import { el, fitQty, fmtPrice, fmtQty } from "./format.js";

/**
 * One symbol's book, kept from a snapshot and the updates after it.
 * apply() answers "ok", or "gap" when an update's prevSeq is not the seq held: the caller then asks for a
 * fresh snapshot and the book ignores updates until it arrives.
 */
export class BookState {
  constructor(symbol) {
    this.symbol = symbol;
    this.seq = null; // null: waiting for a snapshot
    this.bids = new Map(); // price -> [qty, orders]
    this.asks = new Map();
  }

  snapshot(msg) {
    this.seq = msg.seq;
    this.bids = new Map(msg.bids.map(([p, q, n]) => [p, [q, n]]));
    this.asks = new Map(msg.asks.map(([p, q, n]) => [p, [q, n]]));
  }

  apply(msg) {
    if (this.seq === null) return "waiting";
    if (msg.prevSeq !== this.seq) {
      this.seq = null;
      return "gap";
    }
    this.seq = msg.seq;
    setLevels(this.bids, msg.bids || []);
    setLevels(this.asks, msg.asks || []);
    return "ok";
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

/**
 * The book table: a fixed number of rows per side, updated in place so keyboard focus on a price
 * survives every redraw. Asks are listed worst to best down to the spread, bids best to worst below it.
 */
export class BookView {
  constructor({ asks, bids, spread, depth, onPick, columns }) {
    this.depth = depth;
    this.spread = spread;
    this.columns = columns; // ColumnChars: how many characters the size and total columns hold
    this.askRows = makeRows(asks, depth, "sell", onPick);
    this.bidRows = makeRows(bids, depth, "buy", onPick);
  }

  render(book, mine) {
    const { bids, asks } = book.levels(this.depth);
    const maxTotal = Math.max(1, bids.length ? bids.at(-1).total : 0, asks.length ? asks.at(-1).total : 0);
    const fit = { size: this.columns.get(1, 11), total: this.columns.get(2, 14) };
    // Asks: the best ask sits in the last row, next to the spread.
    for (let i = 0; i < this.depth; i++) {
      const level = asks[this.depth - 1 - i];
      fillRow(this.askRows[i], level, maxTotal, mine.sell, fit);
    }
    for (let i = 0; i < this.depth; i++) fillRow(this.bidRows[i], bids[i], maxTotal, mine.buy, fit);
    const bid = book.bestBid();
    const ask = book.bestAsk();
    if (bid !== null && ask !== null) {
      const spread = ask - bid;
      const mid = (ask + bid) / 2;
      this.spread.textContent = `Spread ${fmtPrice(spread)} · Mid ${fmtPrice(mid)}`;
    } else {
      this.spread.textContent = bid === null && ask === null ? "Empty book" : "Spread — (one side empty)";
    }
  }
}

function makeRows(tbody, depth, side, onPick) {
  tbody.replaceChildren();
  const rows = [];
  for (let i = 0; i < depth; i++) {
    const tr = el("tr", `level ${side} vacant`);
    const priceCell = el("td", "px");
    const button = el("button", "pick");
    button.type = "button";
    priceCell.append(button);
    const mark = el("span", "mine-mark", "");
    priceCell.append(mark);
    const qty = el("td", "num");
    const total = el("td", "num");
    tr.append(priceCell, qty, total);
    tr.addEventListener("click", (ev) => {
      const price = tr.dataset.price;
      if (price === undefined) return;
      if (ev.target !== button) button.focus();
      onPick(Number(price), side);
    });
    tbody.append(tr);
    rows.push({ tr, button, mark, qty, total });
  }
  return rows;
}

function fillRow(row, level, maxTotal, minePrices, fit) {
  if (!level) {
    if (row.tr.dataset.price === undefined) return;
    delete row.tr.dataset.price;
    row.tr.classList.add("vacant");
    row.button.textContent = "";
    row.button.tabIndex = -1;
    row.button.removeAttribute("aria-label");
    row.mark.textContent = "";
    row.qty.textContent = "";
    row.total.textContent = "";
    row.tr.style.setProperty("--depth", "0%");
    return;
  }
  const side = row.tr.classList.contains("sell") ? "ask" : "bid";
  const price = fmtPrice(level.price);
  row.tr.dataset.price = String(level.price);
  row.tr.classList.remove("vacant");
  row.button.textContent = price;
  row.button.tabIndex = 0;
  const own = minePrices.has(level.price);
  row.button.setAttribute(
    "aria-label",
    `${side} ${price}, size ${fmtQty(level.qty)} in ${level.orders} order${level.orders === 1 ? "" : "s"}` +
      `${own ? ", includes yours" : ""}. Copy price to ticket`,
  );
  row.mark.textContent = own ? "◆" : "";
  row.mark.title = own ? "Your order rests here" : "";
  // Prices always in full; a size or total too wide for its column in K/M/B, in full in the row's tooltip.
  row.qty.textContent = fitQty(level.qty, fit.size);
  row.total.textContent = fitQty(level.total, fit.total);
  row.tr.title = `${fmtQty(level.qty)} in ${level.orders} order${level.orders === 1 ? "" : "s"}, ${fmtQty(level.total)} in all to here`;
  row.tr.style.setProperty("--depth", `${((level.total / maxTotal) * 100).toFixed(1)}%`);
}
