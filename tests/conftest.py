import fnmatch
import gc
import os
import tomllib
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest

# ------------------------------------------------------------------ no silent skips in CI

SKIPS_ALLOWED = Path(__file__).with_name("skips_allowed.toml")
"""The tests that may skip in CI, each with the reason it depends on the host (node id patterns)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--strict-skips", action="store_true", default=os.environ.get("CI", "").lower() in ("true", "1"),
        help="fail any skipped test not listed in tests/skips_allowed.toml (on by default when CI=true)")


def allowed_skips() -> dict[str, str]:
    with open(SKIPS_ALLOWED, "rb") as f:
        return {str(k): str(v) for k, v in tomllib.load(f).items()}


def _skip_allowed(nodeid: str) -> bool:
    return any(fnmatch.fnmatchcase(nodeid, pattern) for pattern in allowed_skips())


def _refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip report into a failure that says why and where the allow-list is."""
    longrepr = report.longrepr
    why = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    report.outcome = "failed"
    report.longrepr = (f"{report.nodeid} skipped in CI ({why}); a skip fails the run under --strict-skips "
                       f"(CI=true) unless {SKIPS_ALLOWED.relative_to(SKIPS_ALLOWED.parents[1])} lists the test "
                       "with why it depends on the host. Make .ci/run install what it needs instead.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail") and item.config.getoption("strict_skips")
            and not _skip_allowed(report.nodeid)):
        _refuse_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """A whole module skipped (a module-level pytest.skip or importorskip) is refused the same way."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and collector.config.getoption("strict_skips") and not _skip_allowed(report.nodeid):
        _refuse_skip(report)


# ------------------------------------------------------------------ fixtures


@pytest.fixture(autouse=True)
def _collect() -> None:
    """Start each test with a clean heap, so one test's garbage never lands in another's timing."""
    gc.collect()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    """A running server on a fresh data directory; stopped (or killed) at the end of the test."""
    from server_process import ServerProcess

    proc = ServerProcess(tmp_path / "data").start()
    yield proc
    proc.kill()
