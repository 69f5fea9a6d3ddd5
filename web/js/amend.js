// Amend from My open orders: a form under the order's row to change its price and/or quantity, checked
// like the ticket before anything is sent, and what the server's answer means, in words.
//
// The quantity is the new total, filled part included (docs/protocol.md). A new price or a larger quantity
// sends the order to the back of the queue at its price; a smaller quantity at the same price keeps its
// place. The form says which before the amend is sent.

import { describeFills, describeOrder, el, fmtPrice, fmtQty, fmtReason, fmtStatus } from "./format.js";
import { MAX_PRICE, MAX_QTY, wholeError, wholeIn } from "./ticket.js";

/**
 * Check the form against the order as it is now; answers {fields, price, qty} (fields: only what changes,
 * as the amend op takes them) or {errors: {price, qty, form}}.
 */
export function validateAmend(o, raw) {
  const errors = {};
  const price = wholeIn(raw.price, 1, MAX_PRICE);
  if (price === null) errors.price = wholeError("price", raw.price, `of ticks from 1 to ${fmtQty(MAX_PRICE)}`);
  const qty = wholeIn(raw.qty, 1, MAX_QTY);
  if (qty === null) {
    errors.qty = wholeError("quantity", raw.qty, `from 1 to ${fmtQty(MAX_QTY)}`);
  } else if (qty <= o.filledQty) {
    errors.qty = `quantity is the new total, filled part included: it must be above the ${fmtQty(o.filledQty)} ` +
      "already filled";
  }
  if (!errors.price && !errors.qty && price === o.price && qty === o.qty) {
    errors.form = `nothing to amend: it already is ${fmtQty(qty)} @ ${fmtPrice(price)}; change the price, ` +
      "the quantity or both";
  }
  if (Object.keys(errors).length) return { errors };
  const fields = {};
  if (qty !== o.qty) fields.qty = qty;
  if (price !== o.price) fields.price = price;
  return { fields, price, qty };
}

const RULE = "A new price or a larger quantity loses the order's place in the queue; a smaller quantity at " +
  "the same price keeps it.";

/** What an amend to `price` and `qty` does to the order's time priority, in words: {text, loses}. */
export function priorityNote(o, price, qty) {
  if (price === null || qty === null || (price === o.price && qty === o.qty)) return { text: RULE, loses: false };
  if (price !== o.price || qty > o.qty) {
    const why = price !== o.price ? "a new price" : "a larger quantity";
    return {
      text: `Loses its place in the queue: ${why} goes to the back of the queue at ${fmtPrice(price)}.`,
      loses: true,
    };
  }
  return { text: "Keeps its place in the queue: a smaller quantity at the same price.", loses: false };
}

/**
 * What an amend's answer means: {text for Activity, kind, now (the order as it is, or null), done (the
 * form can close), field (the one at fault)}. `before` is the order as the form showed it, `fields` what
 * was sent. A refusal says why in words; nothing sent is "not sent", never "refused".
 */
export function describeAmend(before, fields, res, note = "") {
  const id = `#${before.orderId}`;
  const body = res.body || {};
  const now = res.status === 200 ? body : body.order || null;
  const qty = fields.qty ?? before.qty;
  const price = fields.price ?? before.price;
  const change = `${describeOrder(before)} → ${fmtQty(qty)} @ ${fmtPrice(price)}`;
  const is = (o) => `${fmtQty(o.qty)} @ ${fmtPrice(o.price)}`;
  if (res.status === 200) {
    const fills = now.fills && now.fills.length;
    let tail = "";
    if (fills) {
      tail = `: ${describeFills(now.fills)}, ${fmtStatus(now.status)}`;
      if (now.status === "partially_filled") tail += ` (${fmtQty(now.filledQty)} of ${fmtQty(now.qty)})`;
    }
    return { text: `Amended ${id}: ${change}${tail}${note}`, kind: fills ? before.side : "ok", now, done: true };
  }
  const code = body.code;
  if (code === "nothing_to_amend" && now && now.qty === qty && now.price === price) {
    // The order already is what was asked: after a reconnect, the first attempt did it.
    return res.resent
      ? { text: `Amended ${id}: ${change} (confirmed after a reconnect; the first answer was lost)${note}`, kind: "ok", now, done: true }
      : { text: `Amend ${id}: nothing to amend, it already is ${is(now)}${note}`, kind: "warn", now, done: true };
  }
  if (code === "not_open" && now) {
    if (now.status === "filled") {
      return {
        text: `Amend ${id} too late: ${describeOrder(before)} had already filled (${fmtQty(now.filledQty)} of ` +
          `${fmtQty(now.qty)})${note}`,
        kind: before.side, now, done: true,
      };
    }
    const why = now.reason === "cancelled_by_user" ? "by you" : fmtReason(now.reason) || "closed";
    return { text: `Amend ${id} too late: it was already ${now.status} (${why})${note}`, kind: "warn", now, done: true };
  }
  let why;
  let field = body.field;
  if (code === "qty_not_above_filled" && now) {
    why = `the quantity must be above the ${fmtQty(now.filledQty)} already filled (${fmtQty(now.filledQty)} of ` +
      `${fmtQty(now.qty)} filled now)`;
    field = "qty";
  } else if (code === "post_only_would_take") {
    why = `it is post-only, and at ${fmtPrice(price)} it would take liquidity; it stays ${is(now || before)}`;
    field = "price";
  } else if (code === "nothing_to_amend") {
    why = `nothing to amend: it is ${is(now || before)} already`;
  } else if (res.status === 0 && body.late) {
    return {
      text: `Amend ${id}: no answer from the server yet; check My open orders (a late answer is said here)`,
      kind: "warn", now: null, done: true,
    };
  } else if (res.status === 0) {
    return { text: `Amend ${id} not sent: the server cannot be reached. Try again once Live.`, kind: "bad", now: null, done: false };
  } else if (res.status === 404) {
    return { text: `Amend ${id} refused: the server does not know this order${note}`, kind: "bad", now: null, done: true };
  } else {
    why = body.error || `error ${res.status}`;
  }
  return { text: `Amend ${id} refused: ${why}${note}`, kind: "bad", now, done: false, field };
}

/**
 * The form, one at a time, as a table row shown under its order's (MyOrders asks rowFor()). `send(order,
 * fields)` sends the amend and resolves with describeAmend()'s answer; `precheck(order, price, qty)` may
 * answer {confirm, action} (asked first, like the ticket's), `against(side)` the best price an order on
 * `side` would meet, for saying it would trade at once; `focusOut(orderId)` puts the keyboard back;
 * `span()` is how many columns the table shows (a narrow panel hides some, and a cell spanning more
 * would add columns of its own).
 */
export class AmendForm {
  constructor({ send, precheck, against, focusOut, span }) {
    this.send = send;
    this.span = span;
    this.precheck = precheck;
    this.against = against;
    this.focusOut = focusOut;
    this.order = null; // the order being amended, as it is now
    this.sending = false;
    this.pending = null; // the amend waiting for a confirmation, as JSON
    this.row = this.build();
  }

  build() {
    const row = el("tr", "amend-row");
    const cell = el("td", "amend-cell");
    this.cell = cell;
    const form = el("form", "amend-box");
    form.id = "amend-form";
    form.noValidate = true;
    form.setAttribute("aria-labelledby", "a-title");
    const field = (id, label, hint) => {
      const box = el("div", "amend-field");
      const lab = el("label", "", label);
      lab.htmlFor = id;
      if (hint) lab.append(" ", el("small", "", hint));
      const input = el("input");
      input.id = id;
      input.inputMode = "numeric";
      input.autocomplete = "off";
      input.setAttribute("aria-describedby", `${id}-err a-note`);
      box.append(lab, input);
      return [box, input];
    };
    const [priceBox, price] = field("a-price", "Price");
    const [qtyBox, qty] = field("a-qty", "Quantity", "(new total)");
    const fields = el("div", "amend-fields");
    fields.append(priceBox, qtyBox);
    const err = (id) => {
      const p = el("p", "field-error");
      p.id = id;
      return p;
    };
    const confirm = el("div", "confirm");
    confirm.id = "a-confirm";
    confirm.setAttribute("role", "alertdialog");
    confirm.setAttribute("aria-labelledby", "a-confirm-text");
    confirm.hidden = true;
    const confirmText = el("p");
    confirmText.id = "a-confirm-text";
    const button = (cls, text, type, id) => {
      const b = el("button", cls, text);
      b.type = type;
      b.id = id;
      return b;
    };
    const confirmSend = button("confirm-send", "Amend anyway", "button", "a-confirm-send");
    const confirmBack = button("", "Don't send", "button", "a-confirm-back");
    const confirmActions = el("div", "confirm-actions");
    confirmActions.append(confirmSend, confirmBack);
    confirm.append(confirmText, confirmActions);
    const submit = button("amend-send", "Amend", "submit", "a-submit");
    const close = button("", "Close", "button", "a-close");
    const actions = el("div", "amend-actions");
    actions.append(submit, close);
    const title = el("p", "amend-title");
    title.id = "a-title";
    const hint = el("p", "hint");
    hint.id = "a-hint";
    const note = el("p", "amend-note");
    note.id = "a-note";
    note.setAttribute("aria-live", "polite");
    form.append(title, fields, err("a-price-err"), err("a-qty-err"), hint, note, err("a-form-err"), confirm, actions);
    cell.append(form);
    row.append(cell);
    this.f = { form, title, price, qty, hint, note, submit, close, confirm, confirmText, confirmSend, confirmBack };

    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.submit(false);
    });
    form.addEventListener("input", () => {
      // What was said was about other numbers.
      this.clearErrors();
      this.hideConfirm();
      this.refresh();
    });
    form.addEventListener("keydown", (ev) => {
      if (ev.key !== "Escape") return;
      ev.preventDefault();
      if (this.pending !== null) {
        this.hideConfirm();
        this.f.submit.focus();
      } else {
        this.close(true);
      }
    });
    close.addEventListener("click", () => this.close(true));
    confirmBack.addEventListener("click", () => {
      this.hideConfirm();
      this.f.submit.focus();
    });
    confirmSend.addEventListener("click", () => this.submit(true));
    return row;
  }

  /** Open the form for an order (Amend clicked), or close it when it is already open for that order. */
  toggle(o) {
    if (this.order && this.order.orderId === o.orderId) {
      this.close(true);
      return;
    }
    if (this.sending) return; // one amend at a time
    this.order = o;
    this.f.price.value = String(o.price);
    this.f.qty.value = String(o.qty);
    this.clearErrors();
    this.hideConfirm();
    this.refresh();
  }

  /** After the form is in the page: put the keyboard in it. */
  focus() {
    this.f.price.focus();
    this.f.price.select();
    this.row.scrollIntoView({ block: "nearest" }); // its buttons too, in a panel that scrolls
  }

  isOpen() {
    return this.order !== null;
  }

  /** MyOrders asks, for each order it lists: the form's row when it is open for that one. */
  rowFor(o) {
    if (!this.order || this.order.orderId !== o.orderId) return null;
    if (o !== this.order) {
      this.order = o; // filled more, or amended: the checks and the words follow it
      this.refresh();
    }
    this.cell.colSpan = this.span();
    return this.row;
  }

  close(focusBack) {
    if (!this.order) return;
    const id = this.order.orderId;
    const inside = this.row.contains(document.activeElement);
    this.order = null;
    this.hideConfirm();
    this.row.remove();
    if (focusBack || inside) this.focusOut(id);
  }

  clearErrors() {
    for (const id of ["a-price-err", "a-qty-err", "a-form-err"]) this.row.querySelector(`#${id}`).textContent = "";
    this.f.price.removeAttribute("aria-invalid");
    this.f.qty.removeAttribute("aria-invalid");
  }

  showError(name, message) {
    const input = name === "price" ? this.f.price : name === "qty" ? this.f.qty : null;
    this.row.querySelector(`#a-${input ? name : "form"}-err`).textContent = message;
    if (input) input.setAttribute("aria-invalid", "true");
  }

  hideConfirm() {
    this.pending = null;
    this.f.confirm.hidden = true;
  }

  /** The words that follow the fields: what the order is, what the amend would do to its place. */
  refresh() {
    const o = this.order;
    if (!o) return;
    const f = this.f;
    f.title.textContent = `Amend #${o.orderId}: ${describeOrder(o)}` +
      (o.filledQty ? `, ${fmtQty(o.filledQty)} filled` : "");
    f.hint.textContent = o.filledQty
      ? `Quantity is the new total, the ${fmtQty(o.filledQty)} filled included: more than ${fmtQty(o.filledQty)}.`
      : "Quantity is the new total.";
    const price = wholeIn(f.price.value, 1, MAX_PRICE);
    const qty = wholeIn(f.qty.value, 1, MAX_QTY);
    const { text, loses } = priorityNote(o, price, qty);
    let more = "";
    const best = price === null ? null : this.against(o.side);
    if (best !== null && (o.side === "buy" ? price >= best : price <= best) && price !== o.price) {
      more = o.postOnly
        ? ` It is post-only: at ${fmtPrice(price)} it would take liquidity, so the server would refuse it.`
        : ` At ${fmtPrice(price)} it would trade at once against the ${o.side === "buy" ? "asks" : "bids"} ` +
          `(best ${fmtPrice(best)}).`;
    }
    f.note.textContent = text + more;
    f.note.classList.toggle("warn", loses || more !== "");
    const changed = price !== null && qty !== null && (price !== o.price || qty !== o.qty);
    const label = changed ? `Amend to ${fmtQty(qty)} @ ${fmtPrice(price)}` : `Amend #${o.orderId}`;
    f.submit.textContent = this.sending ? "Amending…" : label;
  }

  async submit(confirmed) {
    const o = this.order;
    if (!o || this.sending) return;
    this.clearErrors();
    const checked = validateAmend(o, { price: this.f.price.value, qty: this.f.qty.value });
    if (checked.errors) {
      this.hideConfirm();
      for (const [name, message] of Object.entries(checked.errors)) this.showError(name, message);
      (checked.errors.price ? this.f.price : checked.errors.qty ? this.f.qty : this.f.price).focus();
      return;
    }
    const key = JSON.stringify({ id: o.orderId, ...checked.fields });
    if (!(confirmed && this.pending === key)) {
      const check = this.precheck(o, checked.price, checked.qty);
      if (check) {
        this.pending = key;
        this.f.confirmText.textContent = check.confirm;
        this.f.confirmSend.textContent = check.action;
        this.f.confirm.hidden = false;
        this.f.confirmBack.focus(); // the safe choice: Enter again does not send
        return;
      }
    }
    this.hideConfirm();
    // Not `disabled`: a disabled button drops the keyboard focus. aria-disabled and the guard above make
    // it one request per click.
    this.sending = true;
    this.f.submit.setAttribute("aria-disabled", "true");
    this.f.submit.focus();
    this.refresh();
    let outcome;
    try {
      outcome = await this.send(o, checked.fields);
    } finally {
      this.sending = false;
      this.f.submit.removeAttribute("aria-disabled");
      this.refresh();
    }
    if (!outcome || this.order === null || this.order.orderId !== o.orderId) return;
    if (outcome.done) {
      this.close(true);
      return;
    }
    this.showError(outcome.field === "price" || outcome.field === "qty" ? outcome.field : "form", outcome.text);
    (outcome.field === "qty" ? this.f.qty : outcome.field === "price" ? this.f.price : this.f.submit).focus();
  }
}
