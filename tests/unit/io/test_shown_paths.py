"""Messages name a file so that two inputs of one name are told apart: ``a/run.json`` and
``b/run.json``, never ``run.json`` twice (:func:`allocator.io.inputs.shown_paths`)."""

from __future__ import annotations

import json

import pytest

from allocator.analysis.validation import validate
from allocator.calibration.rows import read_inputs
from allocator.estimate.bench_files import read_bench_files
from allocator.exceptions import InputError
from allocator.io.inputs import shown_paths
from tests.unit.analysis import requests_problem as rp
from tests.unit.analysis.test_validate import vllm_doc


def test_a_unique_name_is_shown_alone_and_a_shared_one_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert shown_paths(["a/run.json", "b/other.json"]) == ["run.json", "other.json"]
    assert shown_paths(["a/run.json", "b/run.json", "c.json"]) == [
        "a/run.json",
        "b/run.json",
        "c.json",
    ]
    # one file given twice, however spelled, is one file: its name
    assert shown_paths(["a/run.json", "./a/run.json"]) == ["run.json", "run.json"]
    # outside the working directory: the absolute path
    outside = tmp_path.parent / "elsewhere" / "run.json"
    assert shown_paths(["a/run.json", outside]) == ["a/run.json", str(outside)]


def _two_deployments(tmp_path):
    paths = []
    for d, model in (("a", "example/verifier"), ("b", "example/other-model")):
        (tmp_path / d).mkdir()
        path = tmp_path / d / "run.json"
        path.write_text(json.dumps(vllm_doc(model_id=model)))
        paths.append(path)
    return paths


def test_validate_names_both_runs_of_one_name_apart(tmp_path):
    a, b = _two_deployments(tmp_path)
    with pytest.raises(InputError) as e:
        validate(rp.problem(), [a, b])
    text = f"{e.value.field}: {e.value.message}"
    assert str(a) in text and str(b) in text, text


def test_benchmark_files_of_one_name_are_told_apart(tmp_path):
    a, b = _two_deployments(tmp_path)
    with pytest.raises(InputError) as e:
        read_bench_files([a, b])
    text = f"{e.value.field}: {e.value.message}"
    assert str(a) in text and str(b) in text, text


def test_calibrate_rows_of_two_csvs_of_one_name_say_which(tmp_path):
    """Each calibrate row says where it came from (the report's source column): the rows of
    a/rows.csv and b/rows.csv are told apart."""
    paths = []
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        path = tmp_path / d / "rows.csv"
        path.write_text("drafters,k,batch,tokens_per_s\n,0,1,90\n")
        paths.append(path)
    data, _ = read_inputs(paths, rp.problem())
    assert data.sources == (f"{paths[0]} line 2", f"{paths[1]} line 2")
