// What a click in My open orders sends: Cancel, Cancel all (one cancelAll for the symbol on screen) and
// Amend, each over the WebSocket (over HTTP when it is down), and what came of it said under Activity. The
// orders an answer carries are taken into My open orders at once: none is left shown as open after its
// cancel, even before (or without) its private update.

import { describeAmend } from "./amend.js";
import { describeCancelAll } from "./cancelall.js";
import { checkLimit } from "./checks.js";
import { describeOrder, fmtPrice, fmtQty, fmtReason } from "./format.js";
import { invalidate } from "./frame.js";
import { http } from "./http.js";

const FATE_READS = 20; // listed orders a cancel-all found closed, read one by one; past that, only counted

const isLate = (res) => res.status === 0 && res.body && res.body.late;

export class OrderActions {
  /**
   * `page`: the page's state (account, symbol, book, refused, known); `orders`: MyOrders;
   * `call(op, method, path, fields, httpBody)` sends one order-entry call (main.js); `say(text, kind)`
   * adds a line under Activity; `loadOrders()` reads my open orders again; `shownDepth()`: the book
   * levels on screen.
   */
  constructor({ page, orders, call, say, loadOrders, shownDepth }) {
    this.page = page;
    this.orders = orders;
    this.call = call;
    this.say = say;
    this.loadOrders = loadOrders;
    this.shownDepth = shownDepth;
    this.amendBefore = new Map(); // orderId -> the order as the last amend sent for it saw it
    this.cancelAllAsked = new Map(); // symbol -> the orders the last cancel-all there was confirmed for
  }

  /** Another account: the answers still to come are not news for it. */
  reset() {
    this.amendBefore.clear();
    this.cancelAllAsked.clear();
  }

  /** An answer that came after the page had given up waiting; answers whether it was one of these. */
  late(request, res) {
    const note = " (the answer came late)";
    if (request.op === "cancel") {
      this.cancelAnswered(request.orderId, res, note);
    } else if (request.op === "amend") {
      const before = this.amendBefore.get(request.orderId);
      if (before) this.amendAnswered(before, request, res, note);
    } else if (request.op === "cancelAll") {
      const list = this.cancelAllAsked.get(request.symbol);
      if (list) this.cancelAllAnswered(request.symbol, list, res, note);
    } else {
      return false;
    }
    return true;
  }

  // ---------------------------------------------------------------- cancel

  async cancel(o) {
    const { orders, page } = this;
    if (orders.busy.has(o.orderId)) return; // one cancel at a time per order
    orders.busy.add(o.orderId);
    invalidate("orders");
    const account = page.account;
    const res = await this.call("cancel", "DELETE", `/orders/${o.orderId}`, { orderId: o.orderId });
    orders.busy.delete(o.orderId);
    if (account !== page.account) return; // another account's cancel: its answer is not news here
    this.cancelAnswered(o.orderId, res);
  }

  /**
   * Say what a cancel did. A 409 carries the order as it is now, so a cancel that finds its order closed
   * says how: cancelled (a resend after a reconnect whose first attempt had done it, or a cancel from
   * elsewhere), filled first, or cancelled by the exchange. Nothing sent is "not sent", never "refused".
   */
  cancelAnswered(orderId, res, note = "") {
    const say = this.say;
    const body = res.body || {};
    const id = `#${orderId}`;
    const now = this.orderNow(res);
    const filled = (o) => (o.filledQty ? ` (${fmtQty(o.filledQty)} of ${fmtQty(o.qty)} had filled)` : "");
    const off = (o) => `${fmtQty(o.remainingQty)} ${o.symbol} off the book${filled(o)}`;
    if (res.status === 200) {
      say(`Cancelled ${id}: ${off(now)}${note}`, "ok");
    } else if (now && now.status === "cancelled" && now.reason === "cancelled_by_user") {
      say(res.resent
        ? `Cancelled ${id}: ${off(now)} (confirmed after a reconnect; the first answer was lost)${note}`
        : `${id} was already cancelled: ${off(now)}${note}`, "ok");
    } else if (now && now.status === "filled") {
      say(`Cancel ${id} too late: ${describeOrder(now)} had already filled (${fmtQty(now.filledQty)} of ` +
        `${fmtQty(now.qty)})${note}`, now.side);
    } else if (now) {
      say(`Cancel ${id} too late: it was already ${now.status} (${fmtReason(now.reason) || "closed"})` +
        `${filled(now)}${note}`, "warn");
    } else if (isLate(res)) {
      say(`Cancel ${id}: no answer from the server yet; check My open orders (a late answer is said here)`, "warn");
    } else if (res.status === 0) {
      say(`Cancel ${id} not sent: the server cannot be reached. Try again once Live.`, "bad");
    } else {
      say(`Cancel ${id} refused: ${body.error || res.status}${note}`, "bad");
      if (res.status === 409 || res.status === 404) this.loadOrders();
    }
    invalidate("orders");
    invalidate("book");
  }

  // ---------------------------------------------------------------- cancel all

  /**
   * Cancel all (cancelall.js): one cancelAll for `symbol`, which the server carries out at once (nothing
   * trades between its first cancel and its last); `list` is what the question listed, to compare the
   * answer with. Resolves once the line under Activity is said.
   */
  async cancelAll(symbol, list) {
    const { orders, page } = this;
    const account = page.account;
    for (const o of list) orders.busy.add(o.orderId);
    this.cancelAllAsked.set(symbol, list);
    invalidate("orders");
    const res = await this.call("cancelAll", "DELETE", `/orders?symbol=${encodeURIComponent(symbol)}`, { symbol });
    for (const o of list) orders.busy.delete(o.orderId);
    if (!isLate(res)) this.cancelAllAsked.delete(symbol); // none to come late
    invalidate("orders");
    if (account !== page.account) return;
    await this.cancelAllAnswered(symbol, list, res);
  }

  /** Take in the orders a cancel-all cancelled, learn what became of the listed ones it did not, and say it. */
  async cancelAllAnswered(symbol, list, res, note = "") {
    const account = this.page.account;
    const cancelled = res.status === 200 && res.body ? res.body.orders || [] : [];
    for (const o of cancelled) this.takeIn(o);
    invalidate("orders");
    invalidate("book");
    const fates = res.status === 200 ? await this.fates(list, cancelled) : new Map();
    if (account !== this.page.account) return;
    const { text, kind } = describeCancelAll(symbol, list, res, fates, note);
    this.say(text, kind);
  }

  /**
   * The listed orders a cancel-all did not cancel were closed before it ran (it cancels every open one
   * at once): each is read to say how, the first FATE_READS of them. Answers orderId -> the order now, or
   * null when it could not be read; then My open orders is read again, since it may still show one open.
   */
  async fates(list, cancelled) {
    const account = this.page.account;
    const ids = new Set(cancelled.map((o) => o.orderId));
    const gone = list.filter((o) => !ids.has(o.orderId));
    const read = gone.slice(0, FATE_READS);
    const states = await Promise.all(read.map((o) => http("GET", `/orders/${o.orderId}`, { token: account })
      .then((r) => (r.status === 200 && r.body ? r.body : null), () => null)));
    const fates = new Map(gone.map((o) => [o.orderId, null]));
    if (account !== this.page.account) return fates;
    read.forEach((o, i) => {
      if (!states[i]) return;
      fates.set(o.orderId, states[i]);
      this.takeIn(states[i]);
    });
    if ([...fates.values()].includes(null)) this.loadOrders();
    invalidate("orders");
    return fates;
  }

  // ---------------------------------------------------------------- amend

  /**
   * Amend an order (the form in amend.js): over the WebSocket, or `PATCH /orders/{id}` when it is down.
   * What came of it is said under Activity; the form gets the same words.
   */
  async amend(o, fields) {
    const { orders, page } = this;
    const account = page.account;
    orders.amending.add(o.orderId);
    this.amendBefore.set(o.orderId, o);
    invalidate("orders");
    const res = await this.call("amend", "PATCH", `/orders/${o.orderId}`, { orderId: o.orderId, ...fields }, fields);
    orders.amending.delete(o.orderId);
    if (!isLate(res)) this.amendBefore.delete(o.orderId); // none to come late
    invalidate("orders");
    if (account !== page.account) return null;
    return this.amendAnswered(o, fields, res);
  }

  amendAnswered(before, fields, res, note = "") {
    const outcome = describeAmend(before, fields, res, note);
    this.orderNow(res);
    this.say(outcome.text, outcome.kind);
    if (res.status === 404) this.loadOrders();
    invalidate("orders");
    invalidate("book");
    return outcome;
  }

  /** Before an amend goes: the limit-order check for the price and what could still trade (checks.js). */
  checkAmend(o, price, qty) {
    const page = this.page;
    if (page.refused) return null; // the server says so
    if (o.postOnly) return null;
    if (o.symbol !== page.symbol) return null; // the page holds the book on screen only
    const what = `Amend #${o.orderId} to ${o.side} ${fmtQty(qty)} ${o.symbol} @ ${fmtPrice(price)}`;
    return checkLimit({ side: o.side, price, qty: qty - o.filledQty, tif: o.tif }, page.book, this.shownDepth(),
      what, `Amend to ${fmtQty(qty)} @ ${fmtPrice(price)} anyway`);
  }

  // ---------------------------------------------------------------- answers' orders

  /** The order as a cancel's or amend's answer has it (a 200's body, a refusal's `order`), taken in; or null. */
  orderNow(res) {
    const body = res.body || {};
    const now = res.status === 200 ? body : res.status >= 400 && body.order ? body.order : null;
    if (now) this.takeIn(now);
    return now;
  }

  /** An order's state from an answer into My open orders; a reload as old as it is then not news. */
  takeIn(order) {
    this.orders.upsert(order);
    this.page.known.set(order.orderId, Math.max(order.seq, this.page.known.get(order.orderId) ?? 0));
  }
}
