"""End to end: 64 concurrent clients placing orders against a real `tickflow serve`, per durability mode.

    .venv/bin/python bench/bench_e2e.py                 # every row below, none/group/order, and the bare endpoint
    .venv/bin/python bench/bench_e2e.py --json          # one JSON object on stdout (progress on stderr)
    .venv/bin/python bench/bench_e2e.py --transports ws,wsbatch,quote --modes none,group   # some rows

Each client keeps one order in flight on its own keep-alive connection (HTTP) or WebSocket, and times
each round trip. Batched rows (`wsbatch`, issue 28): 16 WebSockets each keep one batch of 64 ops in
flight (the same mix: 90% orders, 10% cancels of the connection's earlier orders), timing each batch's
answer; a batched round places 4x the orders of a single-order round. The quoting row (`quote`, group
commit): 8 makers each re-quote 10 levels a side (one mass quote) as soon as the last is answered,
while 8 takers send IOC orders against them, one in flight each. Beside them, the in-process sequencer
with `none` at 256 submitters (bench_commit.py, in a process of its own, taking its turn in each round),
for the bar "batched WebSocket with group commit at least 0.5x of it". The load generator is a separate process with minimal raw HTTP and WebSocket clients
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
BATCH_CLIENTS = 16
"""WebSockets of the batched rows, each with one batch in flight."""
BATCH_SIZE = 64
"""Ops per batch."""
BATCH_WORK = 4
"""A batched round places this many times the orders of a single-order round (it is that much faster)."""
QUOTE_MAKERS = 8
QUOTE_LEVELS = 10
"""Levels a side of each mass quote."""
QUOTE_TAKERS = 8
INPROCESS = [sys.executable, str(ROOT / "bench" / "bench_commit.py"), "--json", "--submitters", "256",
             "--order-commands", "1", "--rounds", "1", "--commands"]
"""The in-process reference, one round of it: the sequencer and log alone, 256 submitters, in a process of
its own (its `none` row is the one used; `group` comes with it), followed by the commands a round measures."""
INPROCESS_WORK = 8
"""An in-process round runs this many times the orders of a single-order round (it is that much faster)."""


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
        assert n < 65536, n  # (the server takes at most 64 KiB a message)
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


async def _ws_batch_client(port: int, client: int, batches: int, seed: int, lat: list[int]) -> int:
    """One WebSocket with one batch of BATCH_SIZE ops in flight, `batches` times; returns the ops answered."""
    ws = await RawWs.connect(port, f"/ws?token=wb{client}&updates=false")
    await ws.receive()  # the auth answer
    rnd = random.Random(client)
    placed: list[int] = []
    bodies = iter(client_orders(client, batches * BATCH_SIZE, seed))
    done = 0
    for b in range(batches):
        started = time.perf_counter_ns()
        ops: list[dict[str, Any]] = []
        for _ in range(BATCH_SIZE):
            victim = _cancel_or_none(rnd, placed)
            ops.append({"op": "cancel", "orderId": victim} if victim is not None else {"op": "order", **next(bodies)})
        ws.send(msgspec.json.encode({"op": "batch", "id": b, "ops": ops}))
        answer = msgspec.json.decode(await ws.receive())
        lat.append(time.perf_counter_ns() - started)
        results = answer.get("results")
        if answer.get("type") != "results" or len(results) != len(ops):
            raise RuntimeError(f"batch refused: {str(answer)[:300]}")
        for op, result in zip(ops, results):
            if result["status"] not in (200, 409):
                raise RuntimeError(f"batch op {op} answered {result}")
            if op["op"] == "order":
                placed.append(result["body"]["orderId"])
        done += len(ops)
    ws.writer.close()
    return done


def quote_ladder(rnd: random.Random, sizes: dict[str, list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """A maker's next quote: its mid moves by up to a tick around 10,000 (so that most levels keep their
    price or move one tick) and two sizes a side are drawn again. Bids end 3 ticks below the mid and asks
    3 above, so makers at mids 2 ticks apart never cross each other: only the takers trade with them."""
    mid = 10_000 + rnd.randint(-1, 1)
    for side in sizes.values():
        for _ in range(2):
            side[rnd.randrange(QUOTE_LEVELS)] = rnd.randint(1, 50)
    return ([[mid - 3 - i, q] for i, q in enumerate(sizes["buy"])],
            [[mid + 3 + i, q] for i, q in enumerate(sizes["sell"])])


async def _quote_maker(port: int, maker: int, quotes: int, seed: int, lat: list[int]) -> int:
    """Re-quote QUOTE_LEVELS a side `quotes` times, each as soon as the last is answered."""
    ws = await RawWs.connect(port, f"/ws?token=qm{maker}&updates=false")
    await ws.receive()
    rnd = random.Random(seed * 1000 + maker)
    sizes = {side: [rnd.randint(1, 50) for _ in range(QUOTE_LEVELS)] for side in ("buy", "sell")}
    for q in range(quotes):
        started = time.perf_counter_ns()
        bids, asks = quote_ladder(rnd, sizes)
        ws.send(msgspec.json.encode({"op": "quote", "id": q, "symbol": "ACME", "bids": bids, "asks": asks}))
        answer = msgspec.json.decode(await ws.receive())
        lat.append(time.perf_counter_ns() - started)
        if answer.get("status") != 200:
            raise RuntimeError(f"quote answered {str(answer)[:300]}")
    ws.writer.close()
    return quotes


async def _quote_taker(port: int, taker: int, seed: int, stop: asyncio.Event, lat: list[int]) -> tuple[int, int]:
    """IOC orders across the makers' levels, one in flight, until `stop`; returns (orders, quantity filled)."""
    ws = await RawWs.connect(port, f"/ws?token=qt{taker}&updates=false")
    await ws.receive()
    rnd = random.Random(seed * 1000 + 500 + taker)
    sent = filled = 0
    while not stop.is_set():
        side = "buy" if rnd.random() < 0.5 else "sell"
        price = 10_000 + (8 if side == "buy" else -8)  # takes the best 5 levels or so, whatever rests there
        started = time.perf_counter_ns()
        ws.send(msgspec.json.encode({"op": "order", "id": sent, "symbol": "ACME", "side": side, "price": price,
                                     "qty": rnd.randint(1, 20), "tif": "ioc"}))
        answer = msgspec.json.decode(await ws.receive())
        lat.append(time.perf_counter_ns() - started)
        if answer.get("status") != 200:
            raise RuntimeError(f"taker order answered {str(answer)[:300]}")
        filled += answer["body"]["filledQty"]
        sent += 1
    ws.writer.close()
    return sent, filled


async def _quote_load(port: int, quotes: int, seed: int) -> dict[str, Any]:
    """The quoting row: makers re-quote `quotes` times each while takers trade against them."""
    lat: list[int] = []
    taker_lat: list[int] = []
    stop = asyncio.Event()
    started = time.perf_counter()
    takers = [asyncio.create_task(_quote_taker(port, t, seed, stop, taker_lat)) for t in range(QUOTE_TAKERS)]
    try:
        counts = await asyncio.gather(*(_quote_maker(port, m, quotes, seed, lat) for m in range(QUOTE_MAKERS)))
    finally:
        stop.set()
    seconds = time.perf_counter() - started
    taken = await asyncio.gather(*takers)
    row = summarize(sum(counts) * 2 * QUOTE_LEVELS, seconds, lat)
    row.update(quotes=sum(counts), quotes_per_s=round(sum(counts) / seconds), taker_orders=sum(t[0] for t in taken),
               taker_filled=sum(t[1] for t in taken), taker_lat_ns=taker_lat, lat_ns=lat)
    return row


async def _load(port: int, transport: str, per_client: int, seed: int, bare: bool = False) -> dict[str, Any]:
    """One round of `transport`'s load: `per_client` orders for each of the 64 single-order clients, or
    the same scaled for the batched and quoting rows."""
    lat: list[int] = []
    started = time.perf_counter()
    if transport == "quote":
        return await _quote_load(port, max(2, per_client), seed)
    if transport == "wsbatch":
        batches = max(1, round(per_client * CLIENTS * BATCH_WORK / (BATCH_CLIENTS * BATCH_SIZE)))
        counts = await asyncio.gather(*(_ws_batch_client(port, c, batches, seed, lat) for c in range(BATCH_CLIENTS)))
    elif transport == "http":
        counts = await asyncio.gather(*(_http_client(port, c, per_client, seed, bare, lat) for c in range(CLIENTS)))
    else:
        counts = await asyncio.gather(*(_ws_client(port, c, per_client, seed, lat) for c in range(CLIENTS)))
    seconds = time.perf_counter() - started
    row = dict(summarize(sum(counts), seconds, lat), lat_ns=lat)
    if transport == "wsbatch":
        row.update(batches=len(lat), batches_per_s=round(len(lat) / seconds))
    return row


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far (Linux /proc), 0.0 where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def measure(proc: tuple[subprocess.Popen[bytes], int], transport: str, per_client: int, seed: int,
            bare: bool = False) -> dict[str, Any]:
    """One round of load (`_load`), with the CPU the server process and this load generator spent on it."""
    server, load = cpu_seconds(proc[0].pid), time.process_time()
    row = asyncio.run(_load(proc[1], transport, per_client, seed, bare))
    row.update(server_cpu_s=cpu_seconds(proc[0].pid) - server, loadgen_cpu_s=time.process_time() - load)
    return row


def inprocess_round(commands: int) -> dict[str, Any]:
    """One round of the in-process sequencer and log with `none` at 256 submitters (bench_commit.py's row)."""
    cmd = [*INPROCESS, str(commands)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    none = next(m for m in result["modes"] if m["mode"] == "none")
    return {"submitters": result["submitters"], "orders": none["commands"], "seconds": none["seconds"],
            "orders_per_s": none["commands_per_s"], "p50_ms": none["p50_ms"], "p99_ms": none["p99_ms"],
            "p999_ms": none["p999_ms"], "command": " ".join(["python", *cmd[1:]]).replace(str(ROOT) + "/", "")}


def inprocess_merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The in-process rounds as one figure: total over total time; latencies the median of the rounds'."""
    orders, seconds = sum(p["orders"] for p in parts), sum(p["seconds"] for p in parts)
    row = {"submitters": parts[0]["submitters"], "orders": orders, "seconds": round(seconds, 3),
           "orders_per_s": round(orders / seconds), "rounds": len(parts),
           "command": parts[0]["command"].rsplit(" ", 1)[0] + f" N (N = {parts[0]['orders']:,} a round)"}
    for key in ("p50_ms", "p99_ms", "p999_ms"):
        row[key] = round(statistics.median(p[key] for p in parts), 3)
    return row


def pairs(transports: tuple[str, ...], modes: tuple[str, ...]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (transport, mode) pairs that take turns in the rounds, and those run once after (durability
    order). The quoting row runs with group commit only; the bare endpoint is HTTP's."""
    fast = [(t, m) for t in transports for m in modes if m != "order" and (t != "quote" or m == "group")]
    if "http" in transports:
        fast.append(("http", "bare"))
    slow = [(t, "order") for t in transports if "order" in modes and t != "quote"]
    return fast, slow


def run(per_client: int = 800, order_per_client: int = 15, modes: tuple[str, ...] = ("none", "group", "order"),
        transports: tuple[str, ...] = ("http", "ws", "wsbatch", "quote"), seed: int = 1, rounds: int = 8,
        inprocess: bool = True) -> dict[str, Any]:
    """Measure every (transport, mode) pair and the bare endpoint; returns the figures.

    One server per mode (and the bare one) runs throughout. The none and group pairs, the quoting row
    and the bare endpoint take turns over `rounds` rounds, each measuring `per_client / rounds` orders
    per client (scaled for batches and quotes), in a rotated order, so every pair sees the same stretch
    of this shared machine; a pair's figures are over all its rounds. durability=order runs once, after
    them. With `inprocess` (and batched rows), the in-process reference takes its turn in each round
    too, in a process of its own."""
    results: dict[str, Any] = {"clients": CLIENTS, "rounds": rounds, "rows": [],
                               "batch": {"connections": BATCH_CLIENTS, "ops": BATCH_SIZE},
                               "quote": {"makers": QUOTE_MAKERS, "levels_a_side": QUOTE_LEVELS, "takers": QUOTE_TAKERS}}
    fast, slow = pairs(transports, modes)
    if inprocess and "wsbatch" in transports:
        fast.append(("inprocess", "none"))
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-") as tmp:
        procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for mode in (*modes, *(["bare"] if "http" in transports else [])):
                procs[mode] = _start(server_command(Path(tmp) / mode, mode), Path(tmp) / f"{mode}.out")
            for transport, mode in fast + slow:
                n = order_per_client if mode == "order" else per_client
                if transport != "inprocess":
                    measure(procs[mode], transport, max(2, n // 10), seed + 100, bare=mode == "bare")
            slices: dict[tuple[str, str], list[dict[str, Any]]] = {pair: [] for pair in fast}
            slice_size = max(2, per_client // rounds)
            for r in range(rounds):
                turn = fast[r % len(fast):] + fast[:r % len(fast)]
                for transport, mode in turn:
                    if transport == "inprocess":
                        slices[(transport, mode)].append(inprocess_round(slice_size * CLIENTS * INPROCESS_WORK))
                        continue
                    slices[(transport, mode)].append(
                        measure(procs[mode], transport, slice_size, seed + r, bare=mode == "bare"))
                print(f"round {r + 1}/{rounds}: " + ", ".join(
                    f"{t} {m} {slices[(t, m)][-1]['orders_per_s']:,}/s" for t, m in fast), file=sys.stderr, flush=True)
            reference = slices.pop(("inprocess", "none"), None)
            if reference:
                results["inprocess"] = inprocess_merge(reference)
            for (transport, mode), parts in slices.items():
                row = merge(parts)
                row.update(transport=transport, mode=mode)
                results["rows"].append(row)
                print(_line(row), file=sys.stderr, flush=True)
            for transport, mode in slow:
                row = merge([measure(procs[mode], transport, order_per_client, seed)])
                row.update(transport=transport, mode=mode)
                results["rows"].append(row)
                print(_line(row), file=sys.stderr, flush=True)
            results["ratios_by_round"] = [
                ratios({"rows": [dict(slices[pair][r], transport=pair[0], mode=pair[1]) for pair in slices],
                        "inprocess": reference[r] if reference else None})
                for r in range(rounds)]
        finally:
            for proc, _ in procs.values():
                _stop(proc)
    results["ratios"] = ratios(results)
    return results


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a pair's rounds: totals over total time, latencies over all of them (and, for the
    batched and quoting rows, their batches, quotes and takers the same way)."""
    lat = [x for p in parts for x in p.pop("lat_ns")]
    seconds = sum(p["seconds"] for p in parts)
    row = summarize(sum(p["orders"] for p in parts), seconds, lat)
    for who in ("server", "loadgen"):  # CPU per order (per quote level in the quoting row), in µs
        row[f"{who}_us_per_order"] = round(sum(p[f"{who}_cpu_s"] for p in parts) / max(row["orders"], 1) * 1e6, 1)
    if "batches" in parts[0]:
        batches = sum(p["batches"] for p in parts)
        row.update(batches=batches, batches_per_s=round(batches / seconds))
    if "quotes" in parts[0]:
        quotes = sum(p["quotes"] for p in parts)
        taker_lat = [x for p in parts for x in p.pop("taker_lat_ns")]
        takers = summarize(sum(p["taker_orders"] for p in parts), seconds, taker_lat)
        row.update(quotes=quotes, quotes_per_s=round(quotes / seconds), taker_orders=takers["orders"],
                   taker_orders_per_s=takers["orders_per_s"], taker_p50_ms=takers["p50_ms"],
                   taker_p99_ms=takers["p99_ms"], taker_filled=sum(p["taker_filled"] for p in parts))
    return row


def _line(row: dict[str, Any]) -> str:
    what = {"wsbatch": "orders/s in batches", "quote": "quote levels/s"}.get(row["transport"], "orders/s")
    line = (f"{row['transport']:>7} {row['mode']:>5}: {row['orders_per_s']:>8,} {what}  p50 {row['p50_ms']:.2f} ms  "
            f"p99 {row['p99_ms']:.2f} ms  p99.9 {row['p999_ms']:.2f} ms  ({row['orders']} orders; CPU per order: "
            f"server {row['server_us_per_order']} µs, load generator {row['loadgen_us_per_order']} µs)")
    if "quotes" in row:
        line += (f"; {row['quotes_per_s']:,} quotes/s; takers {row['taker_orders_per_s']:,} orders/s, p50 "
                 f"{row['taker_p50_ms']:.2f} ms, {row['taker_filled']:,} filled")
    return line


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
    if ("wsbatch", "group") in by and ("ws", "group") in by:
        out["ws batch / ws single (group)"] = by[("wsbatch", "group")] / by[("ws", "group")]
    inprocess = results.get("inprocess")
    if ("wsbatch", "group") in by and inprocess:
        out["ws batch group / in-process none@256"] = by[("wsbatch", "group")] / inprocess["orders_per_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-client", type=int, default=800, help="orders per client (none and group)")
    p.add_argument("--order-per-client", type=int, default=15, help="orders per client in durability=order")
    p.add_argument("--modes", default="none,group,order")
    p.add_argument("--transports", default="http,ws,wsbatch,quote",
                   help="of http, ws (single orders), wsbatch (batches of 64), quote (mass quotes)")
    p.add_argument("--no-inprocess", action="store_true",
                   help="skip the in-process reference (bench_commit.py, 256 submitters, `none`)")
    p.add_argument("--rounds", type=int, default=8, help="none, group and bare take turns this many times")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    results = run(args.per_client, args.order_per_client, tuple(args.modes.split(",")),
                  tuple(args.transports.split(",")), rounds=args.rounds, inprocess=not args.no_inprocess)
    if args.json:
        print(json.dumps(results))
        return
    for name, value in results["ratios"].items():
        by_round = ", ".join(f"{r[name]:.2f}" for r in results["ratios_by_round"] if name in r)
        print(f"{name}: {value:.2f}x" + (f" (by round: {by_round})" if by_round else ""))


if __name__ == "__main__":
    main()
