"""What a deep book costs the readers that need no token: `GET /book?depth=1`, `GET /symbols`, and how long
one WebSocket `subscribe` holds the event loop.

    .venv/bin/python bench/bench_deep_book.py [--levels 100000] [--requests 300] [--json]

A data directory is built in-process: one account rests `--levels` orders in DEEP, each at a price of
its own (half bids, half asks), and 10 in FLAT. Then `tickflow serve` starts on it and, on 127.0.0.1:

- `GET /book/{symbol}?depth=1` and `GET /symbols`, `--requests` times each, one at a time on one
  keep-alive connection: the median milliseconds per request, for DEEP and FLAT (`/symbols` lists both);
- the loop stall of a subscribe: a second WebSocket sends `ping` back to back and times each `pong`
  while a raw socket (in a thread, reading and discarding, so the bench's own loop stays free)
  subscribes to DEEP and takes the whole snapshot. Reported: the longest pong before the subscribe
  (the baseline) and while the snapshot is sent, and the seconds until it has all arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tickflow.core.types import AddSymbol, Command, NewOrder, Record  # noqa: E402
from tickflow.demo import ServerProcess  # noqa: E402
from tickflow.store.datadir import WAL_FILE  # noqa: E402
from tickflow.store.log.codec import encode_record  # noqa: E402
from tickflow.store.log.wal import FILE_HEADER, frame  # noqa: E402

T0 = 1_700_000_000_000


def history(levels: int):  # type: ignore[no-untyped-def]
    yield AddSymbol("DEEP")
    yield AddSymbol("FLAT")
    half = levels // 2
    for i in range(half):
        yield NewOrder("whale", "DEEP", "buy", "limit", 1_000_000 - i, 1)
    for i in range(levels - half):
        yield NewOrder("whale", "DEEP", "sell", "limit", 1_000_001 + i, 1)
    for i in range(5):
        yield NewOrder("whale", "FLAT", "buy", "limit", 1_000 - i, 1)
        yield NewOrder("whale", "FLAT", "sell", "limit", 1_001 + i, 1)


def build(data: Path, levels: int) -> None:
    data.mkdir(parents=True)
    command: Command
    with open(data / WAL_FILE, "wb") as log:
        log.write(FILE_HEADER)
        log.write(b"".join(frame(encode_record(Record(seq, T0 + seq, command)))
                           for seq, command in enumerate(history(levels), 1)))


async def median_ms(session: aiohttp.ClientSession, url: str, count: int) -> float:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        async with session.get(url) as response:
            await response.read()
            assert response.status == 200, response.status
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1000, 3)


class RawSubscriber(threading.Thread):
    """Subscribes to DEEP over a plain socket and reads until nothing has come for `quiet` seconds."""

    def __init__(self, port: int, quiet: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.quiet = quiet
        self.go = threading.Event()
        self.received = 0
        self.first = 0.0
        self.last = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port))
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head[:200]
        payload = json.dumps({"op": "subscribe", "symbols": ["DEEP"]}).encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.go.wait()
        self.first = time.perf_counter()
        sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
        sock.settimeout(self.quiet)
        self.received = len(head.split(b"\r\n\r\n", 1)[1])
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except socket.timeout:
                break
            if not chunk:
                break
            self.received += len(chunk)
            self.last = time.perf_counter()
        sock.close()
        self.done.set()


async def subscribe_stall(url: str, port: int) -> dict[str, Any]:
    raw = RawSubscriber(port)
    raw.start()
    async with aiohttp.ClientSession() as session, session.ws_connect(url + "/ws") as ws:
        async def ping() -> float:
            began = time.perf_counter()
            await ws.send_str('{"op":"ping"}')
            msg = await ws.receive(timeout=30)
            assert json.loads(msg.data) == {"type": "pong"}, msg.data
            return time.perf_counter() - began

        baseline = [await ping() for _ in range(300)]
        raw.go.set()
        during = []
        while not raw.done.is_set():
            during.append(await ping())
        return {"pong_max_ms_before": round(max(baseline) * 1000, 2),
                "pong_max_ms_during_subscribe": round(max(during) * 1000, 2),
                "pongs_during_subscribe": len(during),
                "snapshot_bytes": raw.received, "snapshot_seconds": round(raw.last - raw.first, 3)}


async def measure(url: str, port: int, requests: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        result = {
            "book_depth1_ms_flat": await median_ms(session, url + "/book/FLAT?depth=1", requests),
            "book_depth1_ms_deep": await median_ms(session, url + "/book/DEEP?depth=1", requests),
            "symbols_ms": await median_ms(session, url + "/symbols", requests),
        }
    result.update(await subscribe_stall(url, port))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-deep-") as tmp:
        data = Path(tmp) / "data"
        build(data, args.levels)
        server = ServerProcess(data, symbols=["DEEP", "FLAT"], durability="none")
        server.start(timeout=300)
        try:
            result = {"benchmark": "deep_book", "levels": args.levels,
                      **asyncio.run(measure(server.url, server.port, args.requests))}
        finally:
            server.stop()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
