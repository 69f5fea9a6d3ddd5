// The price chart: candles from GET /bars, then kept up to date from the feed's trades.
//
// The canvas is drawn by TradingView Lightweight Charts (vendor/); the same numbers are written out as
// text under it, for screen readers and tests. Times are shifted to the browser's time zone, since the
// library draws its time axis in UTC.

import { CandlestickSeries, HistogramSeries, createChart } from "../vendor/lightweight-charts.js";
import { fmtPrice, fmtQty, fmtTime } from "./format.js";

export const INTERVAL_MS = { "1m": 60_000, "5m": 300_000, "15m": 900_000, "1h": 3_600_000 };
const BUCKETS = 180;

/** Candles by bucket start: built from /bars, extended by trades. No DOM, no library. */
export class Candles {
  constructor(intervalMs) {
    this.intervalMs = intervalMs;
    this.bars = new Map(); // t -> {t, open, high, low, close, volume}
    this.changed = new Set();
    this.full = true; // the whole series must be redrawn
  }

  load(bars) {
    this.bars = new Map(bars.map((b) => [b.t, { ...b }]));
    this.changed.clear();
    this.full = true;
  }

  addTrade(trade) {
    const t = Math.floor(trade.ts / this.intervalMs) * this.intervalMs;
    const bar = this.bars.get(t);
    if (bar) {
      bar.high = Math.max(bar.high, trade.price);
      bar.low = Math.min(bar.low, trade.price);
      bar.close = trade.price;
      bar.volume += trade.qty;
    } else {
      this.bars.set(t, { t, open: trade.price, high: trade.price, low: trade.price, close: trade.price, volume: trade.qty });
    }
    if (t < this.lastTime()) this.full = true;
    this.changed.add(t);
  }

  lastTime() {
    let last = -Infinity;
    for (const t of this.bars.keys()) if (t > last) last = t;
    return last;
  }

  sorted() {
    return [...this.bars.values()].sort((a, b) => a.t - b.t);
  }

  latest() {
    return this.bars.get(this.lastTime()) || null;
  }
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function localSeconds(ms) {
  return Math.floor((ms - new Date(ms).getTimezoneOffset() * 60_000) / 1000);
}

export class PriceChart {
  constructor(container, summary) {
    this.container = container;
    this.summary = summary;
    this.symbol = null;
    this.interval = "1m";
    this.candles = new Candles(INTERVAL_MS[this.interval]);
    this.loading = null; // a load in flight: trades are held until it lands
    this.held = [];
    this.cutoff = 0; // trades with ids up to this are in the candles already
    this.drawn = -Infinity; // newest bar time handed to the library
    this.chart = createChart(container, {
      autoSize: true,
      layout: { background: { type: "solid", color: "transparent" }, attributionLogo: true, fontSize: 11 },
      timeScale: { timeVisible: true, secondsVisible: false, rightOffset: 4, barSpacing: 9 },
      rightPriceScale: { scaleMargins: { top: 0.1, bottom: 0.25 } },
      crosshair: { mode: 0 },
    });
    this.series = this.chart.addSeries(CandlestickSeries, {
      priceFormat: { type: "price", precision: 0, minMove: 1 },
      borderVisible: false,
    });
    this.volume = this.chart.addSeries(HistogramSeries, {
      priceFormat: { type: "volume" },
      priceScaleId: "volume",
      lastValueVisible: false,
      priceLineVisible: false,
    });
    this.chart.priceScale("volume").applyOptions({ scaleMargins: { top: 0.8, bottom: 0 } });
    this.applyTheme();
  }

  applyTheme() {
    const up = cssVar("--buy");
    const down = cssVar("--sell");
    this.up = up;
    this.down = down;
    this.chart.applyOptions({
      layout: { textColor: cssVar("--muted") },
      grid: { vertLines: { color: cssVar("--grid") }, horzLines: { color: cssVar("--grid") } },
      rightPriceScale: { borderColor: cssVar("--line") },
      timeScale: { borderColor: cssVar("--line") },
    });
    this.series.applyOptions({ upColor: up, downColor: down, wickUpColor: up, wickDownColor: down });
    this.candles.full = true;
  }

  /**
   * Show a symbol at an interval. `seen()` gives the trades already seen, newest first. The bars are
   * asked for every trade up to the newest one seen, cut by trade id (many trades can share its
   * millisecond, more than the tape holds), and only the trades after it (arriving while the bars load,
   * or later) are added here, each once: none is missing, none counted twice.
   */
  async load(symbol, interval, seen) {
    this.symbol = symbol;
    this.interval = interval;
    this.held = [];
    const newest = seen()[0] || null;
    const intervalMs = INTERVAL_MS[interval];
    const end = Date.now() + intervalMs;
    const from = Math.floor((end - BUCKETS * intervalMs) / intervalMs) * intervalMs;
    // Trade times never run backwards, so every trade up to the newest is before its time + 1.
    const cut = newest ? `&to=${newest.ts + 1}&before=${newest.tradeId + 1}` : `&to=${end}`;
    const path = `/bars?symbol=${encodeURIComponent(symbol)}&interval=${interval}&from=${from}${cut}`;
    const loading = fetch(path, { cache: "no-store" }).then(async (res) => {
      if (!res.ok) throw new Error(`GET /bars answered ${res.status}`);
      return res.json();
    });
    this.loading = loading;
    let bars = [];
    try {
      bars = await loading;
    } catch {
      bars = []; // the live trades still draw; the next (re)connect loads again
    }
    if (this.loading !== loading) return false; // a newer load took over
    if (!newest && this.held.length) return this.load(symbol, interval, seen); // now with a trade to cut at
    this.loading = null;
    this.candles = new Candles(intervalMs);
    this.candles.load(Array.isArray(bars) ? bars : []);
    this.cutoff = newest ? newest.tradeId : 0;
    const held = this.held;
    this.held = [];
    this.addTrades(held);
    return true;
  }

  addTrades(trades) {
    for (const t of trades) {
      if (t.symbol !== undefined && t.symbol !== this.symbol) continue;
      if (this.loading) this.held.push(t);
      else if (t.tradeId > this.cutoff) {
        this.candles.addTrade(t);
        this.cutoff = t.tradeId;
      }
    }
  }

  render() {
    const c = this.candles;
    if (c.full) {
      const bars = c.sorted();
      this.series.setData(bars.map((b) => this.candle(b)));
      this.volume.setData(bars.map((b) => this.bar(b)));
      this.drawn = bars.length ? bars.at(-1).t : -Infinity;
      c.full = false;
      c.changed.clear();
    } else if (c.changed.size) {
      for (const t of [...c.changed].sort((a, b) => a - b)) {
        const b = c.bars.get(t);
        this.series.update(this.candle(b));
        this.volume.update(this.bar(b));
        this.drawn = Math.max(this.drawn, t);
      }
      c.changed.clear();
    }
    this.describe();
  }

  candle(b) {
    return { time: localSeconds(b.t), open: b.open, high: b.high, low: b.low, close: b.close };
  }

  bar(b) {
    const color = b.close >= b.open ? this.up : this.down;
    return { time: localSeconds(b.t), value: b.volume, color: color + "80" };
  }

  describe() {
    const last = this.candles.latest();
    const label = this.interval === "1h" ? "1 hour" : `${this.interval.slice(0, -1)} min`;
    this.summary.textContent = last
      ? `${this.symbol} ${label} candles (${this.candles.bars.size}). Latest from ${fmtTime(last.t)}: ` +
        `open ${fmtPrice(last.open)}, high ${fmtPrice(last.high)}, low ${fmtPrice(last.low)}, ` +
        `close ${fmtPrice(last.close)}, volume ${fmtQty(last.volume)}.`
      : `${this.symbol || ""} ${label} candles: no trades yet.`;
  }
}
