"""Exhaustive search, made fast by dropping dominated subsets before looping over ``k``.

Every subset of the space is screened (:mod:`.dominance`); the survivors are
evaluated at every ``k`` by the model and filtered to the front. When pruning is not
provably valid for a problem (see :func:`.dominance.pruning_blocker`) every subset is
evaluated. Either way the front is complete: ``exact: true``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..core.budget import infeasible_error
from ..core.result import Front, SolveResult
from ..core.space import count_subsets, iter_subsets
from ..model.evaluator import FrontKeeper, evaluate_space
from .base import Strategy
from .dominance import group_columns, pruning_blocker, screen

if TYPE_CHECKING:
    from ..core.problem import Problem


class ExactStrategy(Strategy):
    """Enumerate the search space; the front returned is complete (``exact: true``).

    Parameters
    ----------
    max_cells : int
        Upper bound on ``subsets x k`` values evaluated per chunk (memory bound).
    prune : bool
        Screen out dominated subsets first (only where that is provably valid).
    progress : callable ``(done, total, front_size)`` or None
        Called as subsets are screened and evaluated (``front_size`` may be None).
    """

    name = "exact"

    def __init__(
        self,
        max_cells: int = 1 << 21,
        prune: bool = True,
        progress: Callable[[int, int, int | None], None] | None = None,
    ):
        self.max_cells = max_cells
        self.prune = prune
        self.progress = progress

    def solve(self, problem: Problem) -> SolveResult:
        self.check(problem)
        t0 = time.perf_counter()
        rows = max(1, self.max_cells // len(problem.k_values))
        total = count_subsets(problem)
        notes = []
        blocker = pruning_blocker(problem) if self.prune else "pruning switched off"
        chunks: Iterator[np.ndarray]
        if blocker is None:
            outer = self.progress
            tick = None if outer is None else (lambda d, t: outer(d, t, None))
            survivors, screened = screen(problem, rows, tick)
            dims = ", ".join(["pooled acceptance", "sum rho"] + group_columns(problem))
            notes.append(
                f"screened {screened:,} subsets; {len(survivors):,} not dominated in ({dims})"
            )
            chunks = (survivors[i : i + rows] for i in range(0, len(survivors), rows))
            if self.progress is not None:  # the screen covered the space; now the front grows
                progress = self.progress
                report = lambda d, t, f: progress(total, total, f)  # noqa: E731
            else:
                report = None
        else:
            notes.append(f"no dominance pruning ({blocker}): every subset evaluated")
            chunks = iter_subsets(problem, rows)
            report = self.progress
        front, evaluated = evaluate_front(problem, chunks, report, total)
        if blocker is None:
            space = total * len(problem.k_values)
            notes[-1] += (
                f"; the model evaluated {evaluated:,} of the {space:,} configurations, the "
                f"other {space - evaluated:,} being proven dominated"
            )
            evaluated = space  # the rest are proven dominated
        return self.result(problem, front, evaluated, t0, notes)


def evaluate_front(
    problem: Problem, chunks: Iterable[np.ndarray], progress=None, total: int | None = None
) -> tuple[Front, int]:
    """The front of the subsets in ``chunks`` (membership ``(B, N)`` each) at every ``k``.

    Returns the front and the number of configurations evaluated. Raises the budget's
    :func:`~allocator.core.budget.infeasible_error` when no configuration is within
    budget. ``progress``, when given, is called after each chunk as ``(subsets done,
    total, points kept so far)`` (the chunks' own fronts, not yet merged: at least the
    final front size).
    """
    keeper = FrontKeeper(problem.cost_metric, problem.k_values)
    tick = None if progress is None else (lambda seen: progress(seen.subsets, total, len(keeper)))
    seen = evaluate_space(problem, keeper, chunks=chunks, lowest=True, progress=tick)
    front = keeper.front()
    if front is None:
        raise infeasible_error(problem.budget, seen.lowest)
    return front, seen.cells


__all__ = [
    "ExactStrategy",
    "evaluate_front",
]
