"""Calibration's choices do not move with floating-point noise (the last digits a BLAS
kernel changes): a combination the rows determine is reported the same under a 10⁻¹²
relative change of the sensitivities, and today's fit picks the same point of a flat
valley whichever of its starts ends 10⁻¹³ lower."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from allocator.calibration import fit as fit_module
from allocator.calibration.confounded import combinations
from allocator.calibration.rows import read_inputs, step_times
from allocator.core.problem import Problem
from allocator.io.build import problem_from_file
from allocator.model.steptime import RooflinePredictor, StepInputs

ROOT = "problems/measured"


def _two_drafter_rows() -> StepInputs:
    """Drafter a alone and drafter b alone, both at k = 3 and batch 1, and a plain row."""
    members = np.array([[False, False], [True, False], [False, True]])
    k = np.array([0, 3, 3])
    return StepInputs(members, k, k + 1, np.ones(3), np.zeros(3), np.zeros(3))


@pytest.mark.parametrize("rel", [-1e-12, 1e-12])
def test_the_combination_of_a_near_tie_is_the_first_rows(rel):
    """Two drafters with the same pass time at the same k: overhead + 3·a and overhead +
    3·b are both determined and the two rows are equally sensitive to the overhead; b's
    pass 10⁻¹² shorter or longer must not change which is reported (the first row's)."""
    rows = _two_drafter_rows()
    names = ["overhead_ms", "draft.a.fixed_ms", "draft.b.fixed_ms"]

    def report(d0_b: float) -> dict[str, str]:
        m = RooflinePredictor.from_linear(4.0, 0.0, 0.0, 0.5, [("a", 1.2, 0.0), ("b", d0_b, 0.0)])
        return combinations(m, rows, names, ["overhead_ms"])

    exact = report(1.2)
    # by hand: the row of drafter a, 0.5 + 3·1.2
    assert exact == {"overhead_ms": "overhead_ms + 3·draft.a.fixed_ms = 4.1"}
    assert report(1.2 * (1 + rel)) == exact


def _specforge() -> tuple[Problem, object, np.ndarray]:
    problem = problem_from_file(f"{ROOT}/qwen3-30b-a3b-eagle3.yaml")
    data, _ = read_inputs([f"{ROOT}/sglang-specforge339-2xh100.csv"], problem)
    return problem, data, step_times(problem, data)[1]


@pytest.mark.parametrize("rel", [-1e-13, 1e-13])
def test_a_flat_valleys_ends_tie_to_the_first_start(monkeypatch, rel):
    """The SpecForge rows: both starts fit the speculative rows exactly, at different
    points of a valley (the compute term against the drafter's slope); whichever ends
    10⁻¹³ lower, the fit is the first start's, with no row compute bound."""
    original = scipy.optimize.least_squares
    calls = []

    def perturbed(*args, **kwargs):
        res = original(*args, **kwargs)
        calls.append(res.cost)
        if len(calls) == 2:
            res.cost = calls[0] * (1 + rel)
        return res

    monkeypatch.setattr(scipy.optimize, "least_squares", perturbed)
    problem, data, step = _specforge()
    got = fit_module._fit_today(problem, data, step)
    assert len(calls) == 2
    assert got.model.compute_per_token < 1e-6
    # overhead + 3·d0 is what the two speculative rows fix: the guide's 6.19796
    assert got.model.overhead + 3 * got.model.draft_fixed[0] == pytest.approx(6.19796, rel=1e-5)
