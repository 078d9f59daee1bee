"""Pareto fronts of throughput (maximised) against cost (minimised)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module

if TYPE_CHECKING:
    import moocore
else:
    moocore = lazy_module("moocore")


def front_order(cost: np.ndarray, throughput: np.ndarray, *tiebreak: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points, sorted by cost ascending.

    A point is dropped when another has lower-or-equal cost and higher-or-equal
    throughput (one strictly), and of identical points only the first in the order
    ``(cost, -throughput, *tiebreak)`` is kept. Inputs are ``(P,)`` arrays; ``NaN``
    points are ignored.

    The scan is ``O(P log P)``: sort, then keep each point whose throughput beats the
    running maximum of everything cheaper. From :data:`LIBRARY_FROM` points on,
    :func:`moocore.is_nondominated` (measured faster than the scan alone, see the last
    row of ``benchmarks/run.py``) first drops the strictly dominated points; that never
    changes which points the scan keeps.
    """
    cost = np.asarray(cost, dtype=float)
    thr = np.asarray(throughput, dtype=float)
    if cost.size >= LIBRARY_FROM:
        idx = np.flatnonzero(~(np.isnan(cost) | np.isnan(thr)))
        idx = idx[nondominated(cost[idx], thr[idx])]
        sub = [np.asarray(t)[idx] for t in tiebreak]
        return idx[_scan(cost[idx], thr[idx], sub)]
    return _scan(cost, thr, tiebreak)


#: Pre-filter with moocore from this many points on (below, its import costs more).
LIBRARY_FROM = 10_000


def _scan(cost: np.ndarray, thr: np.ndarray, tiebreak) -> np.ndarray:
    keys = [np.asarray(t) for t in reversed(tiebreak)] + [-thr, cost]
    order = np.lexsort(keys)
    order = order[~(np.isnan(cost[order]) | np.isnan(thr[order]))]
    if order.size == 0:
        return order
    t = thr[order]
    best_before = np.maximum.accumulate(np.concatenate(([-np.inf], t[:-1])))
    return order[t > best_before]


def nondominated(cost: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """Bool mask ``(P,)`` of the points no other point dominates (ties: all kept).

    Delegates to :func:`moocore.is_nondominated`; :func:`front_order` adds sorting and
    one representative per set of identical points (``tests/test_pareto.py`` checks
    they agree).
    """
    pts = np.column_stack([np.asarray(cost, float), np.asarray(throughput, float)])
    if pts.shape[0] == 0:
        return np.zeros(0, bool)
    return moocore.is_nondominated(pts, maximise=[False, True], keep_weakly=True)


def hypervolume(
    cost: np.ndarray, throughput: np.ndarray, ref_cost: float, ref_throughput: float = 0.0
) -> float:
    """Area dominated by the points and bounded by the reference point.

    The area (cost units x throughput units) of the region of cost ``<= ref_cost``
    and throughput ``>= ref_throughput`` that some point dominates; points beyond the
    reference contribute nothing. Computed by :func:`moocore.hypervolume`.
    """
    cost = np.asarray(cost, float)
    thr = np.asarray(throughput, float)
    inside = (cost <= ref_cost) & (thr >= ref_throughput)
    if not inside.any():
        return 0.0
    pts = np.column_stack([cost[inside], thr[inside]])
    return float(moocore.hypervolume(pts, ref=[ref_cost, ref_throughput], maximise=[False, True]))


def knee_point(cost: np.ndarray, throughput: np.ndarray) -> int:
    """Index of the knee of a front: the point farthest above the chord between its ends.

    Both axes are scaled to [0, 1] over the front first, so the answer does not
    depend on units. Inputs ``(P,)`` are front points (any order); a front of one or
    two points returns its highest-throughput point.
    """
    cost = np.asarray(cost, float)
    thr = np.asarray(throughput, float)
    if cost.size == 0:
        raise ValueError("an empty front has no knee")
    lo, hi = int(np.argmin(cost)), int(np.argmax(thr))
    span_c = cost[hi] - cost[lo]
    span_t = thr[hi] - thr[lo]
    if cost.size <= 2 or span_c <= 0 or span_t <= 0:
        return hi
    x = (cost - cost[lo]) / span_c
    y = (thr - thr[lo]) / span_t
    return int(np.argmax(y - x))  # distance above the chord y = x, up to a factor sqrt(2)


__all__ = [
    "LIBRARY_FROM",
    "front_order",
    "hypervolume",
    "knee_point",
    "nondominated",
]
