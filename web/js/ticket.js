// The order ticket: reads the form, checks it before anything is sent, and shows the server's answer.

import { fmtPrice, fmtQty } from "./format.js";

export const MAX_PRICE = 1_000_000_000;
export const MAX_QTY = 1_000_000_000;
const PLAIN = /^\d+$/;
const GROUPED = /^\d{1,3}(,\d{3})+$/; // 10,000 and 1,000,000; never 10,5 or 1,0000

/**
 * A whole number as typed: plain digits, or digits grouped in threes by commas. Answers the number,
 * or null for anything else, so the number sent is always the one the field shows.
 */
export function readWhole(text) {
  const s = String(text ?? "").trim();
  if (PLAIN.test(s)) return Number(s);
  if (GROUPED.test(s)) return Number(s.replaceAll(",", ""));
  return null;
}

/** The whole number the text shows, if it is one in [min, max]; else null. */
export function wholeIn(text, min, max) {
  const n = readWhole(text);
  return n !== null && Number.isSafeInteger(n) && n >= min && n <= max ? n : null;
}

/** Why a field's text is not a whole number in range, in words. */
export function wholeError(name, text, range) {
  const s = String(text ?? "").trim();
  const shown = s.length > 16 ? `${s.slice(0, 16)}…` : s;
  const base = `${name} must be a whole number ${range}`;
  if (s.includes(",") && readWhole(s) === null) {
    return `${base}: "${shown}" is not one (a comma only separates thousands, as in 10,000)`;
  }
  return base;
}

/**
 * Check the ticket's raw field values; answers {order} ready to send, or {errors: {field: message}}.
 * The same limits as the server's (docs/protocol.md), so a bad order is refused here with a clear
 * message instead of costing a round trip.
 */
export function validateOrder(raw, symbols) {
  const errors = {};
  const order = {};
  if (!raw.symbol || (symbols && !symbols.includes(raw.symbol))) errors.symbol = "choose a symbol";
  else order.symbol = raw.symbol;
  if (raw.side !== "buy" && raw.side !== "sell") errors.side = "choose buy or sell";
  else order.side = raw.side;
  if (raw.type !== "limit" && raw.type !== "market") errors.type = "choose limit or market";
  else order.type = raw.type;
  if (raw.type === "limit") {
    const price = wholeIn(raw.price, 1, MAX_PRICE);
    if (price === null) errors.price = wholeError("price", raw.price, `of ticks from 1 to ${fmtQty(MAX_PRICE)}`);
    else order.price = price;
  }
  const qty = wholeIn(raw.qty, 1, MAX_QTY);
  if (qty === null) errors.qty = wholeError("quantity", raw.qty, `from 1 to ${fmtQty(MAX_QTY)}`);
  else order.qty = qty;
  if (!["gtc", "ioc", "fok"].includes(raw.tif)) errors.tif = "choose a time in force";
  else order.tif = raw.tif;
  if (raw.postOnly) {
    if (raw.type !== "limit" || raw.tif !== "gtc") errors.postOnly = "post only needs a GTC limit order";
    else order.postOnly = true;
  }
  return Object.keys(errors).length ? { errors } : { order };
}

const TIF_HINT = {
  gtc: "Good till cancelled: what does not fill rests in the book.",
  ioc: "Immediate or cancel: fills what it can now, the rest is cancelled.",
  fok: "Fill or kill: fills all of it now, or none of it.",
};

const FIELDS = ["symbol", "side", "type", "price", "qty", "tif", "postOnly"];

/**
 * The form. `onSubmit(order)` sends a checked order and resolves with the server's {status, body};
 * `precheck(order)` may answer {refuse: why} (nothing is sent) or {confirm: what, action} (sent only
 * once the user confirms); `referencePrice(side)` is where the arrow keys start in an empty price field.
 */
export class Ticket {
  constructor(form, { answer, onSubmit, onSymbol, precheck, referencePrice }) {
    this.form = form;
    this.answerBox = answer;
    this.onSubmit = onSubmit;
    this.precheck = precheck;
    this.referencePrice = referencePrice;
    this.symbols = [];
    this.current = ""; // the symbol the price was typed for
    this.sending = false;
    this.pending = null; // the order waiting for a confirmation, as JSON
    this.f = {
      symbol: form.querySelector("#t-symbol"),
      type: form.querySelector("#t-type"),
      price: form.querySelector("#t-price"),
      qty: form.querySelector("#t-qty"),
      tif: form.querySelector("#t-tif"),
      postOnly: form.querySelector("#t-postonly"),
      submit: form.querySelector("#t-submit"),
      tifHint: form.querySelector("#t-tif-hint"),
      confirm: form.querySelector("#t-confirm"),
      confirmText: form.querySelector("#t-confirm-text"),
      confirmSend: form.querySelector("#t-confirm-send"),
      confirmBack: form.querySelector("#t-confirm-back"),
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.submit(false);
    });
    const edited = () => {
      this.hideConfirm();
      this.refresh();
    };
    form.addEventListener("input", edited);
    form.addEventListener("change", edited);
    this.f.symbol.addEventListener("change", () => {
      this.symbolChanged();
      onSymbol(this.f.symbol.value);
    });
    this.f.price.addEventListener("keydown", (ev) => this.step(ev, this.f.price, true));
    this.f.qty.addEventListener("keydown", (ev) => this.step(ev, this.f.qty, false));
    this.f.confirmSend.addEventListener("click", () => this.confirmed());
    this.f.confirmBack.addEventListener("click", () => {
      this.hideConfirm();
      this.f.submit.focus();
    });
    this.f.confirm.addEventListener("keydown", (ev) => {
      if (ev.key !== "Escape") return;
      this.hideConfirm();
      this.f.submit.focus();
    });
    this.refresh();
  }

  setSymbols(symbols, selected) {
    this.symbols = symbols;
    const options = symbols.map((s) => new Option(s, s, false, s === selected));
    this.f.symbol.replaceChildren(...options);
    if (this.f.symbol.value !== this.current) this.symbolChanged();
    this.refresh();
  }

  get symbol() {
    return this.f.symbol.value;
  }

  get side() {
    return this.form.querySelector("input[name=side]:checked")?.value;
  }

  raw() {
    return {
      symbol: this.f.symbol.value,
      side: this.side,
      type: this.f.type.value,
      price: this.f.price.value,
      qty: this.f.qty.value,
      tif: this.f.tif.value,
      // Disabled (and so not sent) for a market order, which can never rest.
      postOnly: this.f.postOnly.checked && this.f.type.value === "limit",
    };
  }

  /** A book level was picked: take its price (and a limit type, which a price needs). */
  setPrice(price) {
    this.f.type.value = "limit";
    this.f.price.value = String(price);
    this.clearErrors();
    this.hideConfirm();
    this.refresh();
  }

  /** A price belongs to one book: carried to another it could cross it on one Enter. */
  symbolChanged() {
    this.current = this.f.symbol.value;
    this.f.price.value = "";
    this.clear();
  }

  /** Forget every message: errors, a pending confirmation and the last answer (a new account, a new symbol). */
  clear() {
    this.clearErrors();
    this.hideConfirm();
    this.showAnswer("", "");
    this.refresh();
  }

  refresh() {
    const raw = this.raw();
    const market = raw.type === "market";
    this.f.price.disabled = market;
    this.f.postOnly.disabled = market;
    this.f.tifHint.textContent = market
      ? "Market: takes what the book has now; a market order never rests."
      : TIF_HINT[raw.tif] || "";
    const verb = raw.side === "sell" ? "Sell" : "Buy";
    const qty = wholeIn(raw.qty, 1, MAX_QTY);
    const price = wholeIn(raw.price, 1, MAX_PRICE);
    const where = market ? "at market" : price !== null ? `@ ${fmtPrice(price)}` : raw.price.trim() ? "@ ?" : "";
    const label = [verb, qty === null ? "" : fmtQty(qty), raw.symbol, where].filter(Boolean).join(" ");
    this.f.submit.textContent = this.sending ? `${label}: sending…` : label;
    this.f.submit.className = `submit ${raw.side === "sell" ? "sell-bg" : "buy-bg"}`;
  }

  clearErrors() {
    for (const name of [...FIELDS, "form"]) this.showError(name, "");
  }

  showError(name, message) {
    const note = this.form.querySelector(`#t-${name}-err`);
    const input = this.f[name];
    if (input && input.setAttribute) {
      if (message) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
    if (note) note.textContent = message;
    else if (message) this.form.querySelector("#t-form-err").textContent = message;
  }

  showAnswer(text, kind) {
    this.answerBox.className = `answer ${kind}`;
    this.answerBox.textContent = text;
  }

  askConfirm(order, { confirm, action }) {
    this.pending = JSON.stringify(order);
    this.f.confirmText.textContent = confirm;
    this.f.confirmSend.textContent = action;
    this.f.confirm.hidden = false;
    this.f.confirmBack.focus(); // the safe choice: Enter again does not send
  }

  hideConfirm() {
    if (this.pending === null) return;
    this.pending = null;
    this.f.confirm.hidden = true;
  }

  confirmed() {
    const { order } = validateOrder(this.raw(), this.symbols);
    const same = order && JSON.stringify(order) === this.pending;
    this.hideConfirm();
    this.f.submit.focus();
    if (same) this.submit(true);
  }

  async submit(confirmed) {
    if (this.sending) return;
    this.clearErrors();
    this.hideConfirm();
    this.showAnswer("", "");
    const { order, errors } = validateOrder(this.raw(), this.symbols);
    if (errors) {
      for (const [name, message] of Object.entries(errors)) this.showError(name, message);
      const first = FIELDS.find((name) => errors[name] && this.f[name]);
      if (first) this.f[first].focus();
      return;
    }
    const check = this.precheck ? this.precheck(order) : null;
    if (check && check.refuse) {
      this.showError("form", check.refuse);
      return;
    }
    if (check && check.confirm && !confirmed) {
      this.askConfirm(order, check);
      return;
    }
    // Not `disabled`: a disabled button drops the keyboard focus, and Enter on it would then go nowhere.
    this.sending = true;
    this.f.submit.setAttribute("aria-disabled", "true");
    this.refresh();
    try {
      const answer = await this.onSubmit(order);
      if (answer && answer.status >= 400 && answer.body && answer.body.error) {
        this.showError(answer.body.field || "form", answer.body.error);
      }
    } finally {
      this.sending = false;
      this.f.submit.removeAttribute("aria-disabled");
      this.refresh();
    }
  }

  /** Up and Down step the number (Shift: by 10); in an empty price field they start at the book's price. */
  step(ev, input, isPrice) {
    if (ev.key !== "ArrowUp" && ev.key !== "ArrowDown") return;
    ev.preventDefault();
    const start = isPrice && !input.value.trim() && this.referencePrice ? this.referencePrice(this.side) : null;
    if (start !== null && start !== undefined) {
      input.value = String(start);
    } else {
      const n = wholeIn(input.value, 0, Number.MAX_SAFE_INTEGER) ?? 0;
      const by = (ev.shiftKey ? 10 : 1) * (ev.key === "ArrowUp" ? 1 : -1);
      input.value = String(Math.min(isPrice ? MAX_PRICE : MAX_QTY, Math.max(1, n + by)));
    }
    input.dispatchEvent(new Event("input", { bubbles: true }));
  }
}
