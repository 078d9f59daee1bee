"""``allocator bench`` and ``allocator capacity --request-rate`` on the command line: the
JSON is the API's document, the per-request table and the plot are written, and every bad
input of issue 17's list is one ``error: <field>: ...`` line, exit 2, no output file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from allocator import api
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
FIXED = ["--input-len", "100", "--output-len", "20", "--num-prompts", "50"]


def problem_file(tmp_path: Path, **serving) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data(**serving)))
    return p


def test_bench_json_is_the_apis_document(tmp_path):
    p = problem_file(tmp_path)
    out, rows, png = tmp_path / "b.json", tmp_path / "r.csv", tmp_path / "b.png"
    r = run(
        "bench",
        p,
        "-d",
        "eagle",
        "-k",
        "2",
        "--request-rate",
        "10",
        *FIXED,
        "--seed",
        "3",
        "--json",
        out,
        "--per-request",
        rows,
        "--plot",
        png,
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    want = api.bench(
        p,
        drafters=["eagle"],
        k=2,
        request_rate=10.0,
        input_len=100,
        output_len=20,
        num_prompts=50,
        seed=3,
    ).to_dict()
    doc.pop("date")
    want.pop("date")
    assert doc == json.loads(json.dumps(want))
    with rows.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 50 and float(table[0]["ttft_ms"]) > 0
    assert png.stat().st_size > 0
    assert "Successful requests" in r.stdout and "eagle, k=2" in r.stdout


def test_bench_on_the_bundled_problem_and_trace():
    r = run(
        "bench",
        ROOT / "problems/requests-70b.yaml",
        "--trace",
        TRACE,
        "--num-prompts",
        "300",
        "--schedule",
        "-d",
        "eagle3",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["completed"] == 300 and doc["spec_decode_acceptance_length"] > 1
    assert doc["label"].startswith("eagle3, k by batch size")


def test_capacity_for_a_request_rate_json(tmp_path):
    p = problem_file(tmp_path)
    args = [
        "--request-rate",
        "20",
        "--slo",
        "p99_ttft_ms=400",
        "--slo",
        "p99_tpot_ms=15",
        *FIXED,
        "--max-num-seqs",
        "8,16",
        "--workers",
        "1",
    ]
    r = run("capacity", p, *args, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    keys = [
        "replicas",
        "gpus",
        "drafters",
        "k",
        "max_num_seqs",
        "per_replica_request_rate",
        "max_request_rate_per_replica",
        "cost_per_hour",
        "cost_per_mtok",
        "metrics",
        "baseline",
        "saving",
        "notes",
    ]
    assert list(doc) == keys
    assert list(doc["baseline"]) == keys[:10]
    want = api.size_fleet_for_rate(
        p,
        20.0,
        ["p99_ttft_ms=400", "p99_tpot_ms=15"],
        input_len=100,
        output_len=20,
        num_prompts=50,
        max_num_seqs=[8, 16],
        workers=1,
    ).to_dict()
    assert doc == json.loads(json.dumps(want))
    shown = run("capacity", p, *args)
    assert shown.exit_code == 0 and "requests/s under" in shown.stdout
    assert "reproduce: allocator bench" in " ".join(shown.stderr.split())


def test_capacity_rate_sweep_plot(tmp_path):
    p = problem_file(tmp_path)
    png = tmp_path / "s.png"
    r = run(
        "capacity",
        p,
        "--request-rate",
        "20",
        "--slo",
        "p99_ttft_ms=400",
        *FIXED,
        "--max-num-seqs",
        "16",
        "--workers",
        "1",
        "--sweep-rate",
        "5:60:4",
        "--plot",
        png,
    )
    assert r.exit_code == 0, r.output
    assert png.stat().st_size > 0 and "$/h against request rate" in r.stdout


def bad_cases(tmp_path: Path):
    good = problem_file(tmp_path)
    tight = tmp_path / "tight.yaml"
    tight.write_text(
        yaml.safe_dump(
            rp.data(
                scheduler={"max_num_seqs": 4, "max_num_batched_tokens": 2048, "kv_cache_tokens": 64}
            )
        )
    )
    short = tmp_path / "short.yaml"
    short.write_text(
        yaml.safe_dump(
            rp.data(
                scheduler={
                    "max_num_seqs": 16,
                    "max_num_batched_tokens": 8192,
                    "kv_cache_tokens": 10**6,
                }
            )
        )
    )
    back = tmp_path / "back.csv"
    back.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n"
        "2023-11-16 18:15:45.00,10,5\n"
    )
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n")
    negative = tmp_path / "negative.csv"
    negative.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,5\n")
    slo = ["--request-rate", "5", "--workers", "1", *FIXED]
    b = ["bench", good]
    c = ["capacity", good]
    return [
        (c + slo + ["--slo", "p99_foo_ms=5"], "--slo"),
        (c + slo + ["--slo", "p100_ttft_ms=5"], "--slo"),
        (c + slo + ["--slo", "p99_ttft_ms=-5"], "--slo"),
        (c + slo + ["--slo", "p99_tpot_ms=2"], "--slo"),  # no configuration reaches it
        (c + slo, "--slo"),  # none given
        (c + ["--request-rate", "-2", "--slo", "p99_ttft_ms=5", *FIXED], "--request-rate"),
        (b + ["--request-rate", "-2", *FIXED], "--request-rate"),
        (b + ["--request-rate", "0", *FIXED], "--request-rate"),
        (b + ["--trace", back], "--trace"),
        (b + ["--trace", garbled], "--trace"),
        (b + ["--trace", negative], "--trace"),
        (c + ["--request-rate", "5", "--slo", "p99_ttft_ms=5", "--trace", back], "--trace"),
        (b + ["--input-len", "-3", "--output-len", "5"], "--input-len"),
        (b + ["--input-len", "3", "--output-len", "0"], "--output-len"),
        (["bench", short, "--input-len", "1000", "--output-len", "100"], "serving.prefill_ms"),
        (
            ["bench", tight, "--input-len", "100", "--output-len", "10"],
            "serving.scheduler.kv_cache_tokens",
        ),
        (b + ["--max-num-seqs", "40", *FIXED], "--max-num-seqs"),
        (b + ["-k", "2", *FIXED], "--k"),
        (b + ["-d", "nope", "-k", "2", *FIXED], "--drafters"),
        (b + ["-d", "eagle,ngram", "-k", "2", *FIXED], "--drafters"),
        (b + ["-d", "eagle", "-k", "2", "--schedule", *FIXED], "--schedule"),
        (b + ["--trace", TRACE, "--input-len", "5"], "--trace"),
        (b + ["--trace-speedup", "2", *FIXED], "--trace-speedup"),
        (b + ["--trace", TRACE, "--trace-speedup", "2", "--request-rate", "3"], "--trace-speedup"),
        (b + ["--input-len", "10", "--output-len", "5", "--num-prompts", "0"], "--num-prompts"),
        (b + ["--burstiness", "0", *FIXED], "--burstiness"),
        (b + ["--max-concurrency", "0", *FIXED], "--max-concurrency"),
        (b + ["--plot", tmp_path / "x.txt", *FIXED], "--plot"),
        (b, "--input-len"),  # no requests
        (c + slo + ["--slo", "p99_ttft_ms=5", "--workers", "0"], "--workers"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--max-num-seqs", "a,b"], "--max-num-seqs"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--sweep-rate", "0:5:3"], "--sweep-rate"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--plot", tmp_path / "x.png"], "--plot"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--tpot-ms", "5"], "--tpot-ms"),
    ]


@pytest.mark.parametrize("index", range(34))
def test_bad_input_is_one_line_and_leaves_no_file(tmp_path, index):
    cases = bad_cases(tmp_path)
    assert len(cases) == 34
    args, field = cases[index]
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run(*args, "--json", tmp_path / "o.json")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.stderr
    assert "Traceback" not in r.output and r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == before
