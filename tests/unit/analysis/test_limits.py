"""Answers past the positions a drafter's acceptance was measured for say so (terminal and
JSON notes): past them the last value is repeated, an assumption the answer rests on."""

from __future__ import annotations

import json

import yaml

from allocator import api
from tests.support.cli_runner import run

SHORT = {
    "name": "short",
    "convention": "bonus",
    "verifier": {"pass_cost": 1.0, "token_cost": 0.0},
    # three positions measured (as `estimate` writes a short-draft vLLM log: search.k.max
    # is the server's k, the positions kept are fewer)
    "drafters": [
        {"name": "d", "acceptance": [0.9, 0.85, 0.8], "unit_cost": 0.01, "method": "eagle3",
         "model": "org/head"},
        {"name": "flat", "acceptance": 0.5, "unit_cost": 0.3, "method": "ngram"},
    ],
    "search": {"k": {"max": 6}, "m": {"max": 1}},
}  # fmt: skip


def test_the_problem_knows_how_many_positions_were_measured():
    prob = api.load(SHORT)
    assert prob.drafter(0).positions == 3
    assert prob.drafter(1).positions is None  # one value for every position, by statement
    data = dict(SHORT, workloads=[{"name": "w", "weight": 1.0, "acceptance": {"flat": [0.5, 0.4]}}])
    prob = api.load(data)
    assert (prob.drafter(0).positions, prob.drafter(1).positions) == (3, 2)


def test_solve_notes_a_k_past_the_measured_positions(tmp_path):
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(SHORT))
    doc = json.loads(run("solve", path, "--json", "-").stdout)
    # the front's best point drafts 6 (0.8 repeated past position 3 pays at unit cost 0.01)
    past = [p for p in doc["front"] if "d" in p["drafters"] and p["k"] > 3]
    assert past, doc["front"]
    notes = [n for n in doc["notes"] if "past the 3 position(s)" in n]
    assert len(notes) == 1 and "run d at k = " in notes[0] and "search.k.max: 3" in notes[0]
    assert str(max(p["k"] for p in past)) in notes[0]
    assert not any("flat" in n and "past the" in n for n in doc["notes"])
    r = run("solve", path)
    assert r.exit_code == 0 and "past the 3 position(s)" in r.stderr
    # the export of such a point says it too
    r = run("solve", path, "--export", "vllm")
    assert r.exit_code == 0 and "past the 3 position(s) measured for d" in r.stderr
    # at search.k.max 3 no front point is past them
    capped = dict(SHORT, search={"k": {"max": 3}, "m": {"max": 1}})
    doc = json.loads(run("solve", _write(tmp_path, capped), "--json", "-").stdout)
    assert not any("front point(s)" in n for n in doc["notes"])


def test_the_limit_probe_says_when_k_plus_one_is_past_them(tmp_path):
    data = dict(SHORT, search={"k": {"max": 3}, "m": {"max": 1}})
    data["drafters"] = [dict(SHORT["drafters"][0], acceptance=[0.9, 0.85])]
    doc = json.loads(run("solve", _write(tmp_path, data), "--json", "-").stdout)
    probe = [n for n in doc["notes"] if "sits at search.k.max" in n]
    assert probe and "k = 4 reaches past the positions measured for d (2 measured)" in probe[0]


def test_plan_routes_past_the_measured_positions_are_noted(tmp_path):
    data = dict(SHORT, workloads=[{"name": "w", "weight": 1.0}])
    doc = json.loads(run("plan", _write(tmp_path, data), "--json", "-").stdout)
    route = doc["workloads"][0]
    if route["k"] > 3 and route["drafters"] == ["d"]:
        assert any("workload route(s) run d" in n for n in doc["notes"])
    else:  # the plan stayed within the measured positions
        assert not any("past the" in n for n in doc["notes"])


def _write(tmp_path, data) -> str:
    path = tmp_path / f"{data['name']}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
