"""Front utilities against their libraries and against direct computation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.core.pareto import front_order, hypervolume, knee_point, nondominated

coords = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=60
)  # integers: many exact ties


def brute_nondominated(cost, thr):
    n = len(cost)
    return np.array(
        [
            not any(
                cost[j] <= cost[i] and thr[j] >= thr[i] and (cost[j] < cost[i] or thr[j] > thr[i])
                for j in range(n)
            )
            for i in range(n)
        ]
    )


@given(coords)
@settings(max_examples=200, deadline=None)
def test_front_order_agrees_with_moocore_and_brute_force(pts):
    cost = np.array([p[0] for p in pts], float)
    thr = np.array([p[1] for p in pts], float)
    mask = nondominated(cost, thr)
    np.testing.assert_array_equal(mask, brute_nondominated(cost, thr))
    kept = front_order(cost, thr)
    # front_order keeps one of each set of identical non-dominated points
    assert {(cost[i], thr[i]) for i in kept} == {(cost[i], thr[i]) for i in np.flatnonzero(mask)}
    assert len(kept) == len({(cost[i], thr[i]) for i in kept})
    assert list(cost[kept]) == sorted(cost[kept])


def staircase_area(cost, thr, ref_c, ref_t):
    """Area of the union of rectangles [c, ref_c] x [ref_t, t], summed strip by strip."""
    xs = sorted({c for c in cost if c < ref_c} | {ref_c})
    area = 0.0
    for left, right in zip(xs, xs[1:], strict=False):
        top = max([t for c, t in zip(cost, thr, strict=True) if c <= left] + [ref_t])
        area += (right - left) * (top - ref_t)
    return area


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 5)), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_hypervolume_is_the_dominated_area(pts):
    cost = np.array([p[0] for p in pts])
    thr = np.array([p[1] for p in pts])
    hv = hypervolume(cost, thr, ref_cost=12.0, ref_throughput=0.0)
    assert hv == pytest.approx(staircase_area(cost, thr, 12.0, 0.0), rel=1e-9, abs=1e-9)


def test_hypervolume_agrees_with_optuna():
    rng = np.random.default_rng(0)
    cost, thr = rng.uniform(0, 1, 200), rng.uniform(0, 1, 200)
    from optuna._hypervolume import compute_hypervolume

    theirs = compute_hypervolume(np.column_stack([cost, -thr]), np.array([1.5, 0.0]))
    ours = hypervolume(cost, thr, 1.5, 0.0)
    assert ours == pytest.approx(theirs, rel=1e-12)
    # and both lie between the best single rectangle and the bounding box
    assert np.max((1.5 - cost) * thr) < ours < (1.5 - cost.min()) * thr.max()


def test_hypervolume_ignores_points_beyond_the_reference():
    assert hypervolume([1.0, 5.0], [2.0, 9.0], ref_cost=3.0) == pytest.approx(4.0)
    assert hypervolume([5.0], [9.0], ref_cost=3.0) == 0.0


def test_knee_point_of_a_sharp_corner():
    cost = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    thr = np.array([0.0, 0.9, 0.95, 0.98, 1.0])
    assert knee_point(cost, thr) == 1
    # scale-free: the same front in other units has the same knee
    assert knee_point(cost * 1000, thr * 0.001) == 1
    assert knee_point(cost[:1], thr[:1]) == 0
    with pytest.raises(ValueError):
        knee_point(np.array([]), np.array([]))


def test_library_prefilter_keeps_exactly_what_the_scan_keeps():
    from allocator.core.pareto import LIBRARY_FROM, _scan

    rng = np.random.default_rng(1)
    n = 3 * LIBRARY_FROM
    cost = rng.integers(0, 300, n).astype(float)  # many exact ties
    thr = rng.integers(0, 300, n).astype(float)
    thr[::97] = np.nan
    drafters, k = rng.integers(1, 4, n), rng.integers(1, 9, n)
    fast = front_order(cost, thr, drafters, k)
    plain = _scan(cost, thr, (drafters, k))
    np.testing.assert_array_equal(fast, plain)
