"""One step on floats (allocator/model/steptime/roofline_row.py) against the roofline's
array path: the simulator's one-row calls must give the bits a batch of rows gives each
row, so that making them cheaper changes no simulated result."""

import numpy as np
import pytest

from allocator.model.steptime import roofline_row
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.roofline import DrafterCost, PeakTerms, RooflinePredictor


def _peak(rng, windows=(), tp=False) -> PeakTerms:
    return PeakTerms(
        weights_ms=float(rng.uniform(0.1, 40)),
        kv_ms=float(rng.uniform(1e-6, 1e-4)),
        token_ms=float(rng.uniform(1e-3, 0.2)),
        attn_ms=float(rng.uniform(1e-8, 1e-6)),
        allreduce_ms=float(rng.uniform(1e-4, 1e-2)) if tp else 0.0,
        allreduce_fixed_ms=float(rng.uniform(0, 0.05)) if tp else 0.0,
        windows=windows,
        prefill_attn=float(rng.choice([1.0, 0.5])),
    )


def _predictor(rng, windows, tp, kv_write, drafting) -> RooflinePredictor:
    return RooflinePredictor(
        peak=_peak(rng, windows, tp),
        drafters=(
            DrafterCost("a", _peak(rng, windows, tp), fixed_ms=float(rng.uniform(0, 0.5))),
            DrafterCost("b", PeakTerms(), fixed_ms=0.3, seq_ms=float(rng.uniform(0, 0.01))),
        ),
        mem_eff=float(rng.uniform(0.3, 1)),
        compute_eff=float(rng.uniform(0.3, 1)),
        comm_eff=float(rng.uniform(0.3, 1)),
        prefill_eff=float(rng.uniform(0.3, 1)),
        fixed_ms=float(rng.uniform(0, 2)),
        seq_ms=float(rng.uniform(0, 0.02)),
        overhead_ms=float(rng.uniform(0, 1)),
        kv_write=kv_write,
        drafting=drafting,
    )


def _rows(rng, size: int):
    members = rng.random((size, 2)) < 0.5
    k = rng.integers(0, 8, size)
    b = rng.integers(0, 300, size).astype(float)
    b[rng.random(size) < 0.2] = 0.0
    k[b == 0] = 0
    members[k == 0] = False
    verified = members.sum(axis=1) * k + 1
    context = rng.uniform(0, 20_000, size)
    context[rng.random(size) < 0.2] = 0.0
    prefill = rng.integers(0, 8192, size).astype(float)
    prefill[rng.random(size) < 0.5] = 0.0
    return step_inputs(members, k, verified, b, context, prefill, 2)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("windows", [(), ((128, 0.5),), ((4096, 0.25), (128, 0.25))])
def test_one_row_on_floats_is_the_array_paths_row_bit_for_bit(seed, windows):
    rng = np.random.default_rng(seed)
    r = _predictor(rng, windows, tp=seed % 2 == 1, kv_write=seed % 3 != 2,
                   drafting="parallel" if seed % 2 else "sequential")  # fmt: skip
    assert roofline_row.by_floats(r)
    x = _rows(rng, 200)
    verify = r.verify_ms(x)
    passes = r.drafter_pass_ms(x)
    steps = r.step_ms_of(x)
    for i in range(len(x)):
        one = x.take(np.array([i]))
        assert _same_bits(r.verify_ms(one), verify[i : i + 1]), i
        assert _same_bits(r.drafter_pass_ms(one), passes[i : i + 1]), i
        assert _same_bits(r.step_ms_of(one), steps[i : i + 1]), i


def test_the_pnorm_and_experts_stay_on_the_arrays():
    rng = np.random.default_rng(0)
    r = _predictor(rng, (), False, True, "sequential")
    assert not roofline_row.by_floats(RooflinePredictor(peak=r.peak, form="pnorm"))
    moe = PeakTerms(weights_ms=1.0, expert_ms=0.1, experts=8, experts_per_token=2)
    assert not roofline_row.by_floats(RooflinePredictor(peak=moe))


def test_expert_parallelism_stays_on_the_arrays_and_a_row_is_its_batchs_row():
    """Expert parallelism needs routed experts, so its one-row step takes the array path:
    the same bits as that row of a batch (the busiest GPU's experts per element)."""
    ep = PeakTerms(weights_ms=1.0, expert_ms=0.1, experts=16, experts_per_token=2, expert_gpus=4)
    r = RooflinePredictor(peak=ep, mem_eff=0.8, fixed_ms=0.2)
    assert not roofline_row.by_floats(r)
    b, t, c = np.array([1, 3, 40]), np.array([1, 2, 4]), np.array([0.0, 7.0, 900.0])
    batch = r.verify_ms(step_inputs(np.zeros((3, 0), bool), 0, t, b, c, 0.0, 0))
    for i in range(3):
        one = r.verify_ms(step_inputs(np.zeros((1, 0), bool), 0, t[i], b[i], c[i], 0.0, 0))
        assert one[0] == batch[i]
