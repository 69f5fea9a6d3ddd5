// The trade tape: newest first, coloured by aggressor and always with an arrow (▲ buyer took, ▼ seller hit).

import { arrow, el, fitQty, fmtPrice, fmtQty, fmtTime } from "./format.js";

export const KEEP = 60;

export class Tape {
  /** `columns` (ColumnChars) says how many characters the quantity column holds. */
  constructor(tbody, columns) {
    this.tbody = tbody;
    this.columns = columns;
    this.trades = []; // newest first
    this.seen = new Set();
    this.hole = null; // {below, text}: trades older than `below` may be missing; a row says so
    this.dirty = true;
  }

  clear() {
    this.trades = [];
    this.seen.clear();
    this.hole = null;
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

  /** Say that trades between `below` and the older rows may be missing (null: the tape is whole again). */
  markHole(below, text) {
    this.hole = below === null ? null : { below, text };
    this.dirty = true;
  }

  last() {
    return this.trades[0] || null;
  }

  /** Redraw everything on the next render (the columns changed width). */
  touch() {
    this.dirty = true;
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const qtyChars = this.columns.get(2, 11);
    const rows = [];
    let holeShown = false;
    for (const t of this.trades) {
      if (this.hole && !holeShown && t.tradeId < this.hole.below) {
        const note = el("td", "", this.hole.text);
        note.colSpan = 3;
        const tr = el("tr", "tape-hole");
        tr.append(note);
        rows.push(tr);
        holeShown = true;
      }
      const tr = el("tr", t.aggressor === "buy" ? "buy" : "sell");
      tr.dataset.tradeId = String(t.tradeId);
      const px = el("td", "num");
      px.append(el("span", "arrow", arrow(t.aggressor) + " "), fmtPrice(t.price));
      px.append(el("span", "vh", t.aggressor === "buy" ? " buyer took" : " seller hit"));
      const qty = el("td", "num", fitQty(t.qty, qtyChars));
      if (qty.textContent !== fmtQty(t.qty)) qty.title = fmtQty(t.qty);
      tr.append(el("td", "time", fmtTime(t.ts)), px, qty);
      rows.push(tr);
    }
    this.tbody.replaceChildren(...rows);
  }
}
