"""The one way the tests wait: poll a condition against a deadline, and fail saying what never came.

    wait_until(predicate, timeout, interval, message)          # blocking, for sync tests
    await until(predicate, timeout, interval, message)         # on the event loop; predicate may be async
    await turns()                                              # the loop goes round: scheduled work runs
    await settle(pilot)                                        # a Textual screen that took in what it was sent

Both pollers return the predicate's first truthy value, and raise AssertionError at the deadline with
`message` (a string, or a callable giving one, evaluated then, so it can show the state that was last
seen). `pause` replaces the sleep between polls where the loop that must run is not this one's:
`lambda s: page.wait_for_timeout(s * 1000)` for Playwright's sync API (its events are delivered only
while it is called), `pilot.pause` for a Textual app.

A test that must show something does NOT happen waits for a positive event that has to come after it
(an answer to a later request, a pong on the same socket), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar, overload

if TYPE_CHECKING:
    from textual.pilot import Pilot

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0


def _say(message: str | Callable[[], str], predicate: object, timeout: float) -> str:
    what = message() if callable(message) else message
    if not what:
        what = getattr(predicate, "__qualname__", None) or repr(predicate)
    return f"timed out after {timeout:g} s waiting for {what}"


def wait_until(predicate: Callable[[], T | None], timeout: float = DEFAULT_TIMEOUT, interval: float = 0.01,
               message: str | Callable[[], str] = "", pause: Callable[[float], object] = time.sleep) -> T:
    """Call `predicate` every `interval` seconds until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_say(message, predicate, timeout))
        pause(interval)


@overload
async def until(predicate: Callable[[], Awaitable[T | None]], timeout: float = ..., interval: float = ...,
                message: str | Callable[[], str] = ..., pause: Callable[[float], Awaitable[Any]] = ...) -> T: ...
@overload
async def until(predicate: Callable[[], T | None], timeout: float = ..., interval: float = ...,
                message: str | Callable[[], str] = ..., pause: Callable[[float], Awaitable[Any]] = ...) -> T: ...


async def until(predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT,
                interval: float = 0.001, message: str | Callable[[], str] = "",
                pause: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> Any:
    """`wait_until` on the event loop: other tasks run between polls; `predicate` may return an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_say(message, predicate, timeout))
        await pause(interval)


async def turns(n: int = 3) -> None:
    """Let the event loop go round `n` times, so that what is already scheduled runs (a task woken by a
    future that was just set, a task just created reaching its first wait). A yield, not a wait for
    time: after a positive event, it lets that event's consequences land before a negative check."""
    for _ in range(n):
        await asyncio.sleep(0)


async def settle(pilot: Pilot[Any]) -> None:
    """Let a Textual app's loading workers deliver (everything but the never-ending feed) and the screen
    take it in: the messages they posted handled, and columns sized on the next idle."""
    for _ in range(3):
        await pilot.pause()
    loading = [w for w in pilot.app.workers if w.group != "feed"]
    if loading:  # (an empty list would mean "all", the feed included, which never ends)
        await pilot.app.workers.wait_for_complete(loading)
    # A DataTable sizes its columns when the app is next idle: on a loaded machine one pause was not
    # always enough, and My orders was drawn with the columns of an earlier frame (CI, "▲ bu").
    for _ in range(3):
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
