// Cancel all: one button over My open orders, for the symbol on screen (its label names it). It asks first,
// saying how many orders and how much; then one cancel per order goes out, all of them in flight at once,
// and Activity gets one line for the lot: "Cancelled 7 of 8 orders on ACME (1,250 off the book); #21 had
// already filled".

import { fmtPrice, fmtQty } from "./format.js";

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

/**
 * One line for what the cancels did. `outcomes`: [{before, res, now}] per order (`now`: the order as the
 * answer, or a 409's body, has it). Cancelled counts the ones this run took off the book (also a resend
 * whose first attempt did it); the others are named by what became of them.
 */
export function describeCancelAll(symbol, outcomes) {
  const groups = new Map(); // phrase -> orders
  const add = (phrase, o) => groups.set(phrase, [...(groups.get(phrase) || []), o]);
  let done = 0;
  let off = 0;
  let bad = false;
  for (const { before, res, now } of outcomes) {
    const body = res.body || {};
    if (res.status === 200 || (now && now.reason === "cancelled_by_user" && res.resent)) {
      done += 1;
      off += now.remainingQty;
    } else if (now && now.status === "filled") {
      add("had already filled", before);
    } else if (now && now.reason === "cancelled_by_user") {
      add("was already cancelled", before);
    } else if (now) {
      add(`was already ${now.status}`, before);
    } else if (res.status === 0 && body.late) {
      add("had no answer yet (see My open orders)", before);
    } else if (res.status === 0) {
      bad = true;
      add("not sent: the server cannot be reached", before);
    } else {
      bad = true;
      add(`refused (${body.error || res.status})`, before);
    }
  }
  const n = outcomes.length;
  let text = `Cancelled ${fmtQty(done)} of ${plural(n, "order")} on ${symbol}`;
  if (off) text += ` (${fmtQty(off)} off the book)`;
  for (const [phrase, list] of groups) {
    const words = list.length > 1 ? phrase.replace(/^was /, "were ") : phrase;
    text += `; ${ids(list)} ${words}`;
  }
  return { text, kind: done === n ? "ok" : bad ? "bad" : "warn" };
}

/**
 * The button and its question. `run(list)` cancels the orders and resolves once every answer is in;
 * `show(symbol, list, others)` is called whenever my orders or the symbol change.
 */
export class CancelAll {
  constructor({ button, box, text, send, back, run, home }) {
    this.button = button;
    this.home = home; // where the keyboard goes while the button is disabled by a run
    this.box = box;
    this.text = text;
    this.sendButton = send;
    this.run = run;
    this.running = 0; // orders in the run in flight
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
    const list = this.list;
    this.box.hidden = true;
    this.running = list.length;
    this.show(this.symbol, this.list, this.others);
    this.home.focus();
    try {
      await this.run(list);
    } finally {
      this.running = 0;
      this.show(this.symbol, this.list, this.others);
    }
  }
}
