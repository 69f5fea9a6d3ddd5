"""Argument types every command shares: a server's address, a port, a positive number.

The server and its clients both take them, so they live with the wire, not with a command."""

from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit


def server_url(text: str) -> str:
    """An argparse type: a server's address, http(s)://host[:port] (a trailing / is dropped)."""
    parts = urlsplit(text)
    try:
        port_ok = parts.port != 0
    except ValueError:  # not a number, or above 65535
        port_ok = False
    host = parts.hostname or ""
    if (parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in host) or not port_ok
            or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username is not None):
        raise argparse.ArgumentTypeError(f"{text!r} is not a server address of the form http(s)://host[:port]")
    return text.rstrip("/")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 for any free one."""
    if not text.strip().isdigit() or int(text) > 65_535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number from 0 to 65535 (0 picks a free one)")
    return int(text)


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value
