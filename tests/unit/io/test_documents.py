"""One way to build a JSON document: the API's result and its ``to_dict()`` is what the
command writes with ``--json``; the ``LO:HI:STEPS`` ranges of two commands share one
parser while each keeps its own rules."""

import json
from pathlib import Path

import numpy as np
import pytest

from allocator import api
from allocator.core.documents import POINT_FIELDS, SERVING_FIELDS, number
from allocator.exceptions import ParameterError
from allocator.io.ranges import parse_hosting_range, parse_load_range, parse_range
from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[3]
R2 = ROOT / "problems" / "paper-r2.yaml"
MIXED = ROOT / "problems" / "mixed-traffic.yaml"
SERVING = ROOT / "problems" / "serving-eagle.yaml"


def cli_json(*args) -> dict:
    r = run(*args, "--json", "-")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def without_seconds(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "seconds"}


def test_solve_document_is_the_results_to_dict(tmp_path):
    """The notes of a best point at search.k.max come from the library too."""
    path = tmp_path / "r2.yaml"
    path.write_text(R2.read_text().replace("max: 64", "max: 4"))
    doc = api.solve(api.load(path)).to_dict()
    assert any("search.k.max = 4" in n for n in doc["notes"])
    assert without_seconds(doc) == without_seconds(cli_json("solve", path))
    assert [list(p) for p in doc["front"]] == [list(POINT_FIELDS)] * len(doc["front"])


def test_solve_at_batch_points_carry_the_serving_fields_in_order():
    doc = api.solve_at_batch(api.load(SERVING), 64).to_dict()
    assert without_seconds(doc) == without_seconds(cli_json("solve", SERVING, "--batch", 64))
    assert list(doc["front"][0]) == [*POINT_FIELDS, *SERVING_FIELDS]


def test_evaluate_point_reads_as_its_document():
    point = api.evaluate(api.load(R2), ["weak-a", "weak-b"], 5)
    doc = point.to_dict()
    assert doc == cli_json("evaluate", R2, "-d", "weak-a,weak-b", "-k", 5)
    assert dict(point) == doc and point["throughput"] == doc["throughput"]
    assert list(doc) == list(POINT_FIELDS)


def test_evaluate_speculation_off_at_a_batch():
    point = api.evaluate(api.load(SERVING, check_search=False), [], 0, batch=64)
    doc = point.to_dict()
    assert doc == cli_json("evaluate", SERVING, "-k", 0, "--batch", 64)
    assert doc["drafters"] == [] and doc["m"] == 0 and doc["expected_accepted"] == 1.0
    assert doc["throughput"] == pytest.approx(1.0 / doc["round_time"], rel=1e-15)


def test_plan_and_sweep_documents_are_the_results_to_dict():
    plan = api.plan(MIXED, {"hosting_cost": 0.5})
    assert without_seconds(plan.to_dict()) == without_seconds(
        cli_json("plan", MIXED, "--budget", "hosting_cost=0.5")
    )
    sweep = api.sweep_hosting(MIXED, np.linspace(0.0, 2.0, 9))
    assert without_seconds(sweep.to_dict()) == without_seconds(
        cli_json("plan", MIXED, "--sweep", "hosting_cost=0:2:9")
    )


def test_number_writes_nan_as_null():
    assert number(float("nan")) is None and number(None) is None
    assert number(np.float64(0.5)) == 0.5 and type(number(np.float64(0.5))) is float


# ----------------------------------------------------------------- LO:HI:STEPS


def test_one_range_parser_two_sets_of_rules():
    np.testing.assert_array_equal(parse_load_range("100:300:3"), [100.0, 200.0, 300.0])
    np.testing.assert_array_equal(parse_hosting_range("0:2:3", "hosting_cost=0:2:3"), [0, 1, 2])
    np.testing.assert_array_equal(parse_range("1:5:1", "x", positive=True), [5.0])
    # LO = 0: a hosting cap may be 0, a load may not
    with pytest.raises(ParameterError, match=r"must satisfy 0 < LO <= HI") as exc:
        parse_load_range("0:300:3")
    assert exc.value.field == "sweep_load"
    # STEPS: bounded for loads and for caps alike
    with pytest.raises(ParameterError, match=r"STEPS must be 1\.\.10,000 \(got 20,000\)"):
        parse_load_range("1:2:20000")
    with pytest.raises(ParameterError, match=r"STEPS must be 1\.\.10,000 \(got 20,000\)"):
        parse_hosting_range("0:2:20000", "hosting_cost=0:2:20000")
    assert len(parse_hosting_range("0:2:10000", "hosting_cost=0:2:10000")) == 10000
    with pytest.raises(ParameterError, match=r"STEPS must be 1\.\.10,000 \(got 0\)") as exc:
        parse_hosting_range("0:2:0", "hosting_cost=0:2:0")
    assert exc.value.field == "sweep"
    with pytest.raises(ParameterError, match=r"the range -1:2 must satisfy 0 <= LO <= HI"):
        parse_hosting_range("-1:2:3", "hosting_cost=-1:2:3")
    # a malformed range quotes the argument as given, in the command's own form
    with pytest.raises(ParameterError, match=r"expected LO:HI:STEPS, got '1:2'"):
        parse_load_range("1:2")
    with pytest.raises(
        ParameterError, match=r"expected hosting_cost=LO:HI:STEPS, got 'hosting_cost=1:2:x:4'"
    ):
        parse_hosting_range("1:2:x:4", "hosting_cost=1:2:x:4")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["plan", MIXED, "--sweep", "hosting_cost=1:2"], "error: --sweep: expected hosting_cost="),
        (["plan", MIXED, "--sweep", "hosting_cost=0:2:0"], "error: --sweep: STEPS must be 1.."),
        (
            ["capacity", ROOT / "problems" / "capacity-70b.yaml", "--tokens-per-s", 1000,
             "--sweep-load", "0:10:2"],
            "error: --sweep-load: the range 0:10 must satisfy 0 < LO <= HI",
        ),
    ],
)  # fmt: skip
def test_range_errors_name_the_flag(args, line):
    r = run(*args)
    assert r.exit_code == 2 and r.output.startswith(line), r.output
