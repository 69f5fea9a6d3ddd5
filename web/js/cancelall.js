// Cancel all: one button over My open orders, for the symbol on screen (its label names it). It asks first,
// saying how many orders and how much; then one cancelAll goes out, which the server carries out at once
// (nothing trades between its first cancel and its last), and Activity gets one line for the lot, from
// the orders its answer lists against the ones the question did: "Cancelled 7 of 8 orders on ACME (1,250
// off the book); #21 had already filled".

import { fmtPrice, fmtQty, fmtReason, fmtStatus } from "./format.js";

const plural = (n, word) => `${fmtQty(n)} ${word}${n === 1 ? "" : "s"}`;

/** "#21", "#21 and #23", "#21, #23 and #24", "#21, #23, #24, #25 and 3 more". */
function ids(list) {
  const shown = list.slice(0, 4).map((o) => `#${o.orderId}`);
  const more = list.length - shown.length;
  if (more > 0) return `${shown.join(", ")} and ${more} more`;
  return shown.length > 1 ? `${shown.slice(0, -1).join(", ")} and ${shown.at(-1)}` : shown[0];
}

/** One side's orders in words: "2 buys (300 left, 9990 to 9995)". */
function sideWords(list, side) {
  const mine = list.filter((o) => o.side === side);
  if (!mine.length) return null;
  const left = mine.reduce((total, o) => total + o.remainingQty, 0);
  const prices = mine.map((o) => o.price);
  const [low, high] = [Math.min(...prices), Math.max(...prices)];
  const where = low === high ? `@ ${fmtPrice(low)}` : `${fmtPrice(low)} to ${fmtPrice(high)}`;
  return `${plural(mine.length, side)} (${fmtQty(left)} left, ${where})`;
}

/** The question before cancelling `list` (the symbol's open orders); `others`: open orders elsewhere. */
export function cancelAllQuestion(symbol, list, others) {
  const sides = [sideWords(list, "buy"), sideWords(list, "sell")].filter(Boolean).join(" and ");
  const rest = others
    ? ` Your ${plural(others, "open order")} in other symbols ${others === 1 ? "stays" : "stay"} open.`
    : "";
  return `Cancel all ${plural(list.length, `open ${symbol} order`)}: ${sides}?${rest}`;
}

/** What became of a listed order the cancel-all did not cancel (`now`: as read after it, or null). */
function fate(now) {
  if (!now) return "was no longer open";
  if (now.status === "filled") return "had already filled";
  if (now.status === "cancelled" && now.reason !== "cancelled_by_user") {
    return `was already cancelled (${fmtReason(now.reason)})`;
  }
  return `was already ${fmtStatus(now.status)}`;
}

/**
 * One line for what a cancel-all did: {text, kind}. `list`: the orders the question listed; `res`: the
 * answer, {orders: [the orders it cancelled], seq} when 200; `fates`: orderId -> the order as read after
 * it (or null), for each listed order it did not cancel. Cancelled counts the listed ones this run took
 * off the book (also by a resend's first attempt, whose answer was lost); the others are named by what
 * became of them, and orders it cancelled that the list did not show are named too.
 */
export function describeCancelAll(symbol, list, res, fates, note = "") {
  const body = res.body || {};
  if (res.status === 0 && body.late) {
    const text = `Cancel all ${symbol}: no answer from the server yet; check My open orders (a late answer is said here)`;
    return { text, kind: "warn" };
  }
  if (res.status === 0) {
    return { text: `Cancel all ${symbol} not sent: the server cannot be reached. Try again once Live.`, kind: "bad" };
  }
  if (res.status !== 200) {
    return { text: `Cancel all ${symbol} refused: ${body.error || "error"} (${res.status})${note}`, kind: "bad" };
  }
  const cancelled = new Map((body.orders || []).map((o) => [o.orderId, o]));
  const groups = new Map(); // phrase -> orders
  const done = [];
  for (const before of list) {
    const now = cancelled.get(before.orderId) || fates.get(before.orderId) || null;
    if (cancelled.has(before.orderId) || (now && now.reason === "cancelled_by_user" && res.resent)) {
      done.push(now);
    } else {
      const phrase = fate(now);
      groups.set(phrase, [...(groups.get(phrase) || []), before]);
    }
  }
  const listed = new Set(list.map((o) => o.orderId));
  const unlisted = [...cancelled.values()].filter((o) => !listed.has(o.orderId));
  const off = [...done, ...unlisted].reduce((total, o) => total + o.remainingQty, 0);
  let text = `Cancelled ${fmtQty(done.length)} of ${plural(list.length, "order")} on ${symbol}`;
  if (off) text += ` (${fmtQty(off)} off the book)`;
  for (const [phrase, orders] of groups) text += `; ${ids(orders)} ${were(phrase, orders.length)}`;
  if (unlisted.length) {
    text += `; ${ids(unlisted)} ${were("was also cancelled", unlisted.length)} (not listed when you confirmed)`;
  }
  const kind = done.length === list.length && !unlisted.length ? "ok" : "warn";
  return { text: text + note, kind };
}

const were = (phrase, n) => (n > 1 ? phrase.replace(/^was /, "were ") : phrase);

/**
 * The button and its question. `run(symbol, list)` cancels the symbol's orders (`list`: those the question
 * listed) and resolves once its answer is said; `show(symbol, list, others)` is called whenever my orders
 * or the symbol change.
 */
export class CancelAll {
  constructor({ button, box, text, send, back, run, home }) {
    this.button = button;
    this.home = home; // where the keyboard goes while the button is disabled by a run
    this.box = box;
    this.text = text;
    this.sendButton = send;
    this.run = run;
    this.running = 0; // orders in the cancel-all in flight
    this.symbol = "";
    this.list = [];
    this.others = 0;
    button.addEventListener("click", () => this.ask());
    send.addEventListener("click", () => this.go());
    back.addEventListener("click", () => this.hide(true));
    box.addEventListener("keydown", (ev) => {
      if (ev.key !== "Escape") return;
      ev.preventDefault();
      this.hide(true);
    });
    this.back = back;
  }

  show(symbol, list, others) {
    if ((symbol || "") !== this.symbol) this.hide(false); // the question was about another symbol
    this.symbol = symbol || "";
    this.list = list;
    this.others = others;
    const b = this.button;
    if (this.running) {
      b.textContent = `Cancelling ${fmtQty(this.running)} ${this.symbol}…`;
    } else {
      b.textContent = list.length ? `Cancel all ${this.symbol} (${fmtQty(list.length)})` : `Cancel all ${this.symbol}`;
    }
    b.disabled = this.running > 0 || list.length === 0;
    b.title = list.length || this.running ? "" : `No open ${this.symbol} orders to cancel`;
    if (!this.box.hidden) {
      // The question follows the list: what it says is what a click on it does.
      if (!list.length) this.hide(false);
      else this.words();
    }
  }

  words() {
    this.text.textContent = cancelAllQuestion(this.symbol, this.list, this.others);
    this.sendButton.textContent = `Cancel ${plural(this.list.length, `${this.symbol} order`)}`;
  }

  ask() {
    if (this.running || !this.list.length) return;
    this.words();
    this.box.hidden = false;
    this.back.focus(); // the safe choice: Enter again cancels nothing
  }

  hide(focusButton) {
    if (this.box.hidden) return;
    const inside = this.box.contains(document.activeElement);
    this.box.hidden = true;
    if (focusButton || inside) this.button.focus();
  }

  async go() {
    if (this.running || !this.list.length) return;
    const { symbol, list } = this;
    this.box.hidden = true;
    this.running = list.length;
    this.show(this.symbol, this.list, this.others);
    this.home.focus();
    try {
      await this.run(symbol, list);
    } finally {
      this.running = 0;
      this.show(this.symbol, this.list, this.others);
    }
  }
}
