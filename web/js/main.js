// The trading screen: wires the connection, the panels and the settings together.
//
// Feed messages only change state and mark panels dirty; each dirty panel is redrawn once in the next
// animation frame (frame.js), however many messages arrived before it.

import { BookState, BookView } from "./book.js";
import { PriceChart } from "./chart.js";
import { Connection } from "./connection.js";
import { describeResult, el, fmtPrice } from "./format.js";
import { frameStats, invalidate, onFrame } from "./frame.js";
import { http } from "./http.js";
import { MyOrders } from "./orders.js";
import * as prefs from "./prefs.js";
import { Tape } from "./tape.js";
import { Ticket } from "./ticket.js";

const DEPTH = 12;
const ACTIVITY_KEEP = 8;
const ACCOUNT_RE = /^[A-Za-z0-9._:@-]{1,64}$/;
const $ = (id) => document.getElementById(id);

const page = {
  account: "",
  symbols: [],
  symbol: null,
  book: new BookState(""),
  interval: prefs.load("interval", "1m"),
  ordersLoading: null, // updates that arrived while GET /orders was in flight
  session: Math.random().toString(36).slice(2, 8),
  sent: 0,
  stats: { snapshots: 0, updates: 0, gaps: 0 },
};

// ------------------------------------------------------------------ panels

const bookView = new BookView({
  asks: $("asks"),
  bids: $("bids"),
  spread: $("spread"),
  depth: DEPTH,
  onPick: (price) => {
    ticket.setPrice(price);
  },
});
const tape = new Tape($("tape"));
const chart = new PriceChart($("chart"), $("chart-summary"));
const orders = new MyOrders({ tbody: $("orders"), empty: $("orders-empty"), onCancel: cancelOrder });
const ticket = new Ticket($("ticket"), { onSubmit: placeOrder, onSymbol: selectSymbol });

onFrame("book", () => {
  bookView.render(page.book, orders.prices(page.symbol));
  $("book").dataset.seq = page.book.seq === null ? "" : String(page.book.seq);
  $("book").classList.toggle("stale", page.symbol !== null && page.book.seq === null);
  $("book-state").textContent = page.symbol && page.book.seq === null ? "Waiting for a snapshot…" : "";
  renderQuote();
});
onFrame("tape", () => {
  tape.render();
  renderQuote();
});
onFrame("chart", () => chart.render());
onFrame("orders", () => orders.render());

function renderQuote() {
  const last = tape.last();
  $("quote-symbol").textContent = page.symbol || "—";
  $("quote-last").textContent = last ? `${last.aggressor === "buy" ? "▲" : "▼"} ${fmtPrice(last.price)}` : "—";
  $("quote-last").className = last ? last.aggressor : "";
  $("quote-bid").textContent = fmtPrice(page.book.bestBid());
  $("quote-ask").textContent = fmtPrice(page.book.bestAsk());
  document.title = page.symbol ? `${page.symbol} ${last ? fmtPrice(last.price) : ""} · tickflow` : "tickflow";
}

function say(text, kind = "") {
  const list = $("activity");
  const item = el("li", kind, text);
  list.prepend(item);
  while (list.children.length > ACTIVITY_KEEP) list.lastElementChild.remove();
}

function answer(text, kind) {
  const box = $("answer");
  box.className = `answer ${kind}`;
  box.textContent = text;
}

// ------------------------------------------------------------------ the connection

const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
const conn = new Connection(wsUrl);

conn.addEventListener("state", (ev) => {
  const { state, text } = ev.detail;
  $("conn").dataset.state = state;
  $("conn-text").textContent = text;
  if (state === "open") {
    if (!page.symbols.length) loadSymbols();
  } else if (state === "offline" && page.book.seq !== null) {
    page.book.seq = null; // whatever we hold may be stale; the next snapshot replaces it
    invalidate("book");
  }
});

conn.addEventListener("auth", (ev) => {
  // With `serve --tokens` the field holds a token and the server names the account behind it.
  const account = ev.detail.account;
  $("conn-text").textContent = account && account !== page.account ? `Live as ${account}` : "Live";
  loadOrders();
});

conn.addEventListener("snapshot", (ev) => {
  const msg = ev.detail;
  if (msg.symbol !== page.symbol) return;
  page.stats.snapshots += 1;
  page.book.snapshot(msg);
  tape.add(msg.trades || []);
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
  if (applied !== "ok") return;
  invalidate("book");
  if (msg.trades && msg.trades.length) {
    tape.add(msg.trades);
    chart.addTrades(msg.trades);
    invalidate("tape");
    invalidate("chart");
  }
});

conn.addEventListener("resync", () => {
  page.book.seq = null; // fresh snapshots follow
  invalidate("book");
});

conn.addEventListener("order", (ev) => {
  const order = ev.detail.order;
  if (page.ordersLoading) page.ordersLoading.push(order);
  if (orders.upsert(order)) {
    invalidate("orders");
    invalidate("book");
  }
  if (order.fills && order.fills.length) say(describeResult(order), order.side);
  else if (order.status === "cancelled" && order.reason !== "cancelled_by_user") say(describeResult(order), "warn");
});

conn.addEventListener("servererror", (ev) => {
  const why = ev.detail.error || ev.detail.reason || "error";
  if (ev.detail.op === "auth") {
    // Market data still flows; order entry and my orders need an account the server knows.
    $("conn").dataset.state = "refused";
    $("conn-text").textContent = `Account ${page.account} refused: ${why}`;
  }
  say(`Server: ${why}`, "bad");
});

// ------------------------------------------------------------------ loading

async function loadSymbols() {
  let res;
  try {
    res = await http("GET", "/symbols");
  } catch {
    return; // tried again on the next connect
  }
  if (res.status !== 200 || !res.body || !Array.isArray(res.body.symbols)) return;
  page.symbols = res.body.symbols.map((s) => s.symbol);
  const saved = prefs.load("symbol", "");
  const symbol = page.symbols.includes(saved) ? saved : page.symbols[0];
  ticket.setSymbols(page.symbols, symbol);
  if (symbol) selectSymbol(symbol);
}

async function loadOrders() {
  if (!page.account) return;
  const account = page.account;
  const arrived = [];
  page.ordersLoading = arrived;
  let res;
  try {
    res = await http("GET", "/orders?status=open", { token: account });
  } catch {
    return;
  } finally {
    if (page.ordersLoading === arrived) page.ordersLoading = null;
  }
  if (account !== page.account || res.status !== 200 || !res.body) return;
  orders.reset(res.body.orders || []);
  for (const o of arrived) orders.upsert(o);
  invalidate("orders");
  invalidate("book");
}

function reloadChart() {
  const last = tape.last();
  chart.load(page.symbol, page.interval, last ? last.tradeId : 0).then((current) => {
    if (current) invalidate("chart");
  });
}

function selectSymbol(symbol) {
  if (symbol === page.symbol) return;
  if (page.symbol) conn.unsubscribe(page.symbol);
  page.symbol = symbol;
  page.book = new BookState(symbol);
  prefs.save("symbol", symbol);
  tape.clear();
  $("book-symbol").textContent = symbol;
  $("chart-symbol").textContent = symbol;
  if (ticket.symbol !== symbol) ticket.setSymbols(page.symbols, symbol);
  conn.subscribe(symbol);
  reloadChart();
  invalidate("book");
  invalidate("tape");
}

// ------------------------------------------------------------------ order entry

/** Send over the WebSocket when it is up, else over HTTP; answers {status, body}. */
async function call(op, httpMethod, httpPath, body) {
  if (conn.isOpen) return conn.request({ op, ...body });
  try {
    return await http(httpMethod, httpPath, { token: page.account, body: httpMethod === "DELETE" ? undefined : body });
  } catch {
    return { status: 0, body: { error: "the server cannot be reached; nothing was confirmed" } };
  }
}

async function placeOrder(order) {
  page.sent += 1;
  const clientOrderId = `web-${page.session}-${page.sent}`;
  answer(`Sending ${order.side} ${order.qty} ${order.symbol}…`, "pending");
  const res = await call("order", "POST", "/orders", { ...order, clientOrderId });
  if (res.status === 200) {
    const o = res.body;
    if (orders.upsert(o)) {
      invalidate("orders");
      invalidate("book");
    }
    const kind = o.status === "rejected" ? "bad" : o.status === "cancelled" ? "warn" : "ok";
    answer(`${kind === "bad" ? "✗" : "✓"} ${describeResult(o)}`, kind);
  } else {
    answer(`✗ ${res.body && res.body.error ? res.body.error : "refused"}${res.status ? ` (${res.status})` : ""}`, "bad");
  }
  return res;
}

async function cancelOrder(o) {
  orders.busy.add(o.orderId);
  invalidate("orders");
  const res = await call("cancel", "DELETE", `/orders/${o.orderId}`, { orderId: o.orderId });
  orders.busy.delete(o.orderId);
  if (res.status === 200) {
    orders.upsert(res.body);
    say(`Cancelled #${o.orderId}: ${res.body.remainingQty} ${o.symbol} off the book`, "ok");
  } else {
    say(`Cancel #${o.orderId} refused: ${res.body && res.body.error ? res.body.error : res.status}`, "bad");
    if (res.status === 409 || res.status === 404) loadOrders();
  }
  invalidate("orders");
  invalidate("book");
}

// ------------------------------------------------------------------ settings

function useAccount(name) {
  page.account = name;
  prefs.save("account", name);
  $("account").value = name;
  orders.reset([]);
  invalidate("orders");
  invalidate("book");
  conn.start(name);
}

$("account-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const name = $("account").value.trim();
  if (!ACCOUNT_RE.test(name)) {
    $("account").setAttribute("aria-invalid", "true");
    say("An account name is 1 to 64 letters, digits or . _ : @ -", "bad");
    return;
  }
  $("account").removeAttribute("aria-invalid");
  if (name !== page.account) useAccount(name);
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
const savedAccount = prefs.load("account", "");
useAccount(ACCOUNT_RE.test(savedAccount) ? savedAccount : `guest-${page.session.slice(0, 4)}`);
invalidate("book");

/** For tests and the curious: the page's state, read-only by convention. */
window.tickflow = { conn, frameStats, orders, chart, tape, stats: page.stats, get book() { return page.book; } };
