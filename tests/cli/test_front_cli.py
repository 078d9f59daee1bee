"""``allocator front`` on the command line: every point's bench command, run, gives the
point's metrics; bad input is one ``error: <flag>: ...`` line, exit 2, nothing written; the
plot writes a PNG of what it was given."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.analysis.front import LEFT_OUT
from allocator.plots import plot_serving_front
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[2]
ROOFLINE = ROOT / "problems/roofline-llama31-8b.yaml"
SHORT = ["--input-len", "64", "--output-len", "16", "--num-prompts", "30", "--workers", "1"]


def table_problem(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data()))
    return p


def roofline_problem(tmp_path: Path) -> Path:
    d = api.load_data(ROOFLINE)
    d["serving"]["scheduler"]["max_num_seqs"] = 8
    d["search"]["k"] = {"max": 2}
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def bench_doc(command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["allocator", "bench"]
    r = run(*words[1:], "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return {k: v for k, v in doc.items() if k not in LEFT_OUT}


def test_every_bench_command_reproduces_its_point(tmp_path):
    p = table_problem(tmp_path)
    out = tmp_path / "f.json"
    r = run("front", p, *SHORT, "--max-num-seqs", "4,16", "--max-concurrency", "3,64",
            "--json", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    kinds = set()
    for point in doc["points"]:
        assert bench_doc(point["bench_command"]) == point["metrics"], point["bench_command"]
        kinds.add((isinstance(point["k"], list), point["speculative"]))
    assert kinds == {(False, False), (False, True), (True, True)}  # off, chains, schedules


@pytest.mark.slow
def test_a_retargeted_points_bench_command_names_the_file_written(tmp_path):
    p = roofline_problem(tmp_path)
    folder = tmp_path / "retargeted"
    folder.mkdir()
    out = tmp_path / "f.json"
    csv_out = tmp_path / "f.csv"
    r = run("front", p, *SHORT, "--gpus", "h100-sxm,h200", "--tp", "1,2", "--max-num-seqs",
            "2,8", "--problems-dir", folder, "--json", out, "--csv", csv_out)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    written = sorted(x.name for x in folder.iterdir())
    assert written == ["r.h100-sxm-tp2.json", "r.h200-tp1.json", "r.h200-tp2.json"]
    rng = np.random.default_rng(0)
    points = doc["points"]
    chosen = [points[i] for i in rng.choice(len(points), 6, replace=False)]
    chosen += [points[i] for i in doc["front"][:2]]
    for point in chosen:
        if (point["gpu"], point["tp"]) != ("h100-sxm", 1):
            assert point["problem_file"].startswith(str(folder))
        assert bench_doc(point["bench_command"]) == point["metrics"], point["bench_command"]
    rows = csv_out.read_text().splitlines()
    assert len(rows) == len(points) + 1


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--gpus", "h900"], "--gpus"),
        (["--tp", "3"], "--tp"),
        (["--tp", "16"], "--tp"),
        (["--max-num-seqs", "9"], "--max-num-seqs"),
        (["--slo", "p99_tpot_ms=0.001"], "--slo"),
        (["--disaggregated", "--pd-ratios", "0:1"], "--pd-ratios"),
        (["--disaggregated", "--pd-ratios", "1:2,3"], "--pd-ratios"),
        (["--disaggregated", "--pd-ratios", "1:x"], "--pd-ratios"),
        (["--pd-ratios", "1:1"], "--pd-ratios"),
        (["--kv-link", "ib-ndr"], "--kv-link"),
        (["--disaggregated", "--max-concurrency", "2"], "--max-concurrency"),
        (["--gpu-cost", "h200"], "--gpu-cost"),
        (["--gpu-cost", "h900=2"], "--gpu-cost"),
        (["--output-len", "1"], "--output-len"),
        (["--async-scheduling", "--no-async-scheduling"], "--no-async-scheduling"),
        (["--stages", "5:2"], "--num-prompts"),
        (["--turns", "0"], "--turns"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, flag):
    p = roofline_problem(tmp_path) if flag in ("--gpus", "--tp") else table_problem(tmp_path)
    if flag in ("--gpus", "--tp"):  # the roofline file, on the table's GPUs
        pass
    elif flag == "--max-num-seqs":  # the tables reach batch 16: 9..16 would run
        args = ["--max-num-seqs", "17"]
    out, png = tmp_path / "f.json", tmp_path / "f.png"
    r = run("front", p, *SHORT, *args, "--json", out, "--plot", png)
    # progress lines come on a slow (loaded) machine, once a few seconds have passed
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("simulating the front")]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), lines
    assert not out.exists() and not png.exists()


def test_no_slo_met_names_the_closest_slo_and_its_gap(tmp_path):
    r = run("front", table_problem(tmp_path), *SHORT, "--slo", "p99_tpot_ms=1",
            "--slo", "p99_ttft_ms=100000")  # fmt: skip
    assert r.exit_code == 2
    assert "closest: p99_tpot_ms" in r.stderr and "against 1 (+" in r.stderr


def test_measured_step_times_cannot_move_to_another_gpu(tmp_path):
    d = yaml.safe_load(roofline_problem(tmp_path).read_text())
    d["serving"]["prefill_ms"] = {"tokens": [16, 8192], "ms": [5.0, 90.0]}
    p = tmp_path / "measured.yaml"
    p.write_text(yaml.safe_dump(d))
    r = run("front", p, *SHORT, "--gpus", "h200")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --gpus: serving.prefill_ms was measured on the file's")
    r = run("front", p, *SHORT, "--tp", "2")
    assert r.stderr.startswith("error: --tp: serving.prefill_ms was measured on the file's")
    r = run("front", table_problem(tmp_path), *SHORT, "--gpus", "h200")
    assert r.stderr.startswith("error: --gpus: the problem's step times are not the roofline's")


def test_the_plot_writes_a_png_of_both_fronts(tmp_path):
    u = np.array([100.0, 200.0, 300.0, 150.0, 250.0, 120.0])
    g = np.array([900.0, 500.0, 100.0, 700.0, 300.0, 400.0])
    spec = np.array([True, True, True, False, False, False])
    dominated = np.array([False, False, False, True, True, True])
    meets = np.array([True, False, True, True, True, False])
    on = spec.copy()
    off = np.array([False, False, False, True, True, False])
    png = tmp_path / "front.png"
    got = plot_serving_front(u, g, spec, dominated, meets, on, off, png, slos="p99 <= 1 ms")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert got["format"] == "png"
    # steps through each side's front points, by per-user throughput
    assert set(got["on"][0]) == {100.0, 200.0, 300.0}
    assert set(got["off"][0]) == {150.0, 250.0}
    assert got["faint"] == 3 and got["marked"] == 2
    assert "front with speculation" in got["legend"]
    assert "front without speculation" in got["legend"]


def test_json_to_stdout_holds_only_the_document(tmp_path):
    r = run("front", table_problem(tmp_path), *SHORT, "--max-num-seqs", "4", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"points", "front", "notes"} <= set(doc)
    front = [doc["points"][i] for i in doc["front"]]
    assert all(not p["dominated"] for p in front)
    users = [p["output_tokens_per_s_per_user"] for p in front]
    assert users == sorted(users)


def test_a_trace_points_bench_command_reproduces_it(tmp_path):
    trace = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
    out = tmp_path / "f.json"
    args = ["--trace", trace, "--num-prompts", "40", "--request-rate", "3"]
    r = run("front", table_problem(tmp_path), *args, "--max-num-seqs", "8", "--workers", "1",
            "--json", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    points = json.loads(out.read_text())["points"]
    assert all("--trace" in p["bench_command"] for p in points)
    for point in points[:3]:
        assert bench_doc(point["bench_command"]) == point["metrics"], point["bench_command"]


CONV = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
#: Bench's workload and scheduler options, each set given to front: what the bench
#: command of every point must carry (and, run, reproduce).
WORKLOADS = [
    (["--random-input-len", "64", "--random-output-len", "16", "--random-range-ratio", "0.5",
      "--shared-prefix-len", "24", "--no-prefix-caching", "--no-async-scheduling",
      "--burstiness", "2", "--request-rate", "20", "--num-prompts", "30"],
     ["--random-input-len", "--shared-prefix-len", "--no-prefix-caching",
      "--no-async-scheduling", "--burstiness"]),
    (["--input-len", "48", "--output-len", "12", "--turns", "3", "--think-time", "0.5",
      "--shared-prefix-len", "16", "--request-rate", "10", "--num-prompts", "24",
      "--async-scheduling"],
     ["--turns", "--think-time", "--shared-prefix-len", "--async-scheduling"]),
    (["--input-len", "64", "--output-len", "16", "--stages", "10:1.5,30:1"], ["--stages"]),
    (["--lengths-from", str(CONV), "--num-prompts", "30", "--request-rate", "15"],
     ["--lengths-from"]),
]  # fmt: skip


@pytest.mark.parametrize(("args", "carried"), WORKLOADS, ids=lambda a: a[0] if a else "")
def test_bench_workload_options_reach_every_point_and_its_bench_command(tmp_path, args, carried):
    """front takes bench's workload and scheduler options: each point's bench command
    carries them and, run, gives the point's metrics (with --no-prefix-caching,
    --no-async-scheduling, a staged load ... a front that dropped one would differ)."""
    out = tmp_path / "f.json"
    r = run("front", table_problem(tmp_path), *args, "--max-num-seqs", "4,16",
            "--workers", "1", "--json", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    points = doc["points"]
    for point in points:
        words = shlex.split(point["bench_command"])
        assert all(flag in words for flag in carried), (carried, words)
    if "--stages" in args:
        assert "--num-prompts" not in words and "--request-rate" not in words
    spec = [p for p in points if p["speculative"]]
    for point in [points[0], spec[0], points[-1]]:
        assert bench_doc(point["bench_command"]) == point["metrics"], point["bench_command"]


def test_the_scheduler_options_change_the_points(tmp_path):
    """--no-prefix-caching over a shared prefix and --no-async-scheduling each change
    the front's metrics: the options reach the simulation, not only the commands."""
    base = ["--input-len", "64", "--output-len", "16", "--shared-prefix-len", "48",
            "--num-prompts", "30", "--max-num-seqs", "8", "--workers", "1",
            "--json", "-"]  # fmt: skip
    p = table_problem(tmp_path)

    def metrics(*extra: str) -> list[dict]:
        r = run("front", p, *base, *extra)
        assert r.exit_code == 0, r.output
        return [q["metrics"] for q in json.loads(r.stdout)["points"]]

    plain = metrics()
    assert metrics("--no-prefix-caching") != plain
    assert metrics("--no-async-scheduling") != plain


def test_a_disaggregated_points_bench_command_reproduces_it(tmp_path):
    out, png = tmp_path / "f.json", tmp_path / "f.png"
    r = run("front", roofline_problem(tmp_path), *SHORT, "--max-num-seqs", "4",
            "--disaggregated", "--pd-ratios", "1:2", "--json", out, "--plot", png)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    dis = [p for p in doc["points"] if p["deployment"] != "aggregated"]
    assert dis and {p["deployment"] for p in dis} == {"1:2"}
    chosen = [p for p in dis if p["speculative"]][:1] + [p for p in dis if not p["speculative"]]
    for point in chosen:
        assert "--prefill-replicas 1 --decode-replicas 2" in point["bench_command"]
        assert bench_doc(point["bench_command"]) == point["metrics"], point["bench_command"]
        assert point["fleet_export"].count("vllm serve") == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_draws_disaggregated_points_as_triangles(tmp_path):
    u = np.array([100.0, 200.0, 300.0, 150.0])
    g = np.array([900.0, 500.0, 100.0, 700.0])
    spec = np.array([True, True, False, False])
    dis = np.array([False, True, True, False])
    none = np.zeros(4, bool)
    got = plot_serving_front(u, g, spec, none, ~none, spec, ~spec, tmp_path / "f.png",
                             disaggregated=dis)  # fmt: skip
    assert got["triangles"] == 2
    assert "prefill/decode disaggregated (P:D)" in got["legend"]
    assert "speculation on P:D: non-dominated overall" in got["legend"]
