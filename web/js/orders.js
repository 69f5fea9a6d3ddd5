// My open orders: loaded over HTTP, kept current by the private order updates, each with a cancel button.

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
  /** `columns` (ColumnChars) says how many characters the Filled / Qty column holds. */
  constructor({ tbody, empty, onCancel, columns }) {
    this.tbody = tbody;
    this.empty = empty;
    this.onCancel = onCancel;
    this.columns = columns;
    this.orders = new Map(); // orderId -> order result
    this.busy = new Set(); // orderIds with a cancel in flight
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
    const rows = [...this.orders.values()]
      .sort((a, b) => a.orderId - b.orderId)
      .map((o) => this.row(o));
    const focused = document.activeElement && this.tbody.contains(document.activeElement)
      ? document.activeElement.dataset.orderId
      : undefined;
    this.tbody.replaceChildren(...rows);
    this.empty.hidden = rows.length > 0;
    if (focused !== undefined) {
      // Keep the keyboard where it was: on the same order's button, else on the next one.
      const again = this.tbody.querySelector(`button[data-order-id="${focused}"]`) || this.tbody.querySelector("button");
      if (again) again.focus();
    }
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
    button.disabled = busy;
    button.setAttribute("aria-label", `Cancel ${what}`);
    button.addEventListener("click", () => {
      // Disabled at once, before the next redraw: a double click sends one cancel.
      if (button.disabled) return;
      button.disabled = true;
      button.textContent = "Cancelling…";
      this.onCancel(o);
    });
    const action = el("td", "action");
    action.append(button);
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
