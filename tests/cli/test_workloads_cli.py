"""``bench`` and ``capacity --request-rate`` with the workloads benchmarks generate: vLLM's
random dataset, lengths from a trace's rows, staged loads. Bad input is one ``error:
<flag>: ...`` line naming the flag (both flags where two contradict), exit 2, no output
file; a staged run's per-stage metrics are those of the requests that arrived in each
stage's window, recomputed here from the per-request table."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"


def problem_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data()))
    return p


def bad_cases(tmp_path: Path):
    good = problem_file(tmp_path)
    bad_trace = tmp_path / "bad.csv"
    bad_trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n")
    bad_lengths = tmp_path / "bad-lengths.csv"  # --lengths-from reads no TIMESTAMP
    bad_lengths.write_text("ContextTokens,GeneratedTokens\n10,0\n")
    b = ["bench", good]
    c = ["capacity", good, "--request-rate", "5", "--slo", "p99_ttft_ms=500", "--workers", "1"]
    fixed = ["--input-len", "100", "--output-len", "20"]
    return [
        # contradictory lengths: one line naming both flags
        (b + [*fixed, "--random-input-len", "50"], "--random-input-len", "--input-len"),
        (
            b + ["--output-len", "5", "--random-range-ratio", "0.2"],
            "--random-range-ratio",
            "--output-len",
        ),  # noqa: E501
        (
            b + ["--random-output-len", "5", "--lengths-from", TRACE],
            "--lengths-from",
            "--random-output-len",
        ),  # noqa: E501
        (b + ["--lengths-from", TRACE, "--trace", TRACE], "--trace", "--lengths-from"),
        (c + [*fixed, "--random-input-len", "50"], "--random-input-len", "--input-len"),
        (c + ["--lengths-from", TRACE, "--input-len", "5"], "--lengths-from", "--input-len"),
        # the random dataset's values
        (b + ["--random-range-ratio", "1"], "--random-range-ratio", ""),
        (b + ["--random-range-ratio", "-0.5"], "--random-range-ratio", ""),
        (b + ["--random-range-ratio", '{"input": 0.2}'], "--random-range-ratio", ""),
        (b + ["--random-range-ratio", "wide"], "--random-range-ratio", ""),
        (b + ["--random-input-len", "1", "--random-range-ratio", "0.5"], "--random-input-len", ""),
        (b + ["--random-input-len", "-4"], "--random-input-len", ""),
        (b + ["--random-output-len", "99999999999"], "--random-output-len", ""),
        (c + ["--random-range-ratio", "1.5"], "--random-range-ratio", ""),
        # lengths from a trace
        (b + ["--lengths-from", tmp_path / "none.csv"], "--lengths-from", ""),
        (b + ["--lengths-from", bad_lengths], "--lengths-from", ""),
        (c + ["--lengths-from", bad_lengths], "--lengths-from", ""),
        # stages
        (b + [*fixed, "--stages", "2:-10"], "--stages", ""),
        (b + [*fixed, "--stages", "2:0"], "--stages", ""),
        (b + [*fixed, "--stages", "0:10"], "--stages", ""),
        (b + [*fixed, "--stages", "inf:10"], "--stages", ""),
        (b + [*fixed, "--stages", "fast"], "--stages", ""),
        (b + [*fixed, "--stages", "2:10,"], "--stages", ""),
        (b + [*fixed, "--stages", "1e9:1e9"], "--stages", ""),
        (b + [*fixed, "--stages", "1e-9:1"], "--stages", ""),
        (b + [*fixed, "--stages", "2:10", "--num-prompts", "20"], "--num-prompts", "--stages"),
        (b + [*fixed, "--stages", "2:10", "--request-rate", "3"], "--request-rate", "--stages"),
        (b + ["--stages", "2:10", "--trace", TRACE], "--stages", "--trace"),
        (b + ["--stages", "2:10"], "--input-len", ""),  # no lengths
        (
            c[:2] + ["--tokens-per-s", "50", "--random-input-len", "5"],
            "--random-input-len",
            "--request-rate",
        ),  # noqa: E501
    ]


CASES = 30


@pytest.mark.parametrize("index", range(CASES))
def test_bad_workload_is_one_line_naming_the_flags(tmp_path, index):
    cases = bad_cases(tmp_path)
    assert len(cases) == CASES
    args, flag, other = cases[index]
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run(*args, "--json", tmp_path / "o.json")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}:"), r.stderr
    assert other in lines[0], lines[0]
    assert "Traceback" not in r.output and r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == before


def test_staged_bench_has_each_stages_metrics(tmp_path):
    p = problem_file(tmp_path)
    out, rows = tmp_path / "b.json", tmp_path / "r.csv"
    args = ["bench", p, "-d", "eagle", "-k", "2", "--stages", "2:20,6:10,1:20"]
    args += ["--random-input-len", "200", "--random-output-len", "30"]
    args += ["--random-range-ratio", "0.5", "--seed", "4", "--json", out, "--per-request", rows]
    r = run(*args)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    with rows.open() as f:
        table = list(csv.DictReader(f))
    arrival = np.array([float(t["arrival_s"]) for t in table])
    ttft = np.array([float(t["ttft_ms"]) for t in table])
    e2el = np.array([float(t["e2el_ms"]) for t in table])
    prompt = np.array([int(t["prompt_tokens"]) for t in table])
    assert doc["num_prompts"] == len(table)
    assert doc["request_rate"] == pytest.approx(len(table) / 50.0)
    assert [s["stage"] for s in doc["stages"]] == [1, 2, 3]
    assert sum(s["num_prompts"] for s in doc["stages"]) == len(table)
    assert 100 <= prompt.min() and prompt.max() <= 300  # floor(100) .. ceil(300)
    for s, (lo, hi) in zip(doc["stages"], ((0, 20), (20, 30), (30, 50)), strict=True):
        inside = (arrival >= lo) & (arrival < hi)
        assert s["start_s"] == lo and s["seconds"] == hi - lo
        assert s["num_prompts"] == int(inside.sum()) > 0
        assert s["total_input_tokens"] == int(prompt[inside].sum())
        assert s["mean_ttft_ms"] == pytest.approx(ttft[inside].mean())
        assert s["p99_e2el_ms"] == pytest.approx(np.percentile(e2el[inside], 99))
    assert any("staged load" in n for n in doc["notes"])
    assert any("--ignore-eos" in n for n in doc["notes"])


@pytest.mark.parametrize("scheduling", [(), ("--no-async-scheduling",)])
def test_capacity_with_drawn_lengths_prints_a_reproducing_bench_command(tmp_path, scheduling):
    """The bench command capacity prints for a replica replays its lengths (the random
    dataset here) and the scheduling it ran, so running it gives the replica's metrics
    (the synchronous scheduler's differ from the default's at this load)."""
    p = problem_file(tmp_path)
    out = tmp_path / "c.json"
    r = run(
        "capacity", p, "--request-rate", "4", "--slo", "p99_ttft_ms=2000", "--workers", "1",
        "--random-input-len", "200", "--random-output-len", "20", "--random-range-ratio", "0.4",
        "--num-prompts", "100", "--json", out, *scheduling,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    notes = [n for n in _strings(doc) if "reproduce: allocator bench " in n]
    assert notes, json.dumps(doc)[:2000]
    words = shlex.split(notes[0].split("reproduce: ", 1)[1])
    assert "--random-range-ratio" in words and "--input-len" not in words
    assert words[words.index("--random-input-len") + 1] == "200"
    assert all(flag in words for flag in scheduling)
    again = tmp_path / "again.json"
    r = run(*words[1:], "--json", again)
    assert r.exit_code == 0, r.output
    replayed = json.loads(again.read_text())
    fleet = doc["fleet"] if "fleet" in doc else doc
    metrics = next(d["metrics"] for d in _dicts(fleet) if "metrics" in d)
    for key in ("total_input_tokens", "p99_ttft_ms", "mean_e2el_ms"):
        assert replayed[key] == pytest.approx(metrics[key]), key


def _dicts(doc):
    if isinstance(doc, dict):
        yield doc
        for v in doc.values():
            yield from _dicts(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _dicts(v)


def _strings(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)


def test_help_states_ignore_eos():
    for command in ("bench", "capacity"):
        r = run(command, "--help")
        assert r.exit_code == 0
        text = " ".join(r.stdout.split())
        assert "--ignore-eos" in text and "--random-range-ratio" in text
        assert "--lengths-from" in text
    assert "--stages" in " ".join(run("bench", "--help").stdout.split())
