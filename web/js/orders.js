// My open orders: loaded over HTTP, kept current by the private order updates, each with an Amend and a
// Cancel button. The amend form (amend.js) is a row of its own under its order's, kept across redraws.

import { arrow, el, fitQty, fmtPrice, fmtQty, fmtStatus } from "./format.js";

const OPEN = new Set(["new", "partially_filled"]);
const FILLED_COLUMN = 4;

/** "filled / qty", each in full when both fit on one line of `chars`, else as compact as it takes. */
export function filledOfQty(filled, qty, chars) {
  for (let width = 13; width > 6; width--) {
    const text = `${fitQty(filled, width)} / ${fitQty(qty, width)}`;
    if (text.length <= chars) return text;
  }
  return `${fitQty(filled, 6)} / ${fitQty(qty, 6)}`; // narrow columns wrap it after the slash
}

export class MyOrders {
  /**
   * `columns` (ColumnChars) says how many characters the Filled / Qty column holds; `onAmend(order)` opens
   * or closes the amend form, and `extraRow(order)` answers the row to show under the order's (the form),
   * or null.
   */
  constructor({ tbody, empty, onCancel, onAmend, extraRow, columns }) {
    this.tbody = tbody;
    this.empty = empty;
    this.onCancel = onCancel;
    this.onAmend = onAmend;
    this.extraRow = extraRow;
    this.columns = columns;
    this.orders = new Map(); // orderId -> order result
    this.busy = new Set(); // orderIds with a cancel in flight
    this.amending = new Set(); // orderIds with an amend in flight
  }

  /** My open orders in one symbol, oldest first. */
  inSymbol(symbol) {
    return [...this.orders.values()].filter((o) => o.symbol === symbol).sort((a, b) => a.orderId - b.orderId);
  }

  /** Replace the list with the server's (GET /orders?status=open). */
  reset(orders) {
    this.orders = new Map(orders.map((o) => [o.orderId, o]));
  }

  /** Apply an order's new state; answers true when the list changed. Older states never win. */
  upsert(order) {
    const known = this.orders.get(order.orderId);
    if (known && known.seq > order.seq) return false;
    if (OPEN.has(order.status)) this.orders.set(order.orderId, order);
    else if (!this.orders.delete(order.orderId)) return false;
    return true;
  }

  /** Prices of my open orders in one symbol, by side: for marking them in the book. */
  prices(symbol) {
    const mine = { buy: new Set(), sell: new Set() };
    for (const o of this.orders.values()) {
      if (o.symbol === symbol && o.type === "limit") mine[o.side].add(o.price);
    }
    return mine;
  }

  render() {
    const rows = [];
    for (const o of [...this.orders.values()].sort((a, b) => a.orderId - b.orderId)) {
      rows.push(this.row(o));
      const extra = this.extraRow(o);
      if (extra) rows.push(extra);
    }
    const active = document.activeElement;
    const focused = active && this.tbody.contains(active) ? active : null;
    this.tbody.replaceChildren(...rows);
    this.empty.hidden = this.orders.size > 0;
    if (focused === null) return;
    // Keep the keyboard where it was: in the amend form (kept across redraws), on the same order's button,
    // else on the next order's.
    if (focused.isConnected) {
      focused.focus();
      return;
    }
    const { orderId, action } = focused.dataset;
    const again = this.tbody.querySelector(`button[data-order-id="${orderId}"][data-action="${action}"]`) ||
      this.tbody.querySelector("button");
    if (again) again.focus();
  }

  /** The order's Amend button, if it is listed: where the keyboard goes back to from the amend form. */
  amendButton(orderId) {
    return this.tbody.querySelector(`button[data-order-id="${orderId}"][data-action="amend"]`);
  }

  row(o) {
    const tr = el("tr", `order-${o.side}`);
    tr.dataset.orderId = String(o.orderId);
    const what = `order ${o.orderId}: ${o.side} ${fmtQty(o.qty)} ${o.symbol} at ${fmtPrice(o.price)}, ` +
      `${fmtStatus(o.status)}, ${fmtQty(o.filledQty)} filled`;
    tr.title = `#${o.orderId} ${o.side} ${fmtQty(o.qty)} ${o.symbol} @ ${fmtPrice(o.price)}: ` +
      `${fmtStatus(o.status)}, ${fmtQty(o.filledQty)} filled`;
    const side = el("td", "side");
    side.append(el("span", "arrow", arrow(o.side)), el("span", "side-word", ` ${o.side}`));
    const busy = this.busy.has(o.orderId);
    const button = el("button", "cancel", busy ? "Cancelling…" : "Cancel");
    button.type = "button";
    button.dataset.orderId = String(o.orderId);
    button.dataset.action = "cancel";
    button.disabled = busy;
    button.setAttribute("aria-label", `Cancel ${what}`);
    button.addEventListener("click", () => {
      // Disabled at once, before the next redraw: a double click sends one cancel.
      if (button.disabled) return;
      button.disabled = true;
      button.textContent = "Cancelling…";
      this.onCancel(o);
    });
    const amending = this.amending.has(o.orderId);
    const amend = el("button", "amend", amending ? "Amending…" : "Amend");
    amend.type = "button";
    amend.dataset.orderId = String(o.orderId);
    amend.dataset.action = "amend";
    amend.disabled = amending || busy;
    amend.setAttribute("aria-label", `Amend ${what}`);
    amend.setAttribute("aria-expanded", String(this.extraRow(o) !== null));
    amend.addEventListener("click", () => this.onAmend(o));
    const action = el("td", "action");
    action.append(amend, button);
    const symbol = el("td", "symbol", o.symbol);
    symbol.title = o.symbol;
    tr.append(
      el("td", "num id", `#${o.orderId}`),
      symbol,
      side,
      el("td", "num", o.type === "market" ? "market" : fmtPrice(o.price)),
      el("td", "num filled", filledOfQty(o.filledQty, o.qty, this.columns.get(FILLED_COLUMN, 27))),
      el("td", "status", fmtStatus(o.status)),
      action,
    );
    return tr;
  }
}
