"""``allocator validate`` on the command line: a file written by ``allocator bench --json``
validated against the same problem and seed has no error in any metric; the JSON is the
API's document; the plot is written; bad input is one ``error: <field>: ...`` line, exit 2,
no output file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from allocator import api
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[2]
BENCH = ["--input-len", "100", "--output-len", "20", "--num-prompts", "40", "--seed", "5"]


def problem_file(tmp_path: Path, **serving) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data(**serving)))
    return p


def bench_file(tmp_path: Path, problem: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    r = run("bench", problem, *args, *BENCH, "--json", out)
    assert r.exit_code == 0, r.output
    return out


def test_files_written_by_bench_validate_with_no_error(tmp_path):
    p = problem_file(tmp_path)
    files = [
        bench_file(tmp_path, p, "a.json", "-d", "eagle", "-k", "2", "--request-rate", "10"),
        bench_file(tmp_path, p, "b.json", "--max-concurrency", "4"),
        bench_file(tmp_path, p, "c.json", "-d", "ngram", "-k", "1", "--max-num-seqs", "4"),
    ]
    out, png = tmp_path / "v.json", tmp_path / "v.png"
    r = run("validate", p, *files, "--seed", "5", "--json", out, "--plot", png)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert [x["source"] for x in doc["runs"]] == ["a.json", "b.json", "c.json"]
    assert [x["replayed"]["configuration"] for x in doc["runs"]] == [
        "eagle, k=2",
        "speculation off",
        "ngram, k=1",
    ]
    for one in doc["runs"]:
        measured = json.loads((tmp_path / one["source"]).read_text())
        assert len(one["metrics"]) >= 24
        for key, m in one["metrics"].items():
            assert m["measured"] == measured[key]
            assert abs(m["error_pct"]) < 1e-9, key
    assert doc["summary"]["p99_ttft_ms"]["runs"] == 3
    assert all(s["mean_abs_error_pct"] < 1e-9 for s in doc["summary"].values())
    assert png.stat().st_size > 0
    assert "p99_ttft_ms" in r.stdout and "+0.0%" in r.stdout and "|error| over the runs" in r.stdout
    assert "step times from the measured step_ms tables" in r.stderr
    want = api.validate_runs(p, files, seed=5).to_dict()
    assert doc == json.loads(json.dumps(want))


def test_json_to_stdout_is_only_the_document(tmp_path):
    p = problem_file(tmp_path)
    f = bench_file(tmp_path, p, "a.json", "--max-concurrency", "2")
    r = run("validate", p, f, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"problem", "seed", "runs", "summary", "notes"}


def _vllm(tmp_path: Path, name: str, **keys) -> Path:
    doc = {
        "model_id": "example/verifier",
        "num_prompts": 10,
        "request_rate": "inf",
        "max_concurrency": 1,
        "duration": 2.0,
        "completed": 10,
        "total_input_tokens": 1000,
        "total_output_tokens": 200,
        "request_throughput": 5.0,
        "output_throughput": 100.0,
        "mean_ttft_ms": 5.0,
    }
    doc.update(keys)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _bad_cases(tmp_path: Path):
    p = problem_file(tmp_path)
    spec = dict(
        spec_decode_num_drafts=10,
        spec_decode_draft_tokens=20,
        spec_decode_accepted_tokens=10,
        spec_decode_acceptance_length=2.0,
        spec_decode_per_position_acceptance_rates=[0.6, 0.4],
    )
    csv = tmp_path / "rows.csv"
    csv.write_text("drafters,k,batch,tokens_per_s\n,0,1,50\n")
    return [
        ((p, _vllm(tmp_path, "tp.json", tensor_parallel_size=1)), "tp.json"),
        (
            (p, _vllm(tmp_path, "n.json", input_lens=[100] * 10, output_lens=[20] * 9)),
            "n.json: output_lens",
        ),
        ((p, _vllm(tmp_path, "s.json", **spec)), "--drafters"),
        ((p, _vllm(tmp_path, "s.json", **spec), "--drafters", "medusa"), "--drafters"),
        ((p, _vllm(tmp_path, "m.json"), "--max-num-seqs", "0"), "--max-num-seqs"),
        ((p, csv), "rows.csv"),
        ((p, tmp_path / "absent.json"), "FILE"),
    ]


@pytest.mark.parametrize("index", range(7))
def test_bad_input_is_one_line_and_leaves_no_file(tmp_path, index):
    args, field = _bad_cases(tmp_path)[index]
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run("validate", *args, "--json", tmp_path / "o.json", "--plot", tmp_path / "o.png")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), r.stderr
    assert "Traceback" not in r.output and r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == before
