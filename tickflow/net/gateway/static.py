"""The browser page: every file of web/ at its own path, index.html at `/`."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

import tickflow
from tickflow.net.gateway.responses import error
from tickflow.net.wire.errors import brief


def default_web_dir() -> Path:
    """The page's files: inside an installed package (tickflow/web, from a wheel), else web/ at the top of
    the checkout (an editable install, or the source tree)."""
    package = Path(tickflow.__file__).resolve().parent
    for candidate in (package / "web", package.parent / "web"):
        if (candidate / "index.html").is_file():
            return candidate
    return package.parent / "web"


async def serve_file(request: web.Request, root: Path) -> web.StreamResponse:
    """The file of `root` the request's path names.

    Routed for every method, so that a path no route knows answers 404 whatever the method; a path
    some route knows, asked with a method it does not take (a GET of POST /batch too), still answers 405
    with `Allow`."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    root = root.resolve()
    name = request.match_info.get("path") or "index.html"
    try:
        path = (root / name).resolve()
        found = path.is_relative_to(root) and path.is_file()
    except (OSError, ValueError):  # a NUL byte, a name too long for the file system
        found = False
    if not found:
        return error(404, f"not found: {brief('/' + name)}")
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ("GET", "HEAD"))
    return web.FileResponse(path, headers={"Cache-Control": "no-cache"})
