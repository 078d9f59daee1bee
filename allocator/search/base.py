"""The strategy contract: ``Strategy(**params).solve(problem) -> SolveResult``.

A strategy's constructor only stores its parameters; all work happens in
:meth:`Strategy.solve`. Budgets are enforced by every strategy with
:func:`allocator.core.budget.feasible_mask`, so they all agree on what "within budget"
means.
"""

from __future__ import annotations

import abc
import time
from typing import TYPE_CHECKING, ClassVar

from ..core.result import SolveResult
from ..model.metrics import require_unit_cost

if TYPE_CHECKING:
    from ..core.problem import Problem


class Strategy(abc.ABC):
    """A way of finding the front. Subclasses set ``name`` and implement ``solve``."""

    name: ClassVar[str] = "base"

    @abc.abstractmethod
    def solve(self, problem: Problem) -> SolveResult:
        """Return the front of ``problem`` (throughput up, cost down) within its budget.

        Every strategy starts with :meth:`check`."""

    @staticmethod
    def check(problem: Problem) -> None:
        """What every search needs before it starts: a ``unit_cost`` for each drafter it
        may pool (the front's throughput is in verifier-units of time)."""
        require_unit_cost(problem, needed_by="the front of throughput per verifier-unit of time")

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


__all__ = [
    "Strategy",
]
