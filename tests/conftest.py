import gc

import pytest


@pytest.fixture(autouse=True)
def _collect() -> None:
    """Start each test with a clean heap, so one test's garbage never lands in another's timing."""
    gc.collect()
