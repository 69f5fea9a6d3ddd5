// How many characters each column of a fixed-layout table holds, measured again whenever it is resized, so
// a number can be written in full or compacted (K/M/B) to fit without ever widening its column.

const canvas = document.createElement("canvas");

function charWidth(font) {
  const ctx = canvas.getContext("2d");
  ctx.font = font;
  return ctx.measureText("0000000000").width / 10;
}

export class ColumnChars {
  /** `onChange` runs when a column's capacity changes: the panel then redraws with the new widths. */
  constructor(table, onChange) {
    this.table = table;
    this.onChange = onChange;
    this.chars = [];
    new ResizeObserver(() => this.measure()).observe(table);
  }

  measure() {
    // The cells' font is the table's; their side padding is the header cells' (app.css keeps them equal).
    const row = this.table.tHead && this.table.tHead.rows[0];
    if (!row) return;
    const font = getComputedStyle(this.table);
    const ch = charWidth(`${font.fontWeight} ${font.fontSize} ${font.fontFamily}`);
    const chars = [...row.cells].map((th) => {
      const style = getComputedStyle(th);
      const pad = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      return Math.max(0, Math.floor((th.getBoundingClientRect().width - pad) / ch));
    });
    if (chars.join() === this.chars.join()) return;
    this.chars = chars;
    this.onChange();
  }

  /** Characters column `i` holds; `fallback` before the first measurement. */
  get(i, fallback) {
    return this.chars[i] || fallback;
  }
}
