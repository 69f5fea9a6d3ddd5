#!/usr/bin/env python3
"""kill -9 crash test for tickflow.

Starts its own `tickflow serve` (a free port of 127.0.0.1, a fresh data directory), lets N clients
place a realistic mix of orders over HTTP, kills the server with SIGKILL at a random moment of each
round while requests are in flight, restarts it on the same data and port, and then proves that
nothing acknowledged was lost and nothing unexpected appeared:

* every acknowledged order, re-sent with its clientOrderId, answers exactly its original result;
* every request that got no answer (indeterminate) is resolved by re-sending it: it existed before
  the crash or it is created now, and either way it has exactly one order id;
* every acknowledged fill is on the trade tape (GET /trades, paged), trade ids are dense 1..N, no
  trade names an order that was never sent, a trade never crosses an account with itself, and
  trades seen in earlier rounds never change;
* order ids are dense 1..N and every one of them belongs to an order this script sent;
* acknowledged cancels stay cancelled (GET /orders/{id} equals the cancel's answer), acknowledged
  amends keep their price and quantity;
* per order, the quantity filled on the tape equals the order's filledQty and never exceeds its qty;
* the book (GET /book/SYM?depth=1000) is never crossed (also sampled while the clients run) and its
  levels equal the open orders (GET /orders?status=open of every account) level by level.

Usage (from the repository root, with tickflow and aiohttp installed):

    python python/crash_test.py --rounds 10 --clients 32 --durability group

Exit status: 0 when nothing was lost or unexpected, 1 when something was, 2 when the test itself
could not run (the server did not start, a check could not be made, the time limit passed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import aiohttp
except ImportError:  # pragma: no cover - a clear message instead of a traceback
    print("crash_test.py needs aiohttp: pip install aiohttp", file=sys.stderr)
    sys.exit(2)

HOST = "127.0.0.1"
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
OPEN = frozenset({"new", "partially_filled"})
TERMINAL = frozenset({"filled", "cancelled", "rejected"})
PAGE = 1000
MAX_DEPTH = 1000
MID = 10_000


class HarnessError(Exception):
    """The test could not do what it had to (server would not start, a check request failed...)."""


class NoAnswer(Exception):
    """A request that got no answer: it may or may not have reached the server."""

    def __init__(self, why: str, unsent: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.unsent = unsent
        """True only when the TCP connection itself was refused: not a byte of the request was sent."""


# ---------------------------------------------------------------------------------------- server


class Server:
    """The server under test: started, SIGKILLed and restarted on the same data and port."""

    def __init__(self, base: list[str], data: Path, logs: Path, durability: str, symbols: list[str],
                 start_timeout: float, snapshot_every: int | None = None) -> None:
        self.base = base
        self.snapshot_every = snapshot_every
        self.data = data
        self.logs = logs
        self.durability = durability
        self.symbols = symbols
        self.start_timeout = start_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        values = {"data": str(self.data), "host": HOST, "port": str(self.port),
                  "durability": self.durability, "symbols": ",".join(self.symbols)}
        templated = any("{" in part for part in self.base)
        cmd = [part.format(**values) for part in self.base]
        if not templated:
            cmd += ["--data", values["data"], "--host", HOST, "--port", values["port"],
                    "--durability", self.durability, "--symbols", values["symbols"]]
            if self.snapshot_every is not None:
                cmd += ["--snapshot-every", str(self.snapshot_every)]
        return cmd

    async def start(self) -> float:
        """Start the server; return milliseconds from process start to the first 200 of /health."""
        self.starts += 1
        self.log_path = self.logs / f"server-{self.starts}.log"
        with open(self.log_path, "wb") as out:
            started = time.perf_counter()
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        deadline = started + self.start_timeout
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                if self.proc.poll() is not None:
                    raise HarnessError(f"server exited with {self.proc.returncode} while starting:\n{self.tail()}")
                if time.perf_counter() > deadline:
                    self.kill_now()
                    raise HarnessError(f"server not healthy after {self.start_timeout}s:\n{self.tail()}")
                if not self.port:
                    match = LISTENING.search(self.log_path.read_text(errors="replace"))
                    if match:
                        self.port = int(match.group(1))
                if self.port:
                    try:
                        async with session.get(self.url + "/health",
                                               timeout=aiohttp.ClientTimeout(total=2)) as r:
                            await r.read()
                            if r.status == 200:
                                return (time.perf_counter() - started) * 1000
                    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                        pass
                await asyncio.sleep(0.005)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill_now(self) -> None:
        """SIGKILL, no waiting: exactly a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    async def reap(self) -> int:
        assert self.proc is not None
        deadline = time.monotonic() + 20
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise HarnessError("server did not exit 20 s after the signal")
            await asyncio.sleep(0.01)
        return self.proc.returncode

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a clean exit (SIGKILL after `timeout`); the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.kill_now()
                await self.reap()
                raise HarnessError(f"server did not stop {timeout}s after SIGTERM")
            await asyncio.sleep(0.02)
        return self.proc.returncode

    def tail(self, n: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


def _die_with_parent() -> None:
    """In the child before exec: be SIGKILLed if this script dies, so no server outlives the test."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# ---------------------------------------------------------------------------------------- model


@dataclass(eq=False)
class Order:
    """One new-order request and everything learnt about the order it made."""

    account: str
    coid: str
    body: dict[str, Any]
    round: int
    status: str = "pending"
    """pending -> acked | indeterminate | unsent | refused; indeterminate/unsent -> resolved."""
    result: dict[str, Any] | None = None
    """The answer to compare every re-send with (the acknowledgement, or the resolving re-send)."""
    order_id: int | None = None
    state: dict[str, Any] | None = None
    """The latest authoritative state: its price and qty are exact (only the owner changes them)."""
    state_from: str = "ack"
    """What set `state`: ack, cancel, amend, refusal, get, open."""
    how: str = "ack"
    """ack, existed (indeterminate, found to exist), new (indeterminate, created by the re-send)."""
    cancel_sent: bool = False
    lost: bool = False


@dataclass(eq=False)
class Op:
    """A cancel or an amend (no clientOrderId: tracked by order id)."""

    kind: str
    account: str
    order: Order
    body: dict[str, Any] | None
    round: int
    prev: tuple[int, int] = (0, 0)
    """(price, qty) of the order when the amend was sent."""
    status: str = "pending"
    """pending -> acked | refused | indeterminate."""
    answer: dict[str, Any] | None = None
    lost: bool = False


@dataclass
class RoundStats:
    round: int
    kill_at_s: float = 0.0
    in_flight_at_kill: int = 0
    acked_orders: int = 0
    acked_ops: int = 0
    refused_ops: int = 0
    indeterminate_orders: int = 0
    indeterminate_ops: int = 0
    unsent: int = 0
    existed: int = 0
    created: int = 0
    ops_applied: int = 0
    lost: int = 0
    unexpected: int = 0
    violations: int = 0
    restart_ms: float = 0.0
    replayed: str = ""
    verify_s: float = 0.0
    resent: int = 0
    trades: int = 0
    orders: int = 0
    book_samples: int = 0
    tape_waits: int = 0
    """Times the tape (SQLite, written after the ack) lagged the fills already acknowledged."""
    load_s: float = 0.0


@dataclass
class Ctx:
    args: argparse.Namespace
    server: Server
    symbols: list[str]
    accounts: list[str]
    orders: list[Order] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    by_id: dict[int, Order] = field(default_factory=dict)
    by_key: dict[tuple[str, str], Order] = field(default_factory=dict)
    tape: list[dict[str, Any]] = field(default_factory=list)
    mid: dict[str, int] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    in_flight: int = 0
    round: int = 0

    def find(self, kind: str, what: str, **detail: Any) -> None:
        """Record a failure: kind is lost, unexpected or violation."""
        self.findings.append({"round": self.round, "kind": kind, "what": what, **detail})

    def count(self, kind: str, rnd: int) -> int:
        return sum(1 for f in self.findings if f["kind"] == kind and f["round"] == rnd)


# ---------------------------------------------------------------------------------------- HTTP


def new_session(limit: int) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                    json_serialize=json.dumps)
    # aiohttp silently re-sends an idempotent request (DELETE!) once when a kept-alive connection
    # drops: a cancel must be sent exactly as often as the test says, so switch that off.
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session


async def call(session: aiohttp.ClientSession, url: str, method: str, path: str, account: str | None,
               body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    """(status, JSON body); NoAnswer when the request got no complete answer."""
    headers = {"Authorization": f"Bearer {account}"} if account else {}
    try:
        async with session.request(method, url + path, json=body, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            raw = await r.read()
            status = r.status
    except aiohttp.ClientConnectorError as e:
        raise NoAnswer(f"connect failed: {e}", unsent=True) from None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise NoAnswer(f"{type(e).__name__}: {e}") from None
    try:
        return status, json.loads(raw)
    except ValueError:
        raise NoAnswer(f"status {status} with a body that is not JSON: {raw[:80]!r}") from None


async def must(session: aiohttp.ClientSession, ctx: Ctx, method: str, path: str, account: str | None,
               body: Any = None) -> tuple[int, Any]:
    """A verification request: failing to get an answer is a harness error, not a finding."""
    try:
        return await call(session, ctx.server.url, method, path, account, body, timeout=60.0)
    except NoAnswer as e:
        raise HarnessError(f"{method} {path} got no answer during verification: {e.why}\n{ctx.server.tail()}")


async def all_open(session: aiohttp.ClientSession, ctx: Ctx, account: str) -> tuple[int, Any]:
    """GET /orders?status=open of `account`, every page (the server answers at most 1000 at once)."""
    orders: list[Any] = []
    after = 0
    while True:
        status, body = await must(session, ctx, "GET", f"/orders?status=open&after={after}", account)
        if status != 200:
            return status, body
        orders += body["orders"]
        if len(body["orders"]) != 1000:
            return status, {"orders": orders}
        after = body["orders"][-1]["orderId"]


async def bounded(n: int, jobs: list[Any]) -> list[Any]:
    """Run coroutines with at most n at a time, results in order."""
    sem = asyncio.Semaphore(n)

    async def one(job: Any) -> Any:
        async with sem:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


# ---------------------------------------------------------------------------------------- clients


class Client:
    def __init__(self, ctx: Ctx, idx: int, seed: int) -> None:
        self.ctx = ctx
        self.idx = idx
        self.account = ctx.accounts[idx]
        self.rng = random.Random(seed)
        self.n = 0
        self.open: dict[int, Order] = {}
        self.stopped_why = ""

    def new_body(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        ctx = self.ctx
        symbol = rng.choice(ctx.symbols)
        if rng.random() < 0.15:
            ctx.mid[symbol] = min(MID + 150, max(MID - 150, ctx.mid[symbol] + rng.choice((-1, 1))))
        mid = ctx.mid[symbol]
        side = rng.choice(("buy", "sell"))
        sign = 1 if side == "buy" else -1
        r = rng.random()
        if r < 0.40:
            kind = "rest"
            body = {"type": "limit", "price": mid - sign * rng.randint(1, 15), "qty": rng.randint(1, 100)}
            if rng.random() < 0.2:
                body["postOnly"] = True
                kind = "rest-post"
        elif r < 0.62:
            kind = "cross"
            body = {"type": "limit", "price": mid + sign * rng.randint(0, 8), "qty": rng.randint(1, 120)}
        elif r < 0.72:
            kind = "market"
            body = {"type": "market", "qty": rng.randint(1, 60)}
            if rng.random() < 0.3:
                body["tif"] = rng.choice(("ioc", "fok"))
        elif r < 0.84:
            kind = "ioc"
            body = {"type": "limit", "price": mid + sign * rng.randint(-3, 6), "qty": rng.randint(1, 80),
                    "tif": "ioc"}
        elif r < 0.93:
            kind = "fok"
            body = {"type": "limit", "price": mid + sign * rng.randint(0, 10), "qty": rng.randint(1, 150),
                    "tif": "fok"}
        else:
            kind = "post-near"  # at or through the touch: often post_only_would_take
            body = {"type": "limit", "price": mid + sign * rng.randint(-2, 2), "qty": rng.randint(1, 50),
                    "postOnly": True, "tif": "gtc"}
        self.n += 1
        coid = f"{self.account}-{self.n:06d}"
        body.update(symbol=symbol, side=side, clientOrderId=coid)
        return kind, body

    def pick_action(self) -> str:
        if not self.open:
            return "new"
        r = self.rng.random()
        crowded = len(self.open) > 40
        if r < (0.25 if crowded else 0.13):
            return "cancel"
        if r < (0.40 if crowded else 0.26):
            return "amend"
        return "new"

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        ctx = self.ctx
        while not stop.is_set():
            action = self.pick_action()
            try:
                if action == "new":
                    await self.place(session)
                else:
                    await self.change(session, action)
            except NoAnswer as e:
                self.stopped_why = e.why
                if not stop.is_set():
                    ctx.warnings.append(f"round {ctx.round}: {self.account} got no answer before the kill: {e.why}")
                return

    async def place(self, session: aiohttp.ClientSession) -> None:
        ctx = self.ctx
        _, body = self.new_body()
        order = Order(self.account, body["clientOrderId"], body, ctx.round)
        ctx.orders.append(order)
        ctx.by_key[(order.account, order.coid)] = order
        ctx.in_flight += 1
        try:
            status, answer = await call(session, ctx.server.url, "POST", "/orders", self.account, body)
        except NoAnswer as e:
            order.status = "unsent" if e.unsent else "indeterminate"
            raise
        finally:
            ctx.in_flight -= 1
        if status >= 500:
            order.status = "indeterminate"
            raise NoAnswer(f"status {status}: {answer}")
        if status != 200:
            order.status = "refused"
            ctx.find("unexpected", "a new order was refused", order=order.coid, status=status, answer=answer)
            return
        if answer.get("clientOrderId") != order.coid or answer.get("account") != order.account:
            ctx.find("unexpected", "the acknowledgement is for another order", order=order.coid, answer=answer)
        order.status = "acked"
        register(ctx, order, answer, "ack")
        if answer["status"] in OPEN:
            self.open[order.order_id] = order

    async def change(self, session: aiohttp.ClientSession, action: str) -> None:
        ctx = self.ctx
        rng = self.rng
        order_id = rng.choice(list(self.open))
        order = self.open[order_id]
        state = order.state
        assert state is not None
        price, qty, filled = state["price"], state["qty"], state["filledQty"]
        if action == "cancel":
            op = Op("cancel", self.account, order, None, ctx.round, (price, qty))
            order.cancel_sent = True
            method, body = "DELETE", None
        else:
            r = rng.random()
            if r < 0.4 and qty - filled > 1:
                body = {"qty": rng.randint(filled + 1, qty - 1)}  # keeps its place in the queue
            elif r < 0.6:
                body = {"qty": qty + rng.randint(1, 40)}
            elif r < 0.9:
                body = {"price": max(1, price + rng.choice((-1, 1)) * rng.randint(1, 6))}
            else:
                body = {"price": max(1, price + rng.choice((-1, 1)) * rng.randint(1, 4)),
                        "qty": qty + rng.randint(-min(qty - filled - 1, 10), 10) if qty - filled > 1 else qty + 5}
            op = Op("amend", self.account, order, body, ctx.round, (price, qty))
            method = "PATCH"
        ctx.ops.append(op)
        ctx.in_flight += 1
        try:
            status, answer = await call(session, ctx.server.url, method, f"/orders/{order_id}", self.account, body)
        except NoAnswer:
            op.status = "indeterminate"
            raise
        finally:
            ctx.in_flight -= 1
        if status >= 500:
            op.status = "indeterminate"
            raise NoAnswer(f"status {status}: {answer}")
        op.answer = answer
        if status == 200:
            op.status = "acked"
            if answer.get("orderId") != order_id:
                ctx.find("unexpected", f"the {op.kind} answered for another order", order=order_id, answer=answer)
                return
            if op.kind == "cancel" and answer.get("status") != "cancelled":
                ctx.find("unexpected", "an acknowledged cancel left the order open", order=order_id, answer=answer)
            update(order, answer, op.kind)
            check_fills_shape(ctx, order, answer)
        elif status == 404:
            op.status = "refused"
            ctx.find("lost", f"{op.kind} of an acknowledged order: the server does not know it (404)",
                     order=order_id, coid=order.coid, answer=answer)
            order.lost = True
            self.open.pop(order_id, None)
            return
        else:
            op.status = "refused"
            inner = answer.get("order") if isinstance(answer, dict) else None
            if isinstance(inner, dict) and inner.get("orderId") == order_id:
                update(order, inner, "refusal")
        if order.state is not None and order.state["status"] not in OPEN:
            self.open.pop(order_id, None)


def register(ctx: Ctx, order: Order, answer: dict[str, Any], how: str) -> None:
    order.result = answer
    order.order_id = answer["orderId"]
    order.state = answer
    order.state_from = how
    other = ctx.by_id.get(order.order_id)
    if other is not None and other is not order:
        ctx.find("unexpected", "two clientOrderIds share one order id", order=order.order_id,
                 coids=[other.coid, order.coid])
    ctx.by_id[order.order_id] = order
    check_fills_shape(ctx, order, answer)


def update(order: Order, state: dict[str, Any], how: str) -> None:
    order.state = state
    order.state_from = how


def check_fills_shape(ctx: Ctx, order: Order, answer: dict[str, Any]) -> None:
    filled = answer.get("filledQty", 0)
    if not 0 <= filled <= answer.get("qty", 0) or answer.get("remainingQty") != answer.get("qty", 0) - filled:
        ctx.find("violation", "an answer whose quantities do not add up", order=order.coid, answer=answer)


# ---------------------------------------------------------------------------------------- one round


async def monitor_books(ctx: Ctx, stop: asyncio.Event, stats: RoundStats) -> None:
    """While the clients run: the book must never be crossed."""
    connector = aiohttp.TCPConnector(limit=2)
    async with aiohttp.ClientSession(connector=connector) as session:
        while not stop.is_set():
            for symbol in ctx.symbols:
                try:
                    status, book = await call(session, ctx.server.url, "GET", f"/book/{symbol}?depth=5", None,
                                              timeout=5.0)
                except NoAnswer:
                    return
                if status != 200:
                    continue
                stats.book_samples += 1
                if book["bids"] and book["asks"] and book["bids"][0]["price"] >= book["asks"][0]["price"]:
                    ctx.find("violation", "crossed book seen while the clients ran", symbol=symbol,
                             bid=book["bids"][0], ask=book["asks"][0], seq=book.get("seq"))
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass


async def load_and_kill(ctx: Ctx, clients: list[Client], stats: RoundStats, rng: random.Random) -> None:
    args = ctx.args
    stop = asyncio.Event()
    stats.kill_at_s = round(rng.uniform(args.kill_min, args.kill_max), 3)
    started = time.perf_counter()
    async with new_session(len(clients) + 4) as session:
        tasks = [asyncio.create_task(c.run(session, stop)) for c in clients]
        monitor = asyncio.create_task(monitor_books(ctx, stop, stats))
        await asyncio.wait(tasks, timeout=stats.kill_at_s)
        while (args.min_acks and ctx.server.alive() and not all(t.done() for t in tasks)
               and sum(o.round == ctx.round and o.status == "acked" for o in ctx.orders) < args.min_acks):
            await asyncio.sleep(0.01)  # --min-acks: the kill waits for the round's acknowledged orders
        if not ctx.server.alive():
            raise HarnessError(f"the server died on its own before the kill:\n{ctx.server.tail()}")
        stats.in_flight_at_kill = ctx.in_flight
        ctx.server.kill_now()  # SIGKILL while requests are in flight
        stop.set()
        stats.load_s = round(time.perf_counter() - started, 3)
        await ctx.server.reap()
        _, pending = await asyncio.wait(tasks, timeout=30)
        for t in pending:
            t.cancel()
        results = await asyncio.gather(*tasks, monitor, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise HarnessError(f"a client failed: {result!r}") from result
    for order in ctx.orders:
        if order.round == ctx.round and order.status == "pending":
            order.status = "indeterminate"
    for op in ctx.ops:
        if op.round == ctx.round and op.status == "pending":
            op.status = "indeterminate"
    if stats.in_flight_at_kill == 0:
        ctx.warnings.append(f"round {ctx.round}: no request was in flight at the kill")


async def verify(ctx: Ctx, clients: list[Client], stats: RoundStats, seq0: int) -> None:
    """Everything after a restart; no other request is running meanwhile."""
    args = ctx.args
    rnd = ctx.round
    started = time.perf_counter()
    async with new_session(args.clients + 4) as session:
        # 1. Indeterminate new orders: re-send; the answer's seq says whether it existed before the kill.
        pending = [o for o in ctx.orders if o.round == rnd and o.status in ("indeterminate", "unsent")]

        async def resolve(order: Order) -> None:
            status, answer = await must(session, ctx, "POST", "/orders", order.account, order.body)
            if status != 200:
                ctx.find("unexpected", "re-sending an indeterminate order was refused", order=order.coid,
                         status=status, answer=answer)
                order.status = "refused"
                return
            existed = answer["seq"] <= seq0
            if existed and order.status == "unsent":
                ctx.find("unexpected", "an order whose connection was refused exists", order=order.coid,
                         answer=answer)
            order.how = "existed" if existed else "new"
            order.status = "resolved"
            register(ctx, order, answer, "ack")

        await bounded(args.clients, [resolve(o) for o in pending])
        stats.existed = sum(1 for o in pending if o.how == "existed")
        stats.created = sum(1 for o in pending if o.how == "new")

        # 2. Indeterminate cancels and amends: the order is either as before or as changed.
        for op in [op for op in ctx.ops if op.round == rnd and op.status == "indeterminate"]:
            order = op.order
            status, state = await must(session, ctx, "GET", f"/orders/{order.order_id}", op.account)
            if status != 200:
                ctx.find("lost", "an order with an indeterminate change is unknown", order=order.order_id,
                         status=status, answer=state)
                continue
            before = op.prev
            now = (state["price"], state["qty"])
            if op.kind == "amend":
                assert op.body is not None
                after = (op.body.get("price", before[0]), op.body.get("qty", before[1]))
                if now == after and after != before:
                    stats.ops_applied += 1
                elif now != before:
                    ctx.find("unexpected", "an indeterminate amend left neither the old nor the new order",
                             order=order.order_id, before=before, amend=op.body, now=state)
            else:
                if now != before:
                    ctx.find("unexpected", "an indeterminate cancel changed price or qty", order=order.order_id,
                             before=before, now=state)
                if state["status"] == "cancelled" and state.get("reason") == "cancelled_by_user":
                    stats.ops_applied += 1
            update(order, state, "get")

        # 3. Re-send every acknowledged order: exactly the original answer, nothing created.
        resend = [o for o in ctx.orders if o.status in ("acked", "resolved") and o.result is not None
                  and (args.recheck == "all" or o.round == rnd)]

        async def again(order: Order) -> None:
            status, answer = await must(session, ctx, "POST", "/orders", order.account, order.body)
            if status == 200 and answer == order.result:
                return
            order.lost = True
            ctx.find("lost", "re-sent acknowledged order does not answer its original result", order=order.coid,
                     acked_in_round=order.round, status=status, original=order.result, now=answer)
            if status == 200 and answer.get("orderId") not in ctx.by_id:
                ctx.by_id[answer["orderId"]] = order  # the re-send re-created it: known from here on

        await bounded(args.clients, [again(o) for o in resend])
        stats.resent = len(resend)

        # 4. Acknowledged cancels stay cancelled, exactly as acknowledged.
        cancels = [op for op in ctx.ops if op.kind == "cancel" and op.status == "acked"
                   and (args.recheck == "all" or op.round == rnd)]

        async def still_cancelled(op: Op) -> None:
            status, state = await must(session, ctx, "GET", f"/orders/{op.order.order_id}", op.account)
            assert op.answer is not None
            expected = {**op.answer, "fills": []}
            if status != 200 or state != expected:
                op.lost = True
                ctx.find("lost", "an acknowledged cancel did not stay as acknowledged", order=op.order.order_id,
                         acked_in_round=op.round, acked=op.answer, now=state)

        await bounded(args.clients, [still_cancelled(op) for op in cancels])

        # 5. The trade tape, paged; SQLite is written after the ack, so wait (bounded) for the fills we hold.
        want = max((f["tradeId"] for o in ctx.orders if o.result for f in o.result.get("fills", ())), default=0)
        want = max([want] + [f["tradeId"] for op in ctx.ops if op.status == "acked" and op.answer
                             for f in op.answer.get("fills", ())])
        deadline = time.monotonic() + 10
        while True:
            tape = await fetch_tape(session, ctx)
            if len(tape) >= want or time.monotonic() > deadline:
                break
            stats.tape_waits += 1
            await asyncio.sleep(0.1)
        check_tape(ctx, tape)

        # 6. Open orders of every account, and the state of orders that left the book since.
        open_lists = await bounded(8, [all_open(session, ctx, a) for a in ctx.accounts])
        open_now: dict[int, dict[str, Any]] = {}
        for account, (status, body) in zip(ctx.accounts, open_lists):
            if status != 200:
                raise HarnessError(f"GET /orders?status=open for {account} answered {status}: {body}")
            coids: set[str] = set()
            for state in body["orders"]:
                oid = state["orderId"]
                if state.get("clientOrderId") in coids:
                    ctx.find("unexpected", "two open orders share a clientOrderId", account=account,
                             coid=state.get("clientOrderId"))
                coids.add(state.get("clientOrderId"))
                order = ctx.by_id.get(oid)
                if order is None or order.account != account or order.coid != state.get("clientOrderId"):
                    ctx.find("unexpected", "an open order this test never had acknowledged", account=account,
                             state=state)
                    continue
                open_now[oid] = state
        filled = tape_filled(tape)
        left = [o for o in ctx.by_id.values() if o.state and o.state["status"] in OPEN
                and o.order_id not in open_now and not o.lost]

        async def closed(order: Order) -> None:
            status, state = await must(session, ctx, "GET", f"/orders/{order.order_id}", order.account)
            if status != 200:
                ctx.find("lost", "an acknowledged order is unknown", order=order.order_id, status=status)
                order.lost = True
                return
            if state["status"] in OPEN:
                ctx.find("violation", "an open order missing from GET /orders?status=open", state=state)
                open_now[order.order_id] = state
                return
            if state["status"] == "cancelled" and state.get("reason") == "cancelled_by_user" and not order.cancel_sent:
                ctx.find("unexpected", "an order cancelled by its user that the test never cancelled", state=state)
            if (state["price"], state["qty"]) != (order.state["price"], order.state["qty"]):  # type: ignore[index]
                kind = "lost" if order.state_from == "amend" else "unexpected"
                ctx.find(kind, "price/qty differ from the last acknowledged state", order=order.order_id,
                         expected=order.state, now=state)
            update(order, state, "get")

        await bounded(args.clients, [closed(o) for o in left])
        check_orders(ctx, open_now, filled)

        # 7. The books: never crossed, and exactly the open orders, level by level.
        for symbol in ctx.symbols:
            status, book = await must(session, ctx, "GET", f"/book/{symbol}?depth={MAX_DEPTH}", None)
            if status != 200:
                raise HarnessError(f"GET /book/{symbol} answered {status}: {book}")
            check_book(ctx, symbol, book, open_now)

        # 8. Order ids are dense and all ours; nothing above the highest one we know.
        await check_ids(session, ctx)

    for c in clients:
        c.open = {oid: ctx.by_id[oid] for oid in open_now if ctx.by_id[oid].account == c.account}
    stats.trades = len(ctx.tape)
    stats.orders = len(ctx.by_id)
    stats.verify_s = round(time.perf_counter() - started, 3)


async def fetch_tape(session: aiohttp.ClientSession, ctx: Ctx) -> list[dict[str, Any]]:
    tape: list[dict[str, Any]] = []
    after = 0
    for _ in range(100_000):
        status, page = await must(session, ctx, "GET", f"/trades?after={after}&limit={PAGE}", None)
        if status != 200 or not isinstance(page, list):
            raise HarnessError(f"GET /trades answered {status}: {page}")
        tape.extend(page)
        if len(page) < PAGE:
            return tape
        after = page[-1]["tradeId"]
    raise HarnessError("the trade tape does not end")


def tape_filled(tape: list[dict[str, Any]]) -> dict[int, int]:
    filled: dict[int, int] = {}
    for t in tape:
        for oid in (t["buyOrderId"], t["sellOrderId"]):
            filled[oid] = filled.get(oid, 0) + t["qty"]
    return filled


def check_tape(ctx: Ctx, tape: list[dict[str, Any]]) -> None:
    for i, t in enumerate(tape, 1):
        if t["tradeId"] != i:
            ctx.find("violation", "trade ids are not dense 1..N", position=i, trade=t)
            break
    by_id = {t["tradeId"]: t for t in tape}
    if len(by_id) != len(tape):
        ctx.find("violation", "a trade id appears twice on the tape")
    for old in ctx.tape:
        now = by_id.get(old["tradeId"])
        if now != old:
            ctx.find("lost" if now is None else "violation", "a trade seen earlier is gone or changed",
                     before=old, now=now)
    for t in tape:
        buy, sell = ctx.by_id.get(t["buyOrderId"]), ctx.by_id.get(t["sellOrderId"])
        if buy is None or sell is None:
            ctx.find("unexpected", "a trade with an order this test never sent", trade=t)
            continue
        if buy.body["side"] != "buy" or sell.body["side"] != "sell" or not (
                buy.body["symbol"] == sell.body["symbol"] == t["symbol"]):
            ctx.find("violation", "a trade whose orders do not fit it", trade=t, buy=buy.coid, sell=sell.coid)
        if buy.account == sell.account:
            ctx.find("violation", "a trade between two orders of one account", trade=t)
    # Every trade is explained: a fill some answer reported, or the work of an amend that got no
    # answer but was applied (its fills were never seen). Anything else came from nowhere.
    explained = {f["tradeId"] for o in ctx.by_id.values() if o.result for f in o.result.get("fills", ())}
    explained.update(f["tradeId"] for op in ctx.ops if op.kind == "amend" and op.status == "acked" and op.answer
                     for f in op.answer.get("fills", ()))
    unanswered = {op.order.order_id for op in ctx.ops if op.kind == "amend" and op.status == "indeterminate"}
    for t in tape:
        if t["tradeId"] not in explained:
            taker = t["buyOrderId"] if t["aggressor"] == "buy" else t["sellOrderId"]
            if taker not in unanswered:
                ctx.find("unexpected", "a trade no answer reported (and no unanswered amend explains)", trade=t)
    # Every acknowledged fill (new orders and amends; the order was the aggressor) is on the tape.
    for order in ctx.by_id.values():
        if order.result is None or order.lost:
            continue
        _acked_fills(ctx, order, order.result.get("fills", ()), by_id)
    for op in ctx.ops:
        if op.kind == "amend" and op.status == "acked" and op.answer and not op.lost:
            _acked_fills(ctx, op.order, op.answer.get("fills", ()), by_id, op)
    ctx.tape = tape


def _acked_fills(ctx: Ctx, order: Order, fills: Any, tape: dict[int, dict[str, Any]], op: Op | None = None) -> None:
    side = order.body["side"]
    for f in fills:
        t = tape.get(f["tradeId"])
        mine = t and t["buyOrderId" if side == "buy" else "sellOrderId"] == order.order_id
        if not t or not mine or t["price"] != f["price"] or t["qty"] != f["qty"] or t["aggressor"] != side:
            if op is not None:
                op.lost = True
            else:
                order.lost = True
            ctx.find("lost", "an acknowledged fill is not on the tape as acknowledged", order=order.coid,
                     via=op.kind if op else "order", fill=f, tape=t)


def check_orders(ctx: Ctx, open_now: dict[int, dict[str, Any]], filled: dict[int, int]) -> None:
    for oid, order in ctx.by_id.items():
        if order.state is None or order.lost:
            continue
        if oid in open_now:
            state = open_now[oid]
            known = order.state
            if known["status"] in TERMINAL:
                kind = "lost" if order.state_from == "cancel" else "unexpected"
                ctx.find(kind, "an order known to be finished is open again", order=oid, known=known, now=state)
            if (state["price"], state["qty"]) != (known["price"], known["qty"]):
                kind = "lost" if order.state_from == "amend" else "unexpected"
                ctx.find(kind, "an open order's price/qty differ from the last acknowledged state", order=oid,
                         known=known, now=state)
            if state["filledQty"] < known["filledQty"]:
                ctx.find("lost", "an open order has less filled than acknowledged", order=oid, known=known,
                         now=state)
            if state["status"] != ("partially_filled" if state["filledQty"] else "new"):
                ctx.find("violation", "an open order's status does not fit its fills", state=state)
            update(order, state, "open" if order.state_from not in ("amend", "cancel") else order.state_from)
        state = order.state
        on_tape = filled.get(oid, 0)
        if on_tape > state["qty"]:
            ctx.find("violation", "more filled on the tape than the order's qty", order=oid, tape=on_tape,
                     state=state)
        elif on_tape != state["filledQty"]:
            ctx.find("violation", "filled on the tape differs from the order's filledQty", order=oid,
                     tape=on_tape, state=state)


def check_book(ctx: Ctx, symbol: str, book: dict[str, Any], open_now: dict[int, dict[str, Any]]) -> None:
    bids, asks = book["bids"], book["asks"]
    if len(bids) >= MAX_DEPTH or len(asks) >= MAX_DEPTH:
        raise HarnessError(f"{symbol}: the book is deeper than {MAX_DEPTH} levels; the check would be partial")
    if bids and asks and bids[0]["price"] >= asks[0]["price"]:
        ctx.find("violation", "crossed book after the restart", symbol=symbol, bid=bids[0], ask=asks[0])
    for levels, descending in ((bids, True), (asks, False)):
        prices = [lvl["price"] for lvl in levels]
        if prices != sorted(prices, reverse=descending) or len(set(prices)) != len(prices):
            ctx.find("violation", "book levels are not in price order", symbol=symbol, prices=prices[:20])
    implied: dict[tuple[str, int], list[int]] = {}
    for state in open_now.values():
        if state["symbol"] == symbol:
            level = implied.setdefault((state["side"], state["price"]), [0, 0])
            level[0] += state["remainingQty"]
            level[1] += 1
    shown = {("buy", lvl["price"]): [lvl["qty"], lvl["orders"]] for lvl in bids}
    shown.update({("sell", lvl["price"]): [lvl["qty"], lvl["orders"]] for lvl in asks})
    if shown != implied:
        diff = {f"{s} {p}": {"book": shown.get((s, p)), "open orders": implied.get((s, p))}
                for s, p in sorted(set(shown) | set(implied)) if shown.get((s, p)) != implied.get((s, p))}
        ctx.find("violation", "the book differs from the open orders", symbol=symbol,
                 levels=dict(list(diff.items())[:10]), differing=len(diff))


async def check_ids(session: aiohttp.ClientSession, ctx: Ctx) -> None:
    known = set(ctx.by_id)
    top = max(known, default=0)
    holes = sorted(set(range(1, top + 1)) - known)
    for oid in holes[:10] + [top + 1]:
        owners = []
        for account in ctx.accounts:
            status, state = await must(session, ctx, "GET", f"/orders/{oid}", account)
            if status == 200:
                owners.append(state)
        if owners:
            ctx.find("unexpected", "an order id this test never got an answer for exists", order=oid,
                     states=owners)
        elif oid != top + 1:
            ctx.find("violation", "an order id no account owns (ids are not dense)", order=oid)
    if len(holes) > 10:
        ctx.find("unexpected", f"{len(holes) - 10} more order ids this test does not know", first=holes[10:20])


# ---------------------------------------------------------------------------------------- the run


async def run(args: argparse.Namespace, out: Path, data: Path) -> dict[str, Any]:
    symbols = [s for s in args.symbols.split(",") if s]
    base = shlex.split(args.server_cmd) if args.server_cmd else [sys.executable, "-m", "tickflow.cli", "serve"]
    server = Server(base, data, out, args.durability, symbols, args.start_timeout, args.snapshot_every)
    accounts = [f"c{i:02d}" for i in range(args.clients)]
    ctx = Ctx(args, server, symbols, accounts, mid={s: MID for s in symbols})
    rng = random.Random(args.seed)
    clients = [Client(ctx, i, rng.randrange(1 << 30)) for i in range(args.clients)]
    rounds: list[RoundStats] = []
    first_start_ms = await server.start()
    print(f"tickflow crash test: {args.rounds} rounds of kill -9, {args.clients} clients, "
          f"durability {args.durability}, seed {args.seed}, server {server.url} "
          f"(first start {first_start_ms:.0f} ms)", flush=True)
    print(HEADER, flush=True)
    clean: dict[str, Any] = {}
    try:
        for rnd in range(1, args.rounds + 1):
            ctx.round = rnd
            stats = RoundStats(rnd)
            await load_and_kill(ctx, clients, stats, rng)
            stats.acked_orders = sum(1 for o in ctx.orders if o.round == rnd and o.status == "acked")
            stats.indeterminate_orders = sum(1 for o in ctx.orders if o.round == rnd
                                             and o.status in ("indeterminate", "unsent"))
            stats.unsent = sum(1 for o in ctx.orders if o.round == rnd and o.status == "unsent")
            stats.acked_ops = sum(1 for op in ctx.ops if op.round == rnd and op.status == "acked")
            stats.refused_ops = sum(1 for op in ctx.ops if op.round == rnd and op.status == "refused")
            stats.indeterminate_ops = sum(1 for op in ctx.ops if op.round == rnd and op.status == "indeterminate")
            stats.restart_ms = round(await server.start(), 1)
            stats.replayed = _replay_line(server.log_text())
            status, health = await must_health(ctx)
            await verify(ctx, clients, stats, health["seq"])
            stats.lost = ctx.count("lost", rnd)
            stats.unexpected = ctx.count("unexpected", rnd)
            stats.violations = ctx.count("violation", rnd)
            rounds.append(stats)
            print(row(stats), flush=True)
        # Last: a clean stop (SIGTERM) and start must keep everything too.
        ctx.round = args.rounds + 1
        code = await server.stop()
        restart = await server.start()
        _, health = await must_health(ctx)
        stats = RoundStats(ctx.round)
        await verify(ctx, clients, stats, health["seq"])
        clean = {"exit_status": code, "restart_ms": round(restart, 1), "lost": ctx.count("lost", ctx.round),
                 "unexpected": ctx.count("unexpected", ctx.round),
                 "violations": ctx.count("violation", ctx.round), "resent": stats.resent}
        if code != 0:
            ctx.find("violation", f"the server exited with {code} on SIGTERM")
    finally:
        if server.alive():
            try:
                await server.stop()
            except HarnessError:
                pass
    server_errors = [line for i in range(1, server.starts + 1)
                     for line in (out / f"server-{i}.log").read_text(errors="replace").splitlines()
                     if "Traceback" in line or " ERROR " in line or "CRITICAL" in line]
    return summarize(args, ctx, rounds, first_start_ms, clean, server_errors)


async def must_health(ctx: Ctx) -> tuple[int, dict[str, Any]]:
    async with new_session(2) as session:
        status, health = await must(session, ctx, "GET", "/health", None)
    if status != 200:
        raise HarnessError(f"/health answered {status}: {health}")
    return status, health


REPLAYED = re.compile(r"(replayed \d+ records .*)$")


def _replay_line(text: str) -> str:
    """The server's own account of the recovery: records, seconds, and any torn tail it cut."""
    for line in reversed(text.splitlines()):
        match = REPLAYED.search(line)
        if match and "listening" not in line:
            return match.group(1).strip()
    return ""


HEADER = (f"{'round':>5} {'acked':>7} {'indet':>6} {'existed':>7} {'new':>5} {'ops acked':>9} {'ops indet':>9} "
          f"{'lost':>5} {'unexpected':>10} {'violations':>10} {'kill s':>6} {'in flight':>9} "
          f"{'restart ms':>10} {'trades':>7} {'verify s':>8}")


def row(s: RoundStats) -> str:
    return (f"{s.round:>5} {s.acked_orders:>7} {s.indeterminate_orders:>6} {s.existed:>7} {s.created:>5} "
            f"{s.acked_ops:>9} {s.indeterminate_ops:>9} {s.lost:>5} {s.unexpected:>10} {s.violations:>10} "
            f"{s.kill_at_s:>6.2f} {s.in_flight_at_kill:>9} {s.restart_ms:>10.0f} {s.trades:>7} {s.verify_s:>8.2f}")


def summarize(args: argparse.Namespace, ctx: Ctx, rounds: list[RoundStats], first_start_ms: float,
              clean: dict[str, Any], server_errors: list[str]) -> dict[str, Any]:
    acked_orders = [o for o in ctx.orders if o.result is not None]
    acked_ops = [op for op in ctx.ops if op.status == "acked"]
    restarts = [r.restart_ms for r in rounds]
    findings = ctx.findings
    lost = sum(1 for f in findings if f["kind"] == "lost")
    unexpected = sum(1 for f in findings if f["kind"] == "unexpected")
    violations = sum(1 for f in findings if f["kind"] == "violation")
    return {
        "config": {"rounds": args.rounds, "clients": args.clients, "durability": args.durability,
                   "seed": args.seed, "symbols": ctx.symbols, "kill_window_s": [args.kill_min, args.kill_max],
                   "recheck": args.recheck, "server_cmd": ctx.server.command()},
        "rounds": [vars(r) for r in rounds],
        "clean_restart": clean,
        "totals": {
            "acknowledged_orders": len(acked_orders),
            "acknowledged_before_kill": sum(r.acked_orders for r in rounds),
            "indeterminate_orders": sum(r.indeterminate_orders for r in rounds),
            "indeterminate_existed": sum(r.existed for r in rounds),
            "indeterminate_created_by_resend": sum(r.created for r in rounds),
            "acknowledged_cancels_amends": len(acked_ops),
            "indeterminate_cancels_amends": sum(r.indeterminate_ops for r in rounds),
            "lost_orders": sum(1 for o in ctx.orders if o.lost),
            "lost_cancels_amends": sum(1 for op in ctx.ops if op.lost),
            "lost": lost,
            "unexpected": unexpected,
            "violations": violations,
            "trades": len(ctx.tape),
            "orders": len(ctx.by_id),
            "tape_waits": sum(r.tape_waits for r in rounds),
            "book_samples": sum(r.book_samples for r in rounds),
            "first_start_ms": round(first_start_ms, 1),
            "restart_ms": {"min": min(restarts, default=0), "median": statistics.median(restarts) if restarts else 0,
                           "max": max(restarts, default=0)},
        },
        "findings": findings[:2000],
        "findings_total": len(findings),
        "warnings": ctx.warnings[:200],
        "server_log_errors": server_errors[:50],
        "ok": lost == 0 and unexpected == 0 and violations == 0,
    }


def report_text(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    rounds = summary["rounds"]
    lines = []
    rm = t["restart_ms"]
    lines.append(f"{'total':>5} {t['acknowledged_before_kill']:>7} {t['indeterminate_orders']:>6} "
                 f"{t['indeterminate_existed']:>7} {t['indeterminate_created_by_resend']:>5} "
                 f"{sum(r['acked_ops'] for r in rounds):>9} {t['indeterminate_cancels_amends']:>9} "
                 f"{t['lost']:>5} {t['unexpected']:>10} {t['violations']:>10}")
    lines.append(f"restart (kill -9 to /health 200): min {rm['min']:.0f} ms, median {rm['median']:.0f} ms, "
                 f"max {rm['max']:.0f} ms; {t['orders']:,} orders and {t['trades']:,} trades at the end")
    c = summary["clean_restart"]
    if c:
        lines.append(f"clean stop (SIGTERM) exit {c['exit_status']}, restart {c['restart_ms']:.0f} ms, "
                     f"{c['resent']:,} orders re-sent: {c['lost']} lost, {c['unexpected']} unexpected, "
                     f"{c['violations']} violations")
    lines.append(f"{t['indeterminate_orders']:,} indeterminate orders resolved once each: "
                 f"{t['indeterminate_existed']:,} existed, {t['indeterminate_created_by_resend']:,} did not")
    lines.append(f"{t['lost_orders']:,} lost of {t['acknowledged_orders']:,} acknowledged orders")
    lines.append(f"{t['lost_cancels_amends']:,} lost of {t['acknowledged_cancels_amends']:,} "
                 f"acknowledged cancels and amends")
    lines.append(f"{t['unexpected']:,} unexpected")
    lines.append(f"{t['violations']:,} invariant violations")
    if summary["findings"]:
        kinds: dict[tuple[str, str], int] = {}
        for f in summary["findings"]:
            kinds[(f["kind"], f["what"])] = kinds.get((f["kind"], f["what"]), 0) + 1
        lines.append("findings by kind:")
        lines += [f"  {n:>6} {kind}: {what}" for (kind, what), n in kinds.items()]
        lines.append("first findings (all of them, in full, in the JSON summary):")
        seen: set[tuple[str, str]] = set()
        for f in summary["findings"]:
            if (f["kind"], f["what"]) not in seen:
                seen.add((f["kind"], f["what"]))
                lines.append("  " + json.dumps(f, default=str)[:400])
    if summary["warnings"]:
        lines.append(f"warnings ({len(summary['warnings'])}, first 5):")
        lines += ["  " + w[:300] for w in summary["warnings"][:5]]
    if summary["server_log_errors"]:
        lines.append(f"errors in the server logs ({len(summary['server_log_errors'])}, first 5):")
        lines += ["  " + w[:300] for w in summary["server_log_errors"][:5]]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rounds = summary["rounds"]
    xs = [r["round"] for r in rounds]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.bar(xs, [r["acked_orders"] for r in rounds], color="#4c78a8", label="acknowledged orders")
    ax.bar(xs, [r["indeterminate_orders"] for r in rounds], bottom=[r["acked_orders"] for r in rounds],
           color="#f58518", label="indeterminate")
    ax.set_xlabel("round (one kill -9 each)")
    ax.set_ylabel("orders")
    ax.set_xticks(xs)
    ax2 = ax.twinx()
    ax2.plot(xs, [r["restart_ms"] for r in rounds], color="#e45756", marker="o", label="restart ms")
    ax2.set_ylabel("restart to /health 200 (ms)")
    ax2.set_ylim(bottom=0)
    t = summary["totals"]
    c = summary["config"]
    ax.set_title(f"tickflow kill -9: {t['lost_orders']} lost of {t['acknowledged_orders']:,} acknowledged orders "
                 f"(durability {c['durability']}, {c['clients']} clients)", fontsize=10)
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    fig.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="lower center", ncol=3, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="kill -9 crash test for tickflow: nothing acknowledged may be lost.")
    p.add_argument("--rounds", type=int, default=10, help="kill -9 rounds (default 10)")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients, one account each (default 32)")
    p.add_argument("--durability", choices=("none", "group", "order"), default="group")
    p.add_argument("--seed", type=int, default=1, help="random seed for the order mix and kill moments")
    p.add_argument("--kill-min", type=float, default=0.5, help="earliest kill, seconds into a round")
    p.add_argument("--kill-max", type=float, default=3.0, help="latest kill, seconds into a round")
    p.add_argument("--min-acks", type=int, default=0, metavar="N",
                   help="and not before N orders of the round were acknowledged (a busy machine may need longer "
                        "than the kill moment for them; default 0)")
    p.add_argument("--symbols", default="ACME,GLOBEX")
    p.add_argument("--snapshot-every", type=int, metavar="N",
                   help="the server's --snapshot-every: a small N takes snapshots (and kills land in them) "
                        "all through the run (default: the server's own)")
    p.add_argument("--recheck", choices=("all", "round"), default="all",
                   help="after each restart re-send every order acknowledged so far (all) or this round's")
    p.add_argument("--server-cmd", help="server command instead of `python -m tickflow.cli serve`; "
                   "{data} {host} {port} {durability} {symbols} are filled in, else those options are appended")
    p.add_argument("--out", help="directory for the report, the plot and the server logs (default: a new temp dir)")
    p.add_argument("--json", help="machine-readable summary (default OUT/crash_test.json)")
    p.add_argument("--data", help="data directory for the server (default: OUT/data, removed when all passed)")
    p.add_argument("--keep-data", action="store_true", help="keep the data directory even when all passed")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds a (re)start may take")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds in all")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.clients < 1:
        p.error("--rounds and --clients must be at least 1")
    if not 0 < args.kill_min <= args.kill_max:
        p.error("need 0 < --kill-min <= --kill-max")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.server_cmd:
        import importlib.util
        if importlib.util.find_spec("tickflow") is None:
            print(f"tickflow is not importable by {sys.executable}: pip install -e . (or pass --server-cmd)",
                  file=sys.stderr)
            return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tickflow-crash-"))
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else out / "data"
    if data.exists() and any(data.iterdir()):
        print(f"{data} is not empty: the crash test needs a fresh data directory", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(asyncio.wait_for(run(args, out, data), args.timeout))
    except (HarnessError, asyncio.TimeoutError) as e:
        why = f"gave up after {args.timeout}s" if isinstance(e, asyncio.TimeoutError) else str(e)
        print(f"crash test could not complete: {why}\n(server logs and data in {out})", file=sys.stderr)
        return 2
    text = report_text(summary)
    print(text)
    json_path = Path(args.json) if args.json else out / "crash_test.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(summary, indent=1, default=str))
    (out / "crash_test.txt").write_text(HEADER + "\n" + "\n".join(row(RoundStats(**r)) for r in summary["rounds"])
                                        + "\n" + text + "\n")
    png = out / "crash_test.png"
    drawn = plot(summary, png)
    print(f"report: {out / 'crash_test.txt'}; json: {json_path}" + (f"; plot: {png}" if drawn else
                                                                     " (no plot: matplotlib not installed)"))
    if summary["ok"] and not args.keep_data and not args.data:
        shutil.rmtree(data, ignore_errors=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
