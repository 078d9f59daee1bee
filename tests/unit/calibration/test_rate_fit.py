"""calibrate on runs at a request rate (allocator/analysis/rate_fit.py): parameter recovery
from an independent reference engine (tests/support/rate_reference.py: its own scheduler
loop and its own step time from the GPU's and model's figures by hand, with seeded noise,
TTFT overhead and prefill efficiency known), the written file replayed on its own giving
the reported predictions, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.analysis import rate_fit
from allocator.cli import app
from allocator.core.hardware import Hardware
from allocator.core.model_spec import ModelSpec
from allocator.exceptions import InputError
from allocator.model.steptime.roofline import PeakTerms
from tests.support.cli_runner import runner
from tests.support.rate_reference import (
    Dense,
    Truth,
    peaks,
    problem_file,
    run,
    vllm_file,
)

TRUTH = Truth(mem_eff=0.6, compute_eff=0.5, prefill_eff=0.4, overhead_ms=20.0, noise=0.02)
#: (request rate /s, mean prompt, mean output) of each reference run
RUNS = ((4.0, 512, 128), (12.0, 1024, 128), (20.0, 256, 256))


def write_runs(folder: Path, n: int, runs=RUNS, truth: Truth = TRUTH, **file) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i, (rate, pin, pout) in enumerate(runs):
        prompts = rng.integers(pin // 2, pin * 3 // 2, n)
        outputs = rng.integers(pout // 2, pout * 3 // 2, n)
        sim = run(truth, rate=rate, prompts=prompts, outputs=outputs, seed=i)
        path = folder / f"run{i}.json"
        vllm_file(path, sim, rate=rate, prompts=prompts, outputs=outputs, **file)
        paths.append(path)
    return paths


def test_the_reference_peaks_are_the_specs_peaks():
    """The reference's hand-computed figures are the deployment the problem file states
    (so a recovered factor is a share of the same peak)."""
    got = PeakTerms.from_specs(
        Hardware.from_fields("h100-sxm"), ModelSpec.from_fields(**Dense().fields())
    )
    want = peaks(Dense())
    assert got.weights_ms == pytest.approx(want["W"], rel=1e-12)
    assert got.kv_ms == pytest.approx(want["kv"], rel=1e-12)
    assert got.token_ms == pytest.approx(want["phi"], rel=1e-12)
    assert got.attn_ms == pytest.approx(want["alpha"], rel=1e-12)


@pytest.mark.slow
def test_recovers_prefill_efficiency_overhead_and_bandwidth_from_rate_runs(tmp_path):
    files = write_runs(tmp_path, 100)
    problem = problem_file(tmp_path / "p.yaml")
    calls = []
    report = api.calibrate(
        files, problem, tmp_path / "o.yaml", progress=lambda d, t: calls.append((d, t))
    )
    assert isinstance(report, rate_fit.RateCalibrationReport)
    got = {p["name"]: p for p in report.parameters}
    assert got["mem_eff"]["value"] == pytest.approx(TRUTH.mem_eff, rel=0.05)
    assert got["prefill_eff"]["value"] == pytest.approx(TRUTH.prefill_eff, rel=0.1)
    assert got["ttft_overhead_ms"]["value"] == pytest.approx(TRUTH.overhead_ms, rel=0.25)
    for name in ("mem_eff", "prefill_eff", "ttft_overhead_ms"):
        lo, hi = got[name]["interval_95"]
        assert lo < got[name]["value"] < hi
    # no decode step of these runs is compute bound (b ≤ 64 tokens against a kink near
    # 300): compute_eff is reported not determined, and written at the fit's value
    assert got["compute_eff"]["value"] is None and got["compute_eff"]["undetermined"]
    assert got["compute_eff"]["written"] is not None
    assert calls and all(0 < d <= t for d, t in calls)
    doc = report.to_dict()
    assert doc["median_abs_error_pct"] < 5.0
    # the written file, replayed on its own by validate, gives the reported predictions
    out = tmp_path / "o.yaml"
    out.write_text(report.text())
    check = api.validate_runs(out, [str(f) for f in files], seed=0).to_dict()
    for mine, theirs in zip(doc["runs"], check["runs"], strict=True):
        for key, m in mine["metrics"].items():
            assert theirs["metrics"][key]["predicted"] == pytest.approx(m["predicted"], rel=1e-9)
    written = yaml.safe_load(out.read_text())["serving"]
    assert written["ttft_overhead_ms"] == pytest.approx(got["ttft_overhead_ms"]["written"])
    assert written["roofline"]["prefill_eff"] == pytest.approx(got["prefill_eff"]["written"])


@pytest.mark.slow
def test_a_file_that_would_not_be_the_fit_is_refused(tmp_path, monkeypatch):
    files = write_runs(tmp_path, 30, runs=RUNS[:2])
    problem = problem_file(tmp_path / "p.yaml")
    monkeypatch.setattr(rate_fit, "MAX_EVALUATIONS", 2)
    real = rate_fit._file_data

    def off(path, names, written):  # a writer that drops a digit of the overhead
        return real(
            path,
            names,
            [
                w * (1.0 + 1e-3) if n == "ttft_overhead_ms" else w
                for n, w in zip(names, written, strict=True)
            ],
        )

    monkeypatch.setattr(rate_fit, "_file_data", off)
    out = tmp_path / "o.yaml"
    r = runner.invoke(app, ["calibrate", *map(str, files), "-p", str(problem), "-o", str(out)])
    assert r.exit_code == 2, r.output
    errors = [x for x in r.output.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and "would not be the fit" in errors[0], r.output
    assert "Traceback" not in r.output
    assert not out.exists()


def _edit(path: Path, **changes) -> Path:
    doc = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    write_runs(folder, 12, runs=RUNS[:2])
    problem_file(folder / "p.yaml")
    return folder


def _case(tmp_path: Path, two: Path, case: str) -> tuple[list[str], str]:
    a, b = (tmp_path / "a.json", tmp_path / "b.json")
    a.write_text((two / "run0.json").read_text())
    b.write_text((two / "run1.json").read_text())
    problem = str(two / "p.yaml")
    args = [str(a), str(b), "-p", problem]
    if case == "models":
        _edit(b, model_id="org/other-70b")
        return args, "org/other-70b"
    if case == "gpus":
        _edit(b, hardware="a100-80g")
        return args, "a100-80g"
    if case == "no lengths":
        _edit(
            b,
            input_lens=None,
            output_lens=None,
            ttfts=None,
            itls=None,
            errors=None,
            generated_texts=None,
        )
        return args, "input_lens"
    if case == "unequal":
        doc = json.loads(b.read_text())
        _edit(b, ttfts=doc["ttfts"][:-1])
        return args, "ttfts"
    if case == "no specs":
        p = tmp_path / "q.yaml"
        data = yaml.safe_load((two / "p.yaml").read_text())
        data["serving"] = {
            "batch_sizes": [1],
            "step_ms": [{"drafters": ["d"], "by_batch": {1: {0: 10.0, 1: 12.0}}}],
        }
        p.write_text(yaml.safe_dump(data))
        return [str(a), str(b), "-p", str(p)], "serving.model"
    if case == "holdout":
        return [*args, "--holdout", "by-k"], "--holdout"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    ["models", "gpus", "no lengths", "unequal", "no specs", "holdout"],
)
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path, two, case):
    args, named = _case(tmp_path, two, case)
    out = tmp_path / "o.yaml"
    r = runner.invoke(app, ["calibrate", *args, "-o", str(out)])
    assert r.exit_code == 2, r.output
    text = r.output.strip()
    assert named in text, text
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert not out.exists()


def test_different_models_name_both_files(tmp_path, two):
    args, _ = _case(tmp_path, two, "models")
    with pytest.raises(InputError) as e:
        api.calibrate(args[:2], args[3], tmp_path / "o.yaml")
    assert "b.json" in str(e.value) and "a.json" in str(e.value)


def test_rate_runs_given_with_closed_loop_runs_are_refused_by_the_rate_fit(tmp_path, two):
    """Called on its own (calibrate sends such a mix to the steady-state path, which
    leaves the rate runs out with a note), the rate fit refuses a closed-loop run."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text((two / "run0.json").read_text())
    b.write_text((two / "run1.json").read_text())
    _edit(b, request_rate="inf", max_concurrency=4)
    assert not rate_fit.has_rate_runs([a, b]) and rate_fit.has_rate_runs([a])
    with pytest.raises(InputError) as e:
        rate_fit.rate_calibration([a, b], two / "p.yaml", tmp_path / "o.yaml")
    assert "closed-loop" in str(e.value) and "b.json" in str(e.value)
