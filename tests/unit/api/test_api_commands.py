"""The Python API of schedule, capacity, calibrate, estimate, breakeven and paper: each
call returns a result whose ``to_dict()`` is exactly the command's ``--json`` document;
``load_data`` and ``load`` round-trip a problem through plain data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.exceptions import InputError, ParameterError
from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = ROOT / "problems"


def cli_json(*args: object) -> dict:
    """The JSON document ``allocator ARGS --json -`` prints."""
    r = run(*args, "--json", "-")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def same(doc: dict, want: dict) -> None:
    """Equal as JSON documents: keys in the same order, the same values."""
    assert json.dumps(doc) == json.dumps(want)


def test_schedule_is_the_json_document():
    path = PROBLEMS / "serving-eagle.yaml"
    sched = api.schedule(path)
    same(sched.to_dict(), cli_json("schedule", path))
    assert list(sched.to_dict()) == ["rows", "speculation_off_from", "notes"]
    assert sched.export is None


def test_schedule_export_is_what_the_command_prints():
    path = PROBLEMS / "serving-eagle.yaml"
    sched = api.schedule(path, export="vllm")
    r = run("schedule", path, "--export", "vllm")
    assert r.exit_code == 0, r.output
    assert sched.export is not None and sched.export.text == r.stdout
    with pytest.raises(ParameterError) as exc:
        api.schedule(path, export="sglang")
    assert exc.value.field == "export"


def test_size_fleet_is_the_json_document_with_the_sweep():
    path = PROBLEMS / "capacity-70b.yaml"
    fleet = api.size_fleet(path, 20000, 40, sweep_load="500:40000:20")
    args = ("--tokens-per-s", 20000, "--itl-ms", 40, "--sweep-load", "500:40000:20")
    same(fleet.to_dict(), cli_json("capacity", path, *args))
    plain = api.size_fleet(path, 20000)
    same(plain.to_dict(), cli_json("capacity", path, "--tokens-per-s", 20000))
    assert "sweep" not in plain.to_dict() and "routed" not in plain.to_dict()
    # loads as numbers give the same sweep
    loads = np.linspace(500, 40000, 20)
    same(api.size_fleet(path, 20000, 40, sweep_load=loads).to_dict(), fleet.to_dict())


def test_size_fleet_routes_for_mixed_traffic_from_edited_data(tmp_path):
    data = api.load_data(PROBLEMS / "capacity-70b.yaml")
    data["workloads"] = [
        {"name": "chat", "weight": 3.0},
        {"name": "code", "weight": 1.0, "acceptance": {"eagle3": 0.95}},
    ]
    edited = tmp_path / "mixed.yaml"
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    fleet = api.size_fleet(data, 20000, 40)
    doc = fleet.to_dict()
    assert "routed" in doc and fleet.with_routes
    same(doc, cli_json("capacity", edited, "--tokens-per-s", 20000, "--itl-ms", 40))
    assert "routed" not in api.size_fleet(data, 20000, 40, routes=False).to_dict()


def test_calibrate_is_the_json_document_and_the_file(tmp_path):
    measured = PROBLEMS / "measured" / "vllm-issue20780-bs1.csv"
    problem = PROBLEMS / "measured" / "llama31-8b-eagle.yaml"
    out = tmp_path / "cli.yaml"
    want = cli_json("calibrate", measured, "--problem", problem, "--out", out, "--holdout", 0.3)
    report = api.calibrate(measured, problem, str(out), holdout=0.3)
    same(report.to_dict(), want)
    assert report.text() == out.read_text()
    assert report.calibration.held_out.any()
    # no file asked for: the same fit, nothing written
    alone = api.calibrate(measured, problem, holdout=0.3)
    assert alone.to_dict()["out"] is None
    assert alone.data == report.data
    with pytest.raises(ParameterError) as exc:
        api.calibrate(measured, problem, problem)
    assert exc.value.field == "out"


def test_estimate_is_the_json_document_and_the_file(tmp_path):
    log = PROBLEMS / "measurements" / "vllm-ngram.log"
    out = tmp_path / "ngram.yaml"
    args = ("--format", "vllm-log", "--drafter", "ngram", "--unit-cost", "ngram=0.01")
    want = cli_json("estimate", log, "--out", out, *args)
    report = api.estimate(log, str(out), "vllm-log", drafter="ngram", unit_cost={"ngram": 0.01})
    same(report.to_dict(), want)
    assert report.text == out.read_text()
    listed = api.estimate(log, str(out), "vllm-log", drafter="ngram", unit_cost=["ngram=0.01"])
    assert listed.text == report.text
    with pytest.raises(ParameterError) as exc:
        api.estimate(log, str(out), "vllm-log", errors="factor")
    assert exc.value.field == "errors"


def test_breakeven_is_the_json_document():
    path = PROBLEMS / "paper-r2-correlated.yaml"
    report = api.breakeven(path, ["weak-a", "weak-b"], ["weak-a"], curve_points=11)
    want = cli_json("breakeven", path, "--ensemble", "weak-a,weak-b", "--baseline", "weak-a")
    same(report.to_dict(), want)
    assert report.curve is not None and report.curve[0].shape == (11,)


def test_paper_is_the_json_document():
    same(api.paper().to_dict(), cli_json("paper"))


def test_load_data_and_load_of_data_build_the_same_problem():
    path = PROBLEMS / "paper-r3.yaml"
    data = api.load_data(path)
    assert isinstance(data, dict) and data["name"]
    a, b = api.load(path), api.load(data)
    assert a.names == b.names and np.array_equal(a.acceptance, b.acceptance)
    assert api.solve(data, "exact").points() == api.solve(path, "exact").points()
    data["drafters"][0]["acceptance"] = 2.0
    with pytest.raises(InputError):
        api.load(data)
