"""``allocator bench --prefill-replicas P --decode-replicas D``: a simulated ``vllm bench
serve`` against prefill/decode disaggregated serving (:mod:`allocator.sim.disagg`).

Both pools run the problem's replica (``serving.hardware`` as the file gives it), each with
its own ``max_num_seqs``; through the API a pool may run on another GPU of the bundled
table or another tensor-parallel degree (:func:`pool_problem`: the problem re-targeted as
the serving front re-targets it, the roofline's step times on that replica). The prefill
pool runs speculation off (a prefill instance samples one token and drafts nothing); the
decode pool runs the configuration asked for. The KV of each prompt crosses an
inter-node link of :data:`allocator.core.interconnect.LINKS` (``--kv-link``, default
:data:`DEFAULT_KV_LINK`): ``latency + bytes / bandwidth``, the bytes the verifier's
``serving.model`` holds for the prompt (:meth:`~allocator.core.model_spec.ModelSpec.kv_bytes_at`:
``2 · layers · kv_heads · head_dim · bytes(kv_dtype)`` per token, the latent cache for
latent attention, windowed layers capped at their window), one copy of it over one port
(a replica whose GPUs each pull their own shard over their own port moves it faster: not
modelled). Both pools play the file's scheduling (asynchronous, vLLM's default, unless
``--no-async-scheduling``); the prefill pool its prefix caching, the decode pool none
(:mod:`allocator.sim.disagg` says why).

The document is ``bench --json``'s with the whole run's metrics (the client's view: TTFT
from the send to the decode replica's first token) and ``disaggregated``: the replica
counts, the link, each part of TTFT (``prefill_queue``, ``prefill``, ``transfer``,
``decode_queue``, ``first_decode_step``: mean, median and p99, ms), the bytes moved, and
``pools``: each pool's own run under the same keys, its replicas' under ``replicas``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.interconnect import LINKS, Link
from ..exceptions import InputError, NotModelledError, ParameterError
from ..sim import PERCENTILES, summary
from ..sim.disagg import TTFT_PARTS, DisaggResult, cut_content, simulate_disagg
from ..sim.fleet import FleetResult, check_replicas
from ..sim.results import max_output_tokens_per_s, spec_decode_counts
from ..sim.routers import ROUTERS, get_router
from .bench import BenchResult, model_id, overload_note, plain_metrics, replica_documents
from .deployments import deployments, own_hardware
from .limits import acceptance_notes, lengths_note, provenance_notes
from .replica import Configuration, check_prefill, outside_engine, replica, scheduler_limits
from .request_source import derived_seeds, stage_metrics
from .scheduler_options import with_async_scheduling, with_prefix_caching

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .request_source import RequestSource

#: The link a KV transfer crosses when none is named: InfiniBand NDR, the 400 Gb/s port of
#: a ConnectX-7 adapter (one a GPU on an HGX H100 node).
DEFAULT_KV_LINK = "ib-ndr"


def inter_node_links() -> tuple[str, ...]:
    """The inter-node links of the table, sorted."""
    return tuple(sorted(n for n, k in LINKS.items() if k.scope == "inter-node"))


def kv_link(name: str | Link | None) -> Link:
    """The link a KV transfer crosses: an inter-node link of the table by name (``None``:
    :data:`DEFAULT_KV_LINK`), or a :class:`~allocator.core.interconnect.Link` as given.
    ``ParameterError`` on ``kv_link`` for a name the table's inter-node links do not have,
    listing them."""
    if isinstance(name, Link):
        return name
    key = DEFAULT_KV_LINK if name is None else str(name).strip().lower()
    found = LINKS.get(key)
    if found is None or found.scope != "inter-node":
        what = "unknown link" if found is None else "not an inter-node link"
        raise ParameterError(
            "kv_link", f"{what} {name!r} (known inter-node links: {', '.join(inter_node_links())})"
        )
    return found


def disagg_settings(
    prefill_replicas: object, decode_replicas: object, router: str | None
) -> tuple[int, int, str]:
    """The replica counts checked (each ``1 ..`` :data:`~allocator.sim.fleet.MAX_REPLICAS`,
    ``ParameterError`` on ``prefill_replicas`` or ``decode_replicas``) and the router
    (``round-robin`` by default, as vLLM's disaggregation proxy picks each pool's
    instance)."""
    counts = []
    for value, name in (
        (prefill_replicas, "prefill_replicas"),
        (decode_replicas, "decode_replicas"),
    ):
        try:
            counts.append(check_replicas(value))
        except ParameterError as exc:
            raise ParameterError(name, exc.message) from None
    rule = "round-robin" if router is None else router
    if get_router(rule).keyed:
        raise ParameterError(
            "router", f"{rule} routes on a per-request key, which disaggregated requests lack"
        )
    return counts[0], counts[1], rule


def disagg_scheduling(problem: Problem, async_scheduling: bool | None) -> tuple[Problem, list[str]]:
    """The problem both pools are simulated with: its scheduling as asked
    (``async_scheduling``; ``None``: the file's, vLLM's default asynchronous scheduling
    unless it says otherwise), and no note. vLLM 0.33.0 runs a NIXL prefill or decode
    instance with asynchronous scheduling by default: ``VllmConfig`` turns it on unless a
    pooling model, the executor, ROCm DeepEP DBO or the V1 runner's drafter or pipeline
    parallelism rules it out, and checks nothing of ``kv_transfer_config`` there
    (``vllm/config/vllm.py`` lines 1640-1719); the scheduler defers freeing a consumer's
    blocks under it (lines 189-195 of ``vllm/v1/core/sched/scheduler.py``). ``ParameterError``
    on ``async_scheduling`` when it is not a bool or ``None``."""
    return with_async_scheduling(problem, async_scheduling), []


def pool_problem(
    problem: Problem,
    data: dict | None,
    source: RequestSource,
    gpu: str | None,
    tp: int | None,
    pool: str,
) -> tuple[Problem, list[str]]:
    """The problem one pool (``pool``: ``"prefill"`` or ``"decode"``) runs on ``tp`` GPUs
    ``gpu`` (each ``None``: the file's own), re-targeted as the serving front re-targets a
    problem (:func:`allocator.analysis.deployments.deployments`: the roofline's step times
    on that replica, its KV cache from its memory), and the notes. ``ParameterError`` on
    ``{pool}_gpu`` or ``{pool}_tp`` where the front's would name ``gpus`` or ``tp``."""
    if gpu is None and tp is None:
        return problem, []
    try:
        found, notes = deployments(
            problem, data, None, source, gpus=None if gpu is None else [gpu],
            tp=None if tp is None else [tp],
        )  # fmt: skip
    except ParameterError as exc:
        field = {"gpus": f"{pool}_gpu", "tp": f"{pool}_tp"}.get(exc.field, exc.field)
        raise ParameterError(field, exc.message) from None
    return found[0].problem, [f"{pool} pool: {n}" for n in notes]


def prompt_kv_bytes(problem: Problem, prompt_tokens: np.ndarray) -> np.ndarray:
    """``(N,)`` the KV bytes of each prompt (module docstring); ``InputError`` on
    ``serving.model`` when the file has none (nothing says how many bytes a token holds)."""
    serving = problem.serving
    model = None if serving is None else serving.model
    if model is None:
        raise InputError(
            "serving.model",
            "missing: a KV transfer's bytes come from the verifier's layers, KV heads, head "
            "dimension and KV dtype (serving.model), which this file does not give",
        )
    p = np.asarray(prompt_tokens, dtype=np.int64)
    sizes, where = np.unique(p, return_inverse=True)
    per = np.array([model.kv_bytes_at(float(s)) for s in sizes.tolist()])
    return per[where]


def _stats_ms(values_s: np.ndarray) -> dict[str, float]:
    v = np.asarray(values_s, dtype=float) * 1e3
    return {
        "mean": float(v.mean()),
        "median": float(np.median(v)),
        "p99": float(np.percentile(v, 99)),
    }


def pool_document(run: FleetResult, count: int, max_num_seqs: int) -> dict:
    """One pool's entry: its replicas, ``max_num_seqs`` and run's metrics under bench's keys
    (:func:`allocator.sim.summary`), its replicas' under ``replicas``."""
    r = run.fleet
    doc: dict = {"replicas_count": count, "max_num_seqs": max_num_seqs}
    metrics = plain_metrics(summary(r))
    spec = spec_decode_counts(r)
    if not spec:
        metrics.pop("spec_decode_acceptance_length", None)
    doc.update(metrics)
    doc["max_output_tokens_per_s"] = max_output_tokens_per_s(r)
    doc.update(spec)
    doc["replicas"] = replica_documents(run)
    return doc


def disagg_document(
    res: DisaggResult,
    link: Link,
    p_seqs: int,
    d_seqs: int,
    overhead_ms: float,
    hardware: tuple[tuple[str | None, int], tuple[str | None, int]] = ((None, 1), (None, 1)),
) -> dict:
    """``disaggregated`` of ``bench --json`` (module docstring); ``hardware`` each pool's
    replica ``(GPU, TP)`` (``GPU`` ``None``: the file's replica names none)."""
    (p_gpu, p_tp), (d_gpu, d_tp) = hardware
    return {
        "prefill_replicas": len(res.prefill.replicas),
        "decode_replicas": len(res.decode.replicas),
        "router": res.decode.router,
        "kv_link": {
            "name": link.name,
            "bandwidth_gb_s": link.bandwidth_gb_s,
            "latency_us": link.latency_us,
        },
        "ttft_parts_ms": {part: _stats_ms(res.ttft_parts[part]) for part in TTFT_PARTS},
        "ttft_overhead_ms": overhead_ms,
        "kv_transfer_bytes": {
            "mean": float(res.kv_bytes.mean()),
            "max": float(res.kv_bytes.max()),
        },
        "pools": {
            "prefill": {
                "gpu": p_gpu,
                "tp": p_tp,
                **pool_document(res.prefill, len(res.prefill.replicas), p_seqs),
            },
            "decode": {
                "gpu": d_gpu,
                "tp": d_tp,
                **pool_document(res.decode, len(res.decode.replicas), d_seqs),
            },
        },
    }


def disagg_note(p: int, d: int, router: str, link: Link, async_scheduling: bool = False) -> str:
    """What a disaggregated run's numbers are (``async_scheduling``: the pools'
    scheduling)."""
    played = "asynchronous" if async_scheduling else "synchronous"
    lat = "no latency figure" if link.latency_us is None else f"{link.latency_us:g} µs"
    return (
        f"prefill/decode disaggregation: {p} prefill and {d} decode replicas, each pool "
        f"behind {router} ({ROUTERS[router].summary}); each "
        f"prompt's KV crosses {link.name} ({link.bandwidth_gb_s:g} GB/s, {lat}). TTFT runs "
        "to the decode replica's first token, as vLLM's disaggregation proxy streams the "
        "decode instance's response; disaggregated.ttft_parts_ms splits it. Both pools "
        f"play {played} scheduling, the decode pool without prefix caching; speculation "
        "runs in the decode pool only"
    )


def bench_disagg(
    problem: Problem,
    source: RequestSource,
    config: Configuration,
    request_rate: float,
    *,
    prefill_replicas: int,
    decode_replicas: int,
    kv_link_name: str | Link | None = None,
    router: str | None = None,
    prefill_max_num_seqs: int | None = None,
    decode_max_num_seqs: int | None = None,
    seed: int = 0,
    notes: Sequence[str] = (),
    percentiles: Sequence[float] = PERCENTILES,
    prefill_problem: Problem | None = None,
    decode_problem: Problem | None = None,
) -> BenchResult:
    """One simulated ``vllm bench serve`` run against ``prefill_replicas`` prefill and
    ``decode_replicas`` decode replicas of the problem (module docstring): the
    ``source``'s requests at ``request_rate`` requests/s. ``prefill_problem`` and
    ``decode_problem``: a pool's replica on other hardware (:func:`pool_problem`; ``None``:
    ``problem``'s). Each pool plays its problem's scheduling (:func:`disagg_scheduling`)."""
    p_count, d_count, rule = disagg_settings(prefill_replicas, decode_replicas, router)
    link = kv_link(kv_link_name)
    p_prob = problem if prefill_problem is None else prefill_problem
    d_prob = with_prefix_caching(problem if decode_problem is None else decode_problem, False)
    p_rep = replica(p_prob, Configuration.off(config.names), prefill_max_num_seqs)
    d_rep = replica(d_prob, config, decode_max_num_seqs)
    requests = source.at(request_rate)
    content = requests.content  # (the prefill pool's requests end at their first token)
    if content is not None:
        content = cut_content(content, requests.prompt_tokens + 1)
    ones = np.ones(len(requests), dtype=np.int64)
    check_prefill(p_prob, p_rep, dataclasses.replace(requests, output_tokens=ones, content=content))
    check_prefill(d_prob, d_rep, requests)
    kvb = prompt_kv_bytes(d_prob, requests.prompt_tokens)
    _, sim_seed = derived_seeds(seed)
    try:
        res = simulate_disagg(
            requests,
            (p_rep.policy, p_rep.step, p_rep.scheduler),
            (d_rep.policy, d_rep.step, d_rep.scheduler),
            p_count,
            d_count,
            kvb,
            link.bandwidth_bytes_s,
            link.latency_s,
            rule,
            sim_seed,
        )
    except ParameterError as exc:
        if exc.field == "kv_cache_tokens":
            raise InputError("serving.scheduler.kv_cache_tokens", exc.message) from None
        if exc.field == "step_ms":
            raise NotModelledError("serving", f"no step time: {exc.message}") from None
        if exc.field == "scheduler":
            raise ParameterError("max_concurrency", exc.message) from None
        raise
    serving = d_prob.serving
    overhead = 0.0 if serving is None else float(serving.ttft_overhead_ms)
    result = outside_engine(res.whole, overhead)
    played = scheduler_limits(d_prob).async_scheduling
    all_notes = list(notes) + [disagg_note(p_count, d_count, rule, link, played)]
    all_notes += list(d_rep.notes) + provenance_notes(problem)
    all_notes += acceptance_notes(problem, d_rep.config.members, d_rep.config.max_k)
    all_notes += lengths_note(
        source.fixed_lengths, int(source.prompt_tokens[0]), int(source.output_tokens[0])
    )
    if overhead:
        all_notes.append(
            f"serving.ttft_overhead_ms ({overhead:g} ms) is added to each request's TTFT and "
            "E2EL once, outside disaggregated.ttft_parts_ms"
        )
    for name, run in (("prefill", res.prefill.fleet), ("decode", res.decode.fleet)):
        grown = overload_note(run, request_rate)
        if grown:
            all_notes.append(f"{name} pool: {grown}")
    if d_rep.config.speculative:
        all_notes.append(
            f"KV slots reserved past the verified tokens for the drafter: "
            f"{d_rep.policy.lookahead} (as vLLM 0.33 reserves them for its method)"
        )
    p_seqs, d_seqs = p_rep.scheduler.max_num_seqs, d_rep.scheduler.max_num_seqs
    return BenchResult(
        problem=problem.name,
        config=d_rep.config,
        scheduler=d_rep.scheduler,
        num_prompts=len(requests),
        request_rate=float(request_rate),
        burstiness=source.burstiness,
        result=result,
        metrics=summary(result, percentiles),
        notes=all_notes,
        date=datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        trace=source.trace,
        model_id=model_id(problem),
        stages=stage_metrics(source, result, percentiles),
        disagg=disagg_document(
            res, link, p_seqs, d_seqs, overhead, (own_hardware(p_prob), own_hardware(d_prob))
        ),
        disagg_run=res,
    )


__all__ = [
    "DEFAULT_KV_LINK",
    "bench_disagg",
    "disagg_document",
    "disagg_note",
    "disagg_scheduling",
    "disagg_settings",
    "inter_node_links",
    "kv_link",
    "pool_document",
    "pool_problem",
    "prompt_kv_bytes",
]
