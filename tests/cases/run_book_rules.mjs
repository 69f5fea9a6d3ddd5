// Runs tests/cases/book_rules.json against the page's BookState (web/js/bookstate.js), doing with each
// message what web/js/main.js does, and prints what came of every step as JSON (tests/test_book_rules.py
// compares it with the cases). Usage: node run_book_rules.mjs CASES.json BOOKSTATE.js
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [casesPath, modulePath] = process.argv.slice(2);
const { BookState } = await import(pathToFileURL(modulePath).href);
const OUT = { ok: "book", part: "part", waiting: "ignored", gap: "gap" };

function view(book) {
  const { bids, asks } = book.levels(undefined);
  const levels = (side) => side.map(({ price, qty, orders }) => [price, qty, orders]);
  return { seq: book.seq, live: book.live, more: book.more, bids: levels(bids), asks: levels(asks) };
}

function run(steps) {
  const books = new Map();
  const book = (symbol) => {
    if (!books.has(symbol)) books.set(symbol, new BookState(symbol));
    return books.get(symbol);
  };
  const resubscribe = [];
  const done = steps.map(({ in: msg }) => {
    let out;
    if (msg.type === "resync") {
      for (const b of books.values()) b.reset();
      out = "resync";
    } else if (msg.type === "snapshot") {
      out = OUT[book(msg.symbol).snapshot(msg)];
    } else {
      const answer = book(msg.symbol).apply(msg);
      if (answer === "gap") resubscribe.push(msg.symbol);
      out = OUT[answer];
    }
    return { out, books: Object.fromEntries([...books].map(([symbol, b]) => [symbol, view(b)])) };
  });
  return { steps: done, resubscribe };
}

const cases = JSON.parse(readFileSync(casesPath, "utf8")).cases;
process.stdout.write(JSON.stringify(cases.map((c) => run(c.steps))));
