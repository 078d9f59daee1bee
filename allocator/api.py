"""The public Python API: load a problem, solve it, evaluate one configuration."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .core.problem import MAX_K, SERVING_COST_METRICS, Problem
from .core.result import Front, SolveResult
from .exceptions import InputError, ParameterError
from .model.evaluate import evaluate_configs
from .search import make_strategy

if TYPE_CHECKING:
    from .analysis.simulate import Simulation
    from .analysis.trees import BestTree, EngineTree, SimulatedTree, TreeFront


def load(path: str | Path, *, check_search: bool = True) -> Problem:
    """Read, validate and build a problem file (``check_search=False``: do not require
    the search section to be satisfiable, as for evaluating one configuration)."""
    from .io.build import problem_from_file

    return problem_from_file(path, check_search=check_search)


def solve(problem: Problem | str | Path, strategy: str = "auto", **params) -> SolveResult:
    """The Pareto front of ``problem`` (throughput against its cost metric).

    ``strategy`` is ``auto`` or a name from :data:`allocator.search.STRATEGIES`;
    ``params`` go to the strategy's constructor.
    """
    if not isinstance(problem, Problem):
        problem = load(problem)
    needs_batch(problem)
    chosen, notes = make_strategy(strategy, problem, **params)
    t0 = time.perf_counter()
    result = chosen.solve(problem)
    result.seconds = time.perf_counter() - t0
    result.notes[:0] = notes
    return result


def solve_at_batch(problem: Problem, batch: int) -> SolveResult:
    """``solve --batch B``: the front of tokens/s against the cost metric at ``batch``
    concurrent sequences (:func:`allocator.analysis.schedule.serving_front`)."""
    from .analysis.schedule import serving_front

    t0 = time.perf_counter()
    front, evaluated, _, notes = serving_front(problem, batch)
    return SolveResult(
        problem=problem.name,
        names=problem.names,
        strategy="exact",
        exact=True,
        front=front,
        evaluated=evaluated,
        seconds=time.perf_counter() - t0,
        notes=notes,
    )


def needs_batch(problem: Problem, batch: int | None = None) -> None:
    """Refuse a cost metric priced under load (``cost_per_mtok``) without a batch size."""
    if batch is None and problem.cost_metric in SERVING_COST_METRICS:
        raise InputError(
            "cost_metric",
            f"{problem.cost_metric} is priced at a batch size: pass --batch B "
            "(or choose a cost metric of the model)",
        )


def evaluate(
    problem: Problem,
    drafters: list[str],
    k: int,
    field: str = "drafters",
    batch: int | None = None,
) -> dict:
    """Every metric of one configuration, as the point dict of docs/design.md §6.

    With ``batch`` (the problem needs a ``serving`` section) the point also holds the
    serving metrics at that many concurrent sequences (:mod:`allocator.model.serving`),
    and ``k = 0`` is allowed: decoding without speculation (``drafters`` is then
    ignored and reported empty; its model metrics are one token per plain
    verification pass, no draft cost).
    """
    needs_batch(problem, batch)
    if k > MAX_K:
        raise ParameterError("k" if field.startswith("--") else "k", f"must be at most {MAX_K:,}")
    if batch is None:
        if k < 1:
            raise ParameterError("k", "must be >= 1 (k = 0, no speculation, needs --batch)")
        members = problem.mask(drafters, field)[None, :]
        metrics = evaluate_configs(problem, members, np.array([k]))
        front = Front(members, np.array([k]), metrics, problem.cost_metric)
        return front.point(0, problem.names)
    from .model.serving import serving_metrics
    from .model.timing import verify_time

    if problem.serving is None:
        raise InputError(
            "serving", "--batch needs a serving section in the problem (step times by batch)"
        )
    if k < 0:
        raise ParameterError("k", "must be >= 0")
    if k == 0:
        members = np.zeros((1, problem.n), bool)
        t = verify_time(np.zeros(1), problem.pass_cost, problem.token_cost, problem.pass_cost_curve)
        t1 = float(np.asarray(t).ravel()[0])
        zero = np.zeros(1)
        metrics = {
            "throughput": np.array([1.0 / t1]),
            "expected_accepted": np.ones(1),
            "pooled_acceptance": zero,
            "round_time": np.array([t1]),
            "draft_cost_per_round": zero,
            "draft_cost_per_token": zero,
            "hosting_cost": zero,
            "drafters": zero,
        }
    else:
        members = problem.mask(drafters, field)[None, :]
    # the step time first: an unmeasured k fails here, before the model builds its
    # acceptance curves up to k (which for a huge k would take all memory)
    sm = serving_metrics(problem, members, np.array([k]), batch)
    if k > 0:
        metrics = evaluate_configs(problem, members, np.array([k]))
    metrics["tokens_per_step"] = sm.pop("expected_accepted")
    metrics.update(sm)
    metrics["batch"] = np.array([float(batch)])
    front = Front(members, np.array([k]), metrics, problem.cost_metric)
    return front.point(0, problem.names)


# ---------------------------------------------------------------- token trees, simulation
# One function per kind of tree document (the optimal tree, the front, SGLang's tree):
# each returns its own dataclass and takes only the parameters that apply to it.


def best_tree(
    problem: Problem | str | Path,
    drafters: str | list[str],
    nodes: int,
    depth: int = 16,
    width: int | None = None,
    *,
    rounds: int | None = None,
    seed: int = 0,
) -> BestTree:
    """``tree --nodes``: the tree of at most ``nodes`` speculated nodes (1..512), depth at
    most ``depth`` (1..64) and at most ``width`` children per node (default: every
    measured rank) with the most expected tokens per step, from the drafter's
    ``acceptance_by_rank`` (Sequoia's programme, exact); ``drafters`` names the one
    drafter. With ``rounds`` (2..5e7, seeded by ``seed``) the tree is also simulated."""
    from .analysis.trees import best_tree as compute

    return compute(_problem(problem), drafters, nodes, depth, width, rounds, seed)


def tree_front(
    problem: Problem | str | Path,
    drafters: str | list[str],
    max_nodes: int = 64,
    depth: int = 16,
    width: int | None = None,
) -> TreeFront:
    """``tree`` without ``--nodes``: the best tree's expected tokens per step, step time and
    throughput per size ``1..max_nodes`` (the depth ``<= depth`` of most throughput), the
    size of most throughput, and with a ``serving`` section the tree of most tokens/s per
    batch size."""
    from .analysis.trees import tree_front as compute

    return compute(_problem(problem), drafters, max_nodes, depth, width)


def engine_tree(
    problem: Problem | str | Path,
    drafters: str | list[str],
    nodes: int | None = None,
    depth: int = 16,
    width: int | None = None,
    *,
    eagle: tuple[int, int, int] | None = None,
    rounds: int | None = None,
    seed: int = 0,
) -> EngineTree:
    """``tree --engine`` / ``--eagle``: SGLang's EAGLE tree of the setting ``eagle =
    (num_steps, topk, num_draft_tokens)``, or without it the setting of most throughput
    with ``num_steps <= depth``, ``topk <= width`` (default: the measured ranks up to 16)
    and ``num_draft_tokens - 1 <= nodes`` (default 64); per batch size too with a
    ``serving`` section. Export it with :func:`allocator.engines.export_tree`."""
    from .analysis.trees import engine_tree as compute

    return compute(_problem(problem), drafters, nodes, depth, width, eagle, rounds, seed)


def simulate(
    problem: Problem | str | Path,
    drafters: list[str],
    k: int | None = None,
    *,
    rounds: int,
    seed: int = 0,
    nodes: int | None = None,
    depth: int | None = None,
) -> Simulation | SimulatedTree:
    """``simulate``: play ``rounds`` rounds (2..5e7, seeded by ``seed``) beside the closed
    form: of the chain (``drafters``, ``k``), outcomes drawn from the problem's error
    model (:class:`~allocator.analysis.simulate.Simulation`), or with ``nodes`` instead of
    ``k`` of the optimal token tree of at most ``nodes`` nodes and depth at most ``depth``
    (default 16) of the one drafter named
    (:class:`~allocator.analysis.trees.SimulatedTree`)."""
    if nodes is not None:
        from .analysis.trees import DEFAULT_DEPTH, simulate_best_tree

        if k is not None:
            raise ParameterError("k", "give k for a chain or nodes for a tree, not both")
        depth = DEFAULT_DEPTH if depth is None else depth
        return simulate_best_tree(_problem(problem), drafters, nodes, rounds, depth, seed)
    from .analysis.simulate import simulate as play

    if k is None:
        raise ParameterError("k", "give the draft length (or nodes to play a token tree)")
    if depth is not None:
        raise ParameterError(
            "depth", "bounds a token tree (nodes); a chain's depth is its draft length k"
        )
    if not isinstance(problem, Problem):
        from .io.build import problem_from_file

        problem = problem_from_file(problem, simulation=True)
    return play(problem, drafters, k, rounds, seed)


def _problem(problem: Problem | str | Path) -> Problem:
    return problem if isinstance(problem, Problem) else load(problem)
