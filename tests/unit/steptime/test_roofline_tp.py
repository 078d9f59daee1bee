"""Tensor parallelism in the roofline: the all-reduce term against its closed form, its
place outside max(memory, compute), ``comm_eff`` and its fit (docs/design.md §8.12).

A Llama-3.1-70B-like dense shape (80 layers, hidden 8192) on H100s joined by NVLink 4
(450 GB/s per direction). Per processed token and layer two all-reduces of 8192 × 2
bytes; over a ring of ``n`` GPUs each takes ``2(n − 1)/n · 16,384 B / 450e9 B/s``, so
per token ``X_ar = 10³ · 160 · 2(n − 1)/n · 16,384 / 450e9`` ms: 5.825e-3 ms at n = 2,
8.738e-3 at n = 4. NVLink has no latency figure in the table: ``L_ar = 0``.
"""

import math

import numpy as np
import pytest
import yaml

from allocator.calibration.roofline_fit import fit_roofline, undetermined
from allocator.core.hardware import Hardware
from allocator.core.interconnect import LINKS, ring_allreduce_ms
from allocator.core.model_spec import ModelSpec
from allocator.exceptions import InputError, NotModelledError
from allocator.io.build import problem_from_file
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.dispatch import roofline_of
from allocator.model.steptime.roofline import MIN_EFF, RooflinePredictor, combine

BIG = ModelSpec(params=70e9, layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128)
DRAFT = ModelSpec(params=1e9, layers=1, hidden=8192, heads=64, kv_heads=8, head_dim=128)
ON = np.ones((1, 1), bool)


def roof(count: int, interconnect: str | None = None, **factors) -> RooflinePredictor:
    hw = Hardware.from_fields("h100-sxm", count, interconnect)
    return RooflinePredictor.from_specs(hw, BIG, {"d": DRAFT}, **factors)


def x_of(b, t=1, c=0.0, p=0.0, k=0):
    members = np.zeros((1, 1), bool) if k == 0 else ON
    return step_inputs(members, k, t, b, c, p, 1)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_all_reduce_per_token_is_two_rings_per_layer(n):
    r = roof(n)
    by_hand = 1e3 * 2 * 80 * (2 * (n - 1) / n) * 8192 * 2 / 450e9
    assert r.peak.allreduce_ms == pytest.approx(by_hand, rel=1e-12)
    assert r.peak.allreduce_fixed_ms == 0.0  # NVLink: no vendor latency figure
    ring = float(ring_allreduce_ms(8192 * 2, n, LINKS["nvlink4"].bandwidth_bytes_s))
    assert r.peak.allreduce_ms == pytest.approx(160 * ring, rel=1e-12)
    # the draft model all-reduces over the same GPUs with its own shape: one layer
    assert r.drafters[0].peak.allreduce_ms == pytest.approx(by_hand / 80, rel=1e-12)


def test_a_link_with_a_latency_adds_it_per_pass():
    """ib-hdr: 25 GB/s, 0.6 µs per step: L_ar = 10³ · 160 · 2(n − 1) · 0.6e-6 ms."""
    r = roof(4, "ib-hdr")
    assert r.peak.allreduce_fixed_ms == pytest.approx(1e3 * 160 * 6 * 0.6e-6, rel=1e-12)
    assert r.peak.allreduce_ms == pytest.approx(1e3 * 160 * 1.5 * 16384 / 25e9, rel=1e-12)
    x = x_of(8, t=3)
    expected = r.peak.allreduce_ms * 24 + r.peak.allreduce_fixed_ms
    assert float(r.comm_ms(x)[0]) == pytest.approx(expected, rel=1e-12)


def test_comm_is_added_outside_the_max():
    r = roof(4, comm_eff=0.5)
    for b, t, c, p in [(1, 1, 0, 0), (64, 4, 2048, 0), (8, 1, 512, 4096)]:
        x = x_of(b, t, c, p)
        memory, compute = r.verifier_parts(x)
        comm = r.comm_ms(x)
        n = b * t + p
        assert float(comm[0]) == pytest.approx(r.peak.allreduce_ms * n / 0.5, rel=1e-12)
        pre = r.prefill_compute_ms(x)
        np.testing.assert_array_equal(
            r.verify_ms(x), combine(memory, compute, r.form, r.p) + comm + pre
        )
        assert float(comm[0]) > 0


def test_one_gpu_adds_nothing_and_step_times_are_unchanged():
    one = roof(1)
    assert one.peak.allreduce_ms == 0.0 and one.peak.allreduce_fixed_ms == 0.0
    assert not one.has_comm
    space = dict(zip(one.parameters().names, one.parameters().fitted, strict=True))
    assert not space["comm_eff"]  # nothing to fit on one GPU
    rng = np.random.default_rng(3)
    b = rng.integers(1, 256, 50).astype(float)
    t = rng.integers(1, 6, 50)
    c = rng.uniform(0, 8192, 50)
    k = t - 1
    members = np.broadcast_to((k > 0)[:, None], (50, 1))
    x = step_inputs(members, k, t, b, c, 0.0, 1)
    assert np.all(one.comm_ms(x) == 0.0)
    memory, compute = one.verifier_parts(x)
    np.testing.assert_array_equal(one.verify_ms(x), combine(memory, compute, "max", 8.0))
    # comm_eff has nothing to scale
    np.testing.assert_array_equal(
        one.step_ms_of(x), one.with_parameters({"comm_eff": 0.01}).step_ms_of(x)
    )


def test_comm_eff_is_a_bounded_fitted_parameter_on_several_gpus():
    r = roof(4)
    space = r.parameters()
    i = space.index("comm_eff")
    assert space.values[i] == 1.0 and (space.lower[i], space.upper[i]) == (MIN_EFF, 1.0)
    assert space.fitted[i] and not space.spec_determined[i]
    j = space.index("allreduce_ms")
    assert space.spec_determined[j] and not space.fitted[j]
    x = x_of(32, t=4)
    half = r.with_parameters({"comm_eff": 0.25})
    assert float(half.comm_ms(x)[0]) == pytest.approx(4 * float(r.comm_ms(x)[0]), rel=1e-12)
    with pytest.raises(InputError):
        roof(4, comm_eff=1.5)
    with pytest.raises(InputError, match="no linear form"):
        r.linear_form()


def test_calibration_recovers_comm_eff():
    """Rows made by the model at comm_eff 0.4 (and mem_eff 0.7, compute_eff 0.5, fixed 2
    ms, seq_ms 0.01 held): the fit from the defaults finds them again."""
    truth = roof(4, mem_eff=0.7, compute_eff=0.5, fixed_ms=2.0, seq_ms=0.01, comm_eff=0.4)
    b = np.array([1, 4, 16, 64, 256, 1, 16, 256, 8, 64], float)
    t = np.array([1, 1, 1, 1, 1, 4, 4, 4, 2, 2])
    c = np.array([512, 2048, 512, 4096, 1024, 512, 2048, 1024, 8192, 512], float)
    members = (t > 1)[:, None]
    rows = step_inputs(members, t - 1, t, b, c, 0.0, 1)
    y = truth.step_ms_of(rows)
    start = roof(4, seq_ms=0.01)  # the others at their defaults, to be fitted
    fit = fit_roofline(start, rows, y, free=["mem_eff", "compute_eff", "fixed_ms", "comm_eff"])
    assert "comm_eff" not in fit.undetermined
    assert fit.values["comm_eff"] == pytest.approx(0.4, rel=1e-4)
    assert np.max(np.abs(fit.residuals)) < 1e-8


def test_one_token_count_leaves_comm_eff_undetermined():
    rows = step_inputs(np.zeros((2, 1), bool), 0, 1, 16.0, np.array([512.0, 4096.0]), 0.0, 1)
    why = undetermined(roof(4), rows)
    assert "one token count" in why["comm_eff"]
    assert "comm_eff" not in undetermined(roof(1), rows)  # not fitted on one GPU


def _problem(tmp_path, hardware: dict):
    root = __import__("pathlib").Path(__file__).resolve().parents[3]
    data = yaml.safe_load((root / "problems/roofline-llama31-8b.yaml").read_text())
    data["serving"]["hardware"] = hardware
    data["serving"].pop("gpus_per_replica", None)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    return problem_from_file(tmp_path / "p.yaml")


def test_a_problem_file_sets_the_interconnect(tmp_path):
    p = _problem(tmp_path, {"gpu": "h100-sxm", "count": 2, "interconnect": "pcie5-x16"})
    r = roofline_of(p.serving, p.names)
    assert r is not None and r.has_comm
    assert p.serving.hardware.link is LINKS["pcie5-x16"]
    # 32 layers, hidden 4096 in Llama-3.1-8B: 10³ · 64 · 1 · 8192 / 64e9
    assert r.peak.allreduce_ms == pytest.approx(1e3 * 64 * 4096 * 2 / 64e9, rel=1e-12)


def test_bad_hardware_fields_are_one_line_each(tmp_path):
    with pytest.raises(InputError) as e:
        _problem(tmp_path, {"gpu": "h100-sxm", "count": 2, "interconnect": "smoke-signal"})
    assert "\n" not in str(e.value) and "nvlink4" in str(e.value)
    with pytest.raises(NotModelledError) as e:
        _problem(tmp_path, {"gpu": "h100-sxm", "count": 4, "pp": 2})
    assert e.value.field == "serving.hardware.pp"
    with pytest.raises(NotModelledError) as e:
        _problem(tmp_path, {"gpu": "h100-sxm", "count": 4, "ep": 2})
    assert e.value.field == "serving.hardware.ep" and "\n" not in str(e.value)
    # ep = count is expert parallelism, which a dense model does not have
    dense = _problem(tmp_path, {"gpu": "h100-sxm", "count": 4, "ep": 4})
    with pytest.raises(InputError) as e:
        roofline_of(dense.serving, dense.names)
    assert e.value.field == "serving.hardware.ep" and "\n" not in str(e.value)
    # a count that does not divide the heads is refused, as before
    with pytest.raises(InputError, match="does not divide"):
        RooflinePredictor.from_specs(Hardware.from_fields("h100-sxm", 3), BIG)
    assert math.isfinite(roof(8).peak.allreduce_ms)


def test_calibrate_writes_every_factor_the_roofline_fits(tmp_path):
    """Every factor the predictor lets a fit move (``comm_eff`` on several GPUs among them)
    is written into ``serving.roofline``: a factor fitted but not written would make the
    written file disagree with the fit, and calibrate would refuse to write it."""
    from types import SimpleNamespace

    from allocator.calibration.write import _roofline_section

    p = _problem(tmp_path, {"gpu": "h100-sxm", "count": 4})
    r = roofline_of(p.serving, p.names)
    assert r is not None
    space = r.parameters()
    fitted = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    assert "comm_eff" in fitted
    cal = SimpleNamespace(parameters=[{"name": n, "written": 0.5} for n in fitted])
    serving, _ = _roofline_section(p, cal, {})
    roof = serving["roofline"]
    for name in fitted:
        if name.startswith("draft."):
            _, drafter, key = name.split(".", 2)
            assert roof["drafters"][drafter][key] == 0.5, name
        else:
            assert roof[name] == 0.5, name
