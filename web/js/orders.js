// My open orders: loaded over HTTP, kept current by the private order updates, each with a cancel button.

import { arrow, el, fmtPrice, fmtQty, fmtStatus } from "./format.js";

const OPEN = new Set(["new", "partially_filled"]);

export class MyOrders {
  constructor({ tbody, empty, onCancel }) {
    this.tbody = tbody;
    this.empty = empty;
    this.onCancel = onCancel;
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
    const side = el("td", "side");
    side.append(el("span", "arrow", arrow(o.side) + " "), o.side);
    const button = el("button", "cancel", this.busy.has(o.orderId) ? "Cancelling…" : "Cancel");
    button.type = "button";
    button.dataset.orderId = String(o.orderId);
    button.disabled = this.busy.has(o.orderId);
    button.setAttribute("aria-label", `Cancel order ${o.orderId}: ${o.side} ${o.qty} ${o.symbol} at ${fmtPrice(o.price)}`);
    button.addEventListener("click", () => this.onCancel(o));
    const action = el("td");
    action.append(button);
    tr.append(
      el("td", "num", `#${o.orderId}`),
      el("td", "", o.symbol),
      side,
      el("td", "num", o.type === "market" ? "market" : fmtPrice(o.price)),
      el("td", "num", `${fmtQty(o.filledQty)} / ${fmtQty(o.qty)}`),
      el("td", "", fmtStatus(o.status)),
      action,
    );
    return tr;
  }
}
