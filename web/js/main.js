// The trading screen: wires the connection, the panels and the settings together.
//
// Feed messages only change state and mark panels dirty; each dirty panel is redrawn once in the next
// animation frame (frame.js), however many messages arrived before it.

import { OrderActions } from "./actions.js";
import { AmendForm } from "./amend.js";
import { BookView } from "./book.js";
import { BookState } from "./bookstate.js";
import { CancelAll } from "./cancelall.js";
import { PriceChart } from "./chart.js";
import { checkLimit, checkMarket } from "./checks.js";
import { ColumnChars } from "./columns.js";
import { Connection } from "./connection.js";
import { MyFills } from "./fills.js";
import { describeOrder, describeResult, el, fmtPrice, fmtQty, fmtReason } from "./format.js";
import { frameStats, invalidate, onFrame } from "./frame.js";
import { http } from "./http.js";
import { MyOrders } from "./orders.js";
import * as prefs from "./prefs.js";
import { Tabs } from "./tabs.js";
import { KEEP as TAPE_KEEP, Tape } from "./tape.js";
import { Ticket } from "./ticket.js";

const DEPTH = 12;
const ACTIVITY_KEEP = 8;
const REPEAT_MS = 1000; // the same order again this soon after the last answer is taken for a double click
const TRADES_PAGE = 1000; // the most GET /trades answers at once (docs/protocol.md)
const ORDERS_PAGE = 1000; // the most GET /orders answers at once
const TRADES_PAGES = 20; // pages read to fill the tape after an outage; past that it says trades are missing
const $ = (id) => document.getElementById(id);

const page = {
  account: "", // the token: in open demo mode, the account name itself
  refused: false, // the server refused the token: order entry is not even tried
  refusedWhy: "",
  liveAs: null, // the account the server last named (shown again when a silence ends)
  symbols: [],
  symbol: null,
  book: new BookState(""),
  interval: prefs.load("interval", "1m"),
  ordersLoading: null, // updates that arrived while GET /orders was in flight
  ordersOf: null, // the account whose open orders the list holds (a reload for the same one is compared)
  known: new Map(), // orderId -> the highest seq a reload showed: an update as old is not news
  session: Math.random().toString(36).slice(2, 8),
  sent: 0,
  lastOrder: null, // {key, clientOrderId, answeredAt, unconfirmed}: the last order sent, for repeats
  tapeFill: null, // the trade backfill in flight after a reconnect
  stats: { snapshots: 0, updates: 0, gaps: 0 },
};

// ------------------------------------------------------------------ panels

// Sizes and totals are written to fit their columns (K/M/B when too wide); the columns are measured again
// whenever a panel is resized, and the panel redrawn.
const bookView = new BookView({
  asks: $("asks"),
  bids: $("bids"),
  spread: $("spread"),
  depth: DEPTH,
  onPick: (price) => {
    ticket.setPrice(price);
  },
  columns: new ColumnChars($("book"), () => invalidate("book")),
});
const tape = new Tape($("tape"), new ColumnChars($("tape-table"), () => {
  tape.touch();
  invalidate("tape");
}));
const chart = new PriceChart($("chart"), $("chart-summary"));
const amendForm = new AmendForm({
  send: (o, fields) => actions.amend(o, fields),
  precheck: (o, price, qty) => actions.checkAmend(o, price, qty),
  against: (side) => (side === "buy" ? page.book.bestAsk() : page.book.bestBid()),
  span: () => [...$("orders-table").querySelectorAll("col")].filter((c) => getComputedStyle(c).display !== "none").length,
  focusOut: (orderId) => {
    orders.render(); // now: the button drawn while the amend was out is disabled, and takes no focus
    const back = orders.amendButton(orderId) || $("orders").querySelector("button") || $("orders-title");
    back.focus();
  },
});
const orders = new MyOrders({
  tbody: $("orders"),
  empty: $("orders-empty"),
  onCancel: (o) => actions.cancel(o),
  onAmend: (o) => {
    amendForm.toggle(o);
    orders.render(); // now, so the keyboard can go into the form
    if (amendForm.isOpen()) amendForm.focus();
  },
  extraRow: (o) => amendForm.rowFor(o),
  columns: new ColumnChars($("orders-table"), () => invalidate("orders")),
});
const cancelAll = new CancelAll({
  button: $("cancel-all"),
  box: $("cancel-all-confirm"),
  text: $("cancel-all-text"),
  send: $("cancel-all-send"),
  back: $("cancel-all-back"),
  home: $("orders-title"),
  run: (symbol, list) => actions.cancelAll(symbol, list),
});
const fills = new MyFills({
  tbody: $("fills"),
  empty: $("fills-empty"),
  label: $("fills-symbol"),
  columns: new ColumnChars($("fills-table"), () => invalidate("fills")),
  read: (account, query) => http("GET", `/fills?${query}`, { token: account }),
});
const ordersTabs = new Tabs($("orders-tabs"), (id) => {
  $("orders-title").closest("section").dataset.view = id;
  cancelAll.hide(false);
  prefs.save("ordersView", id);
});
const actions = new OrderActions({ page, orders, call, say, loadOrders, shownDepth });
const ticket = new Ticket($("ticket"), {
  answer: $("answer"),
  onSubmit: placeOrder,
  onSymbol: selectSymbol,
  precheck: checkOrder,
  referencePrice,
});

onFrame("book", () => {
  bookView.render(page.book, orders.prices(page.symbol));
  const waiting = page.symbol !== null && page.book.seq === null;
  const stalled = conn.state === "stalled";
  $("book").dataset.seq = page.book.seq === null ? "" : String(page.book.seq);
  $("book").classList.toggle("stale", waiting || stalled);
  $("book-state").textContent = waiting
    ? "Waiting for a snapshot…"
    : stalled ? "The server is not answering: this book may be old." : "";
  renderQuote();
});
onFrame("tape", () => {
  tape.render();
  renderQuote();
});
onFrame("chart", () => chart.render());
onFrame("fills", () => fills.render());
onFrame("orders", () => {
  orders.render();
  const open = amendForm.order;
  if (open && !amendForm.sending && !orders.orders.has(open.orderId)) {
    // Filled or cancelled while the form was open: its own line under Activity says how.
    amendForm.close(false);
    say(`Amend #${open.orderId} closed: the order is no longer open`, "warn");
  }
  const mine = orders.inSymbol(page.symbol).filter((o) => !orders.busy.has(o.orderId));
  cancelAll.show(page.symbol, mine, [...orders.orders.values()].filter((o) => o.symbol !== page.symbol).length);
});

/**
 * The header quote and the tab title; while the connection is down, or the server silent, both say the
 * prices are old (and the stylesheet marks every panel by body[data-feed]).
 */
function renderQuote() {
  const last = tape.last();
  const down = conn.state === "offline" || (conn.state === "connecting" && conn.stats.opened > 0);
  const feed = down ? "offline" : conn.state === "stalled" ? "stalled" : "live";
  document.body.dataset.feed = feed;
  $("quote-symbol").textContent = page.symbol || "—";
  $("quote-last").textContent = last ? `${last.aggressor === "buy" ? "▲" : "▼"} ${fmtPrice(last.price)}` : "—";
  $("quote-last").className = last ? last.aggressor : "";
  $("quote-bid").textContent = fmtPrice(page.book.bestBid());
  $("quote-ask").textContent = fmtPrice(page.book.bestAsk());
  const title = page.symbol ? `${page.symbol} ${last ? fmtPrice(last.price) : ""} · tickflow` : "tickflow";
  document.title = feed === "offline" ? `Offline · ${title}` : feed === "stalled" ? `No answer · ${title}` : title;
}

/** The levels of each side the book shows (fewer on a phone: the stylesheet's --book-rows). */
function shownDepth() {
  const n = parseInt(getComputedStyle(document.documentElement).getPropertyValue("--book-rows"), 10);
  return n > 0 && n < DEPTH ? n : DEPTH;
}

function say(text, kind = "") {
  const list = $("activity");
  const item = el("li", kind, text);
  list.prepend(item);
  while (list.children.length > ACTIVITY_KEEP) list.lastElementChild.remove();
}

// ------------------------------------------------------------------ the connection

const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
const conn = new Connection(wsUrl);

conn.addEventListener("state", (ev) => {
  const { state, text, resumed } = ev.detail;
  $("conn").dataset.state = state;
  $("conn-text").textContent = text;
  if (state === "open" && resumed) {
    // The same socket, heard from again after a silence: nothing was missed, so nothing is reloaded.
    if (page.refused) showRefused(page.refusedWhy);
    else if (page.liveAs) $("conn-text").textContent = `Live as ${page.liveAs}`;
  } else if (state === "open") {
    loadSymbols(); // symbols may have come or gone while the server was away
    loadAccounts();
  } else if (state === "offline" && page.book.seq !== null) {
    page.book.reset(); // whatever we hold may be stale; the next snapshot replaces it
  }
  // While the server is silent, the ticket says an order may not be confirmed.
  $("t-stalled").hidden = state !== "stalled";
  $("t-stalled").textContent = state === "stalled"
    ? `${text} from the server: an order sent now may not be confirmed until it answers.`
    : "";
  invalidate("book");
});

conn.addEventListener("auth", (ev) => {
  // The token is never shown: only the account the server names (in demo mode the same text).
  page.refused = false;
  page.liveAs = ev.detail.account;
  $("conn-text").textContent = `Live as ${ev.detail.account}`;
  // Again for the same account: after an outage. What changed meanwhile is then said under Activity.
  loadOrders(page.ordersOf === page.account);
  fills.signedIn();
});

function showRefused(why) {
  page.refused = true;
  page.refusedWhy = why;
  $("conn").dataset.state = "refused";
  $("conn-text").textContent = `Token refused (${why}): market data only`;
}

conn.addEventListener("snapshot", (ev) => {
  const msg = ev.detail;
  if (msg.symbol !== page.symbol) return;
  page.stats.snapshots += 1;
  page.book.snapshot(msg);
  const held = tape.last();
  const trades = msg.trades || [];
  tape.add(trades);
  // The snapshot holds only the latest trades: after an outage, read the ones between from the store.
  if (held && !trades.some((t) => t.tradeId <= held.tradeId)) fillTape(msg.symbol, held.tradeId, trades);
  invalidate("book");
  invalidate("tape");
  reloadChart();
});

conn.addEventListener("update", (ev) => {
  const msg = ev.detail;
  if (msg.symbol !== page.symbol) return;
  page.stats.updates += 1;
  const applied = page.book.apply(msg);
  if (applied === "gap") {
    page.stats.gaps += 1;
    conn.resubscribe(page.symbol);
    invalidate("book");
    return;
  }
  if (applied === "waiting") return;
  invalidate("book");
  if (msg.trades && msg.trades.length) {
    tape.add(msg.trades);
    chart.addTrades(msg.trades);
    invalidate("tape");
    invalidate("chart");
  }
});

conn.addEventListener("resync", () => {
  page.book.reset(); // fresh snapshots follow
  invalidate("book");
});

conn.addEventListener("order", (ev) => {
  const order = ev.detail.order;
  if (page.ordersLoading) page.ordersLoading.push(order);
  const old = page.known.get(order.orderId) >= order.seq; // a reload already showed (and said) this
  fills.seen(order);
  if (orders.upsert(order)) {
    invalidate("orders");
    invalidate("book");
  }
  if (old) return;
  if (order.fills && order.fills.length) say(describeResult(order), order.side);
  else if (order.status === "cancelled" && order.reason !== "cancelled_by_user") say(describeResult(order), "warn");
});

conn.addEventListener("servererror", (ev) => {
  const { op, field } = ev.detail;
  const why = ev.detail.error || ev.detail.reason || "error";
  if (op === "auth") {
    // Market data still flows; order entry and my orders need a token the server knows.
    showRefused(why);
    fills.refused();
    say("The server refused the token: market data only. Orders need a valid token (top right).", "bad");
    return;
  }
  if ((op === "subscribe" || op === "unsubscribe") && field === "symbols") {
    loadSymbols(); // a symbol went away while we were disconnected: switch, and say so
    return;
  }
  say(`Server: ${why}`, "bad");
});

// ------------------------------------------------------------------ loading

/**
 * What the account field holds, as /health says: in open demo mode an account name, shown in clear;
 * with --tokens a token, masked. Until the server says, it is masked.
 */
async function loadAccounts() {
  let res;
  try {
    res = await http("GET", "/health");
  } catch {
    return;
  }
  const open = res.status === 200 && res.body && res.body.accounts === "open";
  const field = $("account");
  field.type = open ? "text" : "password";
  field.placeholder = open ? "account name" : "token";
  document.querySelector('label[for="account"]').textContent = open ? "Account" : "Token";
}

async function loadSymbols() {
  let res;
  try {
    res = await http("GET", "/symbols");
  } catch {
    return; // tried again on the next connect
  }
  if (res.status !== 200 || !res.body || !Array.isArray(res.body.symbols)) return;
  page.symbols = res.body.symbols.map((s) => s.symbol);
  let symbol = page.symbol;
  if (symbol === null || !page.symbols.includes(symbol)) {
    const saved = prefs.load("symbol", "");
    const next = page.symbols.includes(saved) ? saved : page.symbols[0];
    if (symbol !== null) {
      say(next ? `${symbol} is no longer traded on this server: switched to ${next}` : `${symbol} is no longer traded on this server`, "warn");
    }
    symbol = next;
  }
  ticket.setSymbols(page.symbols, symbol);
  if (symbol) selectSymbol(symbol);
}

/**
 * Fill the tape's hole after an outage: trades of `symbol` after `after` (the last one held) up to the
 * snapshot's oldest, read from GET /trades page by page. Until then, and if that cannot be done, a row
 * in the tape says trades are missing there.
 */
async function fillTape(symbol, after, snapshotTrades) {
  const until = snapshotTrades.length ? Math.min(...snapshotTrades.map((t) => t.tradeId)) : Infinity;
  const below = until === Infinity ? after + 1 : until;
  const job = {};
  page.tapeFill = job;
  tape.markHole(below, "Loading the trades made while offline…");
  let kept = [];
  let cursor = after;
  let why = `more than ${fmtQty(TRADES_PAGE * TRADES_PAGES)} trades were made while offline; older ones not shown`;
  for (let n = 0; n < TRADES_PAGES; n++) {
    let res;
    try {
      res = await http("GET", `/trades?symbol=${encodeURIComponent(symbol)}&after=${cursor}&limit=${TRADES_PAGE}`);
    } catch {
      res = { status: 0 };
    }
    if (page.tapeFill !== job) return; // another symbol, or a newer fill
    if (res.status !== 200 || !Array.isArray(res.body)) {
      why = "trades made while offline could not be loaded; older ones not shown";
      break;
    }
    kept = kept.concat(res.body).slice(-TAPE_KEEP); // only the newest can be on the tape
    if (res.body.length < TRADES_PAGE || res.body.at(-1).tradeId >= until) {
      why = null;
      break;
    }
    cursor = res.body.at(-1).tradeId;
  }
  page.tapeFill = null;
  tape.add(kept);
  tape.markHole(why === null ? null : below, why === null ? "" : `— ${why} —`);
  invalidate("tape");
}

/**
 * Read my open orders. `compare`: after a reconnect, say under Activity what happened to them while the
 * page was offline (fills, and orders that are no longer open, read one by one), from the list held.
 */
async function loadOrders(compare = false) {
  if (!page.account) return;
  const account = page.account;
  const arrived = [];
  page.ordersLoading = arrived;
  const list = [];
  try {
    // GET /orders answers at most ORDERS_PAGE at once: the pages are followed, after the last id of each.
    for (let after = 0; ; ) {
      const res = await http("GET", `/orders?status=open${after ? `&after=${after}` : ""}`, { token: account });
      if (account !== page.account || res.status !== 200 || !res.body) return;
      const got = res.body.orders || [];
      list.push(...got);
      if (got.length !== ORDERS_PAGE) break;
      after = got[got.length - 1].orderId;
    }
  } catch {
    return;
  } finally {
    if (page.ordersLoading === arrived) page.ordersLoading = null;
  }
  const held = orders.orders;
  orders.reset(list);
  for (const o of arrived) orders.upsert(o);
  for (const o of list) page.known.set(o.orderId, o.seq);
  page.ordersOf = account;
  invalidate("orders");
  invalidate("book");
  foundUnconfirmed(list);
  if (compare) await sayMissed(held, account);
}

const MISSED_READS = 20; // orders gone while offline read one by one; past that, only counted

/** What happened to the orders held before an outage, from the list read after it. */
async function sayMissed(held, account) {
  const gone = [];
  for (const [id, before] of held) {
    const now = orders.orders.get(id);
    if (!now) {
      if (!orders.busy.has(id)) gone.push(before); // a cancel in flight says for itself what happened
    } else if (now.filledQty > before.filledQty) {
      say(`While offline: #${id} ${describeOrder(now)} filled ${fmtQty(now.filledQty - before.filledQty)} more ` +
        `(${fmtQty(now.filledQty)} of ${fmtQty(now.qty)} now)`, now.side);
    }
  }
  const read = gone.slice(0, MISSED_READS);
  const states = await Promise.all(read.map((o) => http("GET", `/orders/${o.orderId}`, { token: account })
    .then((r) => (r.status === 200 && r.body ? r.body : null), () => null)));
  if (account !== page.account) return;
  read.forEach((before, i) => {
    const now = states[i];
    const what = `While offline: #${before.orderId} ${describeOrder(before)}`;
    if (now === null) {
      say(`${what} is no longer open (what became of it could not be read)`, "warn");
      return;
    }
    page.known.set(now.orderId, Math.max(now.seq, page.known.get(now.orderId) ?? 0));
    if (now.status === "new" || now.status === "partially_filled") {
      if (orders.upsert(now)) invalidate("orders"); // placed or changed as the list was read: still open
      return;
    }
    const more = now.filledQty - before.filledQty;
    if (now.status === "filled") {
      say(`${what} filled${before.filledQty ? ` the other ${fmtQty(more)}` : ""} (${fmtQty(now.filledQty)} of ` +
        `${fmtQty(now.qty)})`, now.side);
      return;
    }
    const why = now.reason === "cancelled_by_user" ? "by you, elsewhere" : fmtReason(now.reason) || now.status;
    const filled = more > 0 ? `, after ${fmtQty(more)} more filled (${fmtQty(now.filledQty)} of ${fmtQty(now.qty)})` : "";
    say(`${what} was ${now.status === "cancelled" ? "cancelled" : now.status} (${why})${filled}`, "warn");
  });
  if (gone.length > read.length) {
    say(`While offline: ${fmtQty(gone.length - read.length)} more of your orders closed (filled or cancelled)`, "warn");
  }
}

/** An order whose answer never came (given up on, then the connection lost) found open after all. */
function foundUnconfirmed(list) {
  const last = page.lastOrder;
  if (!last || !last.unconfirmed) return;
  const o = list.find((x) => x.clientOrderId === last.clientOrderId);
  if (!o) return;
  last.unconfirmed = false;
  ticket.showAnswer(`✓ Placed after all (its answer was lost; found in My open orders): ${describeResult(o)}`, "ok");
  say(`Placed after all: ${describeResult(o)}`, "ok");
}

function reloadChart() {
  chart.load(page.symbol, page.interval, () => tape.trades).then((current) => {
    if (current) invalidate("chart");
  });
}

function selectSymbol(symbol) {
  if (symbol === page.symbol) return;
  if (page.symbol && page.symbols.includes(page.symbol)) conn.unsubscribe(page.symbol);
  else if (page.symbol) conn.forget(page.symbol); // gone from the server: it would refuse the unsubscribe
  page.symbol = symbol;
  page.tapeFill = null;
  page.book = new BookState(symbol);
  prefs.save("symbol", symbol);
  tape.clear();
  $("book-symbol").textContent = symbol;
  fills.show(page.account, symbol);
  invalidate("orders"); // Cancel all is for the symbol on screen
  $("chart-symbol").textContent = symbol;
  if (ticket.symbol !== symbol) ticket.setSymbols(page.symbols, symbol);
  conn.subscribe(symbol);
  reloadChart();
  invalidate("book");
  invalidate("tape");
}

// ------------------------------------------------------------------ order entry

/**
 * Send over the WebSocket when it is up, else over HTTP (with `httpBody`, none for DELETE); answers
 * {status, body}.
 */
async function call(op, httpMethod, httpPath, fields, httpBody = httpMethod === "DELETE" ? undefined : fields) {
  const account = page.account;
  let res;
  if (conn.isOpen) {
    res = await conn.request({ op, ...fields });
  } else {
    try {
      res = await http(httpMethod, httpPath, { token: account, body: httpBody });
    } catch {
      res = { status: 0, body: { error: "the server cannot be reached; nothing was confirmed" } };
    }
  }
  if (account === page.account) answeredFills(op, res.status, res.body);
  return res;
}

/** An order's or an amend's answer lists the fills of that order taking liquidity. */
function answeredFills(op, status, body) {
  if (status === 200 && body && (op === "order" || op === "amend")) fills.seen(body);
}

/**
 * Before sending: nothing while the server refuses the token; a confirmation for a market order larger
 * than the side of the book on screen, and for a limit order that trades through the book (checks.js).
 */
function checkOrder(order) {
  if (page.refused) {
    return { refuse: "The server refused your token, so nothing was sent: enter a valid one in the field at the top." };
  }
  if (order.type === "market") return checkMarket(order, page.book, shownDepth(), bookDoubt());
  if (order.postOnly) return null; // it never trades: the server rejects it if it would
  const what = `Limit ${order.side} ${fmtQty(order.qty)} ${order.symbol} @ ${fmtPrice(order.price)}`;
  return checkLimit(order, page.book, shownDepth(), what, `Send ${order.side} ${fmtQty(order.qty)} @ ${fmtPrice(order.price)}`);
}

function silentSecs() {
  return Math.floor((Date.now() - conn.lastHeard) / 1000);
}

/** Why the book on screen cannot be trusted now, or null. */
function bookDoubt() {
  if (page.book.seq === null) return "the book is not live";
  if (conn.state === "stalled") return `the server has not answered for ${silentSecs()} s`;
  return null;
}

/** Where Up and Down start in an empty price field: the price a buy would pay (best ask), a sell get. */
function referencePrice(side) {
  const [near, far] = side === "sell" ? [page.book.bestBid(), page.book.bestAsk()] : [page.book.bestAsk(), page.book.bestBid()];
  const last = tape.last();
  return near ?? far ?? (last ? last.price : null);
}

/**
 * Send an order. The same order again (nothing in the ticket changed) within REPEAT_MS of the last
 * answer, or after an attempt that got no answer, goes with the same clientOrderId: the server answers
 * it with the order already placed, so a double click or a resend never places it twice.
 */
async function placeOrder(order) {
  const key = JSON.stringify(order);
  const last = page.lastOrder;
  const repeat = last !== null && last.key === key &&
    (last.unconfirmed || performance.now() - last.answeredAt < REPEAT_MS);
  if (!repeat) page.sent += 1;
  const clientOrderId = repeat ? last.clientOrderId : `web-${page.session}-${page.sent}`;
  const account = page.account;
  ticket.showAnswer(`Sending ${order.side} ${fmtQty(order.qty)} ${order.symbol}…`, "pending");
  let res = await call("order", "POST", "/orders", { ...order, clientOrderId });
  if (account !== page.account) return res; // the answer of another account's order
  page.lastOrder = { key, clientOrderId, answeredAt: performance.now(), unconfirmed: res.status === 0 };
  if (res.status === 200) {
    const again = repeat && !last.unconfirmed
      ? `Not placed again (the same order within ${REPEAT_MS / 1000} s): `
      : "";
    showOrder(res.body, again);
  } else if (res.status === 0 && res.body && res.body.late) {
    // Not a refusal: the server may still answer, and then the answer replaces this line.
    ticket.showAnswer(`… ${res.body.error}; a late answer will show here`, "warn");
  } else {
    if (res.status === 401) {
      showRefused("unknown token");
      res = { status: 401, body: { error: "The server refused your token, so nothing was placed: enter a valid one in the field at the top." } };
    }
    const why = res.body && res.body.error ? res.body.error : "refused";
    ticket.showAnswer(`✗ ${why}${res.status && res.status !== 401 ? ` (${res.status})` : ""}`, "bad");
  }
  return res;
}

/**
 * The ticket's answer for an order result: ✓ when it was placed or traded, ✗ when rejected, and a
 * neutral ○ when it was cancelled having done nothing (no liquidity, a FOK that could not fill).
 */
function showOrder(o, prefix = "") {
  if (orders.upsert(o)) {
    invalidate("orders");
    invalidate("book");
  }
  const kind = o.status === "rejected" ? "bad" : o.status === "cancelled" ? "warn" : "ok";
  const mark = kind === "bad" ? "✗" : o.status === "cancelled" && o.filledQty === 0 ? "○" : "✓";
  ticket.showAnswer(`${mark} ${prefix}${describeResult(o)}`, kind);
}

// An answer that came after the page had given up waiting (a frozen server): it replaces the ticket's
// "no answer yet" line, or is said under Activity.
conn.addEventListener("late", (ev) => {
  const { request, status, body } = ev.detail;
  answeredFills(request.op, status, body);
  if (actions.late(request, { status, body })) return; // a cancel, cancel-all or amend
  if (request.op !== "order") return;
  const last = page.lastOrder;
  const current = last !== null && last.clientOrderId === request.clientOrderId && last.unconfirmed;
  if (current) {
    last.unconfirmed = false;
    last.answeredAt = performance.now();
  }
  if (status === 200) {
    if (current) showOrder(body, "Answered late: ");
    else if (orders.upsert(body)) invalidate("orders");
    say(`Answered late: ${describeResult(body)}`, body.status === "rejected" ? "bad" : "ok");
  } else {
    const why = body && body.error ? body.error : "refused";
    if (current) ticket.showAnswer(`✗ Answered late: ${why} (${status})`, "bad");
    say(`Order ${request.clientOrderId} answered late: ${why} (${status})`, "bad");
  }
  invalidate("book");
});

// ------------------------------------------------------------------ settings

/** Use a token: any text the server may know (in open demo mode, an account name). Shown only masked. */
function useAccount(token) {
  page.account = token;
  page.refused = false;
  page.liveAs = null;
  page.lastOrder = null;
  page.ordersOf = null;
  page.known.clear();
  actions.reset();
  amendForm.close(false);
  prefs.save("account", token);
  $("account").value = token;
  orders.reset([]);
  fills.show(token, page.symbol);
  ticket.clear(); // errors and answers were the other account's
  $("activity").replaceChildren(); // and so were its fills, cancels and refusals
  invalidate("orders");
  invalidate("book");
  conn.start(token);
}

$("account-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = $("account").value.trim();
  if (!token) {
    $("account").setAttribute("aria-invalid", "true");
    say("Enter an account name, or the token you were given", "bad");
    return;
  }
  $("account").removeAttribute("aria-invalid");
  if (token !== page.account) useAccount(token);
});

function usePalette(name) {
  document.documentElement.dataset.palette = name;
  $("palette").value = name;
  prefs.save("palette", name);
  chart.applyTheme();
  invalidate("chart");
  invalidate("book");
}

$("palette").addEventListener("change", () => usePalette($("palette").value));

$("interval").value = page.interval;
$("interval").addEventListener("change", () => {
  page.interval = $("interval").value;
  prefs.save("interval", page.interval);
  reloadChart();
});

// ------------------------------------------------------------------ start

usePalette(prefs.load("palette", "classic"));
ordersTabs.select(prefs.load("ordersView", "tab-orders"));
const savedAccount = prefs.load("account", "").trim();
useAccount(savedAccount || `guest-${page.session.slice(0, 4)}`);
invalidate("book");

/** For tests and the curious: the page's state, read-only by convention. */
window.tickflow = { conn, frameStats, orders, fills, chart, tape, amendForm, stats: page.stats, get book() { return page.book; } };
