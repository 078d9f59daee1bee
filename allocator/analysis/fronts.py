"""Each drafter's own front, for drawing beside the problem's front
(``solve --plot``)."""

from __future__ import annotations

import numpy as np

from ..core.problem import Problem
from ..core.result import SolveResult
from ..exceptions import InfeasibleError, NotModelledError
from ..search import run


def single_drafter_fronts(problem: Problem) -> dict[str, SolveResult]:
    """Each drafter's own front: ``problem`` restricted to that drafter alone.

    Solved exactly (:func:`allocator.search.run`: ``m = 1``, every other drafter excluded, the same
    budget, cost metric and ``k`` range). Drafters excluded by the problem, or
    whose every configuration breaks the budget, are left out. Returns
    ``{name: SolveResult}``.
    """
    out = {}
    for i, name in enumerate(problem.names):
        if problem.excluded[i]:
            continue
        alone = np.zeros(problem.n, bool)
        alone[i] = True
        sub = problem.replace(
            name=f"{problem.name}/{name}", required=alone, excluded=~alone, m_min=1, m_max=1
        )
        try:
            out[name] = run(sub, strategy="exact")
        except (InfeasibleError, NotModelledError):
            continue
    return out


__all__ = ["single_drafter_fronts"]
