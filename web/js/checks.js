// Checks before an order goes: the questions a careful desk asks about an order that looks like a slip.
// Each answers null (send it) or {confirm: what it would do, in words, action: the send button's label}.
//
// - A market order larger than the side of the book on screen: what it would sweep.
// - A limit order that trades through the book (fat finger): priced more than FAR_PCT (and more than
//   FAR_MIN_TICKS ticks) past the best price on the other side, or taking more levels than are shown.

import { fmtPrice, fmtQty } from "./format.js";

export const FAR_PCT = 2;
export const FAR_MIN_TICKS = 5;

const sideName = (side) => (side === "buy" ? "ask" : "bid"); // the side an order on `side` trades against
const count = (n, side) => `${n} ${sideName(side)}${n === 1 ? "" : "s"}`;

/**
 * A market order: asks when it is larger than the levels shown (`depth`), saying how far it would trade;
 * a fill-or-kill one larger than the whole side is said to trade nothing. `notLive`: why the book cannot
 * be trusted now (then it always asks), or null.
 */
export function checkMarket(order, book, depth, notLive) {
  const fok = order.tif === "fok";
  const what = `Market ${order.side} ${fmtQty(order.qty)} ${order.symbol}${fok ? " fill or kill" : ""}`;
  const action = `Send ${order.side} ${fmtQty(order.qty)} at market${fok ? " FOK" : ""}`;
  if (notLive) return { confirm: `${what}: ${notLive}, so what it would take cannot be checked.`, action };
  const { shown, all, reach } = book.sweep(order.side, order.qty, depth);
  if (all.levels === 0) return null; // an empty side fills nothing: the server says so
  const side = sideName(order.side);
  if (fok && reach === null) {
    // Fill or kill: all of it or nothing. Larger than the whole side, it trades nothing at all.
    return {
      confirm: `${what} would not fill at all: the whole ${side} side holds ${fmtQty(all.qty)} ` +
        `(${count(all.levels, order.side)}, as far as ${fmtPrice(all.last)}), less than ${fmtQty(order.qty)}, ` +
        "so the order would be cancelled with nothing traded.",
      action: `${action} anyway`,
    };
  }
  if (order.qty <= shown.qty) return null;
  const confirm = reach === null
    ? `${what} would sweep the whole ${side} side: ${count(all.levels, order.side)}, ${fmtQty(all.qty)} in all, ` +
      `as far as ${fmtPrice(all.last)}; the other ${fmtQty(order.qty - all.qty)} would be cancelled.`
    : `${what} goes past the ${count(shown.levels, order.side)} shown (${fmtQty(shown.qty)}, to ${fmtPrice(shown.last)}) ` +
      `and would trade as far as ${fmtPrice(reach)}.`;
  return { confirm, action };
}

/**
 * A limit order, or an amend, that would trade through the book: `order` is {side, price, qty (what can
 * still trade), tif}, `what` names it ("Limit buy 10 ACME @ 1500"). Asks when its price is more than
 * FAR_PCT % and FAR_MIN_TICKS ticks past the best price on the other side, or when it would trade at more
 * levels than the `depth` shown. One that does not cross, or meets an empty side, rests: no question.
 */
export function checkLimit(order, book, depth, what, action) {
  const { side, price, qty } = order;
  const best = side === "buy" ? book.bestAsk() : book.bestBid();
  if (best === null) return null;
  const through = side === "buy" ? price - best : best - price;
  if (through <= 0) return null;
  const far = through > FAR_MIN_TICKS && through * 100 > best * FAR_PCT;
  const taken = book.take(side, price, qty);
  const deep = taken.levels > depth;
  if (!far && !deep) return null;
  const parts = [];
  if (far) {
    const pct = Math.round((through / best) * 1000) / 10;
    parts.push(`is ${fmtQty(through)} ticks (${pct}%) ${side === "buy" ? "above the best ask" : "below the best bid"} ` +
      `(${fmtPrice(best)})`);
  }
  if (deep) {
    const shown = book.sweep(side, qty, depth).shown;
    parts.push(`goes past the ${count(shown.levels, side)} shown (${fmtQty(shown.qty)}, to ${fmtPrice(shown.last)})`);
  }
  const verb = side === "buy" ? "buy" : "sell";
  const range = taken.reach === best ? fmtPrice(best) : `${fmtPrice(best)} to ${fmtPrice(taken.reach)}`;
  let outcome;
  if (order.tif === "fok" && taken.rest > 0) {
    outcome = `fill or kill, it would trade nothing: only ${fmtQty(taken.qty)} is offered as far as ${fmtPrice(price)}`;
  } else {
    outcome = `it would ${verb} ${fmtQty(taken.qty)} at ${range}`;
    if (taken.rest > 0) {
      outcome += order.tif === "ioc"
        ? ` and cancel the other ${fmtQty(taken.rest)}`
        : ` and leave the other ${fmtQty(taken.rest)} resting at ${fmtPrice(price)}`;
    }
  }
  return { confirm: `${what} ${parts.join(" and ")}: ${outcome}.`, action };
}
