"""Search strategies: one module each, one contract (:class:`~.base.Strategy`).

``exact`` enumerates (with dominance pruning), ``knapsack`` runs a Pareto programme
for large pools of independent drafters, ``optuna`` runs a multi-objective Optuna
study where neither reaches; ``auto`` (:mod:`.auto`) picks one and says why.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any

from ..core.problem import SERVING_COST_METRICS
from ..exceptions import InputError, ParameterError
from .auto import choose_strategy
from .base import Strategy
from .exact import ExactStrategy
from .knapsack import KnapsackStrategy
from .study import OptunaStrategy

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..core.result import SolveResult

STRATEGIES: dict[str, type[Strategy]] = {
    "exact": ExactStrategy,
    "knapsack": KnapsackStrategy,
    "optuna": OptunaStrategy,
}


def make_strategy(
    name: str, problem: Problem | None = None, **params: Any
) -> tuple[Strategy, list[str]]:
    """The strategy called ``name`` (``auto`` picks one for ``problem``), and notes for
    the user: which one ``auto`` picked and why, and which options it does not use.

    ``params`` go to the strategy's constructor; those it does not take are left out
    (so one call can carry ``trials``, ``seed``, ``progress`` ... for whichever is picked).
    """
    if name == "auto":
        if problem is None:
            raise ValueError("auto needs the problem to choose")
        name, why = choose_strategy(problem)
        notes = [f"auto picked {why}"]
    else:
        notes = []
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ParameterError(
            "strategy",
            f"unknown strategy {name!r} (choose from auto, " + ", ".join(STRATEGIES) + ")",
        ) from None
    accepted = inspect.signature(cls.__init__).parameters
    unused = [k for k, v in params.items() if v is not None and k not in accepted]
    unused = [k for k in unused if k not in ("seed", "progress")]  # always passed along
    if unused:
        options = ", ".join("--" + k for k in unused)
        notes.append(f"{options} ignored: {name} does not use them")
    return cls(**{k: v for k, v in params.items() if k in accepted}), notes


def needs_batch(problem: Problem, batch: int | None = None) -> None:
    """Refuse a cost metric priced under load (``cost_per_mtok``) without a batch size."""

    if batch is None and problem.cost_metric in SERVING_COST_METRICS:
        raise InputError(
            "cost_metric",
            f"{problem.cost_metric} is priced at a batch size: pass --batch B "
            "(or choose a cost metric of the model)",
        )


def run(problem: Problem, strategy: str = "auto", **params: Any) -> SolveResult:
    """The front of ``problem`` by ``strategy`` (``auto`` picks one), timed, with the notes
    of the choice first (:func:`make_strategy`); refuses a cost metric priced under load
    (:func:`needs_batch`)."""
    needs_batch(problem)
    chosen, notes = make_strategy(strategy, problem, **params)
    t0 = time.perf_counter()
    result = chosen.solve(problem)
    result.seconds = time.perf_counter() - t0
    result.notes[:0] = notes
    return result


__all__ = [
    "STRATEGIES",
    "ExactStrategy",
    "KnapsackStrategy",
    "OptunaStrategy",
    "Strategy",
    "choose_strategy",
    "make_strategy",
    "needs_batch",
    "run",
]
