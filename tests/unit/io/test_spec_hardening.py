"""Problem-file values that were accepted or answered with the wrong words (issue 20):
a list's element out of range named with its bound, reversed rank intervals, empty
``draft_ms``, infinite pass-cost-curve token counts, and acceptance lists too long to
matter (a stated limit), each refused in one line naming the field."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.io.build import MAX_ACCEPTANCE_CELLS, problem_from_spec
from allocator.io.spec import MAX_POSITIONS, parse_problem
from allocator.search.exact import ExactStrategy
from tests.support.cli_runner import run

BASE = {"name": "x", "drafters": [{"name": "a", "acceptance": 0.5, "unit_cost": 0.1}]}


def refusal(**fields) -> tuple[str, str]:
    data = copy.deepcopy(BASE)
    data["drafters"][0].update(fields)
    with pytest.raises(InputError) as info:
        problem_from_spec(parse_problem(data))
    return info.value.field, info.value.message


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        # "is a list, not a number" before: the scalar branch of the union answered
        (
            {"acceptance": [0.8, 1.2]},
            "drafters[a].acceptance.1",
            "1.2 is outside (0, 1] (value 2 of the list)",
        ),
        (
            {"acceptance": [0.8, 0.0, 0.5]},
            "drafters[a].acceptance.1",
            "0 is outside (0, 1] (value 2 of the list)",
        ),
        (
            {"acceptance": [0.8, "x"]},
            "drafters[a].acceptance.1",
            "'x' is text, not a number (value 2 of the list)",
        ),
        ({"acceptance": 1.2}, "drafters[a].acceptance", "1.2 is outside (0, 1]"),
        ({"acceptance": []}, "drafters[a].acceptance", "is empty; give at least 1"),
        (
            {"acceptance": {"p": 1}},
            "drafters[a].acceptance",
            "{'p': 1} is a mapping, not a number or a list of numbers",
        ),
        (
            {"acceptance": [0.5, 0.8], "acceptance_interval": [[0.4, 0.6], [0.7, 1.4]]},
            "drafters[a].acceptance_interval.1.1",
            "1.4 is outside [0, 1] (value 2 of the list)",
        ),
        (
            {"acceptance": [0.5, 0.8], "acceptance_interval": [[0.4, 0.6], [0.9, 0.7]]},
            "drafters[a].acceptance_interval",
            "position 2: [0.9, 0.7] needs lo < hi",
        ),
        ({"unit_cost": -1}, "drafters[a].unit_cost", "-1 must be greater than or equal to 0"),
        # accepted before
        ({"draft_ms": {}}, "drafters[a].draft_ms", "is empty; give at least 1"),
        (
            {
                "acceptance_by_rank": [0.5, 0.3],
                "acceptance_by_rank_interval": [[0.4, 0.6], [0.35, 0.2]],
            },
            "drafters[a].acceptance_by_rank_interval",
            "rank 2: [0.35, 0.2] needs lo < hi",
        ),
        (
            {
                "acceptance_by_rank": [[0.5, 0.3], [0.4, 0.2]],
                "acceptance_by_rank_interval": [
                    [[0.4, 0.6], [0.2, 0.4]],
                    [[0.45, 0.3], [0.1, 0.3]],
                ],
            },
            "drafters[a].acceptance_by_rank_interval",
            "depth 2, rank 1: [0.45, 0.3] needs lo < hi",
        ),
    ],
)
def test_refused_naming_the_field_and_the_bound(fields, field, message):
    assert refusal(**fields) == (field, message)


def test_an_infinite_pass_cost_curve_token_count_is_refused():
    data = copy.deepcopy(BASE)
    data["verifier"] = {"pass_cost_curve": {"tokens": [1, float("inf")], "cost": [1.0, 2.0]}}
    with pytest.raises(InputError) as info:
        parse_problem(data)
    assert info.value.field == "verifier.pass_cost_curve.tokens.1"
    assert info.value.message == "inf is not a finite number (value 2 of the list)"


def test_workload_and_ensemble_elements_name_the_bound():
    data = copy.deepcopy(BASE)
    data["workloads"] = [{"name": "w", "weight": 1, "acceptance": {"a": [0.5, 1.5]}}]
    with pytest.raises(InputError) as info:
        parse_problem(data)
    assert (info.value.field, info.value.message) == (
        "workloads[w].acceptance.a.1",
        "1.5 is outside (0, 1] (value 2 of the list)",
    )
    data = copy.deepcopy(BASE)
    data["ensembles"] = [{"members": ["a"], "acceptance": [0.5, -1]}]
    with pytest.raises(InputError) as info:
        parse_problem(data)
    assert info.value.field == "ensembles.0.acceptance.1"
    assert info.value.message == "-1 is outside (0, 1] (value 2 of the list)"


def test_the_cli_says_it_in_one_line(tmp_path):
    data = copy.deepcopy(BASE)
    data["drafters"][0]["acceptance"] = [0.8, 1.2]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    r = run("solve", path)
    assert r.exit_code == 2
    assert r.stderr == (
        "error: drafters[a].acceptance.1: 1.2 is outside (0, 1] (value 2 of the list)\n"
    )


# ------------------------------------------------------------------ long lists
def test_an_acceptance_list_longer_than_any_draft_is_refused():
    """A 10**6-value list took minutes and tens of GB beside 15 other drafters; no k
    reaches past MAX_POSITIONS (= MAX_K), so a longer list is refused."""
    assert MAX_POSITIONS == 100_000
    field, message = refusal(acceptance=[0.7] * (MAX_POSITIONS + 1))
    assert field == "drafters[a].acceptance"
    assert message.startswith("holds 100,001 values; at most 100,000")


def test_too_many_acceptance_cells_are_refused():
    data = copy.deepcopy(BASE)
    n = MAX_ACCEPTANCE_CELLS // MAX_POSITIONS + 1
    data["drafters"][0]["acceptance"] = [0.7] * MAX_POSITIONS
    data["drafters"] += [{"name": f"b{i}", "acceptance": 0.6, "unit_cost": 0.1} for i in range(n)]
    with pytest.raises(InputError) as info:
        problem_from_spec(parse_problem(data))
    assert info.value.field == "drafters[a].acceptance"
    assert "more than 16,777,216" in info.value.message


def test_positions_past_k_max_do_not_change_the_front():
    """Only the first search.k.max positions are pooled: a file whose lists go on past
    them has the front of the same file with the lists cut there (an independent file)."""
    rng = np.random.default_rng(4)
    long = copy.deepcopy(BASE)
    long["drafters"] = [
        {
            "name": f"d{i}",
            "acceptance": [round(float(x), 3) for x in rng.uniform(0.2, 0.9, 300)],
            "unit_cost": round(float(rng.uniform(0.02, 0.2)), 3),
        }
        for i in range(6)
    ]
    long["search"] = {"k": {"max": 12}}
    short = copy.deepcopy(long)
    for d in short["drafters"]:
        d["acceptance"] = d["acceptance"][:12]
    a = ExactStrategy().solve(problem_from_spec(parse_problem(long))).front
    b = ExactStrategy().solve(problem_from_spec(parse_problem(short))).front
    assert np.array_equal(a.members, b.members) and np.array_equal(a.k, b.k)
    assert np.allclose(a.throughput, b.throughput, rtol=0, atol=0)


@pytest.mark.parametrize("ms", [1e-320, 1e308])
def test_a_step_time_no_gpu_takes_is_refused_at_the_file(ms):
    """A subnormal or astronomical step time loaded, then gave infinite tokens/s and a
    JSON writer's traceback (``schedule --json``); the file is refused naming the entry."""
    data = {
        "name": "x",
        "convention": "bonus",
        "drafters": [{"name": "a", "acceptance": 0.5}],
        "serving": {
            "batch_sizes": [1],
            "step_ms": [{"drafters": ["a"], "by_batch": {1: {0: 1.0, 1: ms}}}],
        },
    }
    with pytest.raises(InputError) as e:
        parse_problem(data)
    assert e.value.field == "serving.step_ms.0.by_batch.1.1"
