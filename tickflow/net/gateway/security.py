"""What browsers are told and asked: the headers every answer carries, the Host check of every request
(a name that DNS rebinding could point at this server is refused), and the Origin check of the WebSocket
upgrade (a page from another site must not trade through a browser that can reach the server)."""

from __future__ import annotations

import argparse
import ipaddress
import re
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from tickflow.net.gateway.context import GATEWAY
from tickflow.net.gateway.responses import error
from tickflow.net.wire.errors import brief

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


_HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")


def host_name(host: str) -> str | None:
    """The name or address in a Host header (`name[:port]`, `[v6]:port`), lower case, without its port or a
    trailing dot; None if the header is not one."""
    try:
        parts = urlsplit(f"http://{host.strip()}")
        parts.port  # a port that is not a number raises here
    except ValueError:
        return None
    name = (parts.hostname or "").rstrip(".")
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return name if _HOST_NAME.fullmatch(name) or _is_address(name) else None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_host_argument(text: str) -> str:
    """An argparse type: `--allow-host desk.example.com` (a DNS name; `*` for any)."""
    name = text.strip().lower().rstrip(".")
    if name != "*" and not _HOST_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name (or * for any)")
    return name


def host_allowed(host: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request that names this server `host` (its Host header) is served.

    DNS rebinding makes a name the attacker owns resolve to this server, so that a page of theirs is, to
    the browser, of the same origin as the server's own: a request with that name in its Host is refused.
    An address (127.0.0.1, [::1], the machine's own) needs no DNS, nor does `localhost`, which browsers keep
    on the loopback; any other name must be listed with `--allow-host` (`serve --host NAME` lists its own).
    A request with no Host at all (HTTP/1.0) comes from no browser."""
    if host is None:
        return True
    name = host_name(host)
    if name is None:
        return False
    return name in allowed or "*" in allowed or name == "localhost" or name.endswith(".localhost") or \
        _is_address(name)


@web.middleware
async def check_host(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
    """Every request, the page's files and the WebSocket's upgrade included, names an allowed host."""
    gateway = request.app[GATEWAY]
    if not host_allowed(request.headers.get("Host"), gateway.allowed_hosts):
        gateway.counters["host_refused"] += 1
        return error(403, f"the host {brief(request.headers.get('Host'))} is not one this server answers to: "
                          "reach it by its address or localhost, or start it with --allow-host NAME for a name")
    return await handler(request)
