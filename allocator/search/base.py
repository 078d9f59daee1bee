"""The strategy contract: ``Strategy(**params).solve(problem) -> SolveResult``.

A strategy's constructor only stores its parameters; all work happens in
:meth:`Strategy.solve`. Budgets are enforced by every strategy with
:func:`feasible_mask`, so they all agree on what "within budget" means.
"""

from __future__ import annotations

import abc
import time
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..core.result import SolveResult
from ..exceptions import InfeasibleError

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Budgets are met up to this relative slack, absorbing floating-point rounding
#: (``3 * 0.05 * 4`` is ``0.6000000000000001``).
BUDGET_RTOL = 1e-9


def budget_limit(cap: float) -> float:
    """The largest value within the budget cap ``cap`` (in the capped metric's units).

    ``cap`` plus the slack :data:`BUDGET_RTOL`, relative, and absolute below 1; an
    infinite cap stays infinite.
    """
    return cap + BUDGET_RTOL * max(1.0, abs(cap))


class Strategy(abc.ABC):
    """A way of finding the front. Subclasses set ``name`` and implement ``solve``."""

    name: ClassVar[str] = "base"

    @abc.abstractmethod
    def solve(self, problem: Problem) -> SolveResult:
        """Return the front of ``problem`` (throughput up, cost down) within its budget."""

    def result(
        self,
        problem: Problem,
        front,
        evaluated: int,
        t0: float,
        notes: list[str],
        exact: bool = True,
    ) -> SolveResult:
        """The answer for ``problem``: ``front``, ``evaluated`` configurations, and the
        seconds since ``t0`` (a :func:`time.perf_counter` reading)."""
        return SolveResult(
            problem=problem.name,
            names=problem.names,
            strategy=self.name,
            exact=exact,
            front=front,
            evaluated=evaluated,
            seconds=time.perf_counter() - t0,
            notes=notes,
        )

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def feasible_mask(metrics: dict[str, np.ndarray], budget: dict[str, float]) -> np.ndarray:
    """Where every budget cap holds; arrays of any common shape."""
    ok = np.ones(np.shape(metrics["throughput"]), bool)
    for name, cap in budget.items():
        ok &= metrics[name] <= budget_limit(cap)
    return ok


def infeasible_error(budget: dict[str, float], lowest: dict[str, float]) -> InfeasibleError:
    """The error for a budget no configuration meets, naming the cap that binds.

    ``lowest`` holds, per capped metric, its lowest value over the search space.
    """
    alone = [m for m, cap in budget.items() if lowest[m] > budget_limit(cap)]
    if alone:
        m = alone[0]
        return InfeasibleError(
            f"budget.{m}",
            f"no configuration meets {m} <= {budget[m]:g} (the lowest in the search space "
            f"is {lowest[m]:.6g})",
        )
    caps = " and ".join(f"{m} <= {c:g}" for m, c in budget.items())
    return InfeasibleError("budget", f"no configuration meets {caps} at once")
