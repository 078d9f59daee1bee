"""Context as an axis through the commands: schedule --contexts, solve --batch --context,
evaluate --context; the memory cap from the specs; the memory bug of issue 20 (schedule
reported speculation off at a batch size no configuration fits); answers an engine can
serve; the SGLang export refusal.

References are closed forms written here from docs/design.md §8.11–§8.12 (the roofline
``max(memory, compute) + k · draft``; the cap ``⌊(M·u − W) / (κ·C)⌋``), never values of
the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.cli import app
from tests.support.cli_runner import runner

PROBLEMS = Path(__file__).resolve().parents[2] / "problems"
# 8 x H100 SXM (datasheet: 3.35 TB/s, 989.5 dense bf16 TFLOP/s, 80 GB each)
BW = 8 * 3.35e12  # bytes/s
FLOPS = 8 * 989.5e12
MEM = 8 * 80e9
# a dense verifier of 3.35e9 bf16 parameters, 32 layers, 32 heads, 8 KV heads of 128
PARAMS = 3.35e9
KV_BYTES = 2 * 32 * 8 * 128 * 2  # 131,072 bytes per token
ATTN_FLOPS = 4 * 32 * 32 * 128  # per (query, cached token) pair
DRAFT_MS = 0.2
ACCEPT = 0.6


def roofline_problem(batch_sizes, count=8, params_b=3.35, **extra) -> dict:
    return {
        "name": "ctx",
        "convention": "bonus",
        "drafters": [
            {
                "name": "d",
                "method": "eagle3",
                "model": "org/head",
                "acceptance": ACCEPT,
                "unit_cost": 0.05,
            }
        ],
        "search": {"k": {"max": 4}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": batch_sizes,
            "hardware": {"gpu": "h100-sxm", "count": count},
            "model": {
                "params_b": params_b,
                "layers": 32,
                "hidden": 4096,
                "heads": 32,
                "kv_heads": 8,
                "head_dim": 128,
                "dtype": "bf16",
            },
            "roofline": {"drafters": {"d": {"fixed_ms": DRAFT_MS}}},
            **extra,
        },
    }


def ref_step(b: float, k: int, context: float) -> float:
    """The roofline at peak (η = 1, no fixed or per-sequence time, the KV write
    counted), by hand: memory = [W + κ(b·C + b·t)], compute = φ·b·t + α·b·t·C, in ms."""
    t = k + 1
    n = b * t
    w = 1e3 * 2 * PARAMS / BW
    kv = 1e3 * KV_BYTES / BW
    phi = 1e3 * 2 * PARAMS / FLOPS
    alpha = 1e3 * ATTN_FLOPS / FLOPS
    memory = w + kv * (b * context + n)
    compute = phi * n + alpha * b * t * context
    # count 8 over NVLink 4: two ring all-reduces per layer of hidden x 2 bytes per token,
    # 2(n - 1)/n of it over 450e9 B/s, added outside the max (docs/design.md §8.12)
    comm = 1e3 * 2 * 32 * (2 * 7 / 8) * 4096 * 2 / 450e9 * n
    return max(memory, compute) + comm + k * DRAFT_MS


def ref_best_k(b: float, context: float) -> int:
    rate = [
        (1 + sum(ACCEPT**i for i in range(1, k + 1))) / ref_step(b, k, context) for k in range(5)
    ]
    return int(np.argmax(rate))


def write(tmp_path, data, name="p.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_context_trend_speculation_off_short_and_on_long_at_one_batch(tmp_path):
    """At 64 sequences, by hand (ms): W = 6.7e9 B / 26.8e12 B/s = 0.25; κ = 4.8907e-6 per
    token; φ = 8.4639e-4 per token; α = 6.6231e-8 per pair; the all-reduces over NVLink 4
    X_ar = 10³·64·(2·7/8)·8192 / 450e9 = 2.0389e-3 per token, outside the max.
    Context 128: k = 0: memory 0.25 + κ·(64·128 + 64) = 0.29038, compute 0.05471, + 64·X_ar
    = 0.42087, 1 / 0.42087 = 2.376 tokens/ms/seq; k = 1: 0.29069 + 128·X_ar + 0.2 = 0.75167,
    E = 1.6, 1.6 / 0.75167 = 2.129 < 2.376: off. Context 16384: k = 0: 0.25 + κ·(64·16384
    + 64) + 64·X_ar = 5.5091, 0.1815; k = 4: 5.3801 + 320·X_ar + 0.8 = 6.8325, E = 2.3056,
    0.3374: on (k = 4)."""
    path = write(tmp_path, roofline_problem([64]))
    assert ref_best_k(64, 128) == 0 and ref_best_k(64, 16384) == 4
    assert ref_step(64, 0, 128) == pytest.approx(0.420867, rel=1e-5)
    r = runner.invoke(app, ["schedule", str(path), "--contexts", "128,16384", "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(row["context"], row["batch"], row["k"]) for row in doc["rows"]] == [
        (128, 64, 0),
        (16384, 64, 4),
    ]
    assert doc["speculation_off_from"] == [
        {"context": 128, "speculation_off_from": 64},
        {"context": 16384, "speculation_off_from": None},
    ]
    long = doc["rows"][1]
    e4 = 1 + sum(ACCEPT**i for i in range(1, 5))
    assert long["tokens_per_s"] == pytest.approx(64 * 1000 * e4 / ref_step(64, 4, 16384), rel=1e-9)
    # a context-blind schedule (no context: no KV read) turns speculation off at 64
    r = runner.invoke(app, ["schedule", str(path), "--json", "-"])
    blind = json.loads(r.stdout)
    assert blind["rows"][0]["k"] == 0 and "context" not in blind["rows"][0]
    assert any("not calibrated" in n for n in blind["notes"])


def test_export_writes_one_config_per_context_bucket_when_they_differ(tmp_path):
    path = write(tmp_path, roofline_problem([64]))
    r = runner.invoke(app, ["schedule", str(path), "--contexts", "128,16384", "--export", "vllm"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["128"] is None  # that bucket never speculates
    assert doc["16384"]["num_speculative_tokens_per_batch_size"] == [[1, 64, 4]]
    assert "vllm/config/speculative.py" in r.stderr and "per context" in r.stderr


def test_solve_and_evaluate_take_the_context(tmp_path):
    path = write(tmp_path, roofline_problem([64]))
    r = runner.invoke(
        app,
        [
            "evaluate",
            str(path),
            "-d",
            "d",
            "-k",
            "4",
            "--batch",
            "64",
            "--context",
            "16384",
            "--json",
            "-",
        ],
    )
    assert r.exit_code == 0, r.output
    point = json.loads(r.stdout)
    assert point["context"] == 16384
    assert point["step_ms"] == pytest.approx(ref_step(64, 4, 16384), rel=1e-12)
    r = runner.invoke(
        app, ["solve", str(path), "--batch", "64", "--context", "16384", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    best = max(doc["front"], key=lambda p: p["tokens_per_s"])
    assert best["k"] == 4 and best["context"] == 16384
    r = runner.invoke(app, ["solve", str(path), "--context", "16384"])
    assert r.exit_code == 2 and r.output.startswith("error: --context: ")


# ---------------------------------------------------------------- the memory cap
def test_memory_cap_from_the_specs_falls_with_context(tmp_path):
    """One H100, 8.0e9 bf16 parameters (16e9 B) and Llama-3.1-8B's KV (32 layers x 8 KV
    heads x 128 x 2 x 2 B = 131,072 B per token), vLLM's gpu_memory_utilization 0.92:
    room 80e9·0.92 − 16e9 = 57.6e9 B; at 8192 tokens ⌊57.6e9 / 1.0737e9⌋ = 53 sequences,
    at 32768 ⌊13.41⌋ = 13."""
    room = 80e9 * 0.92 - 16e9
    assert math.floor(room / (KV_BYTES * 8192)) == 53
    assert math.floor(room / (KV_BYTES * 32768)) == 13
    data = roofline_problem([1, 8, 13, 14, 53, 54], count=1, params_b=8.0)
    path = write(tmp_path, data)
    r = runner.invoke(app, ["schedule", str(path), "--contexts", "8192,32768", "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    kept = {c: [row["batch"] for row in doc["rows"] if row["context"] == c] for c in (8192, 32768)}
    assert kept == {8192: [1, 8, 13, 14, 53], 32768: [1, 8, 13]}
    assert any("54 left out" in n and "53 sequences" in n for n in doc["notes"])
    assert any("14, 53, 54 left out" in n and "13 sequences" in n for n in doc["notes"])
    assert any("memory cap from the specs" in n for n in doc["notes"])


def test_schedule_leaves_out_batch_sizes_the_kv_cache_cannot_hold(tmp_path):
    """Issue 20: with a KV cache holding 40 sequences schedule reported plain decoding at
    batch 64 and speculation_off_from: 64 (speculative rows were left out for memory, so
    k = 0 won by default); capacity leaves such a batch size out."""
    data = yaml.safe_load((PROBLEMS / "serving-eagle.yaml").read_text())
    data["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 1.0}
    data["drafters"][0]["memory_gb"] = 1.0
    path = write(tmp_path, data)
    r = runner.invoke(app, ["schedule", str(path), "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [row["batch"] for row in doc["rows"]] == [1, 4, 16, 32]
    assert doc["speculation_off_from"] is None
    assert any("batch 64 left out" in n and "40 sequences" in n for n in doc["notes"])
    # batch 32 fits with the drafter hosted (39 sequences): speculation is still planned
    assert doc["rows"][-1]["k"] > 0


def test_nothing_fits_is_an_error_naming_the_memory(tmp_path):
    data = yaml.safe_load((PROBLEMS / "serving-eagle.yaml").read_text())
    data["serving"]["memory"] = {"kv_cache_gb": 0.5, "kv_per_seq_gb": 0.5}
    data["serving"]["batch_sizes"] = [4, 16]
    path = write(tmp_path, data)
    r = runner.invoke(app, ["schedule", str(path)])
    assert r.exit_code == 2
    assert r.output.startswith("error: serving.memory: ") and "at most 1 sequences" in r.output


# ---------------------------------------------------------------- what an engine serves
def pooled_problem() -> dict:
    return {
        "name": "two",
        "convention": "bonus",
        "drafters": [
            {
                "name": "a",
                "method": "eagle3",
                "model": "x/a",
                "acceptance": 0.6,
                "unit_cost": 0.05,
                "draft_ms": {1: 0.3, 64: 0.6},
            },
            {
                "name": "b",
                "method": "ngram",
                "acceptance": 0.5,
                "unit_cost": 0.01,
                "draft_ms": {1: 0.05, 64: 0.1},
            },
        ],
        "search": {"k": {"max": 3}},
        "serving": {
            "batch_sizes": [1, 64],
            "verify_ms": {
                "batch": [1, 64],
                "tokens": [1, 2, 4, 7],
                "ms": [[6.0, 6.1, 6.3, 6.6], [8.0, 9.0, 11.0, 14.0]],
            },
        },
    }


def test_schedule_and_solve_batch_serve_one_drafter_unless_pooled(tmp_path):
    path = write(tmp_path, pooled_problem())
    r = runner.invoke(app, ["schedule", str(path), "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert all(len(row["drafters"]) <= 1 for row in doc["rows"])
    assert any("only what vLLM serves" in n for n in doc["notes"])
    pooled = json.loads(
        runner.invoke(app, ["schedule", str(path), "--pooled", "--json", "-"]).stdout
    )
    assert any(len(row["drafters"]) == 2 for row in pooled["rows"])  # the pool wins at batch 1
    assert any("upper bound" in n for n in pooled["notes"])
    r = runner.invoke(app, ["solve", str(path), "--batch", "1", "--json", "-"])
    assert r.exit_code == 0, r.output
    front = json.loads(r.stdout)["front"]
    assert all(p["m"] == 1 for p in front)
    r = runner.invoke(app, ["solve", str(path), "--batch", "1", "--pooled", "--json", "-"])
    assert any(p["m"] == 2 for p in json.loads(r.stdout)["front"])


def test_schedule_export_sglang_says_plainly_why(tmp_path):
    r = runner.invoke(app, ["schedule", str(PROBLEMS / "serving-eagle.yaml"), "--export", "sglang"])
    assert r.exit_code == 2
    line = r.output.strip()
    assert line.startswith("error: --export: SGLang takes no k schedule by batch size")
    assert "sglang/srt/speculative/adaptive_spec_params.py" in line
    assert "is not one of" not in line and len(r.output.strip().splitlines()) == 1


def test_json_without_contexts_keeps_its_rows(tmp_path):
    """Without --contexts rows carry exactly today's fields (no context)."""
    r = runner.invoke(app, ["schedule", str(PROBLEMS / "serving-eagle.yaml"), "--json", "-"])
    doc = json.loads(r.stdout)
    keys = {
        "batch",
        "drafters",
        "k",
        "tokens_per_s",
        "tokens_per_s_per_seq",
        "tpot_ms",
        "speedup",
        "cost_per_mtok",
    }
    assert all(set(row) == keys for row in doc["rows"])
    assert isinstance(doc["speculation_off_from"], int | None)


@pytest.mark.parametrize(
    "contexts", ["", "0", "-5", "1024,512", "nan", "1024,,2048", "x", "1e10", ",".join(["1"] * 65)]
)
def test_bad_contexts_are_one_line(contexts):
    r = runner.invoke(
        app, ["schedule", str(PROBLEMS / "serving-eagle.yaml"), "--contexts", contexts]
    )
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --contexts: ") and len(r.output.strip().splitlines()) == 1


def test_api_schedule_by_context_is_the_json_document(tmp_path):
    path = write(tmp_path, roofline_problem([64]))
    sched = api.schedule(path, contexts=[128, 16384])
    r = runner.invoke(app, ["schedule", str(path), "--contexts", "128,16384", "--json", "-"])
    assert json.loads(r.stdout) == json.loads(json.dumps(sched.to_dict()))
