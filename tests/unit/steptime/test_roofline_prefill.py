"""The roofline's prefill term and the defaults of its factors (docs/design.md §8.12).

Worked by hand on the toy replica of ``test_roofline.py`` (1 TB/s, 100 TFLOP/s bf16; a
dense 10⁹-parameter bf16 verifier, 16 layers, 16 heads, 4 KV heads of 128 dims):

    weights_ms = 2 ms, kv_ms = 3.2768e-5 ms per token, token_ms = 0.02 ms per token,
    attn_ms = 1.31072e-6 ms per (query, key) pair.

A step of ``P`` prompt tokens alone, at ``η_m``, ``η_p``, ``fixed_ms``::

    (2 + 3.2768e-5·P) / η_m + fixed_ms + (0.02·P + 1.31072e-6·P(P + 1)/2) / η_p

and a decode step that is memory bound gains the prompt's KV write on its memory side and
the prompt's arithmetic on top of the max.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.api import bench, load
from allocator.core import defaults
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.dispatch import roofline_of
from tests.unit.steptime.test_roofline import OFF, TOY_DENSE, toy

ROOT = Path(__file__).resolve().parents[3]
W, KV, PHI, ALPHA = 2.0, 3.2768e-5, 0.02, 1.31072e-6


def by_hand_prefill_alone(p: float, mem: float, pre: float, fixed: float) -> float:
    return (W + KV * p) / mem + fixed + (PHI * p + ALPHA * p * (p + 1) / 2) / pre


@pytest.mark.parametrize("p", [1.0, 512.0, 8192.0])
def test_a_prompt_alone_costs_the_weights_read_plus_its_arithmetic(p):
    r = toy(mem_eff=0.8, prefill_eff=0.4, compute_eff=0.9, fixed_ms=0.3)
    got = float(r.step_ms(OFF, 0, 1, 0.0, 0.0, p)[0])
    assert got == pytest.approx(by_hand_prefill_alone(p, 0.8, 0.4, 0.3), rel=1e-12)
    # decode's share of peak plays no part in a prompt's time
    other = toy(mem_eff=0.8, prefill_eff=0.4, compute_eff=0.1, fixed_ms=0.3)
    assert float(other.step_ms(OFF, 0, 1, 0.0, 0.0, p)[0]) == got


def test_a_chunk_is_added_to_a_memory_bound_decode_step_not_hidden_under_it():
    """8 sequences at context 1000 decoding one token: memory (2 + 3.2768e-5·(8·1000 + 8
    + P)) / η_m against compute (0.02·8 + 1.31072e-6·8·1000) / η_c, memory bound; a chunk
    of 256 prompt tokens adds its KV write to the memory side and its arithmetic on top."""
    r = toy(mem_eff=0.5, compute_eff=0.5, prefill_eff=0.25)
    b, c, p = 8.0, 1000.0, 256.0
    decode = float(r.step_ms(OFF, 0, 1, b, c, 0.0)[0])
    assert decode == pytest.approx((W + KV * (b * c + b)) / 0.5, rel=1e-12)
    mixed = float(r.step_ms(OFF, 0, 1, b, c, p)[0])
    chunk = (PHI * p + ALPHA * p * (p + 1) / 2) / 0.25
    assert mixed == pytest.approx(decode + KV * p / 0.5 + chunk, rel=1e-12)
    # inside the max the chunk (about 41 ms) would have replaced the decode step's ~4.5 ms
    assert mixed > max(decode, chunk)


def test_without_prefill_the_step_is_the_decode_pass_whatever_prefill_eff():
    rng = np.random.default_rng(5)
    n = 200
    b = rng.integers(1, 512, n).astype(float)
    k = rng.integers(0, 6, n)
    c = rng.uniform(0, 16384, n)
    members = (k > 0)[:, None]
    x = step_inputs(members, k, k + 1, b, c, 0.0, 1)
    base = toy(mem_eff=0.7, compute_eff=0.6, fixed_ms=0.5, seq_ms=0.01, overhead_ms=0.2)
    base = base.with_parameters({"draft.d.fixed_ms": 0.2})
    for eff in (1e-4, 0.3, 1.0):
        np.testing.assert_array_equal(
            base.with_parameters({"prefill_eff": eff}).step_ms_of(x), base.step_ms_of(x)
        )
    # and the decode pass is max(memory, compute) of the decoding tokens, by hand
    one = toy(mem_eff=0.7, compute_eff=0.6)
    x1 = step_inputs(np.zeros((1, 1), bool), 0, 1, 300.0, 0.0, 0.0, 1)
    want = max((W + KV * 300) / 0.7, PHI * 300 / 0.6)
    assert float(one.step_ms_of(x1)[0]) == pytest.approx(want, rel=1e-12)


def test_prefill_eff_is_bounded():
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(Exception) as e:
            toy(prefill_eff=bad)
        assert "prefill_eff" in str(e.value)


def _file(tmp_path, roofline=None, **serving):
    data = {
        "name": "t",
        "convention": "bonus",
        "drafters": [{"name": "d", "method": "eagle3", "acceptance": 0.7, "unit_cost": 0.05}],
        "serving": {
            "batch_sizes": [1],
            "hardware": {"gpu": "h100-sxm"},
            "model": {
                "params_b": 1.0,
                "layers": 16,
                "hidden": 2048,
                "heads": 16,
                "kv_heads": 4,
                "head_dim": 128,
            },
            **serving,
        },
    }
    if roofline is not None:
        data["serving"]["roofline"] = roofline
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


FITTED = {
    "mem_eff": 0.61,
    "compute_eff": 0.52,
    "prefill_eff": 0.43,
    "comm_eff": 0.34,
    "ttft_overhead_ms": 21.0,
}


def test_omitted_factors_take_the_gpus_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(defaults, "PER_GPU", {"h100-sxm": FITTED})
    problem = load(_file(tmp_path))
    s = problem.serving
    r = roofline_of(s, problem.names)
    assert (r.mem_eff, r.compute_eff, r.prefill_eff, r.comm_eff) == (0.61, 0.52, 0.43, 0.34)
    assert s.ttft_overhead_ms == 21.0
    # given in the file, the file's values win, field by field
    given = load(
        _file(tmp_path, roofline={"mem_eff": 0.9, "prefill_eff": 0.8}, ttft_overhead_ms=5.0)
    )
    r = roofline_of(given.serving, given.names)
    assert (r.mem_eff, r.compute_eff, r.prefill_eff, r.comm_eff) == (0.9, 0.52, 0.8, 0.34)
    assert given.serving.ttft_overhead_ms == 5.0


def test_a_gpu_without_defaults_takes_the_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(defaults, "PER_GPU", {"a100-80g": FITTED})
    monkeypatch.setattr(defaults, "FALLBACK", {**FITTED, "mem_eff": 0.99})
    problem = load(_file(tmp_path))
    assert roofline_of(problem.serving, problem.names).mem_eff == 0.99


def test_a_file_without_specs_has_no_time_outside_the_steps_by_default(monkeypatch):
    monkeypatch.setattr(defaults, "PER_GPU", {"h100-sxm": FITTED})
    problem = load(ROOT / "problems" / "requests-70b.yaml")
    assert problem.serving is not None and problem.serving.hardware is None
    assert problem.serving.ttft_overhead_ms == 0.0


@pytest.mark.parametrize(
    ("roofline", "serving", "field"),
    [
        ({"prefill_eff": 0.0}, {}, "prefill_eff"),
        ({"prefill_eff": 1.01}, {}, "prefill_eff"),
        ({"mem_eff": -0.1}, {}, "mem_eff"),
        (None, {"ttft_overhead_ms": -1.0}, "ttft_overhead_ms"),
        (None, {"ttft_overhead_ms": float("inf")}, "ttft_overhead_ms"),
    ],
)
def test_bad_factors_are_refused_naming_the_field(tmp_path, roofline, serving, field):
    with pytest.raises(Exception) as e:
        load(_file(tmp_path, roofline=roofline, **serving))
    assert field in str(e.value)


def test_the_toy_model_is_the_one_worked_by_hand():
    r = toy()
    assert TOY_DENSE.layers == 16
    assert (r.peak.weights_ms, r.peak.kv_ms, r.peak.token_ms) == pytest.approx((W, KV, PHI))
    assert r.peak.attn_ms == pytest.approx(ALPHA)


def test_time_outside_the_steps_adds_to_ttft_and_e2el_only(tmp_path):
    """The same seeded run at a request rate with and without 25 ms outside the steps:
    every TTFT and E2EL statistic 25 ms more, ITL and TPOT the same, to rounding."""
    sched = {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "kv_cache_tokens": 200_000}

    def doc(overhead):
        path = _file(tmp_path, scheduler=sched, ttft_overhead_ms=overhead)
        run = bench(path, request_rate=20.0, num_prompts=60, input_len=200, output_len=30)
        return run.to_dict()

    a, b = doc(0.0), doc(25.0)
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms"):
        assert b[key] == pytest.approx(a[key] + 25.0, abs=1e-6), key
    for key in ("mean_itl_ms", "median_itl_ms", "mean_tpot_ms", "p99_tpot_ms"):
        assert b[key] == pytest.approx(a[key], abs=1e-9), key
    assert a["mean_ttft_ms"] > 0
