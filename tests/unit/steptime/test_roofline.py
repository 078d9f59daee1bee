"""The roofline predictor: hand-computed values, today's form, expert coverage, the context
trend and the parameter view (its fit: tests/unit/calibration/test_roofline_fit.py).

The toy replica used throughout has round figures so the values can be worked by hand:
1 TB/s of bandwidth and 100 TFLOP/s of bf16; the toy dense verifier has 10⁹ parameters
in bf16 (no embedding table: every weight is read), 16 layers, 16 heads, 4 KV heads of
128 dims. Its peak terms, by hand:

    weights_ms = 10³ · 2·10⁹ B / 10¹² B/s             = 2 ms
    kv_ms      = 10³ · (2·16·4·128·2 = 32,768 B) / 10¹² = 3.2768e-5 ms per token
    token_ms   = 10³ · 2·10⁹ FLOP / 10¹⁴ FLOP/s        = 0.02 ms per token
    attn_ms    = 10³ · (4·16·16·128 = 131,072) / 10¹⁴   = 1.31072e-6 ms per (token × context)
"""

import math
from types import MappingProxyType

import numpy as np
import pytest

from allocator.core.hardware import GPU, Hardware
from allocator.core.model_spec import ModelSpec
from allocator.exceptions import InputError
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.roofline import (
    PeakTerms,
    RooflinePredictor,
    combine,
    expected_experts,
)

TOY_GPU = GPU(
    "toy", "a round-figure test accelerator", MappingProxyType({"bf16": 100.0}), 1.0, 100.0
)
TOY_HW = Hardware(TOY_GPU)
TOY_DENSE = ModelSpec(params=1e9, layers=16, hidden=2048, heads=16, kv_heads=4, head_dim=128)
#: 10⁹ parameters, 0.8·10⁹ of them in 8 experts (0.1·10⁹ each), 2 experts per token
TOY_MOE = ModelSpec.from_fields(
    params_b=1.0,
    active_params_b=0.4,
    experts=8,
    experts_per_token=2,
    layers=16,
    hidden=2048,
    heads=16,
    kv_heads=4,
    head_dim=128,
)
OFF = np.zeros((1, 1), bool)
ON = np.ones((1, 1), bool)


def toy(model=TOY_DENSE, **factors) -> RooflinePredictor:
    return RooflinePredictor.from_specs(TOY_HW, model, {"d": None}, **factors)


def one(r: RooflinePredictor, members, k, t, b, c=0.0, p=0.0) -> float:
    return float(r.step_ms(members, k, t, b, c, p)[0])


def test_peak_terms_of_the_toy_replica():
    pk = toy().peak
    assert pk.weights_ms == pytest.approx(2.0, rel=1e-12)
    assert pk.kv_ms == pytest.approx(3.2768e-5, rel=1e-12)
    assert pk.token_ms == pytest.approx(0.02, rel=1e-12)
    assert pk.attn_ms == pytest.approx(1.31072e-6, rel=1e-12)
    moe = toy(TOY_MOE).peak
    # dense part (1 - 0.8)·10⁹ params, one expert 0.1·10⁹ params, active 0.4·10⁹
    assert moe.weights_ms == pytest.approx(0.4, rel=1e-12)
    assert moe.expert_ms == pytest.approx(0.2, rel=1e-12)
    assert moe.token_ms == pytest.approx(0.008, rel=1e-12)


def test_hand_computed_dense_case():
    """mem_eff 0.5, compute_eff 0.5, fixed 1 ms, seq 0.01 ms, overhead 0.3 ms; drafter
    without a spec, d0 = fixed 0.2 ms, d1 = seq 0.005 ms per sequence.

    (a) b = 8, plain decoding (t = 1), C = 1000: n = 8 tokens;
        memory = (2 + 3.2768e-5·(8·1000 + 8)) / 0.5 + 1 + 0.01·8
               = (2 + 0.262406144) / 0.5 + 1.08 = 5.604812288 ms;
        compute = (0.02·8 + 1.31072e-6·8·1000) / 0.5 = 0.34097152 ms → 5.604812288 ms.
    (b) b = 64, k = 3 (t = 4), C = 1000: n = 256;
        memory = (2 + 3.2768e-5·(64000 + 256)) / 0.5 + 1 + 0.64 = 9.851081216 ms;
        compute = (0.02·256 + 1.31072e-6·256·1000) / 0.5 = (5.12 + 0.33554432) / 0.5
                = 10.91108864 ms (compute bound);
        drafting 3 · (0.2 + 0.005·64) = 1.56 ms; overhead 0.3 → 12.77108864 ms.
    """
    r = toy(mem_eff=0.5, compute_eff=0.5, fixed_ms=1.0, seq_ms=0.01, overhead_ms=0.3)
    r = r.with_parameters({"draft.d.fixed_ms": 0.2, "draft.d.seq_ms": 0.005})
    assert one(r, OFF, 0, 1, 8, 1000) == pytest.approx(5.604812288, rel=1e-12)
    assert one(r, ON, 3, 4, 64, 1000) == pytest.approx(12.77108864, rel=1e-12)


def test_hand_computed_moe_case():
    """Toy MoE, η = 1, no fixed time, no KV write, context 0 (weights only):
    (a) b = 2, t = 1: n = 2, cov = 8·(1 − 0.75²) = 3.5 experts;
        memory = 0.4 + 0.2·3.5 = 1.1 ms; compute = 0.008·2 = 0.016 ms → 1.1 ms.
    (b) b = 4, t = 1: cov = 8·(1 − 0.75⁴) = 8·0.68359375 = 5.46875; memory 1.49375 ms.
    (c) b = 4, t = 4: n = 16, 0.75¹⁶ = 0.010022595757618546,
        cov = 7.919819233939052; memory = 0.4 + 0.2·7.919819233939052 = 1.98396384679 ms;
        compute = 0.128 ms: verifying 4 tokens instead of 1 costs memory traffic while the
        pass is far below its compute kink.
    """
    r = toy(TOY_MOE, kv_write=False)
    assert one(r, OFF, 0, 1, 2) == pytest.approx(1.1, rel=1e-12)
    assert one(r, OFF, 0, 1, 4) == pytest.approx(1.49375, rel=1e-12)
    assert one(r, ON, 0, 4, 4) == pytest.approx(1.9839638467878104, rel=1e-12)
    memory, compute = r.verifier_parts(step_inputs(ON, 0, 4, 4))
    assert compute[0] < 0.1 * memory[0]


def test_expert_coverage_matches_monte_carlo():
    """E·(1 − (1 − k/E)^n) against routing each of n tokens to k distinct experts drawn
    uniformly: 4,000 trials, within 5 standard errors."""
    rng = np.random.default_rng(7)
    for experts, k, n in ((8, 2, 3), (64, 6, 20), (128, 8, 16), (128, 8, 256), (16, 16, 1)):
        trials = 4000
        touched = np.empty(trials)
        for i in range(trials):
            picks = np.argsort(rng.random((n, experts)), axis=1)[:, :k]
            touched[i] = np.unique(picks).size
        se = touched.std(ddof=1) / math.sqrt(trials)
        exact = float(expected_experts(n, experts, k))
        assert abs(touched.mean() - exact) <= 5 * se + 1e-4, (experts, k, n)
    assert float(expected_experts(0, 8, 2)) == 0.0
    assert float(expected_experts(10**6, 128, 8)) == pytest.approx(128.0)
    assert np.all(expected_experts(np.arange(5), 0, 0) == 0)


def _todays(v0, v1, c, o, d0, d1, b, k):
    """Today's calibrated form (docs/design.md §8.7), written out: one drafter."""
    t = k + 1
    return max(v0 + v1 * b, c * b * t) + k * (d0 + d1 * b) + (o if k > 0 else 0.0)


def test_reduces_to_todays_form_at_context_zero():
    """Mapping, by hand for the toy with mem_eff 0.5, compute_eff 0.5, fixed 1, seq 0.01:
    v0 = 2 / 0.5 + 1 = 5 ms, v1 = 0.01 ms, c = 0.02 / 0.5 = 0.04 ms, w = 3.2768e-5 / 0.5;
    the drafter without a spec: d0 = 0.2, d1 = 0.005. Exact without the KV write; with it
    the memory side gains w·b·t."""
    factors = dict(mem_eff=0.5, compute_eff=0.5, fixed_ms=1.0, seq_ms=0.01, overhead_ms=0.3)
    drafter = {"draft.d.fixed_ms": 0.2, "draft.d.seq_ms": 0.005}
    exact = toy(kv_write=False, **factors).with_parameters(drafter)
    lf = exact.linear_form(0.0)
    assert (lf.v0, lf.v1, lf.c, lf.w) == pytest.approx((5.0, 0.01, 0.04, 0.0), rel=1e-12)
    assert (lf.d0[0], lf.d1[0]) == pytest.approx((0.2, 0.005))
    written = toy(**factors).with_parameters(drafter)
    w = written.linear_form(0.0).w
    assert w == pytest.approx(3.2768e-5 / 0.5)
    regimes = set()
    for b in (1, 8, 64, 256):
        for k in range(8):
            want = _todays(5.0, 0.01, 0.04, 0.3, 0.2, 0.005, b, k)
            mem = ON if k else OFF
            assert one(exact, mem, k, k + 1, b) == pytest.approx(want, rel=1e-12)
            t = k + 1
            with_write = max(5.0 + 0.01 * b + w * b * t, 0.04 * b * t) + k * (0.2 + 0.005 * b)
            with_write += 0.3 if k else 0.0
            assert one(written, mem, k, t, b) == pytest.approx(with_write, rel=1e-12)
            regimes.add(5.0 + 0.01 * b > 0.04 * b * t)
    assert regimes == {True, False}  # both sides of the kink are checked


def test_from_linear_is_todays_model():
    r = RooflinePredictor.from_linear(6.0, 0.05, 0.03, 0.4, [("a", 0.3, 0.01), ("b", 0.5, 0.0)])
    members = np.array([[True, False], [False, True], [True, True], [False, False]])
    k = np.array([3, 5, 2, 0])
    b = np.array([16.0, 64.0, 128.0, 32.0])
    t = k * members.sum(1) + 1
    got = r.step_ms(members, k, t, b, 0.0, 0.0)
    d = np.array([0.3 + 0.01 * b[0], 0.5, (0.3 + 0.01 * b[2]) + 0.5, 0.0])
    want = np.maximum(6.0 + 0.05 * b, 0.03 * b * t) + k * d + 0.4 * (k > 0)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_linear_form_at_a_context_is_the_step_there():
    r = toy(mem_eff=0.7, compute_eff=0.4, fixed_ms=0.5, seq_ms=0.02)
    for ctx in (512.0, 8192.0):
        lf = r.linear_form(ctx)
        for b in (1, 16, 200):
            for t in (1, 4):
                want = max(lf.v0 + lf.v1 * b + lf.w * b * t, lf.c * b * t)
                assert one(r, OFF, 0, t, b, ctx) == pytest.approx(want, rel=1e-12)
    assert r.linear_form(8192).v1 > r.linear_form(0).v1
    assert r.linear_form(8192).c > r.linear_form(0).c
    with pytest.raises(InputError):
        toy(TOY_MOE).linear_form()


def test_context_trend_worked_by_hand():
    """At 64 sequences speculation (k = 3, E = 2.5 tokens per step, drafting 0.1 ms per
    pass) is off at short context and on at long context. Toy replica, η = 1, no fixed
    time, no KV write.

    C = 0:     k = 0: memory 2, compute 0.02·64 = 1.28 → 2 ms; 1/2 = 0.5 tokens/ms/seq.
               k = 3: n = 256, memory 2, compute 5.12 → 5.12 + 3·0.1 = 5.42 ms;
               2.5 / 5.42 = 0.4613 < 0.5: speculation off.
    C = 8192:  k = 0: memory 2 + 3.2768e-5·64·8192 = 2 + 17.179869184 = 19.179869184;
               compute 1.28 + 1.31072e-6·524288 = 1.967194767 → 19.179869184 ms;
               1 / 19.18 = 0.05214.
               k = 3: memory unchanged 19.179869184; compute 5.12 + 1.31072e-6·256·8192
               = 7.868779069 → 19.179869184 + 0.3 = 19.479869184 ms; 2.5 / 19.48 = 0.1283:
               speculation on (2.46 times the tokens/s).
    A context-blind model (today's form fitted at C = 0) says off at both.
    """
    r = toy(kv_write=False).with_parameters({"draft.d.fixed_ms": 0.1})
    e = 2.5
    short = (one(r, OFF, 0, 1, 64, 0), one(r, ON, 3, 4, 64, 0))
    long = (one(r, OFF, 0, 1, 64, 8192), one(r, ON, 3, 4, 64, 8192))
    assert short == pytest.approx((2.0, 5.42), rel=1e-12)
    assert long == pytest.approx((19.179869184, 19.479869184), rel=1e-12)
    assert e / short[1] < 1 / short[0]  # off at short context
    assert e / long[1] > 1 / long[0]  # on at long context
    assert (e / long[1]) / (1 / long[0]) == pytest.approx(2.4615, rel=1e-4)


def test_pnorm_lies_above_max_and_tends_to_it():
    m = np.array([1.0, 2.0, 0.0, 5.0])
    c = np.array([1.0, 0.5, 3.0, 5.0])
    hi = np.maximum(m, c)
    assert np.all(combine(m, c, "pnorm", 2.0) >= hi)
    np.testing.assert_allclose(combine(m, c, "pnorm", 2.0), np.hypot(m, c))
    np.testing.assert_allclose(combine(m, c, "pnorm", 64.0), hi, rtol=0.011)
    np.testing.assert_array_equal(combine(m, c, "max", 2.0), hi)


def test_monotone_in_every_load_axis():
    rng = np.random.default_rng(3)
    for model in (TOY_DENSE, TOY_MOE):
        for form in ("max", "pnorm"):
            r = toy(
                model,
                form=form,
                p=3.0,
                mem_eff=0.6,
                compute_eff=0.3,
                fixed_ms=0.7,
                seq_ms=0.01,
                overhead_ms=0.2,
            ).with_parameters({"draft.d.fixed_ms": 0.1})
            base = dict(
                b=rng.integers(1, 256, 200).astype(float),
                t=rng.integers(1, 9, 200),
                c=rng.uniform(0, 30000, 200),
                p=rng.uniform(0, 4000, 200),
            )
            k = np.where(base["t"] > 1, base["t"] - 1, 0)
            mem = np.broadcast_to(k[:, None] > 0, (200, 1))
            at = r.step_ms(mem, k, base["t"], base["b"], base["c"], base["p"])
            for axis, bump in (("b", 7.0), ("c", 500.0), ("p", 300.0)):
                moved = dict(base, **{axis: base[axis] + bump})
                after = r.step_ms(mem, k, moved["t"], moved["b"], moved["c"], moved["p"])
                assert np.all(after >= at - 1e-12), (axis, form)
            more = r.step_ms(
                np.ones((200, 1), bool), k, base["t"] + 1, base["b"], base["c"], base["p"]
            )
            assert np.all(more >= at - 1e-12)


def test_an_empty_step_or_drafting_without_a_drafter_has_no_step_time():
    r = toy()
    assert math.isnan(one(r, OFF, 0, 1, 0, 0, 0))
    assert one(r, OFF, 0, 1, 0, 0, 512) > 0  # prefill alone is a step
    assert math.isnan(one(r, OFF, 3, 4, 8))


def test_parameter_vector_view():
    r = toy(form="pnorm")
    space = r.parameters()
    assert space.names[:6] == ("mem_eff", "compute_eff", "fixed_ms", "seq_ms", "overhead_ms", "p")
    spec = dict(zip(space.names, space.spec_determined, strict=True))
    assert spec["weights_ms"] and spec["token_ms"] and not spec["mem_eff"]
    assert not spec["draft.d.weights_ms"]  # the drafter has no spec
    assert np.all(space.lower <= space.values) and np.all(space.values <= space.upper)
    again = r.with_parameters(space.as_dict())
    np.testing.assert_array_equal(again.parameters().values, space.values)
    with pytest.raises(KeyError):
        r.with_parameters({"nope": 1.0})
    fitted = dict(zip(space.names, space.fitted, strict=True))
    assert fitted["mem_eff"] and fitted["p"] and not fitted["weights_ms"]
    free = RooflinePredictor.from_linear(5, 0.1, 0.02).parameters()
    fitted = dict(zip(free.names, free.fitted, strict=True))
    assert fitted["weights_ms"] and fitted["token_ms"] and not fitted["mem_eff"]


def test_bad_factors_are_refused():
    with pytest.raises(InputError):
        toy(mem_eff=1.5)
    with pytest.raises(InputError):
        toy(form="cubic")
    with pytest.raises(InputError):
        RooflinePredictor(PeakTerms(), p=0.5)
