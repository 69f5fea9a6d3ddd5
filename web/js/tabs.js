// Tabs, as WAI-ARIA describes them: one tab selected and its panel shown; only the selected tab is in the
// Tab order, and the arrow keys, Home and End move to another tab and select it.

export class Tabs {
  /** `tablist`: holds buttons with role="tab", each naming its panel in aria-controls; `onSelect(id)`. */
  constructor(tablist, onSelect) {
    this.tabs = [...tablist.querySelectorAll('[role="tab"]')];
    this.onSelect = onSelect;
    for (const tab of this.tabs) tab.addEventListener("click", () => this.select(tab.id));
    tablist.addEventListener("keydown", (ev) => this.key(ev));
  }

  /** The selected tab's id. */
  get selected() {
    return (this.tabs.find((t) => t.getAttribute("aria-selected") === "true") || this.tabs[0]).id;
  }

  select(id) {
    if (!this.tabs.some((t) => t.id === id)) return;
    for (const tab of this.tabs) {
      const on = tab.id === id;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !on;
    }
    this.onSelect(id);
  }

  key(ev) {
    const at = this.tabs.findIndex((t) => t === document.activeElement);
    if (at < 0) return;
    const n = this.tabs.length;
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1 + n, Home: 0, End: n - 1 }[ev.key];
    if (to === undefined) return;
    ev.preventDefault();
    const tab = this.tabs[to % n];
    this.select(tab.id);
    tab.focus();
  }
}
