"""JSON answers, and the middleware that turns every failure into one with a status saying whose fault it is."""

from __future__ import annotations

import asyncio
import logging
import math
import zlib
from typing import Any, Awaitable, Callable

from aiohttp import web

from tickflow.net.exchange.service import Unavailable
from tickflow.net.wire.answers import encode
from tickflow.net.wire.errors import BadRequest
from tickflow.net.wire.limits import MAX_BODY

log = logging.getLogger("tickflow.net.gateway")

CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""The Content-Encodings a body may come in (zlib's window bits for each; inputs.py decodes them). aiohttp's
own decoding is off, as it passes a coding it does not know (or several) through as if the body were plain."""


def json_response(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else encode(body)
    return web.Response(body=data, status=status, content_type="application/json")


def error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field:
        body["field"] = field
    return json_response(body, status)


def _http_error(e: web.HTTPException) -> web.Response:
    """aiohttp's own error (404, 405, ...) as a JSON body, keeping the headers it set (405's Allow)."""
    detail = e.text or ""
    # Its text is "404: Not Found" unless it says more ("No WebSocket UPGRADE hdr ..."): say that, on one line.
    message = e.reason if detail == f"{e.status}: {e.reason}" or not detail else " ".join(detail.split())
    response = error(e.status, message)
    if "Allow" in e.headers:
        response.headers["Allow"] = e.headers["Allow"]
    return response


@web.middleware
async def errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """Every failure becomes a JSON error body with a status that says whose fault it is."""
    try:
        response = await handler(request)
        if isinstance(response, web.HTTPException) and response.status >= 400:
            return _http_error(response)  # e.g. the static files' own 404
        return response
    except BadRequest as e:
        response = json_response(e.body(), e.status)
        if e.retry_after is not None:
            response.headers["Retry-After"] = str(max(1, math.ceil(e.retry_after)))
        if e.status == 415:
            response.headers["Accept-Encoding"] = ", ".join(("identity", *CODINGS))
        if e.status == 408:  # the rest of that body may still come: answer, then close at once
            response.force_close()
            await response.prepare(request)
            await response.write_eof()
            request.protocol.force_close()  # rather than linger up to 10 s reading what is left
        return response
    except Unavailable as e:
        return error(503, str(e))
    except web.HTTPRequestEntityTooLarge:
        return error(413, f"body over {MAX_BODY} bytes")
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _http_error(e)
    except (asyncio.TimeoutError, TimeoutError):
        return error(503, "timed out waiting for the log to become durable")
    except asyncio.CancelledError:
        raise
    except ConnectionError:  # the client went away mid-request: nothing went wrong here
        log.debug("%s %s: the client disconnected", request.method, request.path)
        return error(400, "the connection was lost before the request was read")
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error(500, "internal error")
