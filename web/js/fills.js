// My fills: the account's newest fills in the symbol on screen, read with GET /fills when the account or the
// symbol changes and after every reconnect, and kept current from the answers to my orders and amends and
// from the private order updates. Keyed by trade id, so a fill seen live and again in a reload is one row.

import { arrow, el, fitQty, fmtPrice, fmtQty, fmtTime } from "./format.js";
import { invalidate } from "./frame.js";

export const KEEP = 50;
const QTY_COLUMN = 2;
const LIQUIDITY_WORDS = {
  maker: "maker: your resting order was hit",
  taker: "taker: your order took liquidity",
};

/** An order result's fills as GET /fills items, each with the liquidity the server gave it. */
export function fillsOf(order) {
  return (order.fills || []).map((f) => ({
    tradeId: f.tradeId,
    symbol: order.symbol,
    orderId: order.orderId,
    side: order.side,
    price: f.price,
    qty: f.qty,
    liquidity: f.liquidity,
    ts: order.ts,
  }));
}

/** The time of day for today's fills, the day for older ones (the full time is in the row's tooltip). */
function whenText(ts) {
  const d = new Date(ts);
  if (d.toDateString() === new Date().toDateString()) return fmtTime(ts);
  return d.toLocaleDateString("en-GB", { day: "numeric", month: "short" });
}

export class MyFills {
  /**
   * `read(account, query)` answers GET /fills?query as {status, body} (rejects when the server cannot be
   * reached); `columns` (ColumnChars) says how many characters the quantity column holds.
   */
  constructor({ tbody, empty, label, columns, read }) {
    this.tbody = tbody;
    this.empty = empty;
    this.label = label;
    this.columns = columns;
    this.read = read;
    this.account = "";
    this.symbol = null;
    this.fills = new Map(); // tradeId -> fill
    this.access = "unknown"; // "signed" once the server took the account's token (only then is GET /fills
    // asked: a refusal would be logged by the browser), "refused"
    this.state = "idle"; // "loading", "loaded", "failed"
    this.failure = "";
  }

  /** Show this account's fills in this symbol: a change empties the list and reads it (once signed in). */
  show(account, symbol) {
    if (account === this.account && symbol === this.symbol) return;
    if (account !== this.account) this.access = "unknown";
    this.account = account;
    this.symbol = symbol;
    this.fills.clear();
    this.state = "idle";
    this.label.textContent = symbol || "";
    this.reload();
  }

  /** The server took the token (on every connect): read the fills, those made while offline included. */
  signedIn() {
    this.access = "signed";
    this.reload();
  }

  /** The server refused the token: asking would only be refused too (and logged by the browser). */
  refused() {
    this.access = "refused";
    invalidate("fills");
  }

  /** Read the newest fills again, and merge them with those held. */
  async reload() {
    const { account, symbol } = this;
    invalidate("fills");
    if (!account || !symbol || this.access !== "signed") return;
    if (this.state !== "loaded") this.state = "loading";
    let res;
    try {
      res = await this.read(account, `symbol=${encodeURIComponent(symbol)}&order=desc&limit=${KEEP}`);
    } catch {
      res = { status: 0, body: { error: "the server cannot be reached" } };
    }
    if (account !== this.account || symbol !== this.symbol) return; // read for what is no longer shown
    if (res.status === 200 && Array.isArray(res.body)) {
      this.state = "loaded";
      this.merge(res.body, true);
    } else if (res.status === 401) {
      this.access = "refused";
    } else if (this.state !== "loaded") {
      this.state = "failed";
      this.failure = (res.body && res.body.error) || `error ${res.status}`;
    }
    invalidate("fills");
  }

  /**
   * An order's or an amend's answer, or a private order update: the fills that command made on the order,
   * each saying maker or taker.
   */
  seen(order) {
    if (order.symbol !== this.symbol || !(order.fills && order.fills.length)) return;
    this.merge(fillsOf(order), false);
  }

  /**
   * Take fills in, newest KEEP kept. The server's records replace what the page held; a live one seen
   * again (an order's answer, then its update) is the same fill.
   */
  merge(list, fromServer) {
    let changed = false;
    for (const f of list) {
      if (!fromServer && this.fills.has(f.tradeId)) continue;
      this.fills.set(f.tradeId, f);
      changed = true;
    }
    if (!changed) return;
    const newest = [...this.fills.values()].sort((a, b) => b.tradeId - a.tradeId).slice(0, KEEP);
    this.fills = new Map(newest.map((f) => [f.tradeId, f]));
    invalidate("fills");
  }

  /** Newest first. */
  list() {
    return [...this.fills.values()];
  }

  render() {
    const qtyChars = this.columns.get(QTY_COLUMN, 13);
    this.tbody.replaceChildren(...this.list().map((f) => this.row(f, qtyChars)));
    this.empty.hidden = this.fills.size > 0;
    this.empty.textContent = this.emptyText();
  }

  emptyText() {
    const s = this.symbol || "";
    if (this.access === "refused") return "Your fills need a token the server knows (top right).";
    if (this.state === "failed") return `Your ${s} fills could not be read (${this.failure}); tried again on reconnecting.`;
    if (this.state === "loading" || this.state === "idle") return `Reading your ${s} fills…`;
    return `No fills in ${s} yet.`;
  }

  row(f, qtyChars) {
    const tr = el("tr", `fill-${f.side}`);
    tr.dataset.tradeId = String(f.tradeId);
    tr.title = `${new Date(f.ts).toLocaleString("en-GB")}: ${f.side} ${fmtQty(f.qty)} ${f.symbol} @ ` +
      `${fmtPrice(f.price)}, order #${f.orderId}, trade ${f.tradeId}; ${LIQUIDITY_WORDS[f.liquidity]}`;
    const side = el("td", "side");
    side.append(el("span", "arrow", arrow(f.side)), el("span", "side-word", ` ${f.side}`));
    const qty = el("td", "num qty", fitQty(f.qty, qtyChars));
    const liquidity = el("td", `liq ${f.liquidity}`, f.liquidity);
    tr.append(
      el("td", "time", whenText(f.ts)),
      side,
      qty,
      el("td", "num price", `@ ${fmtPrice(f.price)}`),
      el("td", "num id", `#${f.orderId}`),
      liquidity,
    );
    return tr;
  }
}
