"""Fitting the roofline (allocator.calibration.roofline_fit): which parameters a grid of rows
leaves undetermined by its axes, recovery of known parameters from noisy synthetic step
times with standard errors from the fit's Jacobian, and refusals; and calibrate's
today's-form step model, whose step times are the roofline's without specs.

The toy replica is the predictor's tests' (tests/unit/steptime/test_roofline.py): 1 TB/s
of bandwidth, 100 TFLOP/s of bf16, a dense verifier of 10⁹ parameters and one drafter
``d`` without a spec.
"""

from types import MappingProxyType

import numpy as np
import pytest

from allocator.calibration import StepModel, fit_roofline, undetermined
from allocator.core.hardware import GPU, Hardware
from allocator.core.model_spec import ModelSpec
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.roofline import RooflinePredictor

TOY_GPU = GPU(
    "toy", "a round-figure test accelerator", MappingProxyType({"bf16": 100.0}), 1.0, 100.0
)
TOY_HW = Hardware(TOY_GPU)
TOY_DENSE = ModelSpec(params=1e9, layers=16, hidden=2048, heads=16, kv_heads=4, head_dim=128)


def toy(**factors) -> RooflinePredictor:
    return RooflinePredictor.from_specs(TOY_HW, TOY_DENSE, {"d": None}, **factors)


def test_todays_step_model_is_the_roofline_without_specs():
    """StepModel (v0, v1, c, overhead, d0, d1) against today's form written out by hand:
    ``max(v0 + v1·b, c·b·t) + k·Σ_i (d0_i + d1_i·b) + overhead``, both sides of the kink."""
    members = np.array([[True, False], [False, True], [True, True], [False, False]])
    k = np.array([3, 5, 2, 0])
    b = np.array([16.0, 64.0, 128.0, 32.0])
    t = k * members.sum(1) + 1
    today = StepModel(
        6.0, 0.05, 0.03, 0.4, np.array([0.3, 0.5]), np.array([0.01, 0.0]), np.ones(2, bool)
    )
    d = np.array([0.3 + 0.01 * b[0], 0.5, (0.3 + 0.01 * b[2]) + 0.5, 0.0])
    want = np.maximum(6.0 + 0.05 * b, 0.03 * b * t) + k * d + 0.4 * (k > 0)
    assert (6.0 + 0.05 * b > 0.03 * b * t).any() and (6.0 + 0.05 * b < 0.03 * b * t).any()
    np.testing.assert_allclose(today.step_ms(members, k, b), want, rtol=1e-12)
    r = RooflinePredictor.from_linear(6.0, 0.05, 0.03, 0.4, [("a", 0.3, 0.01), ("b", 0.5, 0.0)])
    np.testing.assert_allclose(r.step_ms(members, k, t, b, 0.0, 0.0), want, rtol=1e-12)


def _grid(batches, ks, contexts):
    b, k, c = (a.ravel() for a in np.meshgrid(batches, ks, contexts, indexing="ij"))
    members = (k > 0)[:, None]
    return step_inputs(members, k, k + 1, b.astype(float), c.astype(float), 0.0)


def test_undetermined_by_axes():
    r = toy()
    names = set(undetermined(r, _grid([1, 8, 64], [2, 4], [0, 4096])))
    assert "overhead_ms" in names  # no k = 0 row: base pass and overhead not separable
    one_batch = undetermined(r, _grid([16], [0, 2, 4], [0, 4096]))
    assert {"seq_ms", "draft.d.seq_ms"} <= set(one_batch)
    assert "one batch size" in one_batch["seq_ms"]
    plain = undetermined(r, _grid([1, 8], [0], [0, 4096]))
    assert {"overhead_ms", "draft.d.fixed_ms", "draft.d.seq_ms"} <= set(plain)
    assert "fixed_ms" in undetermined(r, _grid([1, 8], [0, 2, 3], [512]))
    assert "fixed_ms" not in undetermined(r, _grid([1, 8], [0, 2, 3], [512, 8192]))
    bare = undetermined(
        RooflinePredictor.from_linear(5, 0.1, 0.02, 0.1, [("d", 0.1, 0)]),
        _grid([1, 8], [0, 2, 3], [0]),
    )
    assert {"mem_eff", "compute_eff"}.isdisjoint(bare)  # not fitted by default there
    assert "kv_ms" not in bare and "attn_ms" not in bare  # zero, so not fitted either


def test_parameter_recovery_from_noisy_synthetic_steps():
    """Step times from a known roofline, times 1 + 0.01·N(0, 1) (seeded), over batch ×
    k × context; the fit through the parameter view must recover every parameter within
    4 standard errors, the standard errors coming from the fit's Jacobian and residual
    variance (about the 1% noise). Each standard error must also be small enough for
    the check to mean something (under 15% of the true value)."""
    truth = toy(
        mem_eff=0.7, compute_eff=0.5, fixed_ms=1.5, seq_ms=0.02, overhead_ms=0.4
    ).with_parameters({"draft.d.fixed_ms": 0.3, "draft.d.seq_ms": 0.004})
    rows = _grid([1, 4, 16, 64, 128], [0, 1, 3, 5], [0, 512, 4096])
    rng = np.random.default_rng(2024)
    exact = truth.step_ms_of(rows)
    noisy = exact * (1 + 0.01 * rng.standard_normal(exact.size))
    start = toy()  # efficiencies 1, every additive term 0
    fit = fit_roofline(start, rows, noisy)
    # no row prefills: the prefill tokens' share of peak is the one thing left unseen
    assert set(fit.undetermined) == {"prefill_eff"}
    want = truth.parameters().as_dict()
    for name in (
        "mem_eff",
        "compute_eff",
        "fixed_ms",
        "seq_ms",
        "overhead_ms",
        "draft.d.fixed_ms",
        "draft.d.seq_ms",
    ):
        se = fit.stderr[name]
        assert se < 0.15 * want[name], (name, se)
        assert abs(fit.values[name] - want[name]) <= 4 * se, (name, fit.values[name], se)
    assert np.std(fit.residuals) == pytest.approx(0.01, rel=0.3)


def test_fit_reports_what_the_rows_cannot_determine():
    truth = toy(mem_eff=0.7, fixed_ms=1.0, overhead_ms=0.4).with_parameters(
        {"draft.d.fixed_ms": 0.3}
    )
    rows = _grid([1], [0, 2, 4], [1024])  # one batch, one context, memory bound
    fit = fit_roofline(toy(), rows, truth.step_ms_of(rows))
    assert {"seq_ms", "draft.d.seq_ms", "fixed_ms"} <= set(fit.undetermined)
    assert "compute_eff" in fit.undetermined  # no row near compute bound
    assert set(fit.determined()) == {"mem_eff", "overhead_ms", "draft.d.fixed_ms"}
    np.testing.assert_allclose(fit.model.step_ms_of(rows), truth.step_ms_of(rows), rtol=1e-6)


def test_fit_refuses_bad_measurements():
    rows = _grid([1, 8], [0], [0])
    with pytest.raises(ValueError):
        fit_roofline(toy(), rows, np.array([1.0]))
    with pytest.raises(ValueError):
        fit_roofline(toy(), rows, np.array([1.0, -1.0]))
