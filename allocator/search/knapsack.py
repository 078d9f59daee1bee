"""Large pools under independent errors: a Pareto dynamic programme over drafters.

Under independence with one acceptance value per drafter, a subset's pooled
acceptance is ``1 - exp(L)`` with ``L = sum_i log(1 - a_i)``, and its draft cost is
``sum rho_i``: both are sums over members, like weights in a knapsack. A subset whose
``(sum rho, L)`` is beaten by another's (lower or equal in both) cannot reach the front
at any ``k`` (see :mod:`.dominance`), and that stays true after adding the same
drafters to both. So adding drafters one at a time and keeping, after each, only the
states no other state dominates leaves a superset of every subset that can reach the
front; the model then evaluates those at every ``k``. The front is exact.

When hosting cost is on the axis or capped, states are compared only with states of
the same hosting-cost sum (and the same ``m`` where it matters), and a state over the
hosting cap is never grown; the programme then applies while the pool's distinct
hosting-cost sums stay few (:data:`MAX_HOSTING_LEVELS`), as with costs counted in
whole GPUs or GB.

``L`` is floored at :data:`L_FLOOR`: below it ``1 - exp(L)`` is 1.0 in double precision,
so floored states are genuinely equal in the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..core.budget import budget_limit
from ..core.result import SolveResult
from ..core.space import size_allowed
from ..exceptions import InputError
from .base import Strategy
from .dominance import pruning_blocker
from .exact import evaluate_front

if TYPE_CHECKING:
    from ..core.problem import Problem

#: ``exp(-40) < 2**-53``: pooled acceptance rounds to exactly 1.0 below this.
L_FLOOR = -40.0

#: Most distinct hosting-cost sums the programme keeps apart.
MAX_HOSTING_LEVELS = 4096


def hosting_sums(hosting: np.ndarray, cap: float, limit: int = MAX_HOSTING_LEVELS):
    """The distinct sums ``<= cap`` of subsets of ``hosting`` (rounded to 1e-9), or ``None``
    when there are more than ``limit``.

    ``hosting`` is ``(N,)`` per-drafter hosting costs, ``cap`` in the same units; the
    result is ``(L,)``, ascending, starting at 0 (the empty subset).
    """
    sums = np.zeros(1)
    for h in hosting:
        sums = np.unique(np.round(np.concatenate([sums, sums[sums + h <= cap] + h]), 9))
        if sums.size > limit:
            return None
    return sums


def _hosting_cap(problem: Problem) -> float:
    return budget_limit(problem.budget.get("hosting_cost", np.inf))


def _by_hosting(problem: Problem) -> bool:
    """Whether states must be kept apart by hosting-cost sum: hosting cost is on the
    axis or capped, and not the same for every drafter."""
    used = set(problem.budget) | {problem.cost_metric}
    return "hosting_cost" in used and np.ptp(problem.hosting_cost) > 0


def knapsack_blocker(problem: Problem) -> tuple[str, str] | None:
    """``(field, reason)`` why the programme does not apply to ``problem``, or ``None``."""
    why = pruning_blocker(problem)
    if why is not None:
        return "problem", f"the knapsack strategy cannot handle {why}"
    if getattr(problem.errors, "name", "") != "independent":
        return "errors.model", "the knapsack strategy needs independent errors"
    if problem.acceptance.shape[1] != 1:
        return "drafters", "the knapsack strategy needs one acceptance value per drafter"
    if problem.drafting != "sequential":
        return "drafting", "the knapsack strategy needs sequential drafting"
    if _by_hosting(problem):
        pool = problem.hosting_cost[~problem.excluded]
        if hosting_sums(pool, _hosting_cap(problem)) is None:
            return "drafters", (
                f"the knapsack strategy keeps at most {MAX_HOSTING_LEVELS:,} distinct "
                "hosting-cost sums apart, and these hosting costs make more"
            )
    return None


def pareto_states(sum_rho: np.ndarray, logq: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Indices of states not dominated in (``sum_rho`` down, ``logq`` down) within their level.

    Of equal states only one is kept. Arrays are ``(S,)``.
    """
    order = np.lexsort((logq, sum_rho, level))
    lv, lq = level[order], logq[order]
    keep = np.ones(order.size, bool)
    starts = np.flatnonzero(np.concatenate(([True], lv[1:] != lv[:-1])))
    for lo, hi in zip(starts, np.append(starts[1:], order.size), strict=True):
        seg = lq[lo:hi]
        best_before = np.empty_like(seg)
        best_before[0] = np.inf
        np.minimum.accumulate(seg[:-1], out=best_before[1:])
        keep[lo:hi] = seg < best_before
    return order[keep]


class KnapsackStrategy(Strategy):
    """Exact front for large pools of independent drafters (``exact: true``).

    Parameters
    ----------
    max_cells : int
        Upper bound on ``subsets x k`` values evaluated per chunk (memory bound).
    progress : callable ``(done, total, front_size)`` or None
        Called after each drafter is added (``done`` drafters of ``total``).
    """

    name = "knapsack"

    def __init__(
        self,
        max_cells: int = 1 << 21,
        progress: Callable[[int, int, int | None], None] | None = None,
    ):
        self.max_cells = max_cells
        self.progress = progress

    def solve(self, problem: Problem) -> SolveResult:
        self.check(problem)
        t0 = time.perf_counter()
        blocked = knapsack_blocker(problem)
        if blocked is not None:
            raise InputError(*blocked)
        n = problem.n
        q = 1.0 - problem.acceptance[:, 0]
        logq = np.log(np.where(q > 0, q, 1.0))
        logq[q <= 0] = L_FLOOR  # acceptance 1: pooled acceptance is exactly 1
        rho = problem.unit_cost
        used = set(problem.budget) | {problem.cost_metric}
        n_req = int(problem.required.sum())
        # hosting cost matters: keep states of unequal hosting sums apart (with equal
        # hosting costs the sum is m times the cost, so tracking m does it)
        by_hosting = _by_hosting(problem)
        # track m exactly when the metrics or the m-range depend on it
        track_m = (
            problem.token_cost != 0.0
            or "drafters" in used
            or ("hosting_cost" in used and not by_hosting)
            or problem.m_min > max(1, n_req)
            or problem.m_max < n
        )
        h = problem.hosting_cost
        h_cap = _hosting_cap(problem)
        rho_cap = budget_limit(problem.budget.get("draft_cost_per_round", np.inf)) / problem.k_min

        members = problem.required[None, :].copy()
        cost = np.array([rho[problem.required].sum()])
        ll = np.array([max(logq[problem.required].sum(), L_FLOOR)])
        m = np.array([n_req])
        hs = np.array([h[problem.required].sum()])
        free = np.flatnonzero(~problem.required & ~problem.excluded)
        for step, i in enumerate(free):
            grow = (m < problem.m_max) & (cost + rho[i] <= rho_cap) & (hs + h[i] <= h_cap)
            new = members[grow].copy()
            new[:, i] = True
            members = np.concatenate([members, new])
            cost = np.concatenate([cost, cost[grow] + rho[i]])
            ll = np.concatenate([ll, np.maximum(ll[grow] + logq[i], L_FLOOR)])
            m = np.concatenate([m, m[grow] + 1])
            hs = np.concatenate([hs, hs[grow] + h[i]])
            level = m if track_m else np.zeros_like(m)
            if by_hosting:  # compare states of equal hosting-cost sum only
                h_id = np.unique(np.round(hs, 9), return_inverse=True)[1].ravel()
                level = h_id * (n + 1) + level
            keep = pareto_states(cost, ll, level)
            members, cost, ll, m, hs = members[keep], cost[keep], ll[keep], m[keep], hs[keep]
            if self.progress is not None:
                self.progress(step + 1, free.size, None)
        members = members[size_allowed(problem, m)]
        if members.shape[0] == 0:
            raise InputError("budget", "no subset of drafters meets the budget and search.m")
        rows = max(1, self.max_cells // len(problem.k_values))
        chunks = (members[lo : lo + rows] for lo in range(0, members.shape[0], rows))
        front, evaluated = evaluate_front(problem, chunks)
        note = (
            f"Pareto programme over {free.size} drafters kept {members.shape[0]:,} subsets "
            f"not dominated in (sum rho, sum log(1 - a){', m' if track_m else ''}"
            f"{', hosting' if by_hosting else ''}); "
            f"the model evaluated {evaluated:,} configurations"
        )
        return self.result(problem, front, evaluated, t0, [note])


__all__ = [
    "L_FLOOR",
    "MAX_HOSTING_LEVELS",
    "KnapsackStrategy",
    "hosting_sums",
    "knapsack_blocker",
    "pareto_states",
]
