"""Outputs named like an input are refused and the input is left as it was.

``tree``, ``simulate --nodes`` and ``capacity`` wrote their JSON over the problem file when
``--json`` named it (exit 0, the problem gone).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from allocator.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("source", "args"),
    [
        ("docs/tree.yaml", ["tree", "{p}", "-d", "eagle", "--nodes", "4", "--json", "{p}"]),
        ("docs/tree.yaml", ["tree", "{p}", "-d", "eagle", "--nodes", "4", "--json", "./{n}"]),
        ("docs/tree.yaml", ["tree", "{p}", "-d", "eagle", "--json", "{link}"]),
        (
            "docs/tree.yaml",
            ["simulate", "{p}", "-d", "eagle", "--nodes", "4", "--rounds", "50", "--json", "{p}"],
        ),
        (
            "problems/capacity-70b.yaml",
            ["capacity", "{p}", "--tokens-per-s", "1e4", "--json", "{p}"],
        ),
    ],
)
def test_json_over_the_problem_is_refused(tmp_path, monkeypatch, source, args):
    p = tmp_path / Path(source).name
    shutil.copy(ROOT / source, p)
    (tmp_path / "link.yaml").symlink_to(p)
    before = p.read_bytes()
    monkeypatch.chdir(tmp_path)
    fill = {"p": str(p), "n": p.name, "link": str(tmp_path / "link.yaml")}
    r = CliRunner().invoke(app, [a.format(**fill) for a in args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --json:"), lines
    assert "input" in lines[0]
    assert p.read_bytes() == before
