"""An installed tickflow (a wheel, not this checkout) serves the browser page and styles its screen."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(out)], check=True, timeout=300, capture_output=True)
    (built,) = out.glob("tickflow-*.whl")
    return built


def test_the_wheel_holds_the_page_and_the_screen_styles(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    page = {f"tickflow/web/{p.relative_to(ROOT / 'web').as_posix()}" for p in (ROOT / "web").rglob("*") if p.is_file()}
    assert page and page <= names, sorted(page - names)[:5]
    assert "tickflow/tui/app.tcss" in names
    assert not any(n.startswith(("tests/", "web/", "bench/")) for n in names)


def test_a_server_installed_from_the_wheel_serves_its_own_page(wheel: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(tmp_path)  # `python -m` puts the working directory first on the path: not the checkout
    found = subprocess.run([sys.executable, "-c", "import tickflow; print(tickflow.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found).is_relative_to(site), found
    server = ServerProcess(tmp_path / "data").start()
    try:
        with urllib.request.urlopen(server.url + "/", timeout=10) as r:
            assert r.status == 200 and r.read() == (ROOT / "web" / "index.html").read_bytes()
        with urllib.request.urlopen(server.url + "/js/main.js", timeout=10) as r:
            assert r.read() == (ROOT / "web" / "js" / "main.js").read_bytes()
    finally:
        server.stop()
