// The order book's table. What it shows is a BookState (bookstate.js): the feed's rules, kept apart
// from the page so that they run anywhere.

import { el, fitQty, fmtPrice, fmtQty } from "./format.js";

/**
 * The book table: a fixed number of rows per side, updated in place so keyboard focus on a price
 * survives every redraw. Asks are listed worst to best down to the spread, bids best to worst below it.
 */
export class BookView {
  constructor({ asks, bids, spread, depth, onPick, columns }) {
    this.depth = depth;
    this.spread = spread;
    this.columns = columns; // ColumnChars: how many characters the size and total columns hold
    this.askRows = makeRows(asks, depth, "sell", onPick);
    this.bidRows = makeRows(bids, depth, "buy", onPick);
  }

  render(book, mine) {
    const { bids, asks } = book.levels(this.depth);
    const maxTotal = Math.max(1, bids.length ? bids.at(-1).total : 0, asks.length ? asks.at(-1).total : 0);
    const fit = { size: this.columns.get(1, 11), total: this.columns.get(2, 14) };
    // Asks: the best ask sits in the last row, next to the spread.
    for (let i = 0; i < this.depth; i++) {
      const level = asks[this.depth - 1 - i];
      fillRow(this.askRows[i], level, maxTotal, mine.sell, fit);
    }
    for (let i = 0; i < this.depth; i++) fillRow(this.bidRows[i], bids[i], maxTotal, mine.buy, fit);
    const bid = book.bestBid();
    const ask = book.bestAsk();
    if (bid !== null && ask !== null) {
      const spread = ask - bid;
      const mid = (ask + bid) / 2;
      this.spread.textContent = `Spread ${fmtPrice(spread)} · Mid ${fmtPrice(mid)}`;
    } else {
      this.spread.textContent = bid === null && ask === null ? "Empty book" : "Spread — (one side empty)";
    }
  }
}

function makeRows(tbody, depth, side, onPick) {
  tbody.replaceChildren();
  const rows = [];
  for (let i = 0; i < depth; i++) {
    const tr = el("tr", `level ${side} vacant`);
    const priceCell = el("td", "px");
    const button = el("button", "pick");
    button.type = "button";
    priceCell.append(button);
    const mark = el("span", "mine-mark", "");
    priceCell.append(mark);
    const qty = el("td", "num");
    const total = el("td", "num");
    tr.append(priceCell, qty, total);
    tr.addEventListener("click", (ev) => {
      const price = tr.dataset.price;
      if (price === undefined) return;
      if (ev.target !== button) button.focus();
      onPick(Number(price), side);
    });
    tbody.append(tr);
    rows.push({ tr, button, mark, qty, total });
  }
  return rows;
}

function fillRow(row, level, maxTotal, minePrices, fit) {
  if (!level) {
    if (row.tr.dataset.price === undefined) return;
    delete row.tr.dataset.price;
    row.tr.classList.add("vacant");
    row.button.textContent = "";
    row.button.tabIndex = -1;
    row.button.removeAttribute("aria-label");
    row.mark.textContent = "";
    row.qty.textContent = "";
    row.total.textContent = "";
    row.tr.style.setProperty("--depth", "0%");
    return;
  }
  const side = row.tr.classList.contains("sell") ? "ask" : "bid";
  const price = fmtPrice(level.price);
  row.tr.dataset.price = String(level.price);
  row.tr.classList.remove("vacant");
  row.button.textContent = price;
  row.button.tabIndex = 0;
  const own = minePrices.has(level.price);
  row.button.setAttribute(
    "aria-label",
    `${side} ${price}, size ${fmtQty(level.qty)} in ${level.orders} order${level.orders === 1 ? "" : "s"}` +
      `${own ? ", includes yours" : ""}. Copy price to ticket`,
  );
  row.mark.textContent = own ? "◆" : "";
  row.mark.title = own ? "Your order rests here" : "";
  // Prices always in full; a size or total too wide for its column in K/M/B, in full in the row's tooltip.
  row.qty.textContent = fitQty(level.qty, fit.size);
  row.total.textContent = fitQty(level.total, fit.total);
  row.tr.title = `${fmtQty(level.qty)} in ${level.orders} order${level.orders === 1 ? "" : "s"}, ${fmtQty(level.total)} in all to here`;
  row.tr.style.setProperty("--depth", `${((level.total / maxTotal) * 100).toFixed(1)}%`);
}
