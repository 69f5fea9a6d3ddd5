// The order ticket: reads the form, checks it before anything is sent, and shows the server's answer.

import { fmtQty } from "./format.js";

export const MAX_PRICE = 1_000_000_000;
export const MAX_QTY = 1_000_000_000;
const WHOLE = /^\s*\d+\s*$/;

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
    const price = wholeNumber(raw.price, 1, MAX_PRICE);
    if (price === null) errors.price = `price must be a whole number of ticks from 1 to ${fmtQty(MAX_PRICE)}`;
    else order.price = price;
  }
  const qty = wholeNumber(raw.qty, 1, MAX_QTY);
  if (qty === null) errors.qty = `quantity must be a whole number from 1 to ${fmtQty(MAX_QTY)}`;
  else order.qty = qty;
  if (!["gtc", "ioc", "fok"].includes(raw.tif)) errors.tif = "choose a time in force";
  else order.tif = raw.tif;
  if (raw.postOnly) {
    if (raw.type !== "limit" || raw.tif !== "gtc") errors.postOnly = "post only needs a GTC limit order";
    else order.postOnly = true;
  }
  return Object.keys(errors).length ? { errors } : { order };
}

function wholeNumber(text, min, max) {
  const s = String(text ?? "").replaceAll(",", "").replaceAll("_", "");
  if (!WHOLE.test(s)) return null;
  const n = Number(s);
  return Number.isSafeInteger(n) && n >= min && n <= max ? n : null;
}

const TIF_HINT = {
  gtc: "Good till cancelled: what does not fill rests in the book.",
  ioc: "Immediate or cancel: fills what it can now, the rest is cancelled.",
  fok: "Fill or kill: fills all of it now, or none of it.",
};

const FIELDS = ["symbol", "side", "type", "price", "qty", "tif", "postOnly"];

export class Ticket {
  constructor(form, { onSubmit, onSymbol }) {
    this.form = form;
    this.onSubmit = onSubmit;
    this.symbols = [];
    this.sending = false;
    this.f = {
      symbol: form.querySelector("#t-symbol"),
      type: form.querySelector("#t-type"),
      price: form.querySelector("#t-price"),
      qty: form.querySelector("#t-qty"),
      tif: form.querySelector("#t-tif"),
      postOnly: form.querySelector("#t-postonly"),
      submit: form.querySelector("#t-submit"),
      tifHint: form.querySelector("#t-tif-hint"),
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.submit();
    });
    form.addEventListener("input", () => this.refresh());
    form.addEventListener("change", () => this.refresh());
    this.f.symbol.addEventListener("change", () => onSymbol(this.f.symbol.value));
    for (const input of [this.f.price, this.f.qty]) {
      input.addEventListener("keydown", (ev) => stepWithArrows(ev, input));
    }
    this.refresh();
  }

  setSymbols(symbols, selected) {
    this.symbols = symbols;
    const options = symbols.map((s) => new Option(s, s, false, s === selected));
    this.f.symbol.replaceChildren(...options);
    this.refresh();
  }

  get symbol() {
    return this.f.symbol.value;
  }

  raw() {
    return {
      symbol: this.f.symbol.value,
      side: this.form.querySelector("input[name=side]:checked")?.value,
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
    const qty = wholeNumber(raw.qty, 1, MAX_QTY);
    const where = market ? "at market" : raw.price.trim() ? `@ ${raw.price.trim()}` : "";
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

  async submit() {
    if (this.sending) return;
    this.clearErrors();
    const { order, errors } = validateOrder(this.raw(), this.symbols);
    if (errors) {
      for (const [name, message] of Object.entries(errors)) this.showError(name, message);
      const first = FIELDS.find((name) => errors[name] && this.f[name]);
      if (first) this.f[first].focus();
      return;
    }
    this.sending = true;
    this.f.submit.disabled = true;
    this.refresh();
    try {
      const answer = await this.onSubmit(order);
      if (answer && answer.status >= 400 && answer.body && answer.body.error) {
        this.showError(answer.body.field || "form", answer.body.error);
      }
    } finally {
      this.sending = false;
      this.f.submit.disabled = false;
      this.refresh();
    }
  }
}

function stepWithArrows(ev, input) {
  if (ev.key !== "ArrowUp" && ev.key !== "ArrowDown") return;
  const n = wholeNumber(input.value, 0, Number.MAX_SAFE_INTEGER) ?? 0;
  const step = ev.shiftKey ? 10 : 1;
  input.value = String(Math.max(1, n + (ev.key === "ArrowUp" ? step : -step)));
  input.dispatchEvent(new Event("input", { bubbles: true }));
  ev.preventDefault();
}
