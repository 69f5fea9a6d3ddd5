"""Formatting shared by the widgets: quantities, prices in ticks, times."""

from __future__ import annotations

import time


def qty(n: int) -> str:
    return f"{n:,}"


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
