"""The public Python API: load a problem, solve it, evaluate one configuration."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .model.evaluate import evaluate_configs
from .problem import Problem
from .result import Front, SolveResult
from .search import make_strategy


def load(path: str | Path) -> Problem:
    """Read, validate and build a problem file."""
    return Problem.from_file(path)


def solve(problem: Problem | str | Path, strategy: str = "auto", **params) -> SolveResult:
    """The Pareto front of ``problem`` (throughput against its cost metric).

    ``strategy`` is ``auto`` or a name from :data:`allocator.search.STRATEGIES`;
    ``params`` go to the strategy's constructor.
    """
    if not isinstance(problem, Problem):
        problem = load(problem)
    chosen, notes = make_strategy(strategy, problem, **params)
    t0 = time.perf_counter()
    result = chosen.solve(problem)
    result.seconds = time.perf_counter() - t0
    result.notes[:0] = notes
    return result


def evaluate(problem: Problem, drafters: list[str], k: int, field: str = "drafters") -> dict:
    """Every metric of one configuration, as the point dict of docs/design.md §6."""
    members = problem.mask(drafters, field)[None, :]
    metrics = evaluate_configs(problem, members, np.array([k]))
    front = Front(members, np.array([k]), metrics, problem.cost_metric)
    return front.point(0, problem.names)
