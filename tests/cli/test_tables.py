"""Tables for people stay readable whatever the answer's size (issue 20: a
100,000-point front printed as a table ran past two minutes); the JSON and CSV keep
every point."""

from __future__ import annotations

import io
import json
from pathlib import Path

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


SERVING = Path(__file__).resolve().parents[2] / "problems" / "serving-eagle.yaml"


def _header(text: str) -> str:
    """The header cells of a rich table, joined over their lines."""
    lines = [line for line in text.splitlines() if line.startswith("┃")]
    cells = [[c.strip() for c in line.strip("┃").split("┃")] for line in lines]
    return " | ".join(" ".join(filter(None, col)) for col in zip(*cells, strict=True))


def test_a_front_under_load_shows_no_verifier_units_beside_tokens_per_s():
    """``solve --batch`` printed tokens/s in the throughput column beside the model's
    round time and draft cost in verifier-units, none of them labelled."""
    r = run("solve", SERVING, "--batch", "4")
    assert r.exit_code == 0, r.output
    header = _header(r.stdout)
    assert header == (
        "# | drafters | m | k | tokens/s (whole batch) | tokens/s per sequence | TPOT (ms) | "
        "speedup (× k = 0) | $/Mtok | cost (vu) | tokens per step"
    )
    assert "vu: verifier-units of time (one verification pass = 1)" in r.stdout


def test_a_front_in_verifier_units_labels_every_unit():
    r = run("solve", Path(__file__).resolve().parents[2] / "problems" / "paper-r2.yaml")
    assert _header(r.stdout) == (
        "# | drafters | m | k | throughput (units / vu) | cost (vu) | E[accepted] (units) | "
        "pooled α | round time (vu)"
    )


def test_a_point_under_load_puts_each_metric_beside_its_unit():
    r = run("evaluate", SERVING, "-d", "eagle", "-k", "3", "--batch", "4")
    assert r.exit_code == 0, r.output
    rows = {
        cells[0]: cells[1:]
        for line in r.stdout.splitlines()
        if line.startswith("│")
        for cells in [[c.strip() for c in line.strip("│").split("│")]]
    }
    assert rows["tokens_per_s"][1] == "tokens/s, whole batch"
    assert rows["throughput"][1] == "accepted units per verifier-unit of time"
    assert rows["round_time"][1] == "verifier-units"
    assert "the model, in verifier-units" in rows
