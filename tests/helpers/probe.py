"""Positive events to wait for before a negative check against a real server: "X did not happen" is
checked only once something that must come after X has come.

- `websockets_seen_closed`: /metrics counts the open WebSockets; a connection leaves that count in the
  same step in which the server acts on its going away (cancel on disconnect is started then).
- `sequenced_after`: a command of a probe account, answered: the sequencer took it after everything
  already handed to it (a cancel on disconnect started before is in the log, and durable, by then).
"""

from __future__ import annotations

import aiohttp
from helpers.wait import until


async def metric(url: str, name: str) -> float:
    """A metric's value from GET /metrics (one without labels)."""
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        assert r.status == 200, r.status
        text = await r.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


async def websockets_seen_closed(url: str, still_open: int = 0, timeout: float = 10.0) -> None:
    """Wait until the server counts `still_open` open WebSockets: it has seen the others go."""
    async def counted() -> bool:
        return await metric(url, "tickflow_websocket_clients") == still_open

    await until(counted, timeout=timeout, interval=0.02,
                message=f"the server to count {still_open} open WebSockets")


async def sequenced_after(url: str, symbol: str, token: str = "probe") -> None:
    """Place, and have answered, an immediate-or-cancel buy at price 1 of `symbol` (it rests nowhere and
    takes nothing where no one sells at 1): a command the sequencer takes after all it was given before."""
    body = {"symbol": symbol, "side": "buy", "type": "limit", "price": 1, "qty": 1, "tif": "ioc"}
    async with aiohttp.ClientSession() as s, s.post(f"{url}/orders", json=body,
                                                     headers={"Authorization": f"Bearer {token}"}) as r:
        answer = await r.json()
        assert r.status == 200, answer
