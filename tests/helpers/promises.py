"""Small tools shared by test_sync_helper.py, test_power_cut.py and test_promises.py: waiting on a
deadline, a raw WebSocket client that reads only when told, and the processes a server runs."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
import urllib.request
from typing import Any, Callable

from helpers.wait import until, wait_until


async def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "the condition",
                     every: float = 0.02) -> Any:
    """`helpers.wait.until` under the names these tests use: `check()` (awaited when it returns an
    awaitable) until it returns something true, which is returned; AssertionError at the deadline."""
    return await until(check, timeout, every, what)


def wait_for(check: Callable[[], Any], timeout: float = 15.0, what: str = "the condition", every: float = 0.01) -> Any:
    """`eventually` for plain functions, outside an event loop (`helpers.wait.wait_until`)."""
    return wait_until(check, timeout, every, what)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def children(pid: int) -> list[int]:
    """A process's children (every thread's), from /proc."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except FileNotFoundError:
        pass
    return found


def sync_helper_of(server_pid: int) -> int | None:
    """The log's sync helper among a server's children (the real one or a test's wrapper of it)."""
    for pid in children(server_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sync_helper.py" in f.read():
                    return pid
        except FileNotFoundError:
            continue
    return None


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


class RawWebSocket:
    """A WebSocket client on a plain socket that reads only when asked to, so the server sees a
    client that stops reading (its kernel buffers fill, then the server's)."""

    def __init__(self, port: int, path: str = "/ws", rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:  # before connect, so the window is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        self.sock.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

    def send(self, message: Any) -> None:
        self.send_frames([message])

    def send_frames(self, messages: list[Any], opcode: int = 0x1) -> None:
        self.sock.sendall(b"".join(frame(json.dumps(m).encode(), opcode) for m in messages))

    def read_until_closed(self, timeout: float = 10.0) -> tuple[list[bytes], int | None, bytes]:
        """Read every frame until the server's close frame, as fast as the socket gives them (a server
        that closes a client waits only a moment for it to take what was queued before the close
        frame): (the text messages' payloads, the close code, the reason); the code is None if the
        connection ended without a close frame."""
        self.sock.settimeout(timeout)
        buf = bytearray()
        pos = 0
        texts: list[bytes] = []
        while True:
            while True:  # the frames wholly in the buffer
                if len(buf) - pos < 2:
                    break
                length, start = buf[pos + 1] & 0x7F, pos + 2
                if length >= 126:
                    width = 2 if length == 126 else 8
                    if len(buf) - start < width:
                        break
                    length, start = int.from_bytes(buf[start:start + width], "big"), start + width
                if len(buf) - start < length:
                    break
                opcode, payload = buf[pos] & 0x0F, bytes(buf[start:start + length])
                pos = start + length
                if opcode == 0x1:
                    texts.append(payload)
                elif opcode == 0x8:
                    code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                    try:
                        self.sock.sendall(frame(payload[:2], 0x8))  # answer the close, as a client does
                    except OSError:
                        pass
                    return texts, code, payload[2:]
            del buf[:pos]
            pos = 0
            try:
                chunk = self.sock.recv(4 << 20)
            except OSError:
                return texts, None, b""
            if not chunk:
                return texts, None, b""
            buf += chunk
            try:  # take all there is before parsing: the server waits only a moment for it to drain
                while chunk := self.sock.recv(4 << 20, socket.MSG_DONTWAIT):
                    buf += chunk
            except OSError:  # nothing more for now (or the end, which the next recv says)
                pass

    def close(self) -> None:
        self.sock.close()


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        header = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        header = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
    return header + mask + masked


_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def read_close_once(raw: RawWebSocket, url: str, closed: Callable[[str], bool], poke: list[Any],
                    stop: threading.Event, timeout: float = 60.0) -> tuple[list[bytes], int | None, bytes]:
    """For a thread of its own, while the test makes the server close `raw`: send `poke` on it and read
    the server's /metrics, again and again, until `closed(metrics)`; then read `raw` to its close frame
    at once. A server that closes a client that does not read waits only a moment (1 s, or
    TICKFLOW_WS_CLOSE_WAIT) for the close frame to go out, so the reading starts the moment the close is
    seen, whatever else the test's event loop is busy with. A server notices its own close of a connection only when it next reads a
    message from it: `poke` is sent for that."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        if poke:
            raw.send_frames(poke)
        with _direct.open(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        if closed(text):
            return raw.read_until_closed()
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not close the client in {timeout} s")
        time.sleep(0.005)  # a poll interval
    raise AssertionError("stopped")
