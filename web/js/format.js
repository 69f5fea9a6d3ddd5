// Text formatting shared by the panels. Prices are integer ticks and are shown as they are.

const grouped = new Intl.NumberFormat("en-US");

export function fmtQty(n) {
  return grouped.format(n);
}

export function fmtPrice(p) {
  if (p === null || p === undefined) return "—";
  return Number.isInteger(p) ? String(p) : p.toFixed(1);
}

export function fmtTime(ms) {
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

const STATUS = {
  new: "open",
  partially_filled: "partly filled",
  filled: "filled",
  cancelled: "cancelled",
  rejected: "rejected",
};

export function fmtStatus(status) {
  return STATUS[status] || status;
}

export function fmtReason(reason) {
  return reason ? reason.replaceAll("_", " ") : "";
}

export function arrow(side) {
  return side === "buy" ? "▲" : "▼";
}

/** "buy 30 ACME @ 10010" or "sell 5 ACME at market". */
export function describeOrder(o) {
  const where = o.type === "market" ? "at market" : `@ ${fmtPrice(o.price)}`;
  return `${o.side} ${fmtQty(o.qty)} ${o.symbol} ${where}`;
}

/** One line for an order result: what the server did with the order. */
export function describeResult(o) {
  const head = `#${o.orderId} ${describeOrder(o)}`;
  const fills = o.fills && o.fills.length
    ? ": filled " + o.fills.map((f) => `${fmtQty(f.qty)} @ ${fmtPrice(f.price)}`).join(", ")
    : "";
  let tail = fmtStatus(o.status);
  if (o.status === "partially_filled") tail += ` (${fmtQty(o.filledQty)} of ${fmtQty(o.qty)})`;
  if (o.reason && o.reason !== "cancelled_by_user") tail += `, ${fmtReason(o.reason)}`;
  return `${head}${fills}, ${tail}`;
}

/** The element, created with a class and text: no HTML parsing of server strings, ever. */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
