"""The serving front of the API (``allocator front``): output tokens/s per GPU against
tokens/s per user over simulated deployments (:mod:`allocator.analysis.front`).
Re-exported by :mod:`allocator.api`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..core.problem import Problem
from ..exceptions import InfeasibleError, ParameterError
from ._load import file_notes, load, load_data

if TYPE_CHECKING:
    from ..analysis import deployments as analysis_deployments
    from ..analysis import disagg_bench as analysis_disagg
    from ..analysis import front as analysis_front
    from ..analysis import request_source as analysis_request_source
    from ..analysis import scheduler_options
    from ..analysis.capacity import slo as capacity_slo
    from ..analysis.capacity import workers as capacity_workers
    from ..analysis.front import FrontResult
else:
    analysis_deployments = lazy_module("allocator.analysis.deployments")
    analysis_disagg = lazy_module("allocator.analysis.disagg_bench")
    analysis_front = lazy_module("allocator.analysis.front")
    analysis_request_source = lazy_module("allocator.analysis.request_source")
    scheduler_options = lazy_module("allocator.analysis.scheduler_options")
    capacity_slo = lazy_module("allocator.analysis.capacity.slo")
    capacity_workers = lazy_module("allocator.analysis.capacity.workers")

#: The P:D splits of ``disaggregated`` when none are given: one of each, then decode pools
#: two and three times the prefill pool (a request holds a prefill replica for its prompt's
#: pass and a decode replica for every output token, so decode needs the larger pool unless
#: prompts are long beside outputs), and 2:1 for that case. At most 4 replicas a point.
DEFAULT_PD_RATIOS = ((1, 1), (1, 2), (1, 3), (2, 1))


def front(
    problem: Problem | str | Path | dict,
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    trace_speedup: float | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    max_concurrency: Sequence[int] | None = None,
    slo: Sequence[str] | Mapping[str, float] | None = None,
    gpus: Sequence[str] | None = None,
    tp: Sequence[int] | None = None,
    max_num_seqs: Sequence[int] | None = None,
    gpu_cost: Mapping[str, float] | None = None,
    num_prompts: int | None = None,
    seed: int = 0,
    disaggregated: bool = False,
    pd_ratios: Sequence[tuple[int, int]] | None = None,
    kv_link: str | None = None,
    workers: int | None = None,
    ray: str | None = None,
    problems_dir: str | Path | None = None,
    require_slo: bool = True,
    progress: Callable[[int, int], None] | None = None,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | str | Mapping[str, float] | None = None,
    lengths_from: str | Path | None = None,
    stages: str | Sequence[tuple[float, float]] | None = None,
    shared_prefix_len: int = 0,
    turns: int = 1,
    think_time: float = 0.0,
    prefix_caching: bool = True,
    async_scheduling: bool | None = None,
) -> FrontResult:
    """``allocator front``: the serving Pareto front, output tokens/s per GPU against
    output tokens/s per user (``1000 / mean TPOT``), over every deployment asked: each GPU
    of ``gpus`` (default: the file's own) at each tensor-parallel degree of ``tp``
    (default: the file's own), each candidate of capacity (speculation off, each drafter at
    each ``k``, each drafter's ``k`` by batch size) at each ``max_num_seqs`` (default: the
    ladder) and each client concurrency of ``max_concurrency`` (default: none), simulated
    as ``allocator bench`` runs it: ``num_prompts`` requests (default: enough for the
    highest percentile of ``slo``, 1000 without) of ``input_len``/``output_len`` tokens or
    from ``trace``, at ``request_rate`` requests/s (default ``inf``: all at once), seeded
    by ``seed``; the other workload parameters (``random_input_len``,
    ``random_output_len``, ``random_range_ratio``, ``lengths_from``, ``stages``,
    ``shared_prefix_len``, ``turns``, ``think_time``) and the scheduler's
    (``prefix_caching``, ``async_scheduling``) as :func:`allocator.api.bench` takes them,
    the same for every deployment. ``gpu_cost`` maps GPU names to $/GPU-hour (default: the file's
    ``serving.gpu_cost_per_hour`` over its GPUs, for its own GPU). The simulations run on
    ``workers`` local processes (default: the CPUs available) or on the Ray cluster at
    ``ray``; ``progress(done, total)`` is called as each ends. ``problems_dir``: where the
    bench commands of re-targeted points find their problem files (default: beside the
    problem; :attr:`FrontResult.problem_files` holds their data, the command line writes
    them).

    ``disaggregated``: besides the aggregated points, each candidate of each deployment
    as ``P`` prefill and ``D`` decode replicas for each ``(P, D)`` of ``pd_ratios``
    (default :data:`DEFAULT_PD_RATIOS`), both pools on the deployment's GPU and TP, the KV
    over ``kv_link`` (default ``ib-ndr``), as ``allocator bench --prefill-replicas P
    --decode-replicas D`` runs it (both pools at the scheduling asked, the file's by
    default; not with ``max_concurrency`` or ``turns``).

    Raises :class:`~allocator.exceptions.InfeasibleError` on ``slo`` when no point meets
    every SLO (naming the closest SLO and its gap), unless ``require_slo`` is false."""

    ratios: list[tuple[int, int]] = []
    if disaggregated:
        ratios = analysis_front.check_pd_ratios(
            DEFAULT_PD_RATIOS if pd_ratios is None else pd_ratios
        )
        if not ratios:
            raise ParameterError("pd_ratios", "give at least one P:D split")
        if max_concurrency is not None:
            raise ParameterError(
                "max_concurrency",
                "is not modelled with disaggregation (one client's limit spans both pools)",
            )
        if turns != 1:
            raise ParameterError(
                "turns",
                "sessions are not modelled with disaggregation (a later turn waits for the "
                "decode pool's finish)",
            )
        analysis_disagg.kv_link(kv_link)
    else:
        for value, name in ((pd_ratios, "pd_ratios"), (kv_link, "kv_link")):
            if value is not None:
                raise ParameterError(name, "only with disaggregated")
    slos = capacity_slo.parse_slos(slo) if slo else ()
    if num_prompts is None and slos and stages is None:
        num_prompts = capacity_slo.default_num_prompts(slos)[0]
    source = analysis_request_source.request_source(
        num_prompts, input_len=input_len, output_len=output_len, trace=trace,
        burstiness=burstiness, seed=seed, random_input_len=random_input_len,
        random_output_len=random_output_len, random_range_ratio=random_range_ratio,
        lengths_from=lengths_from, stages=stages, shared_prefix_len=shared_prefix_len,
        turns=turns, think_time=think_time,
    )  # fmt: skip
    rate = analysis_request_source.run_rate(source, request_rate, trace_speedup)
    # the scheduler's options as bench takes them, and the words its command needs for them
    words = [] if prefix_caching else ["--no-prefix-caching"]
    if async_scheduling is not None:
        words.append("--async-scheduling" if async_scheduling else "--no-async-scheduling")
    source = replace(source, flags=(*source.flags, *words))
    if not (source.output_tokens > 1).any():
        raise ParameterError(
            "output_len",
            "every request has one output token: no TPOT, so no per-user throughput (give "
            "output_len >= 2)",
        )
    data: dict | None
    if isinstance(problem, Problem):
        built, data, base, path = problem, None, None, "PROBLEM"
    elif isinstance(problem, dict):
        built, data, base, path = load(problem), problem, None, "PROBLEM"
    else:
        data = load_data(problem)
        built = load(problem)
        base, path = Path(problem).resolve().parent, str(problem)
    stem = Path(path).stem if path != "PROBLEM" else built.name
    deployed, notes = analysis_deployments.deployments(
        built, data, base, source, gpus=gpus, tp=tp, gpu_cost=gpu_cost, stem=stem
    )
    deployed = [replace(d, problem=_scheduled(d.problem, prefix_caching, async_scheduling))
                for d in deployed]  # fmt: skip
    notes += file_notes(problem) + analysis_request_source.workload_notes(source)
    pools: list[Problem] | None = None
    if ratios:
        pools = []
        for d in deployed:
            synced, said = analysis_disagg.disagg_scheduling(d.problem, async_scheduling)
            # refused before any run: the KV a transfer moves needs serving.model
            analysis_disagg.prompt_kv_bytes(synced, source.prompt_tokens[:1])
            pools.append(synced)
            notes += [n for n in said if n not in notes]
    with capacity_workers.Workers(workers, ray, progress=progress) as pool:
        result = analysis_front.front(
            deployed,
            source,
            rate,
            slos,
            max_concurrency=max_concurrency,
            max_num_seqs=max_num_seqs,
            seed=seed,
            workers=pool,
            problem_path=path,
            problems_dir=None if problems_dir is None else str(problems_dir),
            notes=notes,
            pd_ratios=ratios,
            disagg_problems=pools,
            kv_link=kv_link,
        )
    missed = result.unmet()
    if missed is not None and require_slo:
        raise InfeasibleError("slo", missed)
    return result


def _scheduled(problem: Problem, prefix_caching: bool, async_scheduling: bool | None) -> Problem:
    """The deployment's problem under the scheduler options (as bench applies them)."""
    problem = scheduler_options.with_async_scheduling(problem, async_scheduling)
    if not prefix_caching:
        problem = scheduler_options.with_prefix_caching(problem, False)
    return problem


__all__ = ["DEFAULT_PD_RATIOS", "front"]
