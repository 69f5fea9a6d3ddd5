"""The browser page in Firefox, driven over WebDriver BiDi (Firefox's own remote protocol).

Playwright cannot drive Debian's firefox-esr (it expects its own Firefox build, or BiDi commands this ESR
lacks), so this speaks BiDi directly over a WebSocket with aiohttp: a few commands are all it needs.
It checks what differs between engines: the page's modules load and run, a snapshot and the live feed
draw, the ticket places an order, My fills shows its fill, and nothing is logged as an error.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.wait import until

from test_web import Server, _calls, limit, off_loop

FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")


class Bidi:
    """The handful of WebDriver BiDi commands the test uses, and the log entries Firefox reports."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.logs: list[dict[str, Any]] = []
        self.context = ""

    async def cmd(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 20)
            if msg.get("method") == "log.entryAdded":
                self.logs.append(msg["params"])
            elif msg.get("id") == self.next_id:
                if msg.get("type") == "error":
                    raise RuntimeError(f"{method}: {msg.get('error')}: {msg.get('message')}")
                return msg["result"]

    async def js(self, expression: str) -> Any:
        result = await self.cmd("script.evaluate", expression=expression, target={"context": self.context},
                                awaitPromise=True)
        if result.get("type") == "exception":
            raise AssertionError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout: float = 10.0) -> Any:
        return await until(lambda: self.js(expression), timeout, interval=0.1, message=f"true: {expression}")


def start_firefox(profile: str) -> tuple[subprocess.Popen[str], str]:
    assert FIREFOX is not None
    proc = subprocess.Popen(
        [FIREFOX, "--headless", "--no-remote", "--profile", profile, "--remote-debugging-port", "0",
         "--width", "1440", "--height", "900"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
        if match:
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("Firefox did not open its WebDriver BiDi port")


@pytest.mark.skipif(FIREFOX is None, reason="no firefox-esr: run scripts/ci-browser.sh as root to install it")
def test_the_page_works_in_firefox(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", "ACME").start()
    profile = tempfile.mkdtemp(prefix="tickflow-firefox-")
    proc, ws_url = start_firefox(profile)
    artifacts = Path(os.environ.get("TICKFLOW_WEB_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    try:
        off_loop(_drive_firefox(srv, ws_url, artifacts))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        srv.stop()
        shutil.rmtree(profile, ignore_errors=True)


async def _drive_firefox(srv: Server, ws_url: str, artifacts: Path) -> None:
    await _calls(srv, [("POST", "/orders", "mm", limit("ACME", "buy", 99, 10)),
                       ("POST", "/orders", "mm", limit("ACME", "sell", 101, 10))])
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url + "/session") as ws:
        b = Bidi(ws)
        await b.cmd("session.new", capabilities={})
        await b.cmd("session.subscribe", events=["log.entryAdded"])
        b.context = (await b.cmd("browsingContext.getTree"))["contexts"][0]["context"]
        await b.cmd("browsingContext.navigate", context=b.context, url=srv.url + "/", wait="complete")
        await b.js("localStorage.setItem('tickflow.account', 'fiona'); location.reload(); true")
        await b.until("document.getElementById('book')?.dataset.seq")
        await b.until("document.getElementById('account').value === 'fiona'")
        assert await b.js("document.getElementById('spread').textContent") == "Spread 2 · Mid 100"

        # The ticket, as a user fills it: a sell resting at 105.
        await b.js("""(() => {
            document.querySelector('label[for=t-sell]').click();
            const price = document.getElementById('t-price');
            price.value = '105';
            price.dispatchEvent(new Event('input', {bubbles: true}));
            document.getElementById('t-submit').click();
            return true; })()""")
        await b.until("document.getElementById('answer').textContent.includes('sell 10 ACME @ 105, open')")
        await b.until("document.querySelector(\"#asks tr[data-price='105']\")")
        await b.until("document.querySelectorAll('#orders tr').length === 1")

        # Another client takes it: the tape, the chart and my orders follow.
        await _calls(srv, [("POST", "/orders", "bob", limit("ACME", "buy", 105, 20))])
        await b.until("document.querySelector('#tape tr')?.textContent.includes('▲ 105')")
        await b.until("document.getElementById('chart-summary').textContent.includes('close 105, volume 20')")
        await b.until("document.querySelectorAll('#orders tr').length === 0")
        assert await b.js("document.querySelectorAll('#chart canvas').length") > 0
        # My fills: the sell, taken whole by bob, is fiona's one fill, as the maker.
        await b.js("document.getElementById('tab-fills').click(); true")
        await b.until("document.querySelectorAll('#fills tr').length === 1")
        cells = (await b.js("[...document.querySelectorAll('#fills td')].map(td => td.textContent).join('|')")).split("|")
        assert cells[1:] == ["▼ sell", "10", "@ 105", cells[4], "maker"] and cells[4].startswith("#")

        shot = await b.cmd("browsingContext.captureScreenshot", context=b.context)
        (artifacts / "screenshot-firefox.png").write_bytes(base64.b64decode(shot["data"]))
        await b.js("true")  # drain any log entries still on their way
        errors = [entry for entry in b.logs if entry.get("level") == "error"]
        assert errors == [], f"Firefox logged errors: {errors}"
