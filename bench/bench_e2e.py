"""End to end: 64 concurrent clients placing orders against a real `tickflow serve`, per durability mode.

    .venv/bin/python bench/bench_e2e.py                 # HTTP and WebSocket, none/group/order, and the bare endpoint
    .venv/bin/python bench/bench_e2e.py --json          # one JSON object on stdout (progress on stderr)

Each client keeps one order in flight on its own keep-alive connection (HTTP) or WebSocket, and times
each round trip. The load generator is a separate process with minimal raw HTTP and WebSocket clients
(no aiohttp on the client side), so the server, not the client, is what is measured. The same run
measures a bare aiohttp endpoint that parses the same JSON with the same validation and answers
without touching the engine, the log or the feed, so the ratio shows what the exchange adds.
Server and load generator share this machine's cores; the figures are throughput on that machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
BARE_SERVER = ROOT / "bench" / "bare_server.py"
CLIENTS = 64


# ------------------------------------------------------------------ the orders


def client_orders(client: int, n: int, seed: int) -> list[dict[str, Any]]:
    """The standard workload's shape per client: limits around a mid that rest or cross; cancels are
    added by the client for 10% of its own earlier orders."""
    rnd = random.Random(seed * 1000 + client)
    orders = []
    for i in range(n):
        side = "buy" if rnd.random() < 0.5 else "sell"
        price = 10000 + round(rnd.gauss(0, 20)) + (-5 if side == "buy" else 5)
        orders.append({"symbol": "ACME", "side": side, "price": price, "qty": rnd.randint(1, 100),
                       "clientOrderId": f"b{seed}-{client}-{i}"})
    return orders


# ------------------------------------------------------------------ minimal raw clients


class RawHttp:
    """One keep-alive HTTP/1.1 connection with a single request in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, account: str) -> None:
        self.reader = reader
        self.writer = writer
        self.head = (f"Host: 127.0.0.1\r\nAuthorization: Bearer {account}\r\n"
                     "Content-Type: application/json\r\n").encode()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        self.writer.write(b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                          % (method.encode(), path.encode(), self.head, len(body), body))
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)


class RawWs:
    """One WebSocket connection: masked text frames out, text frames in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int, path: str) -> "RawWs":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        status = await reader.readline()
        assert b" 101 " in status, status
        while await reader.readline() not in (b"\r\n", b""):
            pass
        return cls(reader, writer)

    def send(self, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0xFE]) + struct.pack("!H", n)
        # Masking is required of clients; a zero mask keeps the payload as is and costs nothing.
        self.writer.write(head + b"\0\0\0\0" + payload)

    async def receive(self) -> bytes:
        while True:
            b0, b1 = await self.reader.readexactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(n)
            if b0 & 0x0F == 0x1:
                return data


# ------------------------------------------------------------------ one run


def _cancel_or_none(rnd: random.Random, placed: list[int]) -> int | None:
    if placed and rnd.random() < 0.1:
        return placed.pop(rnd.randrange(len(placed)))
    return None


async def _http_client(port: int, client: int, n: int, seed: int, bare: bool, lat: list[int]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = RawHttp(reader, writer, f"c{client}")
    rnd = random.Random(client)
    placed: list[int] = []
    done = 0
    for body in client_orders(client, n, seed):
        started = time.perf_counter_ns()
        victim = _cancel_or_none(rnd, placed)
        if victim is not None and not bare:
            status, data = await conn.request("DELETE", f"/orders/{victim}")
        else:
            status, data = await conn.request("POST", "/orders", msgspec.json.encode(body))
            if status == 200 and not bare:
                placed.append(msgspec.json.decode(data)["orderId"])
        lat.append(time.perf_counter_ns() - started)
        if status not in (200, 409):
            raise RuntimeError(f"HTTP {status}: {data[:200]!r}")
        done += 1
    writer.close()
    return done


async def _ws_client(port: int, client: int, n: int, seed: int, lat: list[int]) -> int:
    ws = await RawWs.connect(port, f"/ws?token=w{client}&updates=false")
    await ws.receive()  # the auth answer
    rnd = random.Random(client)
    placed: list[int] = []
    done = 0
    for i, body in enumerate(client_orders(client, n, seed + 1)):
        started = time.perf_counter_ns()
        victim = _cancel_or_none(rnd, placed)
        if victim is not None:
            ws.send(b'{"op":"cancel","id":%d,"orderId":%d}' % (i, victim))
        else:
            ws.send(msgspec.json.encode({"op": "order", "id": i, **body}))
        answer = msgspec.json.decode(await ws.receive())
        lat.append(time.perf_counter_ns() - started)
        if answer.get("status") not in (200, 409):
            raise RuntimeError(f"WebSocket answer {answer}")
        if victim is None:
            placed.append(answer["body"]["orderId"])
        done += 1
    ws.writer.close()
    return done


async def _load(port: int, transport: str, per_client: int, seed: int, bare: bool = False) -> dict[str, Any]:
    lat: list[int] = []
    started = time.perf_counter()
    if transport == "http":
        counts = await asyncio.gather(*(_http_client(port, c, per_client, seed, bare, lat) for c in range(CLIENTS)))
    else:
        counts = await asyncio.gather(*(_ws_client(port, c, per_client, seed, lat) for c in range(CLIENTS)))
    seconds = time.perf_counter() - started
    return dict(summarize(sum(counts), seconds, lat), lat_ns=lat)


def summarize(count: int, seconds: float, lat_ns: list[int]) -> dict[str, Any]:
    lat_ns.sort()

    def pct(p: float) -> float:
        return lat_ns[min(len(lat_ns) - 1, int(len(lat_ns) * p))] / 1e6

    return {"orders": count, "seconds": round(seconds, 3), "orders_per_s": round(count / seconds),
            "p50_ms": round(pct(0.50), 3), "p99_ms": round(pct(0.99), 3), "p999_ms": round(pct(0.999), 3),
            "mean_ms": round(statistics.fmean(lat_ns) / 1e6, 3)}


# ------------------------------------------------------------------ servers


def server_command(data: Path, mode: str) -> list[str]:
    """`tickflow serve` in durability `mode` on a free port, or the bare endpoint for mode "bare"."""
    if mode == "bare":
        return [sys.executable, str(BARE_SERVER), "--port", "0"]
    return [sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port", "0", "--durability", mode,
            "--symbols", "ACME", "--quiet"]


def _start(cmd: list[str], out: Path) -> tuple[subprocess.Popen[bytes], int]:
    with open(out, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        if "listening on http://127.0.0.1:" in text:
            port = int(text.split("listening on http://127.0.0.1:")[1].split()[0].strip("()"))
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30).read()
            return proc, port
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd} exited: {text}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{cmd} did not start: {out.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(per_client: int = 800, order_per_client: int = 15, modes: tuple[str, ...] = ("none", "group", "order"),
        transports: tuple[str, ...] = ("http", "ws"), seed: int = 1, rounds: int = 8) -> dict[str, Any]:
    """Measure every (transport, mode) pair and the bare endpoint; returns the figures.

    One server per mode (and the bare one) runs throughout. The none and group pairs and the bare
    endpoint take turns over `rounds` rounds, each measuring `per_client / rounds` orders per client,
    in a rotated order, so every pair sees the same stretch of this shared machine; a pair's figures
    are over all its rounds. durability=order runs once, after them."""
    results: dict[str, Any] = {"clients": CLIENTS, "rounds": rounds, "rows": []}
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-") as tmp:
        procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for mode in (*modes, "bare"):
                procs[mode] = _start(server_command(Path(tmp) / mode, mode), Path(tmp) / f"{mode}.out")
            fast = [(t, m) for t in transports for m in modes if m != "order"]
            if "http" in transports:
                fast.append(("http", "bare"))
            for transport, mode in fast + [(t, "order") for t in transports if "order" in modes]:
                n = order_per_client if mode == "order" else per_client
                asyncio.run(_load(procs[mode][1], transport, max(2, n // 10), seed + 100, bare=mode == "bare"))
            slices: dict[tuple[str, str], list[dict[str, Any]]] = {pair: [] for pair in fast}
            slice_size = max(2, per_client // rounds)
            for r in range(rounds):
                turn = fast[r % len(fast):] + fast[:r % len(fast)]
                for transport, mode in turn:
                    slices[(transport, mode)].append(
                        asyncio.run(_load(procs[mode][1], transport, slice_size, seed + r, bare=mode == "bare")))
                print(f"round {r + 1}/{rounds}: " + ", ".join(
                    f"{t} {m} {slices[(t, m)][-1]['orders_per_s']:,}/s" for t, m in fast), file=sys.stderr, flush=True)
            for (transport, mode), parts in slices.items():
                row = merge(parts)
                row.update(transport=transport, mode=mode)
                results["rows"].append(row)
                print(_line(row), file=sys.stderr, flush=True)
            if "order" in modes:
                for transport in transports:
                    row = asyncio.run(_load(procs["order"][1], transport, order_per_client, seed))
                    del row["lat_ns"]
                    row.update(transport=transport, mode="order")
                    results["rows"].append(row)
                    print(_line(row), file=sys.stderr, flush=True)
            results["ratios_by_round"] = [
                ratios({"rows": [dict(slices[pair][r], transport=pair[0], mode=pair[1]) for pair in fast]})
                for r in range(rounds)]
        finally:
            for proc, _ in procs.values():
                _stop(proc)
    results["ratios"] = ratios(results)
    return results


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a pair's rounds: totals over total time, latencies over all of them."""
    lat = [x for p in parts for x in p.pop("lat_ns")]
    return summarize(sum(p["orders"] for p in parts), sum(p["seconds"] for p in parts), lat)


def _line(row: dict[str, Any]) -> str:
    return (f"{row['transport']:>4} {row['mode']:>5}: {row['orders_per_s']:>8,} orders/s  p50 {row['p50_ms']:.2f} ms  "
            f"p99 {row['p99_ms']:.2f} ms  p99.9 {row['p999_ms']:.2f} ms  ({row['orders']} orders)")


def ratios(results: dict[str, Any]) -> dict[str, float]:
    by = {(r["transport"], r["mode"]): r["orders_per_s"] for r in results["rows"]}
    out = {}
    if ("http", "group") in by and ("http", "none") in by:
        out["http group / none"] = by[("http", "group")] / by[("http", "none")]
    if ("ws", "group") in by and ("ws", "none") in by:
        out["ws group / none"] = by[("ws", "group")] / by[("ws", "none")]
    if ("http", "group") in by and ("http", "bare") in by:
        out["http group / bare endpoint"] = by[("http", "group")] / by[("http", "bare")]
    if ("ws", "group") in by and ("http", "group") in by:
        out["ws / http (group)"] = by[("ws", "group")] / by[("http", "group")]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-client", type=int, default=800, help="orders per client (none and group)")
    p.add_argument("--order-per-client", type=int, default=15, help="orders per client in durability=order")
    p.add_argument("--modes", default="none,group,order")
    p.add_argument("--transports", default="http,ws")
    p.add_argument("--rounds", type=int, default=8, help="none, group and bare take turns this many times")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    results = run(args.per_client, args.order_per_client, tuple(args.modes.split(",")),
                  tuple(args.transports.split(",")), rounds=args.rounds)
    if args.json:
        print(json.dumps(results))
        return
    for name, value in results["ratios"].items():
        by_round = ", ".join(f"{r[name]:.2f}" for r in results["ratios_by_round"] if name in r)
        print(f"{name}: {value:.2f}x" + (f" (by round: {by_round})" if by_round else ""))


if __name__ == "__main__":
    main()
