"""Expert parallelism (allocator/model/steptime/experts.py, the roofline's "Expert
parallelism"): the per-GPU touched-expert law against its closed-form mean and a seeded
Monte Carlo, the busiest GPU against Monte Carlo, the all-reduce an EP replica keeps
against the ring's closed form, ep = 1 unchanged, and DeepSeek-V3 on 8 H200s, EP against TP.

DeepSeek-V3 (tests/support/fixtures/configs/deepseek-v3.config.json): 61 layers, hidden
7168, 256 routed experts, 8 per token, fp8 weights. On 8 H200s (4.8 TB/s each, 38.4e12
B/s for the replica; NVLink 4, 450e9 B/s per direction, no latency figure):

- one routed expert over its 58 MoE layers is 58 · 3·7168·2048 = 2,554,331,136 bytes:
  ``X = 10³ · 2,554,331,136 / 38.4e12 = 0.0665190 ms``;
- the all-reduces per token ``10³ · 2·61 · 2·7/8 · 7168·2 / 450e9 = 6.80164e-3 ms``.

One decoding token touches 8 experts. Under TP each GPU reads 1/8 of all 8: ``8·X``.
Under EP a GPU holds 32 whole experts; the count on one GPU is hypergeometric (256, 32, 8):
P(0, 1, 2, 3) = 0.33817, 0.39895, 0.19856, 0.05440 (scipy.stats.hypergeom); the busiest
of 8 taken independent has mean ``Σ_d (1 − F(d)^8) = 2.41010``, each read whole at one
GPU's rate, ``8·X`` per expert: ``8·X·2.41010``. So EP's pass is TP's plus
``8·X·(2.41010 − 1) = 0.750392 ms`` at b = 1 (memory-bound, η = 1, no KV write); at 4096
tokens every expert is touched on every GPU and the two coincide.
"""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import hypergeom

from allocator.core.hardware import Hardware
from allocator.core.interconnect import LINKS
from allocator.core.model_spec import ModelSpec
from allocator.exceptions import InputError, NotModelledError
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.experts import (
    busiest_gpu_experts,
    expected_experts,
    touched_distribution,
)
from allocator.model.steptime.roofline import RooflinePredictor

CONFIGS = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "configs"
DSV3 = ModelSpec.from_hf_config(json.loads((CONFIGS / "deepseek-v3.config.json").read_text()))


def monte_carlo(tokens: int, experts: int, k: int, gpus: int, runs: int, seed: int):
    """(touched count of GPU 0, busiest GPU's count) over ``runs`` seeded routings, each
    token a uniform ``k``-subset of the experts (argsort of uniform keys)."""
    rng = np.random.default_rng(seed)
    m = experts // gpus
    first, busiest = np.empty(runs), np.empty(runs)
    for i in range(runs):
        chosen = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
        touched = np.zeros(experts, bool)
        touched[chosen.ravel()] = True
        per_gpu = touched.reshape(gpus, m).sum(axis=1)
        first[i], busiest[i] = per_gpu[0], per_gpu.max()
    return first, busiest


@pytest.mark.parametrize("tokens", [0, 1, 3, 17, 200])
@pytest.mark.parametrize(("experts", "k", "gpus"), [(256, 8, 8), (128, 4, 8), (64, 6, 4)])
def test_the_per_gpu_mean_is_the_closed_form(tokens, experts, k, gpus):
    law = touched_distribution(tokens, experts, k, gpus)
    assert law.sum() == pytest.approx(1.0, abs=1e-12) and np.all(law >= -1e-15)
    mean = float(law @ np.arange(law.size))
    closed = experts / gpus * (1 - (1 - k / experts) ** tokens)
    assert mean == pytest.approx(closed, rel=1e-9, abs=1e-12)
    assert mean == pytest.approx(float(expected_experts(tokens, experts, k)) / gpus, abs=1e-9)


def test_one_token_on_a_gpu_is_hypergeometric():
    law = touched_distribution(1, 256, 8, 8)
    assert law[:9] == pytest.approx(hypergeom(256, 32, 8).pmf(np.arange(9)), abs=1e-12)


@pytest.mark.parametrize(("tokens", "experts", "k", "gpus"), [(4, 256, 8, 8), (24, 128, 4, 8)])
def test_the_per_gpu_law_matches_monte_carlo(tokens, experts, k, gpus):
    runs = 3000
    first, _ = monte_carlo(tokens, experts, k, gpus, runs, seed=7)
    law = touched_distribution(tokens, experts, k, gpus)
    mean = float(law @ np.arange(law.size))
    assert abs(first.mean() - mean) < 4 * first.std() / np.sqrt(runs)
    seen = np.bincount(first.astype(int), minlength=law.size) / runs
    sigma = np.sqrt(law * (1 - law) / runs)
    assert np.all(np.abs(seen - law) < 4 * sigma + 1e-3)


@pytest.mark.parametrize(
    ("tokens", "experts", "k", "gpus", "gap"),
    [(1, 256, 8, 8, 0.08), (16, 256, 8, 8, 0.02), (64, 256, 8, 8, 0.01), (8, 128, 4, 8, 0.05)],
)
def test_the_busiest_gpu_is_a_close_lower_bound(tokens, experts, k, gpus, gap):
    """Independence understates the max of negatively associated counts (module
    docstring): never above Monte Carlo beyond sampling error, and within ``gap``."""
    runs = 2000
    _, busiest = monte_carlo(tokens, experts, k, gpus, runs, seed=11)
    model = float(busiest_gpu_experts(tokens, experts, k, gpus))
    err = 4 * busiest.std() / np.sqrt(runs)
    assert model <= busiest.mean() + err
    assert model >= busiest.mean() * (1 - gap) - err


def test_the_busiest_gpu_by_hand_and_between_integers():
    f = hypergeom(256, 32, 8).cdf(np.arange(32))
    assert float(busiest_gpu_experts(1, 256, 8, 8)) == pytest.approx(np.sum(1 - f**8), 1e-12)
    lo, hi = busiest_gpu_experts([2, 3], 256, 8, 8)
    assert float(busiest_gpu_experts(2.25, 256, 8, 8)) == pytest.approx(lo + 0.25 * (hi - lo))
    assert float(busiest_gpu_experts(0, 256, 8, 8)) == 0.0
    assert float(busiest_gpu_experts(5000, 256, 8, 8)) == pytest.approx(32.0, abs=1e-9)
    assert np.all(busiest_gpu_experts(np.arange(5.0), 0, 0, 8) == 0.0)


def roof(ep: int, gpus: int = 8, model: ModelSpec = DSV3, **kw) -> RooflinePredictor:
    return RooflinePredictor.from_specs(Hardware.from_fields("h200", gpus, ep=ep), model, **kw)


def x_of(b, t=1, c=0.0, p=0.0):
    return step_inputs(np.zeros((1, 0), bool), 0, t, b, c, p, 0)


def test_the_ep_replica_all_reduces_as_the_ring_closed_form():
    """vLLM 0.33.0 at one data-parallel rank all-reduces the MoE output over the group
    (no all-to-all): 2·(n − 1)/n · M / B per all-reduce, two per layer."""
    ring = 2 * (8 - 1) / 8 * 7168 * 2 / LINKS["nvlink4"].bandwidth_bytes_s
    ep, tp = roof(8), roof(1)
    assert ep.peak.allreduce_ms == pytest.approx(1e3 * 2 * 61 * ring, rel=1e-12)
    assert ep.peak.allreduce_ms == tp.peak.allreduce_ms == pytest.approx(6.80164e-3, rel=1e-5)
    x = x_of(16, 2, 100.0, 40.0)
    assert np.array_equal(ep.comm_ms(x), tp.comm_ms(x))


def test_deepseek_v3_ep8_against_tp8_by_hand():
    ep, tp = roof(8, kv_write=False), roof(1, kv_write=False)
    assert ep.peak.expert_ms == pytest.approx(1e3 * 2_554_331_136 / 38.4e12, rel=1e-12)
    assert ep.peak.expert_gpus == 8 and tp.peak.expert_gpus == 1
    one = x_of(1)
    gained = float(ep.verify_ms(one)[0] - tp.verify_ms(one)[0])
    assert gained == pytest.approx(0.750392, rel=1e-5)
    big = x_of(4096)
    assert float(ep.verify_ms(big)[0]) == pytest.approx(float(tp.verify_ms(big)[0]), 1e-12)
    # EP never reads less than TP: the busiest GPU reads at least the mean
    for b in (1, 2, 8, 32, 128, 512):
        assert ep.verify_ms(x_of(b))[0] >= tp.verify_ms(x_of(b))[0]


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(0, 300),
    t=st.integers(1, 6),
    c=st.floats(0, 3e4),
    p=st.sampled_from([0.0, 1.0, 77.0, 2048.0]),
    gpus=st.sampled_from([1, 2, 4, 8]),
)
def test_ep_one_is_the_tensor_parallel_roofline_bit_for_bit(b, t, c, p, gpus):
    """At ep = 1 the expert read is ``X·cov(n)`` as before: the step equals the formula
    evaluated on the peak terms in the predictor's order, to the last bit."""
    r = roof(1, gpus, mem_eff=0.7, compute_eff=0.55, fixed_ms=0.3, seq_ms=0.01)
    pk = r.peak
    x = x_of(b, t, c, p)
    n = b * t + p
    cov = pk.experts * -np.expm1(n * np.log1p(-pk.experts_per_token / pk.experts))
    traffic = pk.weights_ms + pk.expert_ms * cov + pk.kv_ms * (b * c + n)
    memory = traffic / 0.7 + 0.3 + 0.01 * b
    compute = (pk.token_ms * b * t + pk.attn_ms * (b * t * c)) / 0.55
    comm = (pk.allreduce_ms * n + pk.allreduce_fixed_ms) / r.comm_eff if n > 0 else 0.0
    want = max(memory, compute) + comm
    if p > 0:
        want = want + (pk.token_ms * p + pk.attn_ms * pk.prefill_pairs(np.array(p))) / 1.0
    got = float(r.verify_ms(x)[0])
    if b == 0 and p == 0:
        assert np.isnan(got)
    else:
        assert got == float(want)
    assert r.peak == replace(r.peak, expert_gpus=1)


def test_ep_is_refused_unless_count_and_moe():
    with pytest.raises(NotModelledError) as e:
        Hardware.from_fields("h200", 8, ep=4)
    assert e.value.field == "serving.hardware.ep" and "\n" not in str(e.value)
    assert Hardware.from_fields("h200", 8, ep=8).ep == 8
    dense = ModelSpec(params=8e9, layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128)
    with pytest.raises(InputError) as e:
        roof(8, model=dense)
    assert e.value.field == "serving.hardware.ep"
    # a dense drafter beside a MoE verifier keeps tensor parallelism
    r = RooflinePredictor.from_specs(Hardware.from_fields("h200", 8, ep=8), DSV3, {"d": dense})
    assert r.drafters[0].peak.expert_gpus == 1
    odd = replace(DSV3, experts=255)
    with pytest.raises(NotModelledError) as e:
        roof(8, model=odd)
    assert e.value.field == "serving.hardware.ep"
