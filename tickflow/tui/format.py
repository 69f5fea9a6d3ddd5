"""Formatting shared by the widgets: quantities, prices in ticks, times."""

from __future__ import annotations

import time


_UNITS = ((1_000, "K"), (1_000_000, "M"), (1_000_000_000, "B"), (1_000_000_000_000, "T"))


def qty(n: int) -> str:
    return f"{n:,}"


def qty_fit(n: int, width: int) -> str:
    """`n` with thousands separators; when that is wider than `width`, in K, M, B or T with as many
    decimals as fit (1,234,567,890 in 6 columns is `1.235B`), so a column never grows."""
    text = f"{n:,}"
    if len(text) <= width or n < 1_000:
        return text
    # The largest unit n reaches, counting 999,999 as 1.00M rather than 1,000K.
    unit, suffix = next((u, s) for u, s in reversed(_UNITS) if n >= u * 0.9995 or u == 1_000)
    for decimals in (3, 2, 1, 0):
        text = f"{n / unit:,.{decimals}f}{suffix}"
        if len(text) <= width:
            break
    return text


def price(p: int | float | None) -> str:
    if p is None:
        return "—"
    if isinstance(p, float) and not p.is_integer():
        return f"{p:.1f}"
    return f"{int(p)}"


def clock(ts_ms: int, utc: bool = False) -> str:
    """HH:MM:SS of a millisecond timestamp, local time unless `utc`."""
    t = ts_ms / 1000
    return time.strftime("%H:%M:%S", time.gmtime(t) if utc else time.localtime(t))


def minute(ts_ms: int, utc: bool = False) -> str:
    t = ts_ms / 1000
    return time.strftime("%H:%M", time.gmtime(t) if utc else time.localtime(t))
