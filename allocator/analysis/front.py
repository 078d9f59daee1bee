"""The serving Pareto front (docs/design.md §8.15): output tokens/s per GPU against output
tokens/s per user over simulated deployments, speculation inside the simulation.

**Deployments** (GPU, TP, the problem re-targeted to them, what is refused) are
:mod:`allocator.analysis.deployments`'s.

**Candidates** at each deployment are capacity's
(:func:`allocator.analysis.capacity.rate_search.candidates`, vLLM): speculation off, each
drafter at each ``k`` of ``search.k`` with a step time, each drafter's ``k`` by batch size,
within the budget; each at the ``max_num_seqs`` ladder (powers of two below the largest it
can run, and that largest) or at the values given. With client concurrencies
(``max_concurrency``), each configuration runs at its largest ``max_num_seqs`` (or at
each value given) and each concurrency is a point.

**A point** is one simulated ``vllm bench serve`` (:func:`allocator.analysis.bench.bench`)
of a candidate on its deployment, the same requests and seed for every point:

    output_tokens_per_s_per_gpu  = output_throughput / TP
    output_tokens_per_s_per_user = 1000 / mean_tpot_ms
    cost_per_mtok                = price_per_gpu_hour · TP / (3600 · output_throughput) · 10⁶

**Disaggregated points** (``pd_ratios``, each ``(P, D)``): every candidate again as a
prefill/decode disaggregated run (:func:`allocator.analysis.disagg_bench.bench_disagg`, as
``allocator bench --prefill-replicas P --decode-replicas D`` runs it) of ``P`` prefill and
``D`` decode replicas, both on the deployment's GPU and TP and at the candidate's
``max_num_seqs``, speculation in the decode pool, the KV over ``kv_link``; the same
requests and seed. Its GPUs are ``(P + D) · TP``: per-GPU throughput and cost divide by
them. ``deployment`` says ``aggregated`` or ``P:D``; the point carries its fleet export
(:func:`allocator.engines.vllm_disagg`'s text) beside the decode replica's flags.

``dominated``: some other point has at least its per-GPU and per-user throughput, one of
them strictly higher (ties both kept); ``meets_slo``: every SLO met by the run, as capacity
reads it (:meth:`allocator.analysis.capacity.slo.SLO.met`). Violating points stay in the
front, flagged. The speculation-on and speculation-off fronts (each side's own
non-dominated points) are given for the plot. Each point carries the ``allocator bench``
command reproducing its metrics (on a re-targeted deployment it names the re-targeted
problem file, written by the command line's ``--problems-dir``) and the ``vllm serve``
flags it needs (:mod:`allocator.engines.vllm`).

Simulations are independent jobs on :class:`~allocator.analysis.capacity.workers.Workers`:
the same front wherever they ran.
"""

from __future__ import annotations

import csv
import io
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engines.disagg_exports import Pool, vllm_disagg
from ..engines.vllm import config_text, schedule_config, speculative_config
from ..exceptions import InfeasibleError, InputError, NotModelledError, ParameterError
from ..sim import metric
from .bench import bench
from .capacity.rate_search import Candidate, candidates
from .capacity.slo import SLO, clock_ms
from .capacity.workers import Workers
from .deployments import Deployment
from .disagg_bench import bench_disagg
from .replica import scheduler_limits

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .request_source import RequestSource

#: Most simulations one front runs.
MAX_POINTS = 20_000
#: Keys of ``bench --json`` a point's metrics leave out: the run's date, its per-request
#: lists and its notes (the front's own notes say what they say).
LEFT_OUT = ("date", "latencies", "queue_times", "notes")


# ---------------------------------------------------------------- jobs
@dataclass(frozen=True, eq=False)
class Context:
    """What every simulation of one front reads, sent once to each worker: the problem of
    each deployment, the requests, their rate, the SLOs and the seed."""

    problems: tuple[Any, ...]
    source: RequestSource
    request_rate: float
    slos: tuple[SLO, ...]
    seed: int
    disagg_problems: tuple[Any, ...] | None = None
    kv_link: str | None = None


@dataclass(frozen=True, eq=False)
class Job:
    """One point: deployment ``where``, candidate, client concurrency (``None``: none),
    and ``pd``: the prefill and decode replica counts (``None``: aggregated)."""

    where: int
    candidate: Candidate
    max_concurrency: int | None
    pd: tuple[int, int] | None = None


@dataclass
class Run:
    """What a worker sends back: ``bench --json``'s keys but :data:`LEFT_OUT`
    (``metrics``), each SLO's value (ms) and whether all are met; or the error that
    stopped the run (its class name, field and message: an :class:`InputError` does not
    survive pickling)."""

    metrics: dict[str, Any] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    meets_slo: bool = True
    error: tuple[str, str, str] | None = None


ERRORS: dict[str, type[InputError]] = {
    "InputError": InputError,
    "ParameterError": ParameterError,
    "InfeasibleError": InfeasibleError,
    "NotModelledError": NotModelledError,
}


def run_point(ctx: Context, job: Job) -> Run:
    """Simulate one point (:func:`allocator.analysis.bench.bench`, as ``allocator bench``
    runs it); a module-level function, for the workers."""
    problem = ctx.problems[job.where]
    cand = job.candidate
    try:
        if job.pd is None:
            res = bench(
                problem,
                ctx.source,
                cand.config,
                ctx.request_rate,
                max_num_seqs=cand.max_num_seqs,
                max_concurrency=job.max_concurrency,
                seed=ctx.seed,
            )
        else:
            assert ctx.disagg_problems is not None
            res = bench_disagg(
                ctx.disagg_problems[job.where],
                ctx.source,
                cand.config,
                ctx.request_rate,
                prefill_replicas=job.pd[0],
                decode_replicas=job.pd[1],
                kv_link_name=ctx.kv_link,
                prefill_max_num_seqs=cand.max_num_seqs,
                decode_max_num_seqs=cand.max_num_seqs,
                seed=ctx.seed,
            )
    except InputError as exc:
        return Run(error=(type(exc).__name__, exc.field, exc.message))
    doc = res.to_dict(ctx.slos)
    for key in LEFT_OUT:
        doc.pop(key, None)
    values = {s.key: metric(res.result, s.key) for s in ctx.slos}
    clock = clock_ms(res.result)
    ok = all(s.met(values[s.key], clock) for s in ctx.slos)
    return Run(doc, values, ok)


# ---------------------------------------------------------------- the front
def nondominated(per_gpu: np.ndarray, per_user: np.ndarray) -> np.ndarray:
    """Bool ``(P,)``: no other point has at least both values with one strictly higher
    (ties all kept; a NaN point is on no front). Sorted by per-user throughput (descending),
    then per-GPU (descending): a point is dominated when an earlier point of a strictly
    higher per-user value reaches its per-GPU value, or one of equal per-user value has a
    strictly higher per-GPU value."""
    g = np.asarray(per_gpu, float)
    u = np.asarray(per_user, float)
    ok = np.isfinite(g) & np.isfinite(u)
    out = np.zeros(g.size, bool)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return out
    order = idx[np.lexsort((-g[idx], -u[idx]))]
    gs, us = g[order], u[order]
    keep = np.ones(order.size, bool)
    best = -np.inf  # highest per-GPU among points of strictly higher per-user value
    i = 0
    while i < order.size:
        j = i
        while j < order.size and us[j] == us[i]:
            j += 1
        top = gs[i]  # the group's highest per-GPU (sorted descending)
        for m in range(i, j):
            keep[m] = gs[m] > best and gs[m] == top
        best = max(best, top)
        i = j
    out[order[keep]] = True
    return out


@dataclass
class FrontPoint:
    """One simulated deployment (module docstring)."""

    gpu: str | None
    tp: int
    candidate: Candidate
    max_concurrency: int | None
    request_rate: float
    metrics: dict[str, Any]
    slo_values: dict[str, float]
    meets_slo: bool
    per_gpu: float
    per_user: float
    cost_per_mtok: float | None
    price_per_gpu_hour: float | None
    bench_command: str
    problem_file: str
    vllm_serve_flags: list[str]
    dominated: bool = False
    pd: tuple[int, int] | None = None
    fleet_export: str | None = None

    @property
    def speculative(self) -> bool:
        return self.candidate.config.speculative

    @property
    def disaggregated(self) -> bool:
        return self.pd is not None

    @property
    def deployment(self) -> str:
        """``aggregated`` or ``P:D``."""
        return "aggregated" if self.pd is None else f"{self.pd[0]}:{self.pd[1]}"

    @property
    def gpus(self) -> int:
        """GPUs the point runs on: ``TP``, or ``(P + D) · TP``."""
        return self.tp * (1 if self.pd is None else self.pd[0] + self.pd[1])

    def label(self) -> str:
        conc = "" if self.max_concurrency is None else f", concurrency {self.max_concurrency}"
        where = f"{self.gpu} TP{self.tp}" if self.gpu else f"TP{self.tp}"
        pd = "" if self.pd is None else f" P:D {self.deployment}"
        return f"{where}{pd}: {self.candidate.label()}{conc}"

    def document(self) -> dict:
        c = self.candidate.config
        return {
            "gpu": self.gpu,
            "tp": self.tp,
            "max_num_seqs": self.candidate.max_num_seqs,
            "max_concurrency": self.max_concurrency,
            "request_rate": _json_rate(self.request_rate),
            "drafters": c.drafters,
            "k": c.k_document(),
            "speculative": c.speculative,
            "deployment": self.deployment,
            "prefill_replicas": None if self.pd is None else self.pd[0],
            "decode_replicas": None if self.pd is None else self.pd[1],
            "output_tokens_per_s_per_gpu": _num(self.per_gpu),
            "output_tokens_per_s_per_user": _num(self.per_user),
            "cost_per_mtok": self.cost_per_mtok,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "dominated": self.dominated,
            "meets_slo": self.meets_slo,
            "slo_values": {k: _num(v) for k, v in self.slo_values.items()},
            "metrics": self.metrics,
            "bench_command": self.bench_command,
            "problem_file": self.problem_file,
            "vllm_serve_flags": list(self.vllm_serve_flags),
            "engine_export": shlex.join(self.vllm_serve_flags),
            "fleet_export": self.fleet_export,
        }


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _json_rate(rate: float) -> float | str:
    return "inf" if math.isinf(rate) else float(rate)


#: Columns of :meth:`FrontResult.csv`.
CSV_COLUMNS = (
    "gpu", "tp", "deployment", "max_num_seqs", "max_concurrency", "drafters", "k",
    "speculative",
    "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "cost_per_mtok",
    "dominated", "meets_slo", "output_throughput", "mean_tpot_ms", "mean_ttft_ms",
    "p99_ttft_ms", "p99_itl_ms", "bench_command", "engine_export",
)  # fmt: skip


@dataclass
class FrontResult:
    """``allocator front``'s answer: every point, in the order simulated (deployments, then
    candidates as capacity lists them, then concurrencies), the SLOs, the re-targeted
    problem data by file name, and notes."""

    problem: str
    points: list[FrontPoint]
    slos: tuple[SLO, ...]
    num_prompts: int
    seed: int
    problem_files: dict[str, dict]
    notes: list[str] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        """``(P,)`` arrays for the plot: ``per_gpu``, ``per_user`` (tokens/s), and bools
        ``speculative``, ``disaggregated``, ``dominated``, ``meets_slo``, ``front_on`` and
        ``front_off`` (the non-dominated points among the speculative ones, and among the
        others, aggregated and disaggregated together)."""
        g = np.array([p.per_gpu for p in self.points], float)
        u = np.array([p.per_user for p in self.points], float)
        spec = np.array([p.speculative for p in self.points], bool)
        on = np.zeros(g.size, bool)
        off = np.zeros(g.size, bool)
        on[spec] = nondominated(g[spec], u[spec])
        off[~spec] = nondominated(g[~spec], u[~spec])
        return {
            "per_gpu": g,
            "per_user": u,
            "speculative": spec,
            "disaggregated": np.array([p.disaggregated for p in self.points], bool),
            "dominated": np.array([p.dominated for p in self.points], bool),
            "meets_slo": np.array([p.meets_slo for p in self.points], bool),
            "front_on": on,
            "front_off": off,
        }

    @property
    def front(self) -> list[FrontPoint]:
        """The non-dominated points, by per-user throughput ascending."""
        pts = [p for p in self.points if not p.dominated]
        return sorted(pts, key=lambda p: (p.per_user, -p.per_gpu))

    def to_dict(self) -> dict:
        """``front --json``: ``points`` (every point's document), ``front`` (the indices of
        the non-dominated ones, by per-user throughput), ``slos``, ``num_prompts``,
        ``seed``, ``notes``."""
        index = {id(p): i for i, p in enumerate(self.points)}
        return {
            "problem": self.problem,
            "slos": {s.key: s.ceiling_ms for s in self.slos},
            "num_prompts": self.num_prompts,
            "seed": self.seed,
            "points": [p.document() for p in self.points],
            "front": [index[id(p)] for p in self.front],
            "notes": list(self.notes),
        }

    def csv(self) -> str:
        """Every point, one row each (:data:`CSV_COLUMNS`)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for p in self.points:
            d = p.document()
            m = p.metrics
            row = []
            for col in CSV_COLUMNS:
                if col == "drafters":
                    value: Any = "+".join(d["drafters"])
                elif col == "k":
                    k = d["k"]
                    value = k if isinstance(k, int) else " ".join(f"{a}-{b}:{c}" for a, b, c in k)
                elif col in d:
                    value = d[col]
                else:
                    value = m.get(col)
                row.append("" if value is None else value)
            w.writerow(row)
        return buf.getvalue()

    def unmet(self) -> str | None:
        """``None`` when some point meets every SLO (or none is asked); else the one line
        saying so: the point closest to meeting them all (the least of its largest relative
        excess over a ceiling) and that SLO's value against its ceiling."""
        if not self.slos or any(p.meets_slo for p in self.points):
            return None
        best: tuple[float, FrontPoint, SLO, float] | None = None
        for p in self.points:
            worst: tuple[float, SLO, float] | None = None
            for s in self.slos:
                v = p.slo_values.get(s.key, math.nan)
                gap = v / s.ceiling_ms - 1.0 if math.isfinite(v) else math.inf
                if worst is None or gap > worst[0]:
                    worst = (gap, s, v)
            assert worst is not None
            if best is None or worst[0] < best[0]:
                best = (worst[0], p, worst[1], worst[2])
        assert best is not None
        gap, p, s, v = best
        return (
            f"no point meets every SLO; closest: {s.key} {v:,.4g} ms against {s.ceiling_ms:g} "
            f"(+{gap:.1%}) at {p.label()}"
        )


# ---------------------------------------------------------------- exports and commands
def vllm_flags(problem: Problem, cand: Candidate, tp: int) -> list[str]:
    """The ``vllm serve`` flags a point needs beside its model: tensor parallelism,
    ``max_num_seqs``, ``max_num_batched_tokens`` and the ``--speculative-config`` of
    :mod:`allocator.engines.vllm` (a chain, or ``k`` by batch size)."""
    limits = scheduler_limits(problem)
    words = [
        "--tensor-parallel-size", str(int(tp)),
        "--max-num-seqs", str(cand.max_num_seqs),
        "--max-num-batched-tokens", str(limits.max_num_batched_tokens),
    ]  # fmt: skip
    config = spec_config(problem, cand)
    if config is None:
        return words
    return [*words, "--speculative-config", json_one_line(config)]


def spec_config(problem: Problem, cand: Candidate) -> dict | None:
    """The candidate's ``--speculative-config`` object (:mod:`allocator.engines.vllm`: a
    chain, or ``k`` by batch size); ``None`` with speculation off."""
    c = cand.config
    if not c.speculative:
        return None
    drafters = {d.name: d for d in problem.drafters}
    (name,) = c.drafters
    if c.k is not None:
        config, _ = speculative_config(drafters[name], c.k)
    else:
        k_of = c.k_by_batch(cand.max_num_seqs)
        rows = [
            {"batch": b, "drafters": [name] if k_of[b] else [], "k": int(k_of[b])}
            for b in range(1, cand.max_num_seqs + 1)
        ]
        config, _ = schedule_config(rows, drafters)
    return dict(config)


def fleet_text(problem: Problem, cand: Candidate, tp: int, pd: tuple[int, int]) -> str:
    """The disaggregated point's fleet export: :func:`allocator.engines.vllm_disagg`'s
    text, ``P`` prefill and ``D`` decode replicas of ``tp`` GPUs at the candidate's
    ``max_num_seqs`` and the scheduler's ``max_num_batched_tokens``, the decode pool's
    speculation; the model named as bench's ``model_id`` (the problem's name: a problem file
    names no served model)."""
    limits = scheduler_limits(problem)
    pools = [Pool(n, int(tp), cand.max_num_seqs, limits.max_num_batched_tokens) for n in pd]
    export = vllm_disagg(problem.name, pools[0], pools[1],
                         speculative_config=spec_config(problem, cand))  # fmt: skip
    return export.text()


def json_one_line(config: object) -> str:
    """vLLM's JSON on one line (:func:`allocator.engines.vllm.config_text` without the
    newline)."""
    return config_text(config).rstrip("\n")


def bench_words(
    problem_file: str,
    cand: Candidate,
    rate: float,
    max_concurrency: int | None,
    source: RequestSource,
    n: int,
    seed: int,
    pd: tuple[int, int] | None = None,
    kv_link: str | None = None,
) -> str:
    """The ``allocator bench`` command reproducing one point's metrics: the candidate, the
    rate (none for staged loads, whose stages set the arrivals and the number of requests),
    the requests as the request source was given them (a trace, drawn lengths, or fixed
    ones; its stages; the flags of what they share and of the scheduler,
    :attr:`RequestSource.flags`), the seed."""
    words = ["allocator", "bench", problem_file]
    c = cand.config
    if c.speculative:
        words += ["--drafters", ",".join(c.drafters)]
        words += ["--k", str(c.k)] if c.k is not None else ["--schedule"]
    words += ["--max-num-seqs", str(cand.max_num_seqs)]
    if source.stages is None:
        words += ["--request-rate", repr(float(rate))]
    if max_concurrency is not None:
        words += ["--max-concurrency", str(int(max_concurrency))]
    if pd is not None:
        words += ["--prefill-replicas", str(pd[0]), "--decode-replicas", str(pd[1])]
        if kv_link is not None:
            words += ["--kv-link", kv_link]
    if source.trace is not None:
        words += ["--trace", source.trace]
    else:
        if source.lengths:
            words += source.lengths
        else:
            words += [
                "--input-len", str(int(source.prompt_tokens[0])),
                "--output-len", str(int(source.output_tokens[0])),
            ]  # fmt: skip
        words += ["--burstiness", repr(float(source.burstiness))]
    if source.stages is not None:
        words += ["--stages", ",".join(f"{float(r)!r}:{float(t)!r}" for r, t in source.stages)]
    else:
        words += ["--num-prompts", str(n)]
    words += [*source.flags, "--seed", str(seed)]
    return shlex.join(words)


# ---------------------------------------------------------------- the search
def front(
    deployed: Sequence[Deployment],
    source: RequestSource,
    request_rate: float,
    slos: Sequence[SLO],
    *,
    max_concurrency: Sequence[int] | None = None,
    max_num_seqs: Sequence[int] | None = None,
    seed: int = 0,
    workers: Workers | None = None,
    problem_path: str = "PROBLEM",
    problems_dir: str | None = None,
    notes: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
    pd_ratios: Sequence[tuple[int, int]] = (),
    disagg_problems: Sequence[Problem] | None = None,
    kv_link: str | None = None,
) -> FrontResult:
    """Simulate every candidate of every deployment (module docstring) and mark the
    front. ``problem_path``: how bench commands name the file (its own deployment);
    ``problems_dir``: where re-targeted files are named (default: beside it).
    ``pd_ratios``: each candidate also disaggregated at each ``(P, D)``, on
    ``disagg_problems`` (one per deployment, as bench runs both pools: the scheduling
    asked, :func:`allocator.analysis.disagg_bench.disagg_scheduling`); not with
    ``max_concurrency``."""
    if not deployed:
        raise ParameterError("gpus", "no deployment to simulate")
    ratios = check_pd_ratios(pd_ratios)
    if ratios:
        if max_concurrency is not None:
            raise ParameterError(
                "max_concurrency",
                "is not modelled with disaggregation (one client's limit spans both pools)",
            )
        if disagg_problems is None or len(disagg_problems) != len(deployed):
            raise ParameterError("pd_ratios", "give the problem of each deployment's pools")
    slos = tuple(slos)
    concs: list[int | None] = [None]
    if max_concurrency is not None:
        levels = sorted({int(c) for c in max_concurrency})
        if not levels or levels[0] < 1:
            raise ParameterError("max_concurrency", "values must be integers >= 1")
        concs = list(levels)
    all_notes = list(notes)
    own = Workers(workers=1, progress=progress) if workers is None else workers
    try:
        return _run(deployed, source, float(request_rate), slos, concs, max_concurrency,
                    max_num_seqs, seed, own, problem_path, problems_dir, all_notes,
                    (ratios, disagg_problems, kv_link))  # fmt: skip
    finally:
        if workers is None:
            own.close()


def check_pd_ratios(pd_ratios: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(P, D)`` pairs, each count an integer ``>= 1``, duplicates dropped, order
    kept; a :class:`ParameterError` on ``pd_ratios`` otherwise."""
    out: list[tuple[int, int]] = []
    for pair in pd_ratios:
        try:
            p, d = pair
        except (TypeError, ValueError):
            raise ParameterError("pd_ratios", f"{pair!r}: expected a pair (P, D)") from None
        for v in (p, d):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ParameterError("pd_ratios", f"{pair!r}: replica counts are integers >= 1")
        if (int(p), int(d)) not in out:
            out.append((int(p), int(d)))
    return out


def candidates_of(problem: Problem, max_num_seqs: Sequence[int] | None) -> tuple[list, list]:
    """Capacity's candidates on one deployment (module docstring). With ``max_num_seqs``
    given, the schedules are planned up to the largest value asked, as ``allocator bench
    --schedule --max-num-seqs S`` plans them (not up to the file's own ``max_num_seqs``)."""
    if max_num_seqs is not None:
        asked = [int(s) for s in max_num_seqs]
        limits = scheduler_limits(problem)
        if asked and min(asked) >= 1:
            serving = problem.serving
            assert serving is not None
            low = replace(limits, max_num_seqs=max(asked))
            problem = problem.replace(serving=replace(serving, scheduler=low))
    return candidates(problem, engine="vllm", max_num_seqs=max_num_seqs)


def _candidates_job(shared: tuple, where: int) -> tuple[list, list] | tuple[str, str, str]:
    problems, max_num_seqs = shared
    try:
        return candidates_of(problems[where], max_num_seqs)
    except InputError as exc:
        return (type(exc).__name__, exc.field, exc.message)


def _raise(error: tuple[str, str, str]) -> None:
    kind, name, message = error
    raise ERRORS.get(kind, InputError)(name, message)


def _run(
    deployed, source, request_rate, slos, concs, max_concurrency, max_num_seqs, seed,
    pool: Workers, problem_path, problems_dir, all_notes, disagg: tuple,
) -> FrontResult:  # fmt: skip
    ratios, disagg_problems, kv_link = disagg
    problems = tuple(d.problem for d in deployed)
    pool.expect(len(deployed))
    found = pool.map(_candidates_job, range(len(deployed)), (problems, max_num_seqs))
    jobs: list[Job] = []
    per_deployment: list[list[str]] = []
    for i, got in enumerate(found):
        if isinstance(got[0], str):
            _raise(got)
        cands, cand_notes = got
        if max_concurrency is not None and max_num_seqs is None:
            by_config: dict[tuple, Candidate] = {}  # each configuration at its largest
            for c in cands:
                cfg = c.config  # a schedule's ranges depend on max_num_seqs: not in the key
                k = (tuple(np.flatnonzero(cfg.members)), cfg.k, cfg.is_schedule)
                if k not in by_config or c.max_num_seqs > by_config[k].max_num_seqs:
                    by_config[k] = c
            cands = list(by_config.values())
        per_deployment.append(list(cand_notes))
        jobs += [Job(i, c, conc) for c in cands for conc in concs]
        jobs += [Job(i, c, None, pd) for c in cands for pd in ratios]
    common = [n for n in per_deployment[0] if all(n in other for other in per_deployment)]
    all_notes += common
    for d, cand_notes in zip(deployed, per_deployment, strict=True):
        all_notes += [f"{d.label()}: {n}" for n in cand_notes if n not in common]
    if not jobs:
        raise ParameterError(
            "max_num_seqs",
            "no candidate to simulate: no configuration has a step time at the max_num_seqs "
            "asked (" + "; ".join(all_notes[-2:]) + ")",
        )
    if len(jobs) > MAX_POINTS:
        raise ParameterError(
            "gpus",
            f"{len(jobs):,} simulations asked, at most {MAX_POINTS:,}: fewer GPUs, TPs, "
            "max_num_seqs or concurrencies",
        )
    ctx = Context(problems, source, request_rate, slos, seed,
                  None if not ratios else tuple(disagg_problems), kv_link)  # fmt: skip
    pool.expect(len(jobs))

    # the longest runs first (the fewest sequences at once take the most steps), so that
    # no long run starts last while the other workers wait; results in the jobs' order
    def width(job: Job) -> int:
        return min(job.candidate.max_num_seqs, job.max_concurrency or MAX_POINTS)

    order = sorted(range(len(jobs)), key=lambda i: (width(jobs[i]), i))
    done = pool.map(run_point, [jobs[i] for i in order], ctx)
    runs: list[Run] = [Run()] * len(jobs)
    for i, run in zip(order, done, strict=True):
        runs[i] = run
    for run in runs:
        if run.error is not None:
            _raise(run.error)
    n = len(source.prompt_tokens)
    where = str(Path(problems_dir)) if problems_dir else str(Path(problem_path).parent)
    points = []
    for job, run in zip(jobs, runs, strict=True):
        d = deployed[job.where]
        m = run.metrics
        thr = float(m["output_throughput"])
        tpot = m.get("mean_tpot_ms")
        per_user = 1000.0 / float(tpot) if tpot else math.nan
        gpus = d.tp * (1 if job.pd is None else sum(job.pd))
        per_gpu = thr / gpus
        price = d.price_per_gpu_hour
        cost = price * gpus / (3600.0 * thr) * 1e6 if math.isfinite(price) and thr > 0 else None
        file = problem_path if d.own else str(Path(where) / str(d.file_name))
        points.append(
            FrontPoint(
                d.gpu,
                d.tp,
                job.candidate,
                job.max_concurrency,
                float(request_rate),
                m,
                run.values,
                run.meets_slo,
                per_gpu,
                per_user,
                cost,
                price if math.isfinite(price) else None,
                bench_words(
                    file,
                    job.candidate,
                    request_rate,
                    job.max_concurrency,
                    source,
                    n,
                    seed,
                    job.pd,
                    kv_link,
                ),
                file,
                vllm_flags(d.problem, job.candidate, d.tp),
                pd=job.pd,
                fleet_export=None
                if job.pd is None
                else fleet_text(d.problem, job.candidate, d.tp, job.pd),
            )  # fmt: skip
        )
    g = np.array([p.per_gpu for p in points])
    u = np.array([p.per_user for p in points])
    keep = nondominated(g, u)
    for p, k in zip(points, keep, strict=True):
        p.dominated = not bool(k)
    if np.isnan(u).any():
        all_notes.append(
            "points whose requests all have one output token have no TPOT: per-user "
            "throughput null, on no front"
        )
    files = {str(d.file_name): d.data for d in deployed if not d.own and d.data is not None}
    name = deployed[0].problem.name
    return FrontResult(name, points, slos, n, seed, files, all_notes)


__all__ = [
    "CSV_COLUMNS",
    "ERRORS",
    "LEFT_OUT",
    "MAX_POINTS",
    "Context",
    "FrontPoint",
    "FrontResult",
    "Job",
    "Run",
    "bench_words",
    "candidates_of",
    "check_pd_ratios",
    "fleet_text",
    "front",
    "json_one_line",
    "nondominated",
    "run_point",
    "spec_config",
    "vllm_flags",
]
