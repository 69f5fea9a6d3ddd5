"""The HTTP and WebSocket application: its routes, and closing its WebSockets when the server stops."""

from __future__ import annotations

from aiohttp import web

from tickflow.net.gateway import market, orders
from tickflow.net.gateway.context import GATEWAY, Gateway
from tickflow.net.gateway.responses import errors
from tickflow.net.gateway.security import add_headers, check_host
from tickflow.net.gateway.static import serve_file
from tickflow.net.gateway.websocket import websocket
from tickflow.net.wire.limits import MAX_BODY


async def get_static(request: web.Request) -> web.StreamResponse:
    """The browser page: every file of web/ at its own path, index.html at `/`."""
    return await serve_file(request, request.app[GATEWAY].web_dir)


def make_app(gateway: Gateway) -> web.Application:
    app = web.Application(middlewares=[errors, check_host], client_max_size=MAX_BODY)
    app[GATEWAY] = gateway
    app.on_response_prepare.append(add_headers)  # the browser headers, on every answer
    r = app.router
    r.add_post("/orders", orders.post_order)
    r.add_get("/orders", orders.list_orders)
    r.add_delete("/orders", orders.cancel_orders)
    r.add_get("/orders/{order_id}", orders.get_order)
    r.add_delete("/orders/{order_id}", orders.delete_order)
    r.add_patch("/orders/{order_id}", orders.patch_order)
    r.add_post("/batch", orders.post_batch)
    r.add_put("/quotes/{symbol}", orders.put_quote)
    r.add_get("/book/{symbol}", market.get_book)
    r.add_get("/trades", market.get_trades)
    r.add_get("/fills", market.get_fills)
    r.add_get("/bars", market.get_bars)
    r.add_get("/symbols", market.get_symbols)
    r.add_get("/health", market.get_health)
    r.add_get("/metrics", market.get_metrics)
    r.add_get("/openapi.json", market.get_openapi)
    r.add_get("/ws", websocket)
    r.add_route("*", "/{path:.*}", get_static)
    return app


async def close_websockets(gateway: Gateway) -> None:
    """The server is stopping: close every WebSocket (1001); their accounts' orders stay for the restart."""
    gateway.closing = True  # the WebSockets closed here keep their orders (no cancel on disconnect)
    for ws in list(gateway.open_sockets):
        await ws.close(code=1001, message=b"server shutting down")
