"""The distribution of tokens a round (a decode step) yields, from the model's pooled
acceptance: what ``simulate`` draws beside and what the request simulator draws each
sequence's tokens from (docs/design.md §8.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .acceptance import extend_positions
from .metrics import pooled_acceptance

if TYPE_CHECKING:
    from ..core.problem import Problem


def accepted_distribution(problem: Problem, members: np.ndarray, k: int) -> np.ndarray:
    """The model's distribution of accepted units per round: ``(k + 2,)``, entry ``u``
    is ``P(units = u)`` for ``u = 0..k+1`` (entry 0 is always 0).

    ``P(units >= u)`` is ``Π_{j<u} a(j)`` (paper, ``u <= k``) or ``Π_{j<=u-1} a(j)``
    (bonus, ``u <= k + 1``). For a workload mixture, the rounds-weighted mixture of the
    workloads' distributions (workload ``w`` plays a share ``∝ p_w / E_w`` of rounds).
    """
    members = np.asarray(members, dtype=bool)
    if problem.workloads:
        parts = [
            accepted_distribution(problem.workload_view(i), members, k)
            for i in range(len(problem.workloads))
        ]
        means = np.array([p @ np.arange(k + 2) for p in parts])
        share = np.array([w.weight for w in problem.workloads]) / means
        return (share / share.sum()) @ np.array(parts)
    a = extend_positions(pooled_acceptance(problem, members[None], k)[0], k)
    at_least = np.zeros(k + 3)
    at_least[0] = 1.0
    surv = np.concatenate([[1.0], np.cumprod(a)])  # surv[i] = Π_{j<=i} a(j)
    if problem.convention == "paper":
        at_least[1 : k + 1] = surv[:k]
    else:
        at_least[1 : k + 2] = surv[: k + 1]
    return at_least[:-1] - at_least[1:]


def emitted_pmf(problem: Problem, members: np.ndarray, k: int) -> np.ndarray:
    """Tokens one sequence emits in a decode step at draft length ``k``: ``(k + 2,)``,
    entry ``j`` is ``P(j tokens)`` (entry 0 is 0), bonus convention; ``[0, 1]`` at
    ``k = 0`` (:func:`accepted_distribution`, at ``k + 1``
    for a ``paper`` problem, docs/design.md §8.3)."""
    if k == 0:
        return np.array([0.0, 1.0])
    members = np.asarray(members, dtype=bool)
    if problem.convention == "paper":
        p = accepted_distribution(problem, members, k + 1)[: k + 2]
    else:
        p = accepted_distribution(problem, members, k)
    p = np.clip(np.asarray(p, dtype=float), 0.0, None)
    p[0] = 0.0
    return p / p.sum()


__all__ = ["accepted_distribution", "emitted_pmf"]
