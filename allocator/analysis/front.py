"""The serving Pareto front (docs/design.md §8.15): output tokens/s per GPU against output
tokens/s per user over simulated deployments, speculation inside the simulation.

**A deployment** (:class:`Deployment`) is one GPU of the bundled table
(:data:`allocator.core.hardware.GPUS`) at one tensor-parallel degree: the problem file
re-targeted (:func:`retarget`), its step times then the roofline's on that hardware
(:mod:`allocator.model.steptime.roofline`, ``serving.hardware`` and ``serving.model``). The
file's own hardware is the file as written; another GPU or TP changes, in the file's data,

* ``serving.hardware`` to ``{gpu, count: TP}`` (the file's ``interconnect`` kept on its own
  GPU, else the new GPU's default link) and ``serving.gpus_per_replica`` to TP;
* ``serving.scheduler.kv_cache_tokens`` and ``serving.memory`` are dropped: both describe
  the file's replica, and without them the KV cache follows the new replica's memory
  (:func:`allocator.analysis.replica.kv_cache_tokens`: its memory at vLLM's
  ``gpu_memory_utilization`` less the weights, over the KV bytes per token, from
  :func:`allocator.model.memory_fit.spec_room`);
* ``serving.gpu_cost_per_hour`` to the GPU's price per GPU-hour times TP (``gpu_cost``, or
  the file's price over its ``gpus_per_replica`` on the file's own GPU), dropped when the
  GPU has no price.

Measured step times (``serving.step_ms``, ``serving.verify_ms``, ``serving.prefill_ms``)
describe the file's hardware alone: a file holding one is not re-targeted (refused naming
``gpus`` or ``tp``). What else the file measured on its hardware carries over unchanged,
and a note says so: a drafter's ``draft_ms`` and ``serving.roofline``'s fitted factors and
fixed times.

**Refused** (:class:`~allocator.exceptions.ParameterError`, one line): a GPU the table does
not know (the known ones listed); a TP outside ``1..``:data:`MAX_TP` (one node: the
8-GPU platforms the table's default links are those of) or one that does not divide the
verifier's attention heads (vLLM 0.33.0, ``vllm/config/model.py``,
``verify_with_parallel_config``: "Total number of attention heads ... must be divisible by
tensor parallel size"); every deployment asked unable to hold the model and one request
(weights over the replica's memory at vLLM's utilisation, or a KV cache smaller than the
longest request), one that cannot being left out with a note when others can; no
candidate; more than :data:`MAX_POINTS` simulations.

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

import copy
import csv
import io
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.hardware import gpu as table_gpu
from ..core.hardware import known_gpus
from ..engines.vllm import config_text, schedule_config, speculative_config
from ..exceptions import InfeasibleError, InputError, NotModelledError, ParameterError
from ..io.build import problem_from_spec
from ..io.spec import parse_problem
from ..model.memory_fit import has_spec_memory, spec_room
from ..sim import metric
from .bench import bench
from .capacity.rate_search import Candidate, candidates
from .capacity.slo import SLO, clock_ms
from .capacity.workers import Workers
from .replica import Configuration, kv_cache_tokens, scheduler_limits

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .request_source import RequestSource

#: Largest tensor-parallel degree: one node, the 8-GPU platforms of the table's links.
MAX_TP = 8
#: Most simulations one front runs.
MAX_POINTS = 20_000
#: Measured step-time fields that describe the file's own hardware only.
MEASURED_TIMES = ("step_ms", "verify_ms", "prefill_ms")
#: Keys of ``bench --json`` a point's metrics leave out: the run's date, its per-request
#: lists and its notes (the front's own notes say what they say).
LEFT_OUT = ("date", "latencies", "queue_times", "notes")


# ---------------------------------------------------------------- deployments
@dataclass(frozen=True, eq=False)
class Deployment:
    """One GPU at one tensor-parallel degree: ``gpu`` (a table key, ``None``: the file's
    own replica, which names none), ``tp``, the ``problem`` built for it, ``own`` (the file
    as written), ``price_per_gpu_hour`` ($/h, NaN: none), ``data`` (the re-targeted problem
    data, ``None`` when ``own``) and its ``file_name`` (``None`` when ``own``)."""

    gpu: str | None
    tp: int
    problem: Problem
    own: bool
    price_per_gpu_hour: float
    data: dict | None = None
    file_name: str | None = None

    def label(self) -> str:
        return f"{self.gpu or 'own replica'} TP{self.tp}"


def gpu_name(name: str, parameter: str) -> str:
    """The table's key of GPU ``name``; a :class:`ParameterError` naming ``parameter`` and
    listing the known GPUs otherwise."""
    try:
        return table_gpu(name, parameter).name
    except InputError as exc:
        raise ParameterError(parameter, exc.message) from None


def own_hardware(problem: Problem) -> tuple[str | None, int]:
    """The file's own GPU (``None`` without ``serving.hardware``) and TP (its
    ``gpus_per_replica`` without one)."""
    serving = problem.serving
    if serving is None:
        return None, 1
    if serving.hardware is not None:
        return serving.hardware.gpu.name, int(serving.hardware.count)
    return None, int(serving.gpus_per_replica)


def gpu_prices(
    problem: Problem, gpus: Sequence[str | None], gpu_cost: Mapping[str, float] | None
) -> tuple[dict[str | None, float], list[str]]:
    """$/GPU-hour of each GPU: ``gpu_cost``'s, else (the file's own GPU) the file's
    ``serving.gpu_cost_per_hour`` over its ``gpus_per_replica``; NaN without either, and a
    note saying where each price came from."""
    own, _ = own_hardware(problem)
    serving = problem.serving
    assert serving is not None
    given: dict[str, float] = {}
    for name, value in (gpu_cost or {}).items():
        key = gpu_name(name, "gpu_cost")
        v = float(value)
        if not (math.isfinite(v) and v > 0):
            raise ParameterError("gpu_cost", f"{name}: a price must be a positive $/GPU-hour")
        given[key] = v
    out: dict[str | None, float] = {}
    said: list[str] = []
    for g in gpus:
        if g is not None and g in given:
            out[g] = given[g]
            said.append(f"{g} ${given[g]:g}/GPU-hour (gpu_cost)")
        elif g == own and math.isfinite(float(serving.gpu_cost_per_hour)):
            per = float(serving.gpu_cost_per_hour) / int(serving.gpus_per_replica)
            out[g] = per
            said.append(
                f"{g or 'the replica'} ${per:g}/GPU-hour (serving.gpu_cost_per_hour "
                f"{float(serving.gpu_cost_per_hour):g} over {serving.gpus_per_replica} GPU(s))"
            )
        else:
            out[g] = math.nan
    notes = ["price per GPU-hour: " + "; ".join(said)] if said else []
    missing = [str(g) for g in gpus if math.isnan(out[g])]
    if missing:
        notes.append(
            f"no price for {', '.join(missing)}: cost_per_mtok is null there (give gpu_cost, "
            "--gpu-cost GPU=$/h)"
        )
    for key in given:
        if key not in out:
            notes.append(f"gpu_cost names {key}, which no deployment asked for runs on")
    return out, notes


def retarget(data: dict, gpu: str, tp: int, price_per_gpu_hour: float) -> dict:
    """The problem ``data`` (a problem file's dict) on ``tp`` GPUs ``gpu`` (module
    docstring); ``data`` is left unchanged."""
    out = copy.deepcopy(data)
    serving = out["serving"]
    old = serving.get("hardware") or {}
    hardware: dict[str, Any] = {"gpu": gpu, "count": int(tp)}
    if old.get("interconnect") is not None and str(old.get("gpu", "")).lower() == gpu:
        hardware["interconnect"] = old["interconnect"]
    serving["hardware"] = hardware
    serving["gpus_per_replica"] = int(tp)
    if isinstance(serving.get("scheduler"), dict):
        serving["scheduler"].pop("kv_cache_tokens", None)
    serving.pop("memory", None)
    if math.isfinite(price_per_gpu_hour):
        serving["gpu_cost_per_hour"] = float(price_per_gpu_hour) * int(tp)
    else:
        serving.pop("gpu_cost_per_hour", None)
    return out


def _check_tp(tp: int) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int | np.integer) or not 1 <= tp <= MAX_TP:
        raise ParameterError(
            "tp",
            f"{tp!r}: a tensor-parallel degree is an integer from 1 to {MAX_TP} (one node; "
            "the bundled GPUs' platforms hold 8)",
        )
    return int(tp)


def _check_heads(problem: Problem, tp: int) -> None:
    """``tp`` must divide the verifier's (and each drafter architecture's) heads."""
    serving = problem.serving
    assert serving is not None
    for model in (serving.model, *serving.drafter_models):
        if model is None:
            continue
        try:
            model.tp_kv_factor(tp, "tp")
        except InputError as exc:
            raise ParameterError("tp", exc.message) from None


def _holds(problem: Problem, source: RequestSource) -> str | None:
    """Why the replica cannot hold the model and the longest request (``None``: it can)."""
    serving = problem.serving
    assert serving is not None
    if has_spec_memory(problem):
        room, _ = spec_room(serving, np.zeros((1, problem.n), bool))
        if float(room[0]) <= 0:
            assert serving.hardware is not None and serving.model is not None
            return (
                f"{serving.hardware.name}: {serving.model.weight_bytes / 1e9:,.1f} GB of weights "
                f"against {serving.hardware.memory_bytes / 1e9:,.0f} GB"
            )
    tokens = kv_cache_tokens(problem, Configuration.off(problem.names))
    need = int((source.prompt_tokens + source.output_tokens).max())
    if tokens < need:
        return f"a KV cache of {tokens:,} tokens, less than the longest request ({need:,})"
    return None


def deployments(
    problem: Problem,
    data: dict | None,
    base_dir: str | Path | None,
    source: RequestSource,
    *,
    gpus: Sequence[str] | None = None,
    tp: Sequence[int] | None = None,
    gpu_cost: Mapping[str, float] | None = None,
    stem: str = "problem",
) -> tuple[list[Deployment], list[str]]:
    """Every deployment asked (module docstring), and notes. ``problem`` is the file as
    built, ``data`` its dict (``None``: a built problem, which cannot be re-targeted),
    ``base_dir`` where its relative paths are read from, ``stem`` the name the re-targeted
    files are given (``STEM.GPU-tpN.json``)."""
    own_gpu, own_tp = own_hardware(problem)
    names: list[str | None]
    if gpus is None:
        names = [own_gpu]
    else:
        names = []
        for g in gpus:
            key = gpu_name(str(g), "gpus") if g is not None else None
            if key not in names:
                names.append(key)
        if not names:
            raise ParameterError("gpus", f"give at least one GPU (known: {', '.join(known_gpus())})")
    degrees = [own_tp] if tp is None else sorted({_check_tp(t) for t in tp})
    if not degrees:
        raise ParameterError("tp", "give at least one tensor-parallel degree")
    prices, notes = gpu_prices(problem, names, gpu_cost)
    serving = problem.serving
    assert serving is not None
    out: list[Deployment] = []
    unheld: list[str] = []
    retargeted = False
    for g in names:
        for t in degrees:
            if g == own_gpu and t == own_tp:
                _check_heads(problem, t)
                out.append(Deployment(g, t, problem, True, prices[g]))
                continue
            flag = "gpus" if g != own_gpu else "tp"
            if g is None or not serving.has_roofline:
                raise ParameterError(
                    flag,
                    "the problem's step times are not the roofline's (no serving.hardware and "
                    "serving.model): it describes its own replica only; leave out --gpus and "
                    "--tp",
                )
            if data is None:
                raise ParameterError(
                    flag,
                    "a built Problem cannot be re-targeted: give the problem file or its data",
                )
            measured = [f for f in MEASURED_TIMES if (data.get("serving") or {}).get(f)]
            if measured:
                raise ParameterError(
                    flag,
                    f"serving.{measured[0]} was measured on the file's own replica: step times "
                    "cannot follow another GPU or TP (the roofline's, serving.hardware and "
                    "serving.model, can)",
                )
            retargeted = True
            moved = retarget(data, g, t, prices[g])
            built = problem_from_spec(parse_problem(moved), base_dir, check_search=False)
            _check_heads(built, t)
            why = _holds(built, source)
            if why is not None:
                unheld.append(f"{g} TP{t} ({why})")
                continue
            out.append(Deployment(g, t, built, False, prices[g], moved, f"{stem}.{g}-tp{t}.json"))
    if unheld and not out:
        raise ParameterError(
            "tp", "no deployment asked holds the model and one request: " + "; ".join(unheld)
        )
    if unheld:
        notes.append("left out, the replica cannot hold the model and one request: " + "; ".join(unheld))
    if retargeted:
        notes += _carried_notes(problem, data)
    return out, notes


def _carried_notes(problem: Problem, data: dict | None) -> list[str]:
    """What a re-targeted file keeps from its own hardware (module docstring)."""
    notes = [
        "on another GPU or TP than the file's: step times from the roofline on that replica, "
        "its KV cache from its memory (serving.scheduler.kv_cache_tokens and serving.memory "
        "dropped: they describe the file's replica)"
    ]
    serving = (data or {}).get("serving") or {}
    kept = []
    if any(d.get("draft_ms") for d in (data or {}).get("drafters") or []):
        kept.append("the drafters' draft_ms")
    roof = serving.get("roofline") or {}
    if any(k in roof for k in ("mem_eff", "compute_eff", "comm_eff", "fixed_ms", "seq_ms",
                                "overhead_ms", "drafters")):  # fmt: skip
        kept.append("serving.roofline's factors and fixed times")
    if kept:
        notes.append(
            f"{' and '.join(kept)} carry over unchanged from the file's own hardware "
            f"({own_hardware(problem)[0]} TP{own_hardware(problem)[1]}): measured or fitted "
            "there, not on the others"
        )
    return notes


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


@dataclass(frozen=True, eq=False)
class Job:
    """One point: deployment ``where``, candidate, client concurrency (``None``: none)."""

    where: int
    candidate: Candidate
    max_concurrency: int | None


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
        res = bench(
            problem,
            ctx.source,
            cand.config,
            ctx.request_rate,
            max_num_seqs=cand.max_num_seqs,
            max_concurrency=job.max_concurrency,
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

    @property
    def speculative(self) -> bool:
        return self.candidate.config.speculative

    def label(self) -> str:
        conc = "" if self.max_concurrency is None else f", concurrency {self.max_concurrency}"
        where = f"{self.gpu} TP{self.tp}" if self.gpu else f"TP{self.tp}"
        return f"{where}: {self.candidate.label()}{conc}"

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
        }


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _json_rate(rate: float) -> float | str:
    return "inf" if math.isinf(rate) else float(rate)


#: Columns of :meth:`FrontResult.csv`.
CSV_COLUMNS = (
    "gpu", "tp", "max_num_seqs", "max_concurrency", "drafters", "k", "speculative",
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
        ``speculative``, ``dominated``, ``meets_slo``, ``front_on`` and ``front_off`` (the
        non-dominated points among the speculative ones, and among the others)."""
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
    c = cand.config
    if not c.speculative:
        return words
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
    return [*words, "--speculative-config", json_one_line(config)]


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
) -> str:
    """The ``allocator bench`` command reproducing one point's metrics."""
    words = ["allocator", "bench", problem_file]
    c = cand.config
    if c.speculative:
        words += ["--drafters", ",".join(c.drafters)]
        words += ["--k", str(c.k)] if c.k is not None else ["--schedule"]
    words += ["--max-num-seqs", str(cand.max_num_seqs), "--request-rate", repr(float(rate))]
    if max_concurrency is not None:
        words += ["--max-concurrency", str(int(max_concurrency))]
    if source.trace is not None:
        words += ["--trace", source.trace]
    else:
        words += [
            "--input-len", str(int(source.prompt_tokens[0])),
            "--output-len", str(int(source.output_tokens[0])),
            "--burstiness", repr(float(source.burstiness)),
        ]  # fmt: skip
    words += ["--num-prompts", str(n), "--seed", str(seed)]
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
) -> FrontResult:
    """Simulate every candidate of every deployment (module docstring) and mark the
    front. ``problem_path``: how bench commands name the file (its own deployment);
    ``problems_dir``: where re-targeted files are named (default: beside it)."""
    if not deployed:
        raise ParameterError("gpus", "no deployment to simulate")
    slos = tuple(slos)
    concs: list[int | None] = [None]
    if max_concurrency is not None:
        concs = sorted({int(c) for c in max_concurrency})
        if not concs or concs[0] < 1:
            raise ParameterError("max_concurrency", "values must be integers >= 1")
    all_notes = list(notes)
    own = Workers(workers=1, progress=progress) if workers is None else workers
    try:
        return _run(deployed, source, float(request_rate), slos, concs, max_concurrency,
                    max_num_seqs, seed, own, problem_path, problems_dir, all_notes)  # fmt: skip
    finally:
        if workers is None:
            own.close()


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
    pool: Workers, problem_path, problems_dir, all_notes,
) -> FrontResult:  # fmt: skip
    problems = tuple(d.problem for d in deployed)
    pool.expect(len(deployed))
    found = pool.map(_candidates_job, range(len(deployed)), (problems, max_num_seqs))
    jobs: list[Job] = []
    per_deployment: list[list[str]] = []
    for i, (d, got) in enumerate(zip(deployed, found, strict=True)):
        if isinstance(got[0], str):
            _raise(got)  # type: ignore[arg-type]
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
    ctx = Context(problems, source, request_rate, slos, seed)
    pool.expect(len(jobs))
    runs = pool.map(run_point, jobs, ctx)
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
        per_gpu = thr / d.tp
        price = d.price_per_gpu_hour
        cost = price * d.tp / (3600.0 * thr) * 1e6 if math.isfinite(price) and thr > 0 else None
        file = problem_path if d.own else str(Path(where) / str(d.file_name))
        points.append(
            FrontPoint(
                d.gpu, d.tp, job.candidate, job.max_concurrency, float(request_rate), m,
                run.values, run.meets_slo, per_gpu, per_user, cost,
                price if math.isfinite(price) else None,
                bench_words(file, job.candidate, request_rate, job.max_concurrency, source, n,
                            seed),
                file, vllm_flags(d.problem, job.candidate, d.tp),
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
