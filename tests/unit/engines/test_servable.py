"""What an engine can run: one drafter per server, by a method it serves."""

import pytest

from allocator import api
from allocator.engines import POOLED_BOUND, servable
from allocator.exceptions import InfeasibleError, ParameterError

PROBLEM = {
    "name": "three",
    "convention": "bonus",
    "drafters": [
        {"name": "a", "acceptance": 0.7, "unit_cost": 0.05, "method": "eagle3", "model": "m/a"},
        {"name": "b", "acceptance": 0.6, "unit_cost": 0.02, "method": "ngram"},
        {"name": "c", "acceptance": 0.5, "unit_cost": 0.01},
    ],
    "search": {"k": {"min": 1, "max": 8}},
}


def test_one_drafter_per_server_and_the_pooled_bound_labelled():
    problem = api.load(PROBLEM)
    assert problem.m_max == 3
    one, notes = servable(problem, "vllm")
    assert (one.m_min, one.m_max) == (1, 1) and "one drafter per server" in notes[0]
    front = api.solve(one).front
    assert all(int(m.sum()) == 1 for m in front.members)
    pooled, notes = servable(problem, "sglang", pooled=True)
    assert pooled is problem and notes == [POOLED_BOUND]
    # the unrestricted front pools drafters: the restriction is what changes it
    assert any(int(m.sum()) > 1 for m in api.solve(problem).front.members)


def test_a_space_with_no_single_drafter_is_refused_by_name():
    data = dict(PROBLEM, search={"m": {"min": 2}})
    with pytest.raises(InfeasibleError) as info:
        servable(api.load(data), "vllm")
    assert info.value.field == "search.m.min"
    data = dict(PROBLEM, search={"require": ["a", "b"]})
    with pytest.raises(InfeasibleError) as info:
        servable(api.load(data), "vllm")
    assert info.value.field == "search.require"
    with pytest.raises(ParameterError) as info:
        servable(api.load(PROBLEM), "tgi")
    assert info.value.field == "engine"


# ----------------------------------------------------------------- the command line
import json  # noqa: E402
import shlex  # noqa: E402

import yaml  # noqa: E402

from tests.support.cli_runner import run  # noqa: E402
from tests.support.engine_schemas import check_sglang  # noqa: E402

SERVING = {
    "batch_sizes": [1, 16, 64],
    "gpu_cost_per_hour": 2.0,
    "step_ms": [
        {"drafters": ["a"], "by_batch": {1: {0: 6.0, 1: 6.5, 4: 8.0}, 64: {0: 9, 1: 10, 4: 14}}},
        {"drafters": ["b"], "by_batch": {1: {0: 6.0, 1: 6.2, 4: 7.0}, 64: {0: 9, 1: 9.5, 4: 11}}},
        {"drafters": ["a", "b"], "by_batch": {1: {0: 6, 1: 6.6, 4: 8.5}, 64: {0: 9, 1: 10, 4: 15}}},
    ],
}
SERVED = {
    "name": "served",
    "convention": "bonus",
    "drafters": [
        {"name": "a", "acceptance": 0.7, "unit_cost": 0.05, "method": "eagle3", "model": "m/a"},
        {"name": "b", "acceptance": 0.6, "unit_cost": 0.02, "method": "ngram"},
    ],
    "search": {"k": {"min": 1, "max": 4}},
    "serving": SERVING,
}


def test_solve_at_a_batch_size_keeps_to_what_the_engine_serves(tmp_path):
    """`solve --batch` sized what no engine runs (two drafters pooled); now it keeps one
    drafter per server by default, and --pooled gives the pooled front labelled as the
    upper bound no engine serves."""
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(SERVED))
    pooled = json.loads(run("solve", path, "--batch", 16, "--pooled", "--json", "-").stdout)
    assert any(p["m"] == 2 for p in pooled["front"]), "the pooled front should pool here"
    assert POOLED_BOUND in pooled["notes"]
    for engine in ("vllm", "sglang"):
        doc = json.loads(
            run("solve", path, "--batch", 16, "--engine", engine, "--json", "-").stdout
        )
        assert doc["front"] and all(p["m"] == 1 for p in doc["front"])
        assert any("one drafter per server" in n for n in doc["notes"])
    default = json.loads(run("solve", path, "--batch", 16, "--json", "-").stdout)
    assert all(p["m"] == 1 for p in default["front"]) and "vLLM" in default["notes"][0]
    # the terminal says so too
    assert "one drafter per server" in run("solve", path, "--batch", 16).stderr


def test_plain_solve_keeps_the_models_question_and_labels_pools(tmp_path):
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(SERVED))
    doc = json.loads(run("solve", path, "--json", "-").stdout)
    assert any(p["m"] == 2 for p in doc["front"])
    assert any(n.startswith(POOLED_BOUND) for n in doc["notes"])
    one = json.loads(run("solve", path, "--engine", "sglang", "--json", "-").stdout)
    assert all(p["m"] == 1 for p in one["front"])
    assert not any(n.startswith(POOLED_BOUND) for n in one["notes"])


def test_solve_at_a_batch_size_exports_for_it(tmp_path):
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(SERVED))
    r = run("solve", path, "--batch", 64, "--export", "sglang")
    assert r.exit_code == 0, r.output
    assert check_sglang(shlex.split(r.stdout)).max_running_requests == 64
    r = run("solve", path, "--batch", 16, "--export", "sglang")
    assert r.exit_code == 0 and check_sglang(shlex.split(r.stdout)).max_running_requests == 48
    r = run("solve", path, "--batch", 16, "--export", "vllm")
    assert r.exit_code == 0 and json.loads(r.stdout)["method"] in ("eagle3", "ngram")
