"""The public Python API: one function per command, each returning what the command
prints (a dataclass whose ``to_dict()`` is the command's ``--json`` document)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import validate
from .._lazy import lazy_module
from ..analysis.limits import extrapolation_notes, limit_notes, position_notes
from ..core.problem import Problem
from ..core.result import Point, SolveResult
from ..engines import POOLED_BOUND, convention_warning, pick_point, servable
from ..engines import export_plan as engine_plan
from ..engines import export_point as engine_settings
from ..exceptions import ParameterError
from ..io.build import problem_from_file
from ..io.ranges import parse_load_range
from ..io.spec import problem_json_schema
from ..search import needs_batch, run
from ._front import front
from ._load import as_problem, file_notes, load, load_data
from ._requests import bench, size_disaggregated_for_rate, size_fleet_for_rate, validate_runs

# Each command's analysis is named here and imported when the command first runs
# (allocator._lazy): a command's start-up loads its own analysis, not every other.
if TYPE_CHECKING:
    from .. import calibration
    from .. import estimate as estimate_readers
    from ..analysis import breakeven as analysis_breakeven
    from ..analysis import paper as analysis_paper
    from ..analysis import plan as analysis_plan
    from ..analysis import profile_plan as analysis_profile_plan
    from ..analysis import rate_fit as analysis_rate_fit
    from ..analysis import rounds as analysis_rounds
    from ..analysis import schedule as analysis_schedule
    from ..analysis import trees as analysis_trees
    from ..analysis import uncertainty as analysis_uncertainty
    from ..analysis.breakeven import BreakevenReport
    from ..analysis.capacity import by_load as capacity_by_load
    from ..analysis.capacity.by_load import CapacityResult
    from ..analysis.paper import PaperReport
    from ..analysis.plan import Plan, PlanSweep
    from ..analysis.profile_plan import ProfilePlan
    from ..analysis.rate_fit import RateCalibrationReport
    from ..analysis.rounds import Simulation
    from ..analysis.schedule import ContextSchedules, Schedule
    from ..analysis.trees import BestTree, EngineTree, SimulatedTree, TreeFront
    from ..analysis.uncertainty import Progress
    from ..calibration import CalibrationReport
    from ..estimate import EstimateReport
    from ..model import point as model_point
else:
    analysis_breakeven = lazy_module("allocator.analysis.breakeven")
    capacity_by_load = lazy_module("allocator.analysis.capacity.by_load")
    analysis_paper = lazy_module("allocator.analysis.paper")
    analysis_plan = lazy_module("allocator.analysis.plan")
    analysis_profile_plan = lazy_module("allocator.analysis.profile_plan")
    analysis_rate_fit = lazy_module("allocator.analysis.rate_fit")
    analysis_rounds = lazy_module("allocator.analysis.rounds")
    analysis_schedule = lazy_module("allocator.analysis.schedule")
    analysis_trees = lazy_module("allocator.analysis.trees")
    analysis_uncertainty = lazy_module("allocator.analysis.uncertainty")
    calibration = lazy_module("allocator.calibration")
    estimate_readers = lazy_module("allocator.estimate")
    model_point = lazy_module("allocator.model.point")


def solve(
    problem: Problem | str | Path,
    strategy: str = "auto",
    *,
    engine: str | None = None,
    pooled: bool = False,
    **params,
) -> SolveResult:
    """The Pareto front of ``problem`` (throughput against its cost metric).

    ``strategy`` is ``auto`` or a name from :data:`allocator.search.STRATEGIES`;
    ``params`` go to the strategy's constructor. The notes say which strategy ran and
    why, and when the best point sits at a limit of the search
    (:func:`allocator.analysis.limits.limit_notes`). ``engine`` (``vllm``, ``sglang``):
    only the configurations that engine serves, one drafter per server
    (:func:`allocator.engines.servable`; with ``pooled`` the problem as it is, labelled as
    the upper bound). Without ``engine`` the question is the model's: pooled
    configurations stay, and a note labels them when the front holds one.
    """

    if not isinstance(problem, Problem):
        problem = load(problem)
    served: list[str] = []
    if engine is not None or pooled:
        needs_batch(problem)
        problem, served = servable(problem, engine or "vllm", pooled)
    result = run(problem, strategy, **params)
    result.notes[:0] = served
    if engine is None and not pooled and any(int(m.sum()) > 1 for m in result.front.members):
        result.notes.append(
            f"{POOLED_BOUND}; --engine vllm or --engine sglang keeps to what one serves"
        )
    result.notes.extend(limit_notes(problem, result, one_per_server=bool(served) and not pooled))
    return result


def solve_at_batch(
    problem: Problem,
    batch: int,
    *,
    context: float | None = None,
    engine: str = "vllm",
    pooled: bool = False,
) -> SolveResult:
    """``solve --batch B``: the front of tokens/s against the cost metric at ``batch``
    concurrent sequences of ``context`` tokens each (``None``: none given)
    (:func:`allocator.analysis.schedule.serving_front`), of the configurations ``engine``
    serves (with ``pooled``: every configuration, labelled as the upper bound;
    :func:`allocator.engines.servable`)."""
    return analysis_schedule.front_at_batch(
        problem, batch, 0.0 if context is None else context, engine, pooled
    )


def evaluate(
    problem: Problem,
    drafters: list[str],
    k: int,
    field: str = "drafters",
    batch: int | None = None,
    context: float | None = None,
) -> Point:
    """Every metric of one configuration: the point of docs/design.md §6
    (:func:`allocator.model.point.evaluate_point`; ``point["throughput"]``, ``to_dict()``).

    With ``batch`` (the problem needs a ``serving`` section) the point also holds the
    serving metrics at that many concurrent sequences (:mod:`allocator.model.under_load`),
    and ``k = 0`` is allowed: decoding without speculation (``drafters`` is then
    ignored and reported empty; its model metrics are one token per plain
    verification pass, no draft cost). ``field`` names ``drafters`` in errors.
    ``context`` (with ``batch``): tokens in each sequence's KV cache; the point's
    ``notes`` say where its step time rests on extrapolation.
    """
    needs_batch(problem, batch)
    return model_point.evaluate_configuration(problem, drafters, k, field, batch, context)


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
    if samples is not None:
        validate.whole(samples, "samples", lo=1, hi=MAX_SAMPLES)
    n = DEFAULT_SAMPLES if samples is None else samples
    try:
        report = analysis_uncertainty.analyse(
            problem, result.front, n, seed=seed, quantile=robust, progress=progress
        )
    except ParameterError as exc:  # name the parameter given, not the one implied
        if samples is None and exc.field == "samples":
            raise ParameterError("robust", exc.message) from None
        raise
    return result.with_uncertainty(report)


def export_point(
    problem: Problem,
    result: SolveResult,
    engine: str,
    pick: int | None = None,
    batch: int | None = None,
) -> tuple[str, list[str]]:
    """``solve --export``: front point ``pick`` (1-based; default the one of most
    throughput) as ``engine``'s settings (``vllm``: ``--speculative-config`` JSON,
    ``sglang``: shell-quoted flags; one line), and the notes that go with them
    (:func:`allocator.engines.export_point`); ``batch``: the concurrent sequences the
    front was solved at (``solve --batch``), for the settings that depend on it."""

    chosen = pick_point(result.points(), pick)
    text, notes = engine_settings(engine, chosen, problem.drafter_map, batch)
    warning = convention_warning(problem.convention)
    notes += extrapolation_notes(problem, problem.mask(list(chosen["drafters"])), chosen["k"])
    return text, [*notes, *([warning] if warning else [])]


def plan(
    problem: Problem | str | Path,
    budget: dict[str, float] | None = None,
    *,
    max_candidates: int | None = None,
    time_limit: float | None = None,
    batch: int | None = None,
    engine: str = "vllm",
    pooled: bool = False,
) -> Plan:
    """``plan``: the drafters to host and each workload's subset and ``k``
    (:func:`allocator.analysis.plan.make_plan`, docs/design.md §4.6), of the
    configurations ``engine`` serves (one drafter per route; with ``pooled`` every
    subset, labelled as the upper bound no engine serves; :func:`allocator.engines.servable`).
    ``budget`` replaces caps of the problem's; ``max_candidates`` (default
    :data:`allocator.analysis.plan.MAX_CANDIDATES`) caps the candidates kept per
    workload; ``time_limit`` (s) bounds the solver per plan; ``batch``: sequences each
    replica must still hold beside the hosted drafters."""

    if not isinstance(problem, Problem):
        problem = load(problem)
    problem, served = servable(problem, engine, pooled)
    result = analysis_plan.make_plan(
        problem,
        budget,
        max_candidates=analysis_plan.MAX_CANDIDATES if max_candidates is None else max_candidates,
        time_limit=time_limit,
        batch=batch,
    )
    result.notes[:0] = served
    result.notes.extend(position_notes(problem, result.members, result.k, "workload route"))
    return result


def sweep_hosting(
    problem: Problem | str | Path,
    caps: np.ndarray | None = None,
    budget: dict[str, float] | None = None,
    *,
    max_candidates: int | None = None,
    time_limit: float | None = None,
    engine: str = "vllm",
    pooled: bool = False,
) -> PlanSweep:
    """``plan --sweep``: the front of plans' throughput against hosting cost, under each
    hosting cap of ``caps`` (``(S,)``) or, with ``None``, every distinct achievable
    hosting cost (:func:`allocator.analysis.plan.sweep_hosting`). Other arguments as
    :func:`plan`."""

    if not isinstance(problem, Problem):
        problem = load(problem)
    problem, served = servable(problem, engine, pooled)
    result = analysis_plan.sweep_hosting(
        problem,
        caps,
        budget,
        max_candidates=analysis_plan.MAX_CANDIDATES if max_candidates is None else max_candidates,
        time_limit=time_limit,
    )
    result.notes[:0] = served
    return result


def export_plan(
    problem: Problem, plan: Plan, engine: str, batch: int | None = None
) -> tuple[dict, list[str]]:
    """``plan --export``: ``plan`` as one JSON document of ``engine``'s settings per
    workload route and the hosted set (:func:`allocator.engines.export_plan`), and the
    notes that go with it (the plan's own notes are not among them); ``batch``: the
    sequences each replica holds (``plan --batch``), for the settings that depend on it."""

    settings, notes = engine_plan(engine, plan.to_dict(), problem.drafter_map, batch)
    warning = convention_warning(problem.convention)
    return settings, [*notes, *([warning] if warning else [])]


# ---------------------------------------------------------------- schedule, capacity,
# calibrate, estimate, breakeven, paper: one function per command, each returning a
# dataclass whose ``to_dict()`` is the command's ``--json`` document.
def schedule(
    problem: Problem | str | Path | dict,
    *,
    export: str | None = None,
    contexts: Sequence[float] | str | None = None,
    engine: str = "vllm",
    pooled: bool = False,
) -> Schedule | ContextSchedules:
    """``allocator schedule``: the best configuration at each of ``serving.batch_sizes``
    and where speculation stops paying (:func:`allocator.analysis.schedule.schedule`),
    over the configurations ``engine`` serves (:func:`allocator.engines.servable`;
    ``pooled``: also pooled ones, labelled as an upper bound no engine serves).

    ``contexts``: tokens per sequence (a list, or ``"1024,8192"``): ``k`` by batch size
    and context bucket (:func:`allocator.analysis.schedule.schedule_by_context`; rows
    gain ``context``). ``export``: also the schedule as that engine takes it
    (``"vllm"``), in ``.export``; refused (on ``engine``) when ``engine`` takes no ``k``
    schedule by batch size (SGLang): the schedule exported is planned for it.
    """

    if export is not None:
        analysis_schedule.check_export(export)
        analysis_schedule.check_schedule_engine(engine, "engine")
    buckets = parse_contexts(contexts) if contexts is not None else None
    prob, served = servable(as_problem(problem), engine, pooled)
    sched: Schedule | ContextSchedules
    if buckets is None:
        sched = analysis_schedule.schedule(prob)
    else:
        sched = analysis_schedule.schedule_by_context(prob, buckets)
    sched.notes[:0] = served
    if export is not None:
        sched.export = analysis_schedule.export_schedule(sched, prob, export)
    return sched


def profile_plan(
    problem: Problem | str | Path | dict,
    *,
    engine: str = "vllm",
    contexts: Sequence[float] | str | None = None,
    model: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ProfilePlan:
    """``allocator profile-plan``: the fewest benchmark runs (concurrency x k x context,
    and speculation off) that determine every roofline parameter of ``problem`` (it needs
    ``serving.hardware`` and ``serving.model``), as ``engine``'s commands with the
    acceptance fixed (:func:`allocator.analysis.profile_plan.profile_plan`). ``contexts``:
    tokens per sequence to plan at; ``model``: the verifier's name in the commands;
    ``progress(done, total)``: the candidate run sets weighed so far, and at most."""

    buckets = None if contexts is None else parse_contexts(contexts)
    return analysis_profile_plan.profile_plan(
        as_problem(problem), engine, buckets, model=model, progress=progress
    )


def parse_contexts(contexts: Sequence[float] | str) -> list[float]:
    """``"1024,8192,32768"`` (or a list) as context buckets, tokens per sequence: numbers
    > 0, strictly increasing, at most 64; a :class:`ParameterError` naming ``contexts``
    otherwise (:func:`allocator.analysis.schedule.parse_contexts`)."""
    return analysis_schedule.parse_contexts(contexts)


def size_fleet(
    problem: Problem | str | Path | dict,
    tokens_per_s: float,
    tpot_ms: float | None = None,
    *,
    sweep_load: np.ndarray | Sequence[float] | str | None = None,
    routes: bool | None = None,
    engine: str = "vllm",
    pooled: bool = False,
    budget: Mapping[str, float] | None = None,
) -> CapacityResult:
    """``allocator capacity --tokens-per-s``: the cheapest fleet carrying ``tokens_per_s``
    (generated tokens/s over the fleet) with every sequence's mean time per output token
    (TPOT) at most ``tpot_ms`` (ms; ``None``: no target), beside the cheapest without
    speculation (:func:`allocator.analysis.capacity.by_load.capacity`), over every integer
    batch size the step times reach.

    ``sweep_load``: also $/h at these loads (tokens/s, or ``"LO:HI:STEPS"``), with and
    without speculation. ``routes``: also plan's per-workload routes as one fleet
    (default: when the problem has workloads). Only what ``engine`` serves unless
    ``pooled`` (:func:`allocator.engines.servable`); ``budget`` replaces caps of the
    problem's.
    """

    if isinstance(sweep_load, str):
        sweep_load = parse_load_range(sweep_load)
    loads = None if sweep_load is None else np.asarray(sweep_load, dtype=float)
    prob = as_problem(problem).with_budget(budget)
    restricted, notes = servable(prob, engine, pooled)
    result = capacity_by_load.capacity(restricted, tokens_per_s, tpot_ms, loads, routes)
    result.notes[:0] = notes
    result.notes += file_notes(problem)
    return result


def calibrate(
    measured: str | Path | Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None = None,
    *,
    holdout: float | str | None = None,
    seed: int = 0,
    drafters: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CalibrationReport | RateCalibrationReport:
    """``allocator calibrate``: the step-time predictor fitted to the rows of ``measured``
    (CSV files and the engines' benchmark files, in any mix) for the problem file
    ``problem``, and the calibrated problem (``.data``, and ``.text()`` to write as
    ``out``): today's form, or the roofline's factors where the problem gives
    ``serving.hardware`` and ``serving.model``. ``out`` itself is not written here, but
    to check that the file is the fit its text is staged in a temporary file beside
    ``out`` (beside ``problem`` when ``out`` is ``None``), read back by the problem
    loader and removed. It raises :class:`~allocator.exceptions.InputError` naming
    ``out`` when that folder cannot be written or the file's step time at a row differs
    from the fit's by more than 10⁻⁶ relative; the rows' predictions reported are the
    file's. ``holdout``: a fraction of
    rows (chosen by ``seed``) held out, or ``"by-k"``/``"by-batch"`` (each group predicted
    by the fit of the others); ``drafters``: the drafter of the speculative benchmark runs
    (default the problem's only one)
    (:func:`allocator.calibration.calibration_report`).

    Benchmark files of runs at a request rate are fitted through the request-level
    simulator instead (:func:`allocator.analysis.rate_fit.rate_calibration`: ``mem_eff``,
    ``compute_eff``, ``prefill_eff``, ``ttft_overhead_ms`` from their TTFT, TPOT, ITL and
    E2EL, every replay from ``seed``), with ``progress(done, total)`` after each
    evaluation; ``holdout`` is refused there."""
    files = [measured] if isinstance(measured, str | Path) else list(measured)
    if analysis_rate_fit.has_rate_runs(files):
        if holdout is not None:
            raise ParameterError(
                "holdout", "runs at a request rate are fitted whole: no rows to hold out"
            )
        calibration.check_paths(files, problem, out)
        return analysis_rate_fit.rate_calibration(
            files, problem, out, seed=seed, drafters=drafters, progress=progress
        )
    return calibration.calibration_report(
        measured, problem, out, holdout=holdout, seed=seed, drafters=drafters
    )


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
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
    rename: Mapping[str, str] | Sequence[str] | None = None,
) -> EstimateReport:
    """``allocator estimate``: drafter acceptance (with 95% intervals) read from ``path``
    in format ``fmt`` (:data:`allocator.estimate.FORMATS`), as the problem file for
    ``out`` (``.text`` to write there; nothing is written here). ``drafter`` names the
    drafter (any format; one whose input names several takes ``rename``, ``OLD=NEW``);
    ``topk``, ``adaptive``, ``adaptive_steps``: an SGLang run's tree and adaptive
    settings (``sglang-requests``). See :func:`allocator.estimate.estimate_problem`."""
    return estimate_readers.estimate_problem(
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
        min_count=estimate_readers.MIN_TRIALS if min_count is None else min_count,
        convention=convention,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=adaptive_steps,
        rename=rename,
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
    return analysis_breakeven.breakeven_report(
        as_problem(problem), list(ensemble), list(baseline), curve_points
    )


def schema() -> dict:
    """``allocator schema``: the JSON Schema of the problem file, as a dict
    (:func:`allocator.io.spec.problem_json_schema`)."""
    return problem_json_schema()


def paper() -> PaperReport:
    """``allocator paper``: every number of the paper's §4–§5 recomputed beside its printed
    value (:func:`allocator.analysis.paper.reproduce`)."""
    return analysis_paper.PaperReport(analysis_paper.reproduce())


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
    return analysis_trees.best_tree(
        as_problem(problem), drafters, nodes, depth, width, rounds, seed
    )


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
    return analysis_trees.tree_front(as_problem(problem), drafters, max_nodes, depth, width)


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
    batch: int | None = None,
) -> EngineTree:
    """``tree --engine sglang`` / ``--eagle``: SGLang's EAGLE tree of the setting ``eagle =
    (num_steps, topk, num_draft_tokens)``, or without it the setting of most throughput
    with ``num_steps <= depth``, ``topk <= width`` (default: the measured ranks up to 16)
    and ``num_draft_tokens - 1 <= nodes`` (default 64), in verifier-units or, with
    ``batch`` (one of ``serving.batch_sizes``), in tokens/s at that many concurrent
    sequences; per batch size too with a ``serving`` section. Export it with
    :func:`allocator.engines.export_tree` (passing the same ``batch``)."""
    return analysis_trees.engine_tree(
        as_problem(problem), drafters, nodes, depth, width, eagle, rounds, seed, batch=batch
    )


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
    """``simulate``: the rounds Monte Carlo (:mod:`allocator.analysis.rounds`), not a
    replay of requests (that is :func:`bench`). Play ``rounds`` rounds (2..5e7, seeded by
    ``seed``) beside the closed form: of the chain (``drafters``, ``k``), outcomes drawn
    from the problem's error model (:class:`~allocator.analysis.rounds.Simulation`), or
    with ``nodes`` instead of ``k`` of the optimal token tree of at most ``nodes`` nodes and
    depth at most ``depth`` (default 16) of the one drafter named
    (:class:`~allocator.analysis.trees.SimulatedTree`)."""
    if nodes is not None:
        if k is not None:
            raise ParameterError("k", "give k for a chain or nodes for a tree, not both")
        depth = analysis_trees.DEFAULT_DEPTH if depth is None else depth
        return analysis_trees.simulate_best_tree(
            as_problem(problem), drafters, nodes, rounds, depth, seed
        )

    if k is None:
        raise ParameterError("k", "give the draft length (or nodes to play a token tree)")
    if depth is not None:
        raise ParameterError(
            "depth", "bounds a token tree (nodes); a chain's depth is its draft length k"
        )
    if not isinstance(problem, Problem):
        problem = problem_from_file(problem, simulation=True)
    return analysis_rounds.simulate(problem, drafters, k, rounds, seed)


__all__ = [
    "DEFAULT_SAMPLES",
    "MAX_SAMPLES",
    "bench",
    "best_tree",
    "breakeven",
    "calibrate",
    "engine_tree",
    "estimate",
    "evaluate",
    "export_plan",
    "export_point",
    "front",
    "load",
    "load_data",
    "needs_batch",
    "paper",
    "parse_contexts",
    "plan",
    "profile_plan",
    "sample_uncertainty",
    "schedule",
    "schema",
    "simulate",
    "size_disaggregated_for_rate",
    "size_fleet",
    "size_fleet_for_rate",
    "solve",
    "solve_at_batch",
    "sweep_hosting",
    "tree_front",
    "validate_runs",
]
