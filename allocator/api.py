"""The public Python API: one function per command, each returning what the command
prints (a dataclass whose ``to_dict()`` is the command's ``--json`` document)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .core.problem import MAX_K, SERVING_COST_METRICS, Problem
from .core.result import Point, SolveResult
from .exceptions import InputError, ParameterError
from .search import make_strategy

if TYPE_CHECKING:
    from .analysis.breakeven import BreakevenReport
    from .analysis.fleet import CapacityResult
    from .analysis.paper import PaperReport
    from .analysis.plan import Plan, PlanSweep
    from .analysis.schedule import Schedule
    from .analysis.simulate import Simulation
    from .analysis.trees import BestTree, EngineTree, SimulatedTree, TreeFront
    from .analysis.uncertainty import Progress
    from .estimate import EstimateReport
    from .estimate.calibrate import CalibrationReport


def load(
    problem: str | Path | dict,
    *,
    check_search: bool = True,
    base_dir: str | Path | None = None,
) -> Problem:
    """Read, validate and build a problem file, or build the problem from its data (a
    dict as :func:`load_data` returns, perhaps edited). ``check_search=False``: do not
    require the search section to be satisfiable, as for evaluating one configuration.
    ``base_dir``: for data, the folder its relative paths (an outcome log) are read from
    (default: the working directory)."""
    from .io.build import problem_from_file, problem_from_spec

    if isinstance(problem, dict):
        from .io.spec import parse_problem

        return problem_from_spec(parse_problem(problem), base_dir, check_search=check_search)
    return problem_from_file(problem, check_search=check_search)


def load_data(path: str | Path) -> dict:
    """The problem file at ``path`` as plain data (a dict, as written), validated: for
    callers that edit a problem and build it again with :func:`load`."""
    from .io.spec import parse_problem, read_problem_data

    data = read_problem_data(path)
    parse_problem(data)
    return data


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
    from .model.evaluate import DRAFT_COST_CAPS, require_unit_cost

    if problem.cost_metric in DRAFT_COST_CAPS:  # the cost axis is in verifier-units
        require_unit_cost(problem, needed_by=f"cost_metric {problem.cost_metric}")
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


# ---------------------------------------------------------------- schedule, capacity,
# calibrate, estimate, breakeven, paper: one function per command, each returning a
# dataclass whose ``to_dict()`` is the command's ``--json`` document.
def _problem(problem: Problem | str | Path | dict) -> Problem:
    return problem if isinstance(problem, Problem) else load(problem)


def schedule(problem: Problem | str | Path | dict, *, export: str | None = None) -> Schedule:
    """``allocator schedule``: the best configuration at each of ``serving.batch_sizes``
    and where speculation stops paying (:func:`allocator.analysis.schedule.schedule`).

    ``export``: also the schedule as that engine takes it (``"vllm"``), in ``.export``.
    """
    from .analysis.schedule import check_export, export_schedule
    from .analysis.schedule import schedule as plan_schedule

    if export is not None:
        check_export(export)
    prob = _problem(problem)
    sched = plan_schedule(prob)
    if export is not None:
        sched.export = export_schedule(sched, prob, export)
    return sched


def size_fleet(
    problem: Problem | str | Path | dict,
    tokens_per_s: float,
    itl_ms: float | None = None,
    *,
    sweep_load: np.ndarray | Sequence[float] | str | None = None,
    routes: bool | None = None,
) -> CapacityResult:
    """``allocator capacity``: the cheapest fleet carrying ``tokens_per_s`` (generated
    tokens/s over the fleet) with inter-token latency at most ``itl_ms`` (ms; ``None``:
    no target), beside the cheapest without speculation
    (:func:`allocator.analysis.fleet.capacity`).

    ``sweep_load``: also $/h at these loads (tokens/s, or ``"LO:HI:STEPS"``), with and
    without speculation. ``routes``: also plan's per-workload routes as one fleet
    (default: when the problem has workloads).
    """
    from .analysis.fleet import capacity
    from .io.ranges import parse_load_range

    loads = None
    if isinstance(sweep_load, str):
        loads = parse_load_range(sweep_load)
    elif sweep_load is not None:
        loads = np.asarray(sweep_load, dtype=float)
    return capacity(_problem(problem), tokens_per_s, itl_ms, loads, routes)


def calibrate(
    measured: str | Path,
    problem: str | Path,
    out: str | Path | None = None,
    *,
    holdout: float | None = None,
    seed: int = 0,
) -> CalibrationReport:
    """``allocator calibrate``: the step-time model fitted to the rows of ``measured``
    (CSV) for the problem file ``problem``, and the calibrated problem (``.data``, and
    ``.text()`` to write as ``out``; nothing is written here). ``holdout``: fit on the
    rest and report the error on this fraction of rows, chosen by ``seed``
    (:func:`allocator.estimate.calibrate.calibration_report`)."""
    from .estimate.calibrate import calibration_report

    return calibration_report(measured, problem, out, holdout=holdout, seed=seed)


def estimate(
    path: str | Path,
    out: str | Path,
    fmt: str = "outcomes",
    *,
    unit_cost: Mapping[str, float] | Sequence[str] | None = None,
    costs: str | Path | None = None,
    models: Mapping[str, str] | Sequence[str] | None = None,
    methods: Mapping[str, str] | Sequence[str] | None = None,
    errors: str | None = None,
    name: str | None = None,
    drafter: str | None = None,
    k: int | None = None,
    min_count: int | None = None,
    convention: str | None = None,
) -> EstimateReport:
    """``allocator estimate``: drafter acceptance (with 95% intervals) read from ``path``
    in format ``fmt`` (:data:`allocator.estimate.FORMATS`), as the problem file for
    ``out`` (``.text`` to write there; nothing is written here). See
    :func:`allocator.estimate.estimate_problem` for the options."""
    from .estimate import MIN_TRIALS, estimate_problem

    return estimate_problem(
        path,
        out,
        fmt,
        unit_cost=unit_cost,
        costs=costs,
        models=models,
        methods=methods,
        errors=errors,
        name=name,
        drafter=drafter,
        k=k,
        min_count=MIN_TRIALS if min_count is None else min_count,
        convention=convention,
    )


def breakeven(
    problem: Problem | str | Path | dict,
    ensemble: Sequence[str],
    baseline: Sequence[str],
    *,
    curve_points: int | None = None,
) -> BreakevenReport:
    """``allocator breakeven``: the latent error correlation at which the ensemble's gain
    over the baseline vanishes (exchangeable errors), beside the gain under the problem's
    own errors. ``curve_points``: also the gain at that many correlations on [0, 1]
    (``.curve``) (:func:`allocator.analysis.breakeven.breakeven_report`)."""
    from .analysis.breakeven import breakeven_report

    return breakeven_report(_problem(problem), list(ensemble), list(baseline), curve_points)


def paper() -> PaperReport:
    """``allocator paper``: every number of the paper's §4–§5 recomputed beside its printed
    value (:func:`allocator.analysis.paper.reproduce`)."""
    from .analysis.paper import PaperReport, reproduce

    return PaperReport(reproduce())


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


__all__ = [
    "DEFAULT_SAMPLES",
    "MAX_SAMPLES",
    "best_tree",
    "breakeven",
    "calibrate",
    "engine_tree",
    "estimate",
    "evaluate",
    "export_plan",
    "export_point",
    "load",
    "load_data",
    "needs_batch",
    "paper",
    "plan",
    "sample_uncertainty",
    "schedule",
    "simulate",
    "size_fleet",
    "solve",
    "solve_at_batch",
    "sweep_hosting",
    "tree_front",
]
