// Text formatting shared by the panels. Prices are integer ticks and are shown as they are.

const grouped = new Intl.NumberFormat("en-US");
const UNITS = [[1e3, "K"], [1e6, "M"], [1e9, "B"], [1e12, "T"]];
const decimal = [0, 1, 2, 3].map((d) => new Intl.NumberFormat("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }));

export function fmtQty(n) {
  return grouped.format(n);
}

/**
 * `n` with thousands separators; when that is wider than `width` characters, in K, M, B or T with as many
 * decimals as fit (1,234,567,890 in 6 is `1.235B`), so a column never grows. The TUI's `qty_fit`.
 */
export function fitQty(n, width) {
  const text = fmtQty(n);
  if (text.length <= width || n < 1000) return text;
  // The largest unit n reaches, counting 999,999 as 1.000M rather than 1,000.0K.
  let [unit, suffix] = UNITS[0];
  for (const [u, s] of UNITS) if (n >= u * 0.9995) [unit, suffix] = [u, s];
  let out = text;
  for (const d of [3, 2, 1, 0]) {
    out = decimal[d].format(n / unit) + suffix;
    if (out.length <= width) break;
  }
  return out;
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

const FILL_PRICES_LISTED = 3;

/**
 * The fills of one order call, by price: "filled 20 @ 9998, 20 @ 9999" for up to three prices, else
 * "filled 40 at 5 prices (9996 to 10000), avg 9998.2", however many fills a sweep made.
 */
export function describeFills(fills) {
  const byPrice = new Map();
  let qty = 0;
  let cost = 0;
  for (const f of fills) {
    byPrice.set(f.price, (byPrice.get(f.price) || 0) + f.qty);
    qty += f.qty;
    cost += f.price * f.qty;
  }
  if (byPrice.size <= FILL_PRICES_LISTED) {
    return "filled " + [...byPrice].map(([price, q]) => `${fmtQty(q)} @ ${fmtPrice(price)}`).join(", ");
  }
  const prices = [...byPrice.keys()];
  const [low, high] = [Math.min(...prices), Math.max(...prices)];
  const avg = Math.round((cost / qty) * 10) / 10;
  return `filled ${fmtQty(qty)} at ${byPrice.size} prices (${fmtPrice(low)} to ${fmtPrice(high)}), avg ${fmtPrice(avg)}`;
}

/** One line for an order result: what the server did with the order. */
export function describeResult(o) {
  const head = `#${o.orderId} ${describeOrder(o)}`;
  const fills = o.fills && o.fills.length ? `: ${describeFills(o.fills)}` : "";
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
