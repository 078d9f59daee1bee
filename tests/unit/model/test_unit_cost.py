"""Serving files need no verifier-unit fields (issue 20): ``unit_cost`` is optional; every
answer in verifier-units refuses naming ``drafters[NAME].unit_cost`` when a drafter it
needs has none, and every answer in tokens/s is the one the same file gives with a cost
written in. A serving file that states no ``convention`` counts as the engines do
(``bonus``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.exceptions import InputError
from allocator.search import STRATEGIES
from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[3]
SERVING = yaml.safe_load((ROOT / "problems" / "serving-eagle.yaml").read_text())
TREE = yaml.safe_load((ROOT / "docs" / "tree.yaml").read_text())
FIELD = "drafters[eagle].unit_cost"


def without_cost(data: dict) -> dict:
    out = copy.deepcopy(data)
    for d in out["drafters"]:
        d.pop("unit_cost", None)
    return out


def refused(fn, *args, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kw)
    return info.value


def write(tmp_path: Path, data: dict, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# ------------------------------------------------------------------ the file
def test_a_serving_file_without_unit_cost_loads():
    problem = api.load(without_cost(SERVING))
    assert np.isnan(problem.unit_cost).all()


# ------------------------------------------------------------------ verifier-units refuse
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_refuses_a_missing_unit_cost(strategy):
    problem = api.load(without_cost(SERVING))
    exc = refused(api.solve, problem, strategy, **({"trials": 5} if strategy == "optuna" else {}))
    assert exc.field == FIELD and exc.message.startswith("missing: ")


def test_evaluate_simulate_breakeven_and_trees_refuse():
    problem = api.load(without_cost(SERVING))
    assert refused(api.evaluate, problem, ["eagle"], 3).field == FIELD
    assert refused(api.simulate, problem, ["eagle"], 3, rounds=100).field == FIELD
    tree = api.load(without_cost(TREE))
    assert refused(api.best_tree, tree, "eagle", nodes=4).field == FIELD
    pair = copy.deepcopy(SERVING)
    pair["drafters"].append({"name": "other", "acceptance": 0.5})
    pair["serving"]["step_ms"].append(
        {"drafters": ["other"], "by_batch": {1: {0: 6.87, 1: 7.5}, 64: {0: 8.53, 1: 9.9}}}
    )
    exc = refused(api.breakeven, without_cost(pair), ["eagle", "other"], ["eagle"])
    assert exc.field == FIELD


def test_solve_at_a_batch_refuses_a_cost_axis_in_verifier_units():
    problem = api.load(without_cost(SERVING))
    exc = refused(api.solve_at_batch, problem, 4)
    assert exc.field == FIELD and "cost_metric draft_cost_per_round" in exc.message


def test_a_budget_on_a_draft_cost_is_refused_even_under_load():
    """A cap on draft cost masks on unit costs: without them every speculative
    configuration would silently fail it."""
    data = without_cost(SERVING)
    data["budget"] = {"draft_cost_per_round": 1.0}
    exc = refused(api.schedule, data)
    assert exc.field == FIELD and "budget.draft_cost_per_round" in exc.message


def test_an_excluded_drafter_needs_no_cost():
    data = copy.deepcopy(SERVING)
    data["drafters"].append({"name": "spare", "acceptance": 0.4})
    data["search"] = {"exclude": ["spare"]}
    assert len(api.solve(api.load(data)).front) > 0


def test_the_cli_refuses_in_one_line(tmp_path):
    path = write(tmp_path, without_cost(SERVING))
    r = run("solve", path)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {FIELD}: missing: ") and r.stderr.count("\n") == 1
    assert not list(tmp_path.glob("*.json"))[1:]


# ------------------------------------------------------------------ tokens/s answer
def _doc(*args) -> dict:
    r = run(*args, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    doc.pop("seconds", None)
    return doc


@pytest.mark.parametrize(
    "args",
    [
        ["schedule"],
        ["capacity", "--tokens-per-s", "10000"],
        ["solve", "--batch", "4", "--budget", "hosting_cost=10"],
    ],
)
def test_answers_in_tokens_per_s_need_no_cost(tmp_path, args):
    """The same answer as the file with its unit_cost (an independent file)."""
    costed = copy.deepcopy(SERVING)
    uncosted = without_cost(SERVING)
    if args[0] == "solve":
        costed["cost_metric"] = uncosted["cost_metric"] = "hosting_cost"
    a = _doc(args[0], write(tmp_path, costed, "a.json"), *args[1:])
    b = _doc(args[0], write(tmp_path, uncosted, "b.json"), *args[1:])
    if args[0] == "solve":  # the model's verifier-unit fields are null without a cost
        for pa, pb in zip(a["front"], b["front"], strict=True):
            assert pb["throughput"] == pb["tokens_per_s"]  # under load: tokens/s
            for f in ("round_time", "draft_cost_per_round", "draft_cost_per_token"):
                assert pb[f] is None
                pa[f] = None
    assert a == b


def test_evaluate_at_a_batch_gives_tokens_per_s_and_nulls(tmp_path):
    costed = _doc("evaluate", write(tmp_path, SERVING, "a.json"), "-d", "eagle", "-k", 3, "-b", 4)
    doc = _doc(
        "evaluate", write(tmp_path, without_cost(SERVING), "b.json"), "-d", "eagle", "-k", 3,
        "-b", 4,
    )  # fmt: skip
    assert doc["tokens_per_s"] == costed["tokens_per_s"]
    assert doc["throughput"] is None and doc["round_time"] is None and doc["cost"] is None


# ------------------------------------------------------------------ convention
def test_a_serving_file_without_convention_counts_the_bonus_token():
    """alpha 0.7 at k = 3: paper E = 1 + 0.7 + 0.49 = 2.19; bonus E = 1 + 0.7 + 0.49 +
    0.343 = 2.533 (what vLLM and SGLang count)."""
    data = copy.deepcopy(SERVING)
    del data["convention"]
    assert api.load(data).convention == "bonus"
    assert api.evaluate(api.load(data), ["eagle"], 3)["expected_accepted"] == pytest.approx(2.533)
    data["convention"] = "paper"
    assert api.evaluate(api.load(data), ["eagle"], 3)["expected_accepted"] == pytest.approx(2.19)
    plain = copy.deepcopy(data)
    del plain["serving"], plain["convention"]
    assert api.load(plain).convention == "paper"
