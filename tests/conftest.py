import gc

import pytest


@pytest.fixture(autouse=True)
def _collect() -> None:
    """Start each test with a clean heap, so one test's garbage never lands in another's timing."""
    gc.collect()


@pytest.fixture
def server(tmp_path):  # type: ignore[no-untyped-def]
    """A running server on a fresh data directory; stopped (or killed) at the end of the test."""
    from server_process import ServerProcess

    proc = ServerProcess(tmp_path / "data").start()
    yield proc
    proc.kill()
