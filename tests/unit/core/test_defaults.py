"""The default roofline factors per GPU (allocator/core/defaults.py): every entry within
bounds and with its evidence, and each fitted memory efficiency checked against a closed
form worked by hand from one of its runs in problems/measured/serving-runs/runs.yaml.

The closed form is independent of the simulator and of ModelSpec: the bytes a decoding
step reads are counted here from the published config values (the bundled config.json
files, sources in problems/measured/serving-runs/configs/README.md), and the share of the
GPUs' peak bandwidth is those bytes over (bandwidth x the measured inter-token latency).
The fit pools several groups and also matches TTFT and E2E, and the closed form leaves out
the all-reduce and the prefills interleaved with decoding, so the two agree only to
within the tolerance stated per case, not exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from allocator.core.defaults import (
    EVIDENCE,
    FACTOR_KEYS,
    FALLBACK,
    PER_GPU,
    default_factors,
)
from allocator.core.hardware import GPUS

ROOT = Path(__file__).resolve().parents[3]
RUNS = ROOT / "problems/measured/serving-runs/runs.yaml"


@pytest.fixture(scope="module")
def families() -> dict[str, dict]:
    return {f["id"]: f for f in yaml.safe_load(RUNS.read_text(encoding="utf-8"))}


def test_every_entry_is_a_known_gpu_with_all_factors_in_bounds():
    assert set(FALLBACK) == set(FACTOR_KEYS)
    for gpu, factors in PER_GPU.items():
        assert gpu in GPUS, gpu
        assert set(factors) == set(FACTOR_KEYS), gpu
        for key in ("mem_eff", "compute_eff", "prefill_eff", "comm_eff"):
            assert 0.0 < factors[key] <= 1.0, (gpu, key)
        assert factors["ttft_overhead_ms"] >= 0.0


def test_every_entry_has_evidence_naming_runs_that_exist(families):
    assert "fallback" in EVIDENCE
    for gpu in PER_GPU:
        text = EVIDENCE[gpu]
        named = [fid for fid in families if fid in text]
        assert named, f"{gpu}: EVIDENCE names no family of runs.yaml"
        for fid in named:  # a family cited for a GPU ran on that GPU
            assert gpu.split("-")[0] in families[fid]["gpu"].lower().replace(" ", ""), fid


def test_a_gpu_without_runs_takes_the_fallback():
    missing = [g for g in GPUS if g not in PER_GPU]
    assert missing, "every GPU has runs: nothing falls back"
    for gpu in missing:
        assert dict(default_factors(gpu)) == dict(FALLBACK)
    for gpu in PER_GPU:
        assert default_factors(gpu) is PER_GPU[gpu]


def _dense_params(h: int, layers: int, heads: int, kv: int, inter: int, vocab: int, bias: bool):
    """Llama/Qwen2 parameters read per decoded token (no input embedding table), by hand:
    q, o h x h; k, v h x (kv x d); three h x inter MLP matrices; two norms per layer; the
    final norm; the LM head vocab x h."""
    d = h // heads
    attn = 2 * h * h + 2 * h * kv * d + ((h + 2 * kv * d) if bias else 0)
    return layers * (attn + 3 * h * inter + 2 * h) + h + vocab * h


def _run(families, fid: str, index: int) -> dict:
    return families[fid]["runs"][index]


def test_a100_mem_eff_against_batch_one_decode_of_qwen2_7b(families):
    """dl-qwen2-7b-a100-tp1-kv5gib run 0: one request of 1024/1024 tokens alone on one
    A100 80GB, so every decoding step is batch 1. Qwen2-7B-Instruct (hidden 3584, 28
    layers, 28 heads, 4 KV heads, MLP 18944, vocabulary 152064, q/k/v biases, bf16)."""
    run = _run(families, "dl-qwen2-7b-a100-tp1-kv5gib", 0)
    assert run["num_prompts"] == 1
    weights = 2 * _dense_params(3584, 28, 28, 4, 18944, 152064, bias=True)
    kv_per_token = 2 * 28 * 4 * (3584 // 28) * 2  # K and V, bf16
    context = 1024 + 1024 / 2  # the mean context over the decode
    step_bytes = weights + kv_per_token * context
    peak_ms = 1e3 * step_bytes / (GPUS["a100-80g"].bandwidth_tb_s * 1e12)
    closed = peak_ms / run["metrics"]["mean_itl_ms"]
    assert 0.5 < closed < 0.7  # the hand count itself: 7.0 ms of 11.8 ms
    assert PER_GPU["a100-80g"]["mem_eff"] == pytest.approx(closed, rel=0.15)


def test_h200_mem_eff_against_decode_of_llama_70b_at_rate_one(families):
    """dc-sglang-llama33-70b-h200x4-tp4-random run 0: 1 request/s of about 509/534 tokens
    on 4 x H200 (TP 4). Requests in flight by Little's law: rate x mean E2E; their mean
    context: the mean prompt plus half the mean answer. Llama-3.3-70B (hidden 8192, 80
    layers, 64 heads, 8 KV heads, MLP 28672, vocabulary 128256, bf16)."""
    run = _run(families, "dc-sglang-llama33-70b-h200x4-tp4-random", 0)
    m = run["metrics"]
    n = m["successful_requests"]
    in_flight = run["request_rate"] * m["mean_e2el_ms"] / 1e3
    context = m["total_input_tokens"] / n + m["total_generated_tokens"] / n / 2
    weights = 2 * _dense_params(8192, 80, 64, 8, 28672, 128256, bias=False)
    kv_per_token = 2 * 80 * 8 * 128 * 2
    step_bytes = weights + kv_per_token * context * in_flight
    peak_ms = 1e3 * step_bytes / (4 * GPUS["h200"].bandwidth_tb_s * 1e12)
    closed = peak_ms / m["median_itl_ms"]
    assert math.isfinite(closed) and 0.4 < closed < 0.7
    assert PER_GPU["h200"]["mem_eff"] == pytest.approx(closed, rel=0.15)


def test_h200_ttft_overhead_and_prefill_eff_against_ttft_of_llama_70b_at_rate_one(families):
    """The same run's median time to first token, by hand: a request arriving at 1/s
    waits on average half of the step in progress (half the median ITL), then its prompt
    (the median of lengths drawn uniform in [1, 1024], scaled to the recorded mean:
    about the mean) is prefilled in one step that reads the weights at ``mem_eff`` and
    does 2 x parameters FLOP per prompt token at ``prefill_eff`` of the 4 GPUs' bf16
    peak (the attention's P^2 term is under 1% here and left out), and the request
    spends ``ttft_overhead_ms`` outside the steps. Without the overhead the hand count
    is 37% short, at prefill_eff 1 27% short: the tolerance tells the fitted pair from
    either."""
    run = _run(families, "dc-sglang-llama33-70b-h200x4-tp4-random", 0)
    m = run["metrics"]
    f = PER_GPU["h200"]
    gpu = GPUS["h200"]
    params = _dense_params(8192, 80, 64, 8, 28672, 128256, bias=False)
    prompt = m["total_input_tokens"] / m["successful_requests"]
    weights_ms = 1e3 * 2 * params / (4 * gpu.bandwidth_tb_s * 1e12 * f["mem_eff"])
    prefill_ms = 1e3 * 2 * params * prompt / (4 * gpu.dense_tflops["bf16"] * 1e12)
    wait_ms = m["median_itl_ms"] / 2
    hand = f["ttft_overhead_ms"] + wait_ms + weights_ms + prefill_ms / f["prefill_eff"]
    assert hand == pytest.approx(m["median_ttft_ms"], rel=0.15)
    assert f["ttft_overhead_ms"] > 0.0 and f["prefill_eff"] < 1.0
