"""``validate``: measured runs beside their replay on the problem's replica.

Two independent references. A document written by ``allocator bench`` on a problem and
validated against the same problem and seed is the same run: every metric's error is 0.
A hand-made vLLM file on :mod:`requests_problem` at concurrency 1 with speculation off
has predictions worked out by hand from its tables (one request at a time: TTFT is the
prefill of the prompt, every later token one 10 ms step at batch 1), so each error is
``100 · (predicted / measured − 1)`` of numbers written here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from allocator import api
from allocator.analysis.validation import (
    FAMILIES,
    MeasuredRun,
    check_deployment,
    error_pct,
    family,
    measured_runs,
    validate,
)
from allocator.exceptions import InputError, ParameterError
from allocator.plots.validate import plot_validation
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[3]
MEASUREMENTS = ROOT / "problems/measurements"

#: One request at a time, 100 prompt and 20 output tokens, speculation off (by hand).
TTFT = rp.prefill_ms(100)  # 4 + 56 · 84 / 2032 ms: the step that prefills the prompt
TPOT = rp.step_ms(None, 1, 0)  # 10 ms: each later token, one step at batch 1
E2EL = TTFT + 19 * TPOT
REQ_S = 1000.0 / E2EL  # requests back to back


def vllm_doc(**keys) -> dict:
    """A ``vllm bench serve --save-result`` document: 10 requests of 100/20 tokens at
    concurrency 1 in 2 s, speculation off, with ``keys`` replacing its own."""
    doc = {
        "model_id": "example/verifier",
        "num_prompts": 10,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 1,
        "duration": 2.0,
        "completed": 10,
        "failed": 0,
        "total_input_tokens": 1000,
        "total_output_tokens": 200,
        "request_throughput": 5.0,
        "output_throughput": 100.0,
        "mean_ttft_ms": 5.0,
        "median_ttft_ms": 5.0,
        "p99_ttft_ms": 6.0,
        "mean_tpot_ms": 8.0,
        "mean_itl_ms": 12.5,
        "mean_e2el_ms": 200.0,
    }
    doc.update(keys)
    return doc


def write(tmp_path: Path, name: str, *docs: dict) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return path


# ---------------------------------------------------------------- round trip
ROUND_TRIPS = {
    "eagle k=2 at a rate": dict(drafters=["eagle"], k=2, request_rate=10.0),
    "speculation off, closed loop": dict(max_concurrency=4),
    "ngram k=3, max_num_seqs 8": dict(drafters=["ngram"], k=3, request_rate=20.0, max_num_seqs=8),
    "bursty arrivals": dict(drafters=["eagle"], k=1, request_rate=15.0, burstiness=0.5),
    "k by batch size": dict(drafters=["eagle"], schedule=True, request_rate=30.0),
}


@pytest.mark.parametrize("options", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_a_bench_document_validated_against_its_problem_has_no_error(tmp_path, options):
    problem = rp.problem()
    doc = api.bench(
        problem, input_len=100, output_len=20, num_prompts=40, seed=7, **options
    ).to_dict()
    path = write(tmp_path, "bench.json", json.loads(json.dumps(doc)))
    report = validate(problem, [path], seed=7)
    (run,) = report.runs
    keys = set(run.metrics)
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert {f"mean_{name}_ms", f"median_{name}_ms", f"p99_{name}_ms"} <= keys
    assert {"request_throughput", "output_throughput", "total_token_throughput"} <= keys
    speculative = "k" in options or "schedule" in options
    assert ("spec_decode_acceptance_length" in keys) == speculative
    assert run.replayed["configuration"] == doc["label"].split(";")[0]
    for key, m in run.metrics.items():
        assert m.measured == pytest.approx(doc[key], rel=1e-12), key
        assert m.error_pct == pytest.approx(0.0, abs=1e-9), key
    assert all(s.mean_abs_error_pct < 1e-9 for s in report.summary.values())
    assert run.replayed["max_num_seqs"] == options.get("max_num_seqs", 16)
    assert run.replayed["burstiness"] == options.get("burstiness", 1.0)


def test_another_seed_replays_other_draws(tmp_path):
    problem = rp.problem()
    doc = api.bench(
        problem, drafters=["eagle"], k=2, request_rate=10.0, input_len=100, output_len=20,
        num_prompts=40, seed=7,
    ).to_dict()  # fmt: skip
    report = validate(problem, [write(tmp_path, "b.json", doc)], seed=8)
    assert any(abs(m.error_pct or 0.0) > 1e-6 for m in report.runs[0].metrics.values())


# ---------------------------------------------------------------- arithmetic
def test_errors_of_a_hand_made_file_are_the_hand_computed_ones(tmp_path):
    report = validate(rp.problem(), [write(tmp_path, "h.json", vllm_doc())])
    got = {k: (m.measured, m.predicted, m.error_pct) for k, m in report.runs[0].metrics.items()}
    want = {
        "request_throughput": (5.0, REQ_S),
        "output_throughput": (100.0, 20 * REQ_S),
        "mean_ttft_ms": (5.0, TTFT),
        "median_ttft_ms": (5.0, TTFT),
        "p99_ttft_ms": (6.0, TTFT),
        "mean_tpot_ms": (8.0, TPOT),
        "mean_itl_ms": (12.5, TPOT),
        "mean_e2el_ms": (200.0, E2EL),
    }
    assert list(got) == list(want)  # every key of both, in the report's order
    for key, (measured, predicted) in want.items():
        m, p, e = got[key]
        assert m == measured
        assert p == pytest.approx(predicted, rel=1e-9), key
        assert e == pytest.approx(100.0 * (predicted / measured - 1.0), rel=1e-9), key
    assert got["mean_tpot_ms"][2] == pytest.approx(25.0)
    assert got["mean_itl_ms"][2] == pytest.approx(-20.0)
    (lengths,) = [n for n in report.runs[0].notes if n.startswith("lengths taken as fixed")]
    assert "100 input and 20 output tokens" in lengths


def test_the_summary_is_the_mean_and_median_absolute_error_over_runs(tmp_path):
    # TPOT measured 8, 10 and 12.5 ms against 10 predicted: +25%, 0%, -20%
    files = [
        write(tmp_path, f"{i}.json", vllm_doc(mean_tpot_ms=tpot))
        for i, tpot in enumerate((8.0, 10.0, 12.5))
    ]
    s = validate(rp.problem(), files).summary["mean_tpot_ms"]
    assert (s.mean_abs_error_pct, s.median_abs_error_pct, s.runs) == pytest.approx((15.0, 20.0, 3))


def test_error_pct_has_no_value_for_a_measured_zero():
    assert error_pct(0.0, 3.0) is None
    assert error_pct(4.0, None) is None
    assert error_pct(4.0, 5.0) == pytest.approx(25.0)


# ---------------------------------------------------------------- the workload replayed
def test_per_request_lengths_are_replayed_and_failed_requests_left_out(tmp_path):
    ins, outs = [50, 150, 100, 100, 100], [10, 30, 20, 0, 20]  # one failed: output 0
    doc = vllm_doc(
        num_prompts=5, completed=4, failed=1, total_input_tokens=400, total_output_tokens=80,
        request_throughput=2.0, output_throughput=40.0, input_lens=ins, output_lens=outs,
    )  # fmt: skip
    (run,) = measured_runs([write(tmp_path, "d.json", doc)])
    assert run.prompt_tokens.tolist() == [50, 150, 100, 100]
    assert run.output_tokens.tolist() == [10, 30, 20, 20]
    assert not any(n.startswith("lengths taken as fixed") for n in run.notes)
    report = validate(rp.problem(), [write(tmp_path, "d2.json", doc)])
    assert report.runs[0].replayed["num_prompts"] == 4
    assert report.runs[0].replayed["mean_input_tokens"] == 100.0


def test_fractional_mean_lengths_are_rounded_with_a_note(tmp_path):
    doc = vllm_doc(total_input_tokens=1005, total_output_tokens=196, output_throughput=98.0)
    (run,) = measured_runs([write(tmp_path, "f.json", doc)])
    assert set(run.prompt_tokens) == {100} and set(run.output_tokens) == {20}
    assert any("means 100.5, 19.6" in n for n in run.notes)


def test_sglang_keys_are_read_under_vllms_names(tmp_path):
    (run,) = measured_runs([MEASUREMENTS / "sglang-bench.jsonl"])[3:4]
    assert run.engine == "sglang" and run.k == 3
    assert {"p90_e2el_ms", "total_token_throughput", "spec_decode_acceptance_length"} <= set(
        run.metrics
    )


# ---------------------------------------------------------------- refusals
def _run(**fields) -> MeasuredRun:
    base = dict(
        source="r.json", engine="vllm", model=None, hardware=None, tensor_parallel=None, k=0,
        request_rate=math.inf, max_concurrency=1, burstiness=1.0,
        prompt_tokens=np.ones(1, np.int64), output_tokens=np.ones(1, np.int64), metrics={},
    )  # fmt: skip
    base.update(fields)
    return MeasuredRun(**base)  # type: ignore[arg-type]


def _problem(model="", gpu=None, count=1, gpus_per_replica=1):
    hardware = None if gpu is None else SimpleNamespace(gpu=SimpleNamespace(name=gpu), count=count)
    serving = SimpleNamespace(
        model=SimpleNamespace(name=model), hardware=hardware, gpus_per_replica=gpus_per_replica
    )
    return SimpleNamespace(serving=serving)


@pytest.mark.parametrize(
    ("problem", "run", "named"),
    [
        (_problem(model="meta-llama/Llama-3.1-8B"), _run(model="Qwen/Qwen3-8B"), "Qwen/Qwen3-8B"),
        (_problem(gpu="h100-sxm"), _run(hardware="a100-sxm"), "'h100-sxm'"),
        (_problem(gpu="h100-sxm", count=2), _run(tensor_parallel=1), "serving.hardware.count"),
        (_problem(gpus_per_replica=2), _run(tensor_parallel=4), "serving.gpus_per_replica is 2"),
    ],
    ids=["model", "gpu", "tp", "gpus per replica"],
)
def test_a_run_of_another_deployment_is_refused_naming_both(problem, run, named):
    with pytest.raises(InputError) as exc:
        check_deployment(problem, run)  # type: ignore[arg-type]
    assert exc.value.field == "r.json" and named in exc.value.message


def test_the_same_deployment_written_differently_passes():
    problem = _problem(model="meta-llama/Llama-3.1-8B", gpu="h100-sxm", count=2)
    run = _run(model="llama-3.1-8b", hardware="H100-SXM", tensor_parallel=2)
    assert check_deployment(problem, run) is None  # type: ignore[arg-type]
    assert check_deployment(_problem(), _run(tensor_parallel=8)) is None  # type: ignore[arg-type]


def test_runs_of_two_deployments_are_refused_naming_both_files(tmp_path):
    files = [
        write(tmp_path, "a.json", vllm_doc(model_id="meta-llama/Llama-3.1-8B")),
        write(tmp_path, "b.json", vllm_doc(model_id="Qwen/Qwen3-8B")),
    ]
    with pytest.raises(InputError) as exc:
        validate(rp.problem(), files)
    assert exc.value.field == "b.json"
    assert "'Qwen/Qwen3-8B'" in exc.value.message and "a.json" in exc.value.message


def test_unequal_per_request_arrays_are_refused(tmp_path):
    doc = vllm_doc(input_lens=[100] * 10, output_lens=[20] * 9)
    with pytest.raises(InputError) as exc:
        measured_runs([write(tmp_path, "u.json", doc)])
    assert exc.value.field == "u.json: output_lens" and "9" in exc.value.message


def _sglang(**keys) -> dict:
    doc = json.loads((MEASUREMENTS / "sglang-bench.jsonl").read_text().splitlines()[0])
    doc.update(keys)
    return doc


def test_a_rate_run_of_varied_lengths_without_them_is_refused(tmp_path):
    doc = _sglang(dataset_name="sharegpt", request_rate=4.0, max_concurrency=None)
    with pytest.raises(InputError) as exc:
        measured_runs([write(tmp_path, "s.jsonl", doc)])
    assert exc.value.field == "s.jsonl: input_lens" and "request rate" in exc.value.message


def test_a_closed_loop_of_varied_lengths_is_replayed_at_the_means_with_a_note(tmp_path):
    (run,) = measured_runs([write(tmp_path, "s.jsonl", _sglang(dataset_name="sharegpt"))])
    assert any("they vary" in n for n in run.notes)


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        (dict(request_rate="trace"), "s.jsonl: request_rate"),
        (
            dict(
                server_info={
                    **_sglang()["server_info"],
                    "speculative_algorithm": "EAGLE",
                    "speculative_num_steps": 3,
                    "speculative_eagle_topk": 4,
                    "speculative_num_draft_tokens": 8,
                },
                accept_length=2.0,
            ),
            "s.jsonl",
        ),
    ],
    ids=["trace replay", "token tree"],
)
def test_runs_the_simulator_does_not_play_are_refused(tmp_path, keys, field):
    with pytest.raises(InputError) as exc:
        measured_runs([write(tmp_path, "s.jsonl", _sglang(**keys))])
    assert exc.value.field == field


def test_a_csv_of_calibrate_rows_is_refused_saying_why(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("drafters,k,batch,tokens_per_s\n,0,1,50\n")
    with pytest.raises(InputError) as exc:
        measured_runs([path])
    assert exc.value.field == "rows.csv" and "calibrate" in exc.value.message


def test_a_speculative_run_needs_the_drafter_when_the_problem_has_several(tmp_path):
    problem = rp.problem()
    doc = api.bench(
        problem, drafters=["eagle"], k=2, max_concurrency=2, input_len=100, output_len=20,
        num_prompts=8,
    ).to_dict()  # fmt: skip
    doc.pop("label")
    doc.pop("kv_cache_peak_fraction")
    doc["model_id"] = "example/verifier"
    doc["spec_decode_num_drafts"] = 100
    doc["spec_decode_draft_tokens"] = 200
    doc["spec_decode_accepted_tokens"] = 150
    doc["spec_decode_acceptance_length"] = 2.5
    doc["spec_decode_per_position_acceptance_rates"] = [0.8, 0.7]
    doc["spec_decode_acceptance_rate"] = 75.0  # 100 · 150 / 200
    path = write(tmp_path, "spec.json", doc)
    with pytest.raises(ParameterError) as exc:
        validate(problem, [path])
    assert exc.value.field == "drafters" and "eagle, ngram" in exc.value.message
    report = validate(problem, [path], drafters="eagle")
    assert report.runs[0].replayed["configuration"] == "eagle, k=2"
    m = report.runs[0].metrics["spec_decode_acceptance_length"]
    assert m.measured == 2.5 and 1.0 < (m.predicted or 0.0) <= 3.0
    with pytest.raises(ParameterError) as exc:
        validate(problem, [path], drafters="medusa")
    assert exc.value.field == "drafters"


# ---------------------------------------------------------------- notes and the plot
def test_an_uncalibrated_roofline_says_so():
    problem = api.load(ROOT / "problems/roofline-llama31-8b.yaml")
    report = validate(problem, [MEASUREMENTS / "vllm-bench-c1-k0.json"])
    assert any("uncalibrated" in n for n in report.notes)
    doc = report.to_dict()
    assert set(doc) >= {"runs", "summary", "notes"}
    assert set(doc["runs"][0]) >= {"source", "metrics", "notes"}
    assert set(next(iter(doc["runs"][0]["metrics"].values()))) == {
        "measured", "predicted", "error_pct",
    }  # fmt: skip


def test_the_plot_draws_every_metric_in_its_family(tmp_path):
    files = [
        write(tmp_path, f"{i}.json", vllm_doc(mean_tpot_ms=tpot)) for i, tpot in enumerate((8, 12))
    ]
    doc = validate(rp.problem(), files).to_dict()
    drawn = plot_validation(doc, tmp_path / "v.svg", family=family, families=FAMILIES)
    assert list(drawn) == ["TTFT", "TPOT", "ITL", "E2EL", "throughput"]
    assert drawn["TPOT"]["mean"][0].tolist() == [8.0, 12.0]
    assert drawn["TPOT"]["mean"][1] == pytest.approx([TPOT, TPOT])
    assert drawn["throughput"]["request"][1] == pytest.approx([REQ_S, REQ_S])
    assert (tmp_path / "v.svg").stat().st_size > 0


def _relabelled(label: str) -> dict:
    doc = api.bench(
        rp.problem(), drafters=["eagle"], k=2, input_len=10, output_len=5, num_prompts=4
    ).to_dict()
    doc["label"] = label
    return doc


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (vllm_doc(request_rate=1e-9, max_concurrency=None), "x.json: request_rate"),
        (
            vllm_doc(
                input_lens=[20_000_000] * 10, output_lens=[20] * 10, total_input_tokens=200_000_000
            ),
            "x.json: input_lens",
        ),
        (_relabelled("eagle, k=99; max_num_seqs 16"), "x.json: k"),
        (_relabelled("medusa, k=2; max_num_seqs 16"), "x.json: drafters"),
        (_relabelled("eagle k 2"), "x.json: label"),
    ],
    ids=["rate too slow to send", "request too long", "k past the largest", "unknown", "label"],
)
def test_what_the_run_asks_that_the_simulator_cannot_play_names_the_file(tmp_path, doc, field):
    with pytest.raises(InputError) as exc:
        validate(rp.problem(), [write(tmp_path, "x.json", doc)])
    assert exc.value.field == field


def test_a_file_that_says_it_is_synthetic_is_not_called_a_measurement():
    """The bundled engine files are made by a generator and say so in their ``note``; the
    report carries it, so their errors are not read as hardware's."""
    problem = api.load(ROOT / "problems/roofline-llama31-8b.yaml")
    report = validate(problem, [MEASUREMENTS / "vllm-bench-c1-k0.json"])
    assert any("not a measurement" in n for n in report.runs[0].notes)


def test_a_long_value_from_a_file_is_quoted_short():
    """A 100,000-character ``hardware`` was repeated whole in the one error line."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = write(Path(d), "h.json", vllm_doc(hardware="h" * 100_000))
        problem = api.load(ROOT / "problems/roofline-llama31-8b.yaml")
        with pytest.raises(InputError) as e:
            validate(problem, [path])
    assert len(str(e.value)) < 500


# ---------------------------------------------------------------- a run longer than the cache
def _scheduler(kv_cache_tokens: int) -> dict:
    return {
        "max_num_seqs": 16,
        "max_num_batched_tokens": 2048,
        "kv_cache_tokens": kv_cache_tokens,
        "block_size": 16,
    }


def test_a_prompt_longer_than_the_cache_is_blamed_on_the_run(tmp_path):
    """Request 9's prompt (300,000 tokens) is longer than the whole 200,000-token cache of
    requests_problem: the refusal names that request of the file and the limit it
    exceeds, not the problem's kv_cache_tokens."""
    doc = vllm_doc(input_lens=[100] * 9 + [300_000], output_lens=[20] * 10)
    with pytest.raises(InputError) as e:
        validate(rp.problem(), [write(tmp_path, "long.json", doc)])
    assert e.value.field.endswith("long.json: input_lens[9]"), e.value.field
    assert "300,000 prompt and 20 output tokens" in e.value.message
    assert "KV cache, 200,000 tokens (serving.scheduler.kv_cache_tokens)" in e.value.message


def test_mean_lengths_longer_than_the_cache_name_the_totals(tmp_path):
    doc = vllm_doc(total_input_tokens=10 * 250_000)  # fixed lengths: 250,000 each
    with pytest.raises(InputError) as e:
        validate(rp.problem(), [write(tmp_path, "mean.json", doc)])
    assert e.value.field.endswith("mean.json: total_input_tokens"), e.value.field
    assert "250,000 prompt and 20 output tokens (the means)" in e.value.message


def test_a_cache_of_less_than_one_block_is_still_the_problems(tmp_path):
    with pytest.raises(InputError) as e:
        validate(rp.problem(scheduler=_scheduler(8)), [write(tmp_path, "h.json", vllm_doc())])
    assert e.value.field == "serving.scheduler.kv_cache_tokens"
