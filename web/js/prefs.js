// Settings remembered in localStorage (the account, the symbol, the palette, the candle interval, the tab
// shown in the orders panel).
// Storage can be missing or refused (private windows, sandboxed frames): the page then works unremembered.

const PREFIX = "tickflow.";

export function load(key, fallback) {
  try {
    const value = localStorage.getItem(PREFIX + key);
    return value === null ? fallback : value;
  } catch {
    return fallback;
  }
}

export function save(key, value) {
  try {
    localStorage.setItem(PREFIX + key, value);
  } catch {
    /* not remembered; nothing else to do */
  }
}
