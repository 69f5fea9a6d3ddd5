"""Reading a request: its account, its body (limited in size and time, decoded) and its query parameters."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from tickflow.net.gateway.context import GATEWAY
from tickflow.net.gateway.responses import CODINGS
from tickflow.net.wire import requests
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import DIGITS, MAX_BODY


def account(request: web.Request) -> str:
    """The account the request's `Authorization: Bearer <token>` names; 401 without one."""
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else None
    gateway = request.app[GATEWAY]
    name = gateway.account(token)
    if name is None:
        if token:
            gateway.sign_in_failures.failed(request.remote, f"{request.method} {request.rel_url.raw_path[:80]}")
        raise BadRequest("missing or unknown token: send Authorization: Bearer <token>", None, 401)
    return name


def only_params(request: web.Request, endpoint: str, takes: tuple[str, ...]) -> None:
    """Refuse (400, naming it) a query parameter `endpoint` does not take: a misspelt one (`limt`, `sid`)
    would otherwise be ignored without a word, and the answer taken for what was asked."""
    for name in request.query:
        if name not in takes:
            raise BadRequest(f"unknown query parameter {brief(name)}: {endpoint} takes {', '.join(takes)}",
                             cut(name))


async def body(request: web.Request) -> Any:
    """The request's JSON body, read within the body timeout and decoded from its Content-Encoding."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise BadRequest(f"body over {MAX_BODY} bytes", None, 413)
    try:
        if request.content.is_eof():  # the whole body came with the headers: the usual case, no timer
            raw = await request.read()
        else:
            timeout = request.app[GATEWAY].body_timeout
            try:
                async with asyncio.timeout(timeout):
                    raw = await request.read()
            except TimeoutError:
                raise BadRequest(f"the body did not arrive within {timeout:g} s", None, 408) from None
    except web.RequestPayloadError as e:  # e.g. chunks that do not add up
        why = str(e.__cause__.message if isinstance(e.__cause__, HttpProcessingError) else e).strip()
        raise BadRequest(f"cannot read the body: {why}", None) from None
    coding = request.headers.get("Content-Encoding")
    return requests.decode_json(_decoded(raw, coding.strip().lower()) if coding else raw)


def _decoded(raw: bytes, coding: str) -> bytes:
    """`raw` undone from its Content-Encoding, or refused: never taken as plain if it says otherwise."""
    if coding == "identity":
        return raw
    wbits = CODINGS.get(coding)
    if wbits is None:
        raise BadRequest(f"Content-Encoding {brief(coding)} is not supported: send the body as it is, "
                         "or in gzip or deflate", None, 415)
    # Some clients send "deflate" without zlib's header: raw deflate is tried after zlib's.
    for bits in (wbits, -zlib.MAX_WBITS) if coding == "deflate" else (wbits,):
        inflater = zlib.decompressobj(bits)
        try:
            plain = inflater.decompress(raw, MAX_BODY + 1)
        except zlib.error:
            continue
        if len(plain) > MAX_BODY:
            raise BadRequest(f"body over {MAX_BODY} bytes once decoded", None, 413)
        if inflater.eof and not inflater.unused_data:
            return plain
    raise BadRequest(f"cannot read the body: it is not the {coding} its Content-Encoding says", None)


def int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """Query parameter `name` as an integer in [low, high], `default` when absent."""
    text = request.query.get(name)
    if text is None:
        return default
    negative = text.startswith("-")
    if not DIGITS.match(text[negative:]):
        raise BadRequest(f"{name} must be an integer, not {brief(text)}", name)
    value = -int(text[1:]) if negative else int(text)
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}", name)
    return value
