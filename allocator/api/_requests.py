"""The request-level commands of the API: a simulated ``vllm bench serve`` (``bench``),
capacity for a request rate under SLO percentiles (``size_fleet_for_rate``) and measured runs
beside their replay (``validate_runs``). Re-exported by :mod:`allocator.api`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..core.problem import Problem
from ..exceptions import ParameterError
from ..io.ranges import parse_range
from ._load import as_problem, file_notes, load_data

if TYPE_CHECKING:
    from ..analysis import bench as analysis_bench
    from ..analysis import disagg_bench as analysis_disagg
    from ..analysis import disagg_capacity, scheduler_options
    from ..analysis import replica as analysis_replica
    from ..analysis import request_source as analysis_request_source
    from ..analysis import validation as analysis_validation
    from ..analysis.bench import BenchResult
    from ..analysis.capacity import by_rate as capacity_by_rate
    from ..analysis.capacity import slo as capacity_slo
    from ..analysis.capacity import workers as capacity_workers
    from ..analysis.capacity.by_rate import RateCapacityResult
    from ..analysis.disagg_capacity import DisaggCapacity
    from ..analysis.validation import ValidationReport
else:
    analysis_bench = lazy_module("allocator.analysis.bench")
    analysis_disagg = lazy_module("allocator.analysis.disagg_bench")
    disagg_capacity = lazy_module("allocator.analysis.disagg_capacity")
    analysis_replica = lazy_module("allocator.analysis.replica")
    scheduler_options = lazy_module("allocator.analysis.scheduler_options")
    analysis_request_source = lazy_module("allocator.analysis.request_source")
    analysis_validation = lazy_module("allocator.analysis.validation")
    capacity_by_rate = lazy_module("allocator.analysis.capacity.by_rate")
    capacity_slo = lazy_module("allocator.analysis.capacity.slo")
    capacity_workers = lazy_module("allocator.analysis.capacity.workers")


# ---------------------------------------------------------------- requests (issue 17):
# a simulated `vllm bench serve`, and capacity for a request rate under SLO percentiles.
def _vllm_scheduler_only(engine: str) -> None:
    """The request simulator plays vLLM 0.33's scheduler (``allocator/sim``); SGLang's
    (``sglang/srt/managers/scheduler.py``, ``schedule_policy.py``: its new-token ratio,
    chunked prefill size, radix cache) is not modelled, so it is refused under SGLang's
    name: :class:`ParameterError` on ``engine`` for ``"sglang"``."""
    if engine == "sglang":
        raise ParameterError(
            "engine",
            "sglang: the request simulator follows vLLM's scheduler; SGLang's scheduler is "
            "not modelled, so bench and capacity for a request rate run only with vllm",
        )


def bench(
    problem: Problem | str | Path | dict,
    *,
    drafters: Sequence[str] | None = None,
    k: int | None = None,
    schedule: bool = False,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    num_prompts: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    trace_speedup: float | None = None,
    seed: int = 0,
    max_num_seqs: int | None = None,
    engine: str = "vllm",
    pooled: bool = False,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | str | Mapping[str, float] | None = None,
    lengths_from: str | Path | None = None,
    stages: str | Sequence[tuple[float, float]] | None = None,
    replicas: int = 1,
    router: str | None = None,
    async_scheduling: bool | None = None,
    shared_prefix_len: int = 0,
    turns: int = 1,
    think_time: float = 0.0,
    prefix_caching: bool = True,
    prefill_replicas: int | None = None,
    decode_replicas: int | None = None,
    kv_link: str | None = None,
    prefill_max_num_seqs: int | None = None,
    decode_max_num_seqs: int | None = None,
    prefill_gpu: str | None = None,
    prefill_tp: int | None = None,
    decode_gpu: str | None = None,
    decode_tp: int | None = None,
) -> BenchResult:
    """``allocator bench``: a simulated ``vllm bench serve`` of one replica of the problem
    (:func:`allocator.analysis.bench.bench`): ``drafters`` at ``k`` (none or ``k = 0``:
    speculation off) or ``k`` by batch size (``schedule``; refused on ``engine`` for an
    engine that takes no schedule, SGLang); ``num_prompts`` requests
    (default 1000) of ``input_len``/``output_len`` tokens arriving at ``request_rate``
    (requests/s; default ``inf``, all at once) with gamma gaps of shape ``burstiness``, or
    the first rows of a ``trace`` (its own times, sped up by ``trace_speedup`` or scaled to
    ``request_rate``); ``max_concurrency`` requests in flight at the client at most;
    ``max_num_seqs`` replaces the file's ``serving.scheduler.max_num_seqs`` and
    ``async_scheduling`` its ``serving.scheduler.async_scheduling`` (``None``: the file's,
    default true as vLLM's). Instead of
    fixed lengths: vLLM's random dataset (``random_input_len``, ``random_output_len``,
    ``random_range_ratio``) or lengths drawn from the rows of the trace ``lengths_from``;
    instead of one rate: ``stages``, ``"RATE:SECONDS,..."``, whose arrivals set the number
    of requests (:func:`allocator.analysis.request_source.request_source`). Every request
    runs to its output length (vLLM's ``--ignore-eos``). ``replicas`` identical replicas
    behind ``router`` (:data:`allocator.sim.routers.ROUTERS`; default ``round-robin`` past
    one replica; one replica is the single run). Every prompt starts with the same
    ``shared_prefix_len`` tokens; ``turns`` above 1 makes multi-turn sessions (each turn's
    prompt the previous prompt, its answer and ``input_len`` new tokens), the next turn sent
    ``think_time`` s after the previous finishes. ``prefix_caching=False`` turns off the
    file's ``serving.scheduler.enable_prefix_caching``. Seeded by ``seed``: the same seed
    gives the same document but for ``date``. ``engine`` ``"sglang"`` is refused
    (:func:`_vllm_scheduler_only`).

    ``prefill_replicas`` and ``decode_replicas`` (both, each at least 1): prefill/decode
    disaggregation instead (:mod:`allocator.analysis.disagg_bench`), each pool behind ``router``,
    the prompt's KV over the inter-node link ``kv_link`` (default ``ib-ndr``), each pool's
    ``max_num_seqs`` ``prefill_max_num_seqs`` and ``decode_max_num_seqs`` (default
    ``max_num_seqs``, else the file's); not with ``replicas``, ``max_concurrency`` or
    ``turns``. ``prefill_gpu``/``prefill_tp`` and ``decode_gpu``/``decode_tp``: a pool's
    replica on another GPU of the bundled table or tensor-parallel degree (each ``None``:
    the file's), the problem re-targeted as ``front`` re-targets it (the roofline's step
    times; the problem given as a file or its data)."""

    _vllm_scheduler_only(engine)
    hardware = {"prefill_gpu": prefill_gpu, "prefill_tp": prefill_tp,
                "decode_gpu": decode_gpu, "decode_tp": decode_tp}  # fmt: skip
    disagg = _disagg_asked(
        prefill_replicas, decode_replicas, kv_link, prefill_max_num_seqs, decode_max_num_seqs
    )
    if not disagg:
        for name, value in hardware.items():
            if value is not None:
                raise ParameterError(
                    name, "only with disaggregation (prefill_replicas) (decode_replicas)"
                )
    if disagg:
        if replicas != 1:
            raise ParameterError(
                "replicas", "one replica pool or disaggregation (prefill_replicas), not both"
            )
        if max_concurrency is not None:
            raise ParameterError(
                "max_concurrency",
                "is not modelled with disaggregation (one client's limit spans both pools)",
            )
        if turns != 1:
            raise ParameterError(
                "turns",
                "sessions are not modelled with disaggregation (a later turn waits "
                "for the decode pool's finish)",
            )
        analysis_disagg.disagg_settings(prefill_replicas, decode_replicas, router)
        analysis_disagg.kv_link(kv_link)
    count, router = analysis_bench.fleet_settings(replicas, router)
    prob = scheduler_options.with_async_scheduling(as_problem(problem), async_scheduling)
    if disagg:
        prob, fleet_notes = analysis_disagg.disagg_scheduling(prob, async_scheduling)
    else:
        fleet_notes = []
    if not prefix_caching:
        prob = scheduler_options.with_prefix_caching(prob, False)
    n = num_prompts
    if n is None and stages is None:
        n = analysis_request_source.DEFAULT_NUM_PROMPTS
    source = analysis_request_source.request_source(
        n, input_len=input_len, output_len=output_len, trace=trace, burstiness=burstiness,
        seed=seed, random_input_len=random_input_len, random_output_len=random_output_len,
        random_range_ratio=random_range_ratio, lengths_from=lengths_from, stages=stages,
        shared_prefix_len=shared_prefix_len, turns=turns, think_time=think_time,
    )  # fmt: skip
    rate = analysis_request_source.run_rate(source, request_rate, trace_speedup)
    size = decode_max_num_seqs if disagg and decode_max_num_seqs is not None else max_num_seqs
    config, notes = analysis_replica.configuration(
        prob, drafters, k, schedule=schedule, max_num_seqs=size, engine=engine, pooled=pooled,
    )  # fmt: skip
    all_notes = [
        *notes,
        *fleet_notes,
        *file_notes(problem),
        *analysis_request_source.workload_notes(source),
    ]
    if disagg:
        pools: dict[str, Problem | None] = {}
        for pool in ("prefill", "decode"):
            gpu = prefill_gpu if pool == "prefill" else decode_gpu
            tp = prefill_tp if pool == "prefill" else decode_tp
            if gpu is None and tp is None:
                pools[pool] = None
                continue
            data = _problem_data(problem, f"{pool}_gpu" if gpu is not None else f"{pool}_tp")
            built, more = analysis_disagg.pool_problem(
                as_problem(data), data, source, gpu, tp, pool
            )
            built, _ = analysis_disagg.disagg_scheduling(built, async_scheduling)
            if not prefix_caching:
                built = scheduler_options.with_prefix_caching(built, False)
            pools[pool] = built
            all_notes += more
        return analysis_disagg.bench_disagg(
            prob,
            source,
            config,
            rate,
            prefill_replicas=prefill_replicas,  # type: ignore[arg-type]
            decode_replicas=decode_replicas,  # type: ignore[arg-type]
            kv_link_name=kv_link,
            router=router,
            prefill_max_num_seqs=max_num_seqs
            if prefill_max_num_seqs is None
            else prefill_max_num_seqs,
            decode_max_num_seqs=max_num_seqs
            if decode_max_num_seqs is None
            else decode_max_num_seqs,
            seed=seed,
            notes=all_notes,
            prefill_problem=pools["prefill"],
            decode_problem=pools["decode"],
        )
    return analysis_bench.bench(
        prob,
        source,
        config,
        rate,
        max_num_seqs=max_num_seqs,
        max_concurrency=max_concurrency,
        seed=seed,
        notes=all_notes,
        replicas=count,
        router=router,
    )


def _problem_data(problem: object, field: str) -> dict:
    """A problem's file data, to re-target (``ParameterError`` on ``field`` for a built
    :class:`~allocator.core.problem.Problem`)."""
    if isinstance(problem, dict):
        return problem
    if isinstance(problem, str | Path):
        return load_data(problem)
    raise ParameterError(
        field, "a built Problem cannot be re-targeted: give the problem file or its data"
    )


def _disagg_asked(
    prefill: int | None,
    decode: int | None,
    link: str | None,
    prefill_seqs: int | None,
    decode_seqs: int | None,
) -> bool:
    """Whether :func:`bench` runs disaggregated: both replica counts given (one alone is
    refused, naming the other; a link or a pool's ``max_num_seqs`` without them too)."""
    if prefill is None and decode is None:
        for value, name in (
            (link, "kv_link"),
            (prefill_seqs, "prefill_max_num_seqs"),
            (decode_seqs, "decode_max_num_seqs"),
        ):
            if value is not None:
                raise ParameterError(
                    name,
                    "only with disaggregation: give both pools' replica counts "
                    "(prefill_replicas) (decode_replicas)",
                )
        return False
    if prefill is None or decode is None:
        name = "prefill_replicas" if prefill is None else "decode_replicas"
        raise ParameterError(name, "missing: disaggregation needs both pools' replica counts")
    return True


def size_fleet_for_rate(
    problem: Problem | str | Path | dict,
    request_rate: float | None,
    slo: Sequence[str] | Mapping[str, float],
    *,
    burstiness: float = 1.0,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    trace_speedup: float | None = None,
    num_prompts: int | None = None,
    seed: int = 0,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | str | Mapping[str, float] | None = None,
    lengths_from: str | Path | None = None,
    sweep_rate: np.ndarray | Sequence[float] | str | None = None,
    max_num_seqs: Sequence[int] | None = None,
    workers: int | None = None,
    ray: str | None = None,
    engine: str = "vllm",
    pooled: bool = False,
    budget: Mapping[str, float] | None = None,
    progress: Callable[[int, int], None] | None = None,
    router: str | None = None,
    async_scheduling: bool | None = None,
    shared_prefix_len: int = 0,
    turns: int = 1,
    think_time: float = 0.0,
    prefix_caching: bool = True,
) -> RateCapacityResult:
    """``allocator capacity --request-rate``: the cheapest fleet serving ``request_rate``
    requests/s (over the fleet; with a ``trace``, its own rate times ``trace_speedup`` when
    no rate is given) with every SLO of ``slo`` met (``"p99_ttft_ms=500"`` strings or a
    mapping; :mod:`allocator.analysis.capacity.by_rate`), beside the cheapest without speculation.

    Each replica is simulated at its share of the rate over ``num_prompts`` requests
    (default: enough for the highest percentile asked; their lengths as :func:`bench`
    takes them, staged loads aside: the search sets the rate) seeded by ``seed``; ``sweep_rate``
    also prices rates (``"LO:HI:STEPS"`` or numbers); ``max_num_seqs`` the values tried
    (default: a ladder); ``router`` (a name of :data:`allocator.sim.routers.ROUTERS`):
    fleets of ``n`` replicas behind it are simulated at the whole rate instead (the
    replica count found by simulation, not by dividing the rate); the simulations run on
    ``workers`` local processes (default: the CPUs available) or on the Ray cluster at
    ``ray``. Only what ``engine`` serves unless
    ``pooled`` (no ``k`` by batch size for an engine that takes none); ``budget`` replaces
    caps of the problem's; ``shared_prefix_len``, ``turns``, ``think_time`` and
    ``prefix_caching`` as :func:`bench` takes them; ``async_scheduling`` replaces the file's
    ``serving.scheduler.async_scheduling`` (``None``: the file's). ``progress(done,
    total)`` is called as each candidate search ends, with the searches done so far and
    those expected in all (an upper bound that falls as candidates are pruned). ``engine``
    ``"sglang"`` is refused (:func:`_vllm_scheduler_only`)."""

    _vllm_scheduler_only(engine)
    slos = capacity_slo.parse_slos(slo)
    n = capacity_slo.default_num_prompts(slos)[0] if num_prompts is None else num_prompts
    source = analysis_request_source.request_source(
        n, input_len=input_len, output_len=output_len, trace=trace, burstiness=burstiness,
        seed=seed, random_input_len=random_input_len, random_output_len=random_output_len,
        random_range_ratio=random_range_ratio, lengths_from=lengths_from,
        shared_prefix_len=shared_prefix_len, turns=turns, think_time=think_time,
    )  # fmt: skip
    if request_rate is None and trace_speedup is None:
        raise ParameterError("request_rate", "give the fleet's request rate, requests/s")
    rate = analysis_request_source.run_rate(source, request_rate, trace_speedup)
    if isinstance(sweep_rate, str):
        sweep_rate = parse_range(
            sweep_rate, "sweep_rate", positive=True, max_steps=capacity_by_rate.MAX_SWEEP_RATES
        )
    rates = None if sweep_rate is None else np.asarray(sweep_rate, dtype=float)
    prob = scheduler_options.with_async_scheduling(
        as_problem(problem).with_budget(budget), async_scheduling
    )
    if async_scheduling is not None:  # the candidates' bench commands run what ran here
        flag = "--async-scheduling" if async_scheduling else "--no-async-scheduling"
        source = replace(source, flags=(*source.flags, flag))
    if not prefix_caching:
        prob = scheduler_options.with_prefix_caching(prob, False)
        source = replace(source, flags=(*source.flags, "--no-prefix-caching"))
    path = str(problem) if isinstance(problem, str | Path) else "PROBLEM"
    with capacity_workers.Workers(workers, ray, progress=progress) as pool:
        fleet = capacity_by_rate.size_for_rate(
            prob,
            rate,
            slos,
            source,
            seed=seed,
            engine=engine,
            pooled=pooled,
            max_num_seqs=max_num_seqs,
            sweep_rates=rates,
            workers=pool,
            problem_path=path,
            router=router,
        )
    fleet.notes += file_notes(problem) + analysis_request_source.workload_notes(source)
    return fleet


def size_disaggregated_for_rate(
    problem: Problem | str | Path | dict,
    request_rate: float | None,
    slo: Sequence[str] | Mapping[str, float],
    *,
    drafters: Sequence[str] | None = None,
    k: int | None = None,
    schedule: bool = False,
    pooled: bool = False,
    engine: str = "vllm",
    max_total: int = 16,
    prefill_max_num_seqs: int | None = None,
    decode_max_num_seqs: int | None = None,
    kv_link: str | None = None,
    router: str | None = None,
    burstiness: float = 1.0,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    trace_speedup: float | None = None,
    num_prompts: int | None = None,
    seed: int = 0,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | str | Mapping[str, float] | None = None,
    lengths_from: str | Path | None = None,
    shared_prefix_len: int = 0,
    prefix_caching: bool = True,
    async_scheduling: bool | None = None,
) -> DisaggCapacity:
    """``allocator capacity --request-rate --disaggregated``: the fewest prefill and decode
    replicas serving ``request_rate`` requests/s with every SLO of ``slo`` met, the decode
    pool running ``drafters`` at ``k`` (or ``schedule``; none: speculation off) with
    ``decode_max_num_seqs``, each split simulated
    (:mod:`allocator.analysis.disagg_capacity`; the requests as
    :func:`size_fleet_for_rate` draws them, the pools as :func:`bench` runs them)."""
    _vllm_scheduler_only(engine)
    slos = capacity_slo.parse_slos(slo)
    n = capacity_slo.default_num_prompts(slos)[0] if num_prompts is None else num_prompts
    source = analysis_request_source.request_source(
        n, input_len=input_len, output_len=output_len, trace=trace, burstiness=burstiness,
        seed=seed, random_input_len=random_input_len, random_output_len=random_output_len,
        random_range_ratio=random_range_ratio, lengths_from=lengths_from,
        shared_prefix_len=shared_prefix_len,
    )  # fmt: skip
    if request_rate is None and trace_speedup is None:
        raise ParameterError("request_rate", "give the fleet's request rate, requests/s")
    rate = analysis_request_source.run_rate(source, request_rate, trace_speedup)
    analysis_disagg.kv_link(kv_link)
    prob = scheduler_options.with_async_scheduling(as_problem(problem), async_scheduling)
    prob, sync_notes = analysis_disagg.disagg_scheduling(prob, async_scheduling)
    if not prefix_caching:
        prob = scheduler_options.with_prefix_caching(prob, False)
        source = replace(source, flags=(*source.flags, "--no-prefix-caching"))
    config, notes = analysis_replica.configuration(
        prob, drafters, k, schedule=schedule, max_num_seqs=decode_max_num_seqs, engine=engine,
        pooled=pooled,
    )  # fmt: skip
    path = str(problem) if isinstance(problem, str | Path) else "PROBLEM"
    found = disagg_capacity.size_disaggregated(
        prob, source, config, rate, slos, max_total=max_total,
        prefill_max_num_seqs=prefill_max_num_seqs, decode_max_num_seqs=decode_max_num_seqs,
        kv_link=kv_link, router=router, seed=seed, problem_path=path,
    )  # fmt: skip
    found.notes += notes + sync_notes
    return found


def validate_runs(
    problem: Problem | str | Path | dict, files: Sequence[str | Path], **options
) -> ValidationReport:
    """``allocator validate``: each measured run of ``files`` beside its replay on the
    problem's replica (options ``drafters``, ``max_num_seqs``, ``seed``, ``progress``:
    :func:`allocator.analysis.validation.validate`)."""
    return analysis_validation.validate(as_problem(problem), files, **options)


__all__ = ["bench", "size_disaggregated_for_rate", "size_fleet_for_rate", "validate_runs"]
