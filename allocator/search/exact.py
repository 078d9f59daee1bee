"""Exhaustive search: every subset of the space at every ``k``, vectorised by chunks."""

from __future__ import annotations

import time

import numpy as np

from ..model.evaluate import METRICS, evaluate_subsets
from ..pareto import front_order
from ..result import Front, SolveResult
from .base import Strategy, feasible_mask, infeasible_error
from .space import iter_subsets


class ExactStrategy(Strategy):
    """Enumerate the search space; the front returned is complete (``exact: true``).

    Parameters
    ----------
    max_cells : int
        Upper bound on ``subsets x k`` values evaluated per chunk (memory bound).
    """

    name = "exact"

    def __init__(self, max_cells: int = 1 << 21):
        self.max_cells = max_cells

    def solve(self, problem) -> SolveResult:
        t0 = time.perf_counter()
        ks = problem.k_values
        rows = max(1, self.max_cells // len(ks))
        lowest = dict.fromkeys(problem.budget, np.inf)
        parts: list[Front] = []
        evaluated = 0
        for members in iter_subsets(problem, rows):
            met = evaluate_subsets(problem, members)
            evaluated += met["throughput"].size
            for name in problem.budget:
                lowest[name] = min(lowest[name], float(met[name].min()))
            b, j = np.nonzero(feasible_mask(met, problem.budget))
            if b.size == 0:
                continue
            cost = met[problem.cost_metric][b, j]
            keep = front_order(cost, met["throughput"][b, j], met["drafters"][b, j], ks[j])
            b, j = b[keep], j[keep]
            parts.append(
                Front(
                    members[b],
                    ks[j],
                    {m: np.array(met[m][b, j]) for m in METRICS},
                    problem.cost_metric,
                )
            )
        if not parts:
            raise infeasible_error(problem.budget, lowest)
        front = concat_fronts(parts, problem.cost_metric)
        keep = front_order(front.cost, front.throughput, front.metrics["drafters"], front.k)
        return SolveResult(
            problem=problem.name,
            names=problem.names,
            strategy=self.name,
            exact=True,
            front=front.take(keep),
            evaluated=evaluated,
            seconds=time.perf_counter() - t0,
        )


def concat_fronts(parts: list[Front], cost_metric: str) -> Front:
    """Concatenate fronts (not filtered)."""
    return Front(
        np.concatenate([p.members for p in parts]),
        np.concatenate([p.k for p in parts]),
        {m: np.concatenate([p.metrics[m] for p in parts]) for m in METRICS},
        cost_metric,
    )
