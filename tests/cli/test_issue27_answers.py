"""What the answers of bench and capacity say and write: bench's JSON as vLLM writes it,
read back by calibrate; the files each command wrote, named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[2]
REQUESTS_70B = ROOT / "problems" / "requests-70b.yaml"
CLOSED = ["--max-num-seqs", 10, "--max-concurrency", 4, "--input-len", 1000, "--output-len",
          200, "--num-prompts", 40]  # fmt: skip

#: Every key ``vllm bench serve --save-result`` writes without ``--save-detailed`` for a
#: text-generation run (vLLM 0.33.0, vllm/benchmarks/serve.py): the header of
#: ``main_async`` (lines 2306-2330), ``benchmark()``'s result (lines 1318-1341, with the
#: per-request lists ``--save-detailed`` keeps removed at lines 2428-2443), the
#: speculative-decoding keys when the server drafted (lines 1376-1387), and the statistics
#: ``process_one_metric`` writes (lines 1426-1432; here for ttft, tpot, itl, e2el at 99).
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99")
      for m in ("ttft", "tpot", "itl", "e2el")),
}  # fmt: skip
SPEC_KEYS = {
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
}  # fmt: skip


def test_bench_json_has_every_vllm_key_and_calibrate_reads_it(tmp_path):
    off, spec = tmp_path / "off.json", tmp_path / "spec.json"
    r = run("bench", REQUESTS_70B, *CLOSED, "--json", off)
    assert r.exit_code == 0, r.output
    assert f"wrote {off}" in r.stdout
    r = run("bench", REQUESTS_70B, "--drafters", "eagle3", "--k", 2, *CLOSED, "--json", spec,
            "--slo", "p99_ttft_ms=2000")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc_off, doc_spec = json.loads(off.read_text()), json.loads(spec.read_text())
    assert VLLM_KEYS <= set(doc_off) and not SPEC_KEYS & set(doc_off)
    assert VLLM_KEYS | SPEC_KEYS <= set(doc_spec)
    assert doc_off["request_goodput"] is None and doc_spec["request_goodput"] > 0
    assert len(doc_spec["spec_decode_per_position_acceptance_rates"]) == 2
    cal = tmp_path / "cal.yaml"
    r = run("calibrate", off, spec, "--problem", REQUESTS_70B, "--out", cal)
    assert r.exit_code == 0, r.output
    assert cal.exists()


# ---------------------------------------------------------------- numbers that cannot be honest
def one_line_error(r, flag: str) -> str:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), r.output
    return lines[0]


@pytest.mark.parametrize("value", ["1e-310", "1e300"])
def test_a_step_time_no_gpu_takes_is_refused_by_field_and_nothing_written(tmp_path, value):
    text = REQUESTS_70B.read_text().replace("1: {0: 18.58, 1: 19.625", f"1: {{0: {value}, 1: 19.6")
    prob = tmp_path / "p.yaml"
    prob.write_text(text)
    out = tmp_path / "b.json"
    r = run("bench", prob, "--max-num-seqs", 1, "--input-len", 100, "--output-len", 5,
            "--num-prompts", 5, "--json", out)  # fmt: skip
    # refused as the file is read, naming the entry (the simulator's own bound, 1e-6 to
    # 1e7 ms, is the second line of defence for step times a predictor computes)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith("error: serving.step_ms.0.by_batch.1.0: ")
    assert not out.exists()


def test_one_output_token_leaves_tpot_and_itl_undefined(tmp_path):
    out = tmp_path / "b.json"
    r = run("bench", REQUESTS_70B, "--input-len", 100, "--output-len", 1, "--num-prompts", 5,
            "--json", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["mean_tpot_ms"] is None and doc["p99_itl_ms"] is None
    assert doc["mean_ttft_ms"] > 0
    assert "P99 TPOT (ms)" in r.stdout and "n/a" in r.stdout
    assert any(n.startswith("TPOT and ITL are undefined") for n in doc["notes"])
    r = run("capacity", REQUESTS_70B, "--request-rate", 1, "--input-len", 100, "--output-len",
            1, "--slo", "p99_itl_ms=50")  # fmt: skip
    assert "p99_itl_ms is undefined" in one_line_error(r, "--slo")


def test_a_burstiness_whose_gaps_underflow_is_refused():
    r = run("bench", REQUESTS_70B, "--input-len", 100, "--output-len", 5, "--num-prompts", 50,
            "--request-rate", 1, "--burstiness", "1e-300")  # fmt: skip
    one_line_error(r, "--burstiness")


@pytest.mark.parametrize("flag", ["--json", "--per-request", "--plot"])
def test_an_output_path_ending_in_a_slash_is_refused(tmp_path, flag):
    path = f"{tmp_path / 'out.x'}/"
    r = run("bench", REQUESTS_70B, "--input-len", 100, "--output-len", 5, "--num-prompts", 5,
            flag, path)  # fmt: skip
    assert "ends in a slash" in one_line_error(r, flag)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- errors that name the cause
def test_a_missing_output_len_names_output_len():
    r = run("bench", REQUESTS_70B, "--input-len", 100, "--num-prompts", 5)
    one_line_error(r, "--output-len")


def test_a_trace_with_one_timestamp_is_named(tmp_path):
    trace = tmp_path / "same.csv"
    rows = "".join("2023-11-16 18:15:46.6805900,100,10\n" for _ in range(3))
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    for args in (["--trace-speedup", 2], ["--request-rate", 2]):
        r = run("capacity", REQUESTS_70B, "--trace", trace, *args, "--slo", "p99_ttft_ms=1000",
                "--workers", 1)  # fmt: skip
        assert f"{trace}: every row has the same timestamp" in one_line_error(r, "--trace")


def test_a_speed_up_that_slows_a_trace_past_its_bound_names_the_speed_up(tmp_path):
    """``--trace-speedup 1e-300`` stretches two seconds of trace past 1e8 s: the error
    named --request-rate, which was not given."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46,100,10\n2023-11-16 18:15:47,100,10\n2023-11-16 18:15:48,100,10\n"
    )
    r = run("bench", REQUESTS_70B, "--trace", trace, "--trace-speedup", 1e-300)
    assert "slows the trace to" in one_line_error(r, "--trace-speedup")


# ---------------------------------------------------------------- long work says how long
def test_progress_on_a_pipe_prints_lines_with_a_total_an_estimate_and_why(monkeypatch):
    import io
    import time

    from rich.console import Console

    from allocator.cli import progress as progress_module

    screen = io.StringIO()
    monkeypatch.setattr(progress_module, "err", Console(file=screen, width=200))
    with progress_module.total_progress("sizing", "searches done", every=0.05, why="slow") as tick:
        tick(0, 10)
        time.sleep(0.12)
        tick(4, 10)
        time.sleep(0.12)
    lines = screen.getvalue().splitlines()
    assert lines[0] == "sizing: slow"  # said once, when the work has run a while
    assert "sizing: 4/10 searches done, 0:00 elapsed, about 0:00 left" in lines
    assert lines[-1].startswith("sizing: 4/10 searches done") and len(lines) >= 3


# ---------------------------------------------------------------- the sweep's plot and table
def test_crossing_labels_of_nearby_crossings_do_not_overlap(tmp_path):
    from allocator.plots.sweep import fleet_cost_steps

    x = np.linspace(1.0, 10.0, 10)
    marks = [(5.0, "with speculation cheaper\nfrom 5 req/s"),
             (5.1, "without speculation cheaper\nfrom 5.1 req/s"),
             (5.2, "with speculation cheaper\nfrom 5.2 req/s")]  # fmt: skip
    got = fleet_cost_steps(x, x, x + 1, tmp_path / "s.png", marks=marks, xlabel="x", title="t")
    boxes = got["label_boxes"]
    assert len(boxes) == 3
    for i, a in enumerate(boxes):
        for b in boxes[:i]:
            assert a[0] >= b[2] or b[0] >= a[2] or a[1] >= b[3] or b[1] >= a[3]


def test_the_rate_sweep_table_heads_every_column_and_explains_s():
    from rich.console import Console

    from allocator.cli.capacity import rate_sweep_table

    fleet = {"replicas": 2, "k": 3, "max_num_seqs": 8, "cost_per_hour": 9.96}
    sweep = {"points": [{"request_rate": 1.0, "with_speculation": fleet,
                         "without_speculation": {**fleet, "k": 0}}]}  # fmt: skip
    table = rate_sweep_table(sweep)
    assert all(str(c.header).strip() for c in table.columns)
    console = Console(width=200, record=True)
    console.print(table)
    assert "S = max_num_seqs" in console.export_text()


def test_capacity_help_names_the_ray_extra():
    """rich read ``[ray]`` as markup and printed "needs allocator." (issue 27, item 10)."""
    r = run("capacity", "--help")
    assert r.exit_code == 0
    assert "allocator[ray]" in " ".join(r.output.replace("│", " ").split())


def test_a_step_time_the_file_allows_but_no_gpu_takes_is_refused_by_the_simulator(tmp_path):
    """1e-9 ms loads (calibrated files floor their times there) but is no step a replica
    runs: the simulator's bound, 1e-6 to 1e7 ms, refuses it naming serving.step_ms."""
    text = REQUESTS_70B.read_text().replace("1: {0: 18.58, 1: 19.625", "1: {0: 1e-9, 1: 19.6")
    prob = tmp_path / "p.yaml"
    prob.write_text(text)
    out = tmp_path / "b.json"
    r = run("bench", prob, "--max-num-seqs", 1, "--input-len", 100, "--output-len", 5,
            "--num-prompts", 5, "--json", out)  # fmt: skip
    assert "lies outside [1e-06, 1e+07] ms" in one_line_error(r, "serving.step_ms")
    assert not out.exists()
