"""The public Python API: load a problem, solve it, evaluate one configuration, plan
mixed traffic. Each function returns a dataclass whose ``to_dict()`` is the command's
JSON document (docs/design.md §6)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .core.problem import MAX_K, SERVING_COST_METRICS, Problem
from .core.result import Point, SolveResult
from .exceptions import InputError, ParameterError
from .search import make_strategy

if TYPE_CHECKING:
    from .analysis.plan import Plan, PlanSweep
    from .analysis.uncertainty import Progress


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
    from .analysis.limits import limit_notes

    result.notes.extend(limit_notes(problem, result))
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
) -> Point:
    """Every metric of one configuration: the point of docs/design.md §6
    (:func:`allocator.model.point.evaluate_point`; ``point["throughput"]``, ``to_dict()``).

    With ``batch`` (the problem needs a ``serving`` section) the point also holds the
    serving metrics at that many concurrent sequences (:mod:`allocator.model.serving`),
    and ``k = 0`` is allowed: decoding without speculation (``drafters`` is then
    ignored and reported empty; its model metrics are one token per plain
    verification pass, no draft cost). ``field`` names ``drafters`` in errors.
    """
    from .model.point import evaluate_point

    needs_batch(problem, batch)
    if k > MAX_K:
        raise ParameterError("k", f"must be at most {MAX_K:,}")
    if batch is None:
        if k < 1:
            raise ParameterError("k", "must be >= 1 (k = 0, no speculation, needs --batch)")
        return evaluate_point(problem, problem.mask(drafters, field), k)
    if problem.serving is None:
        raise InputError(
            "serving", "--batch needs a serving section in the problem (step times by batch)"
        )
    if k < 0:
        raise ParameterError("k", "must be >= 0")
    members = np.zeros(problem.n, bool) if k == 0 else problem.mask(drafters, field)
    return evaluate_point(problem, members, k, batch)


# ----------------------------------------------------- uncertainty, exports, plans

#: Posterior draws of :func:`sample_uncertainty` when only a robust quantile is given.
DEFAULT_SAMPLES = 200
#: Most posterior draws :func:`sample_uncertainty` takes (each draw re-solves the problem).
MAX_SAMPLES = 100_000


def sample_uncertainty(
    problem: Problem,
    result: SolveResult,
    samples: int | None = None,
    robust: float | None = None,
    *,
    seed: int = 0,
    progress: Progress | None = None,
) -> SolveResult:
    """``solve --samples N [--robust Q]``: ``result`` re-examined on ``samples`` posterior
    draws of the acceptance intervals (docs/design.md §4.7;
    :func:`allocator.analysis.uncertainty.analyse`).

    The returned result carries the analysis (its ``to_dict()`` has the ``uncertainty``
    object); with ``robust`` its front is the ``robust``-quantile front (``exact:
    false``, a note says so). ``samples`` defaults to :data:`DEFAULT_SAMPLES`;
    ``progress(done, total, None)`` counts evaluations (configuration x draw).
    """
    from .analysis.uncertainty import analyse

    if samples is not None and not 1 <= samples <= MAX_SAMPLES:
        raise ParameterError("samples", f"must be in 1..{MAX_SAMPLES:,}")
    n = DEFAULT_SAMPLES if samples is None else samples
    try:
        report = analyse(problem, result.front, n, seed=seed, quantile=robust, progress=progress)
    except ParameterError as exc:  # name the parameter given, not the one implied
        if samples is None and exc.field == "samples":
            raise ParameterError("robust", exc.message) from None
        raise
    return result.with_uncertainty(report)


def export_point(
    problem: Problem, result: SolveResult, engine: str, pick: int | None = None
) -> tuple[str, list[str]]:
    """``solve --export``: front point ``pick`` (1-based; default the one of most
    throughput) as ``engine``'s settings (``vllm``: ``--speculative-config`` JSON,
    ``sglang``: shell-quoted flags; one line), and the notes that go with them
    (:func:`allocator.engines.export_point`)."""
    from .engines import convention_warning, pick_point
    from .engines import export_point as engine_settings

    chosen = pick_point(result.points(), pick)
    text, notes = engine_settings(engine, chosen, problem.drafter_map)
    warning = convention_warning(problem.convention)
    return text, [*notes, *([warning] if warning else [])]


def plan(
    problem: Problem | str | Path,
    budget: dict[str, float] | None = None,
    *,
    max_candidates: int | None = None,
    time_limit: float | None = None,
    batch: int | None = None,
) -> Plan:
    """``plan``: the drafters to host and each workload's subset and ``k``
    (:func:`allocator.analysis.plan.make_plan`, docs/design.md §4.6). ``budget``
    replaces caps of the problem's; ``max_candidates`` (default
    :data:`allocator.analysis.plan.MAX_CANDIDATES`) caps the candidates kept per
    workload; ``time_limit`` (s) bounds the solver per plan; ``batch``: sequences each
    replica must still hold beside the hosted drafters."""
    from .analysis.plan import MAX_CANDIDATES, make_plan

    if not isinstance(problem, Problem):
        problem = load(problem)
    return make_plan(
        problem,
        budget,
        max_candidates=MAX_CANDIDATES if max_candidates is None else max_candidates,
        time_limit=time_limit,
        batch=batch,
    )


def sweep_hosting(
    problem: Problem | str | Path,
    caps: np.ndarray | None = None,
    budget: dict[str, float] | None = None,
    *,
    max_candidates: int | None = None,
    time_limit: float | None = None,
) -> PlanSweep:
    """``plan --sweep``: the front of plans' throughput against hosting cost, under each
    hosting cap of ``caps`` (``(S,)``) or, with ``None``, every distinct achievable
    hosting cost (:func:`allocator.analysis.plan.sweep_hosting`). Other arguments as
    :func:`plan`."""
    from .analysis.plan import MAX_CANDIDATES
    from .analysis.plan import sweep_hosting as sweep

    if not isinstance(problem, Problem):
        problem = load(problem)
    return sweep(
        problem,
        caps,
        budget,
        max_candidates=MAX_CANDIDATES if max_candidates is None else max_candidates,
        time_limit=time_limit,
    )


def export_plan(problem: Problem, plan: Plan, engine: str) -> tuple[dict, list[str]]:
    """``plan --export``: ``plan`` as one JSON document of ``engine``'s settings per
    workload route and the hosted set (:func:`allocator.engines.export_plan`), and the
    notes that go with it (the plan's own notes are not among them)."""
    from .engines import convention_warning
    from .engines import export_plan as engine_plan

    settings, notes = engine_plan(engine, plan.to_dict(), problem.drafter_map)
    warning = convention_warning(problem.convention)
    return settings, [*notes, *([warning] if warning else [])]
