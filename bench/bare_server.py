"""The yardstick for bench_e2e: the same aiohttp stack parsing and validating the same order JSON,
answering a same-sized body, with no engine, log or feed behind it."""

from __future__ import annotations

import argparse
import asyncio
import signal

from aiohttp import web

from tickflow.core.types import OrderState
from tickflow.net.wire import answers, requests
from tickflow.net.wire.limits import MAX_BODY
from tickflow.net.gateway.responses import errors

SYMBOLS = {"ACME": None}


async def post_order(request: web.Request) -> web.Response:
    header = request.headers.get("Authorization", "")
    account = header[7:] if header.startswith("Bearer ") else "anon"
    cmd = requests.new_order(account, requests.decode_json(await request.read()), SYMBOLS)
    state = OrderState(1, cmd.client_order_id, account, cmd.symbol, cmd.side, cmd.type, cmd.price, cmd.qty,
                       cmd.tif, cmd.post_only, "new", 0, cmd.qty, [], None, 1, 0)
    return web.Response(body=answers.encode(state), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def serve(port: int) -> None:
    app = web.Application(middlewares=[errors], client_max_size=MAX_BODY)
    app.router.add_post("/orders", post_order)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    print(f"bare endpoint listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    port = p.parse_args().port
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(port))
    except ImportError:
        asyncio.run(serve(port))


if __name__ == "__main__":
    main()
