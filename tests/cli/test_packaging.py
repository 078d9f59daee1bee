"""The package's metadata: one version, printed by ``allocator --version``; the licence."""

import subprocess
import sys
import tomllib
from pathlib import Path

import allocator

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_written_once_and_printed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "allocator.__version__"}
    r = subprocess.run(
        [sys.executable, "-m", "allocator", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0 and r.stdout == f"allocator {allocator.__version__}\n"
    assert allocator.__version__.count(".") == 2


def test_mit_licence_is_shipped():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) the allocator developers" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]


def test_the_slow_marker_is_strict_and_every_slow_entry_names_a_test():
    """``pytest -m "not slow"`` is the fast loop: the marker is registered under strict
    markers, and every entry of tests/conftest.py's ``SLOW`` names a file that exists and,
    after ``::``, a test defined in it (a renamed test would drop out of the list silently
    and slow the loop)."""
    from tests.conftest import SLOW

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    ini = options["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    assert any(m.startswith("slow:") for m in ini["markers"])
    for entry in SLOW:
        path, _, test = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        if test:
            assert f"def {test}(" in (ROOT / path).read_text(), entry
