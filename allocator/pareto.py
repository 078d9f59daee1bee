"""Pareto fronts of throughput (maximised) against cost (minimised)."""

from __future__ import annotations

import numpy as np


def front_order(cost: np.ndarray, throughput: np.ndarray, *tiebreak: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points, sorted by cost ascending.

    A point is dropped when another has lower-or-equal cost and higher-or-equal
    throughput (one strictly), and of identical points only the first in the order
    ``(cost, -throughput, *tiebreak)`` is kept. Inputs are ``(P,)`` arrays; ``NaN``
    points are ignored.

    The scan is ``O(P log P)``: sort, then keep each point whose throughput beats the
    running maximum of everything cheaper.
    """
    cost = np.asarray(cost, dtype=float)
    thr = np.asarray(throughput, dtype=float)
    keys = [np.asarray(t) for t in reversed(tiebreak)] + [-thr, cost]
    order = np.lexsort(keys)
    order = order[~(np.isnan(cost[order]) | np.isnan(thr[order]))]
    if order.size == 0:
        return order
    t = thr[order]
    best_before = np.maximum.accumulate(np.concatenate(([-np.inf], t[:-1])))
    return order[t > best_before]
