"""Tables for people stay readable whatever the answer's size (issue 20: a
100,000-point front printed as a table ran past two minutes); the JSON and CSV keep
every point."""

from __future__ import annotations

import io
import json

from rich.console import Console

from allocator import api
from allocator.cli.render import MAX_TABLE_ROWS, front_table, shown_rows
from tests.support.cli_runner import run

#: One drafter that is always right: every k is on the front (throughput and draft cost
#: both rise with k), so the front has k_max points.
LONG = {
    "name": "long-front",
    "drafters": [{"name": "a", "acceptance": 1.0, "unit_cost": 0.01}],
    "search": {"k": {"max": 1000}},
}


def rendered(table) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200).print(table)
    return buf.getvalue()


def test_shown_rows_keeps_the_ends():
    assert list(shown_rows([1, 2, 3], limit=4)) == [(1, 1), (2, 2), (3, 3)]
    got = list(shown_rows(list(range(10)), limit=4))
    assert got == [(1, 0), (2, 1), (6, None), (9, 8), (10, 9)]


def test_a_long_front_prints_its_ends_and_says_how_many_are_left_out():
    result = api.solve(api.load(LONG))
    assert len(result.front) == 1000
    text = rendered(front_table(result))
    body = [line for line in text.splitlines() if line.startswith("│")]
    assert len(body) == MAX_TABLE_ROWS + 1  # 60 points and the gap
    numbers = [line.split("│")[1].strip() for line in body]
    half = MAX_TABLE_ROWS // 2
    assert numbers[:half] == [str(i) for i in range(1, half + 1)]
    assert numbers[half] == "…"
    assert numbers[half + 1 :] == [str(i) for i in range(1001 - half, 1001)]
    assert "940 points not shown; --json or --csv lists every one" in text


def test_the_json_and_csv_keep_every_point(tmp_path):
    problem = tmp_path / "long.json"
    problem.write_text(json.dumps(LONG))
    r = run("solve", problem, "--json", tmp_path / "f.json", "--csv", tmp_path / "f.csv")
    assert r.exit_code == 0, r.output
    assert len(json.loads((tmp_path / "f.json").read_text())["front"]) == 1000
    assert len((tmp_path / "f.csv").read_text().splitlines()) == 1001
    assert "940 points not shown" in r.stdout
