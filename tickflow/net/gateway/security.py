"""What browsers are told and asked: the headers every answer carries, and the Origin check of the
WebSocket upgrade (a page from another site must not trade through a browser that can reach the server)."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

from aiohttp import web

from tickflow.net.gateway.context import GATEWAY

CHART_STYLE = "sha256-3pRED1tOXas1FXFoPb9TGCjmYe9XQsmO9OV23khV2nY="
"""The one inline style the page needs: the <style> web/vendor/lightweight-charts.js adds for its
attribution logo (tests/test_abuse.py checks the hash against the file)."""

CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",  # the page's modules and web/vendor/lightweight-charts.js, nothing inline
    f"style-src 'self' '{CHART_STYLE}'",
    "img-src 'self'",
    "connect-src 'self'",  # HTTP and the WebSocket of this server only
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""On every answer of the application, the page's files and JSON errors alike."""


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: runs for every answer just before its headers go out, also those prepared
    inside a handler (a WebSocket's, a file's, a 408) that a middleware would see too late."""
    headers = response.headers
    for name, value in HEADERS.items():
        headers.setdefault(name, value)


def _default_port(scheme: str) -> int:
    return 443 if scheme in ("https", "wss") else 80


def normal_origin(text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin `scheme://host[:port]`, lower case, the port filled in; None if
    it is not one (`null`, a path, userinfo, another scheme)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if (scheme not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.path not in ("", "/") or parts.query or parts.fragment):
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _default_port(scheme)


def origin_argument(text: str) -> str:
    """An argparse type: `--allow-origin https://desk.example.com[:port]`."""
    if normal_origin(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a web origin of the form http(s)://host[:port]")
    return text


def origin_allowed(request: web.Request) -> bool:
    """Whether the request's Origin may open a WebSocket: none at all (a bot; browsers always send one),
    the server's own (the Host it was reached at, over http or https), or one of `--allow-origin`."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    given = normal_origin(origin)
    if given is None:
        return False
    scheme = given[0]
    own = normal_origin(f"{scheme}://{request.host}") if request.host else None
    if given == own:
        return True
    return any(normal_origin(allowed) == given for allowed in request.app[GATEWAY].allowed_origins)
