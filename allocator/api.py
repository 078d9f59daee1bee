"""The public Python API: load a problem, solve it, evaluate one configuration."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .exceptions import InputError
from .model.evaluate import evaluate_configs
from .problem import Problem
from .result import Front, SolveResult
from .search import make_strategy
from .spec import MAX_K


def load(path: str | Path, *, check_search: bool = True) -> Problem:
    """Read, validate and build a problem file (``check_search=False``: do not require
    the search section to be satisfiable, as for evaluating one configuration)."""
    return Problem.from_file(path, check_search=check_search)


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
    """Every metric of one configuration, as the point dict of DESIGN §4."""
    if not 1 <= k <= MAX_K:
        raise InputError("--k" if field.startswith("--") else "k", f"must be in 1..{MAX_K:,}")
    members = problem.mask(drafters, field)[None, :]
    metrics = evaluate_configs(problem, members, np.array([k]))
    front = Front(members, np.array([k]), metrics, problem.cost_metric)
    return front.point(0, problem.names)
