// The trade tape: newest first, coloured by aggressor and always with an arrow (▲ buyer took, ▼ seller hit).

import { arrow, el, fmtPrice, fmtQty, fmtTime } from "./format.js";

const KEEP = 60;

export class Tape {
  constructor(tbody) {
    this.tbody = tbody;
    this.trades = []; // newest first
    this.seen = new Set();
    this.dirty = true;
  }

  clear() {
    this.trades = [];
    this.seen.clear();
    this.dirty = true;
  }

  /** Add trades in any order; ones already shown are ignored. */
  add(trades) {
    let changed = false;
    for (const t of trades) {
      if (this.seen.has(t.tradeId)) continue;
      this.seen.add(t.tradeId);
      this.trades.push(t);
      changed = true;
    }
    if (!changed) return;
    this.trades.sort((a, b) => b.tradeId - a.tradeId);
    for (const t of this.trades.splice(KEEP)) this.seen.delete(t.tradeId);
    this.dirty = true;
  }

  last() {
    return this.trades[0] || null;
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const rows = this.trades.map((t) => {
      const tr = el("tr", t.aggressor === "buy" ? "buy" : "sell");
      tr.dataset.tradeId = String(t.tradeId);
      const px = el("td", "num");
      px.append(el("span", "arrow", arrow(t.aggressor) + " "), fmtPrice(t.price));
      px.append(el("span", "vh", t.aggressor === "buy" ? " buyer took" : " seller hit"));
      tr.append(el("td", "time", fmtTime(t.ts)), px, el("td", "num", fmtQty(t.qty)));
      return tr;
    });
    this.tbody.replaceChildren(...rows);
  }
}
