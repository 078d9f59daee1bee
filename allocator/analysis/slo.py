"""Capacity for a request rate under SLO percentiles: how many replicas of which
configuration serve ``R`` requests/s with every latency target met, at the lowest $/h.

**SLOs** (:func:`parse_slos`): a latency key of ``bench``'s document and a ceiling in ms,
``KEY=MS``: ``mean``, ``median`` or ``pN`` (any ``N`` in (0, 100)) of ``ttft``, ``tpot``,
``itl`` or ``e2el``, e.g. ``p99_ttft_ms=500``, ``p99.9_itl_ms=120``, ``median_e2el_ms=9000``.

**Candidates** (:func:`candidates`): every configuration the named engine serves (one
drafter, unless ``pooled``; :func:`allocator.engines.servable`) within the problem's budget
(as ``schedule`` applies it): speculation off, each drafter at each ``k`` of ``search.k``
with a step time, and each drafter's ``k`` by batch size (its schedule,
:func:`~allocator.analysis.replica.schedule_configuration`); each at every ``max_num_seqs`` of
a ladder, the powers of two below the largest it can run and that largest (the file's
``serving.scheduler.max_num_seqs``, cut to the decode batch sizes its step times reach), or
at the values given.

**A replica sustains a rate** ``r`` when a simulated run (:mod:`allocator.analysis.bench`,
the same requests and seed at every rate) meets every SLO and ``r`` is no more than the
replica's saturation throughput, the request throughput of the same requests sent all at
once: without it a target on TPOT or ITL alone would be met by a replica whose queue grows
without bound.

**Replicas split the requests evenly**: with ``n`` replicas each is simulated alone at
``R / n`` (generated arrivals at that rate; a trace slowed to it, so that a burst of the
trace reaches one replica for ``n`` times as long: pessimistic for bursts). A candidate
needs the fewest ``n`` whose share it sustains; the answer is the candidate of least cost
``n · gpu_cost_per_hour`` (ties: the simpler configuration, see
:meth:`Candidate.key`), beside the cheapest without speculation (the baseline). Its
``metrics`` are the run at ``R / n``: ``allocator bench`` with the same requests, seed,
configuration and ``max_num_seqs`` at that rate gives the same numbers (the notes print the
command). ``max_request_rate_per_replica`` is the highest rate one replica sustains, found
by bisection between ``R / n`` (sustained) and ``R / (n − 1)`` (not), to
:data:`RATE_TOL`.

**The search is exhaustive over the candidates** and simulates only contenders:

1. *Latency floors*: every request's TTFT is at least its prompt at the cheapest prefill
   rate (ms per token, over chunks up to ``max_num_batched_tokens``), its TPOT at least its
   fewest decode steps (``⌈(O − 1)/(k + 1)⌉``) at the fastest step over ``O − 1``, every
   ITL gap at least the fastest step; a statistic of these floors is a floor of the
   statistic. A candidate whose floor exceeds a ceiling meets it at no rate: left out.
2. *A throughput ceiling*: a replica cannot complete more than ``1 / (mean prompt · least
   prefill ms per token + mean (O − 1) / T*)`` requests/s, ``T*`` the most decode tokens/s
   of the existing model (:mod:`allocator.model.serving`: ``b · 1000 · E / step_ms`` at
   every decode batch size up to ``max_num_seqs``), so it needs at least ``⌈R / (that ·
   (1 + BOUND_MARGIN))⌉`` replicas (the margin covers a run's random acceptances beating
   their mean).
3. Candidates are taken in order of that bound, the first alone, then :data:`WAVE` at a
   time (what is pruned never depends on how many workers run them); a candidate whose
   bound exceeds the best found so far is left out unsimulated; one simulated searches
   its fewest replicas no more than the best so far: its saturation run bounds it from
   below (``⌈R / saturation⌉``), a run at a very low rate (:data:`LOW_LOAD` of saturation)
   tells whether it meets the SLOs at all, then doubling and bisection on ``n``, so that
   ``n`` is sustained and ``n − 1`` is not (simulated, or above saturation). This takes
   the metrics not to improve as the rate rises (the same requests and draws at every
   rate, only the arrival times scaled).

**Prompts per run** (:func:`default_num_prompts`): enough that at least
:data:`MIN_TAIL` requests lie beyond the highest percentile asked (2,000 for p99), at least
:data:`MIN_PROMPTS`: a percentile read from one or two values moves with the seed.

**A sweep of rates** (``sweep_rates``): for each candidate contending at some rate, its
highest sustained rate ``r*`` (saturation, then halving until sustained, then bisection to
:data:`SWEEP_TOL`; a candidate whose bracket can no longer beat a side's best at any swept
rate stops there); at each rate each side (with and without speculation) needs ``min ⌈R /
r*⌉`` replicas; where the cheaper side changes is listed.

Simulations are independent jobs run by :class:`~allocator.analysis.workers.Workers` (this
process, local processes or Ray): the same answer wherever they ran.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import InfeasibleError, InputError, ParameterError
from ..model.accepted import emitted_pmf
from .replica import (
    Configuration,
    ProblemStepTime,
    configuration,
    replica,
    run,
    scheduler_limits,
)
from .request_source import RequestSource
from .workers import Workers

if TYPE_CHECKING:
    from ..core.problem import Problem

_KEY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
#: Requests beyond the highest percentile asked, at least (the default --num-prompts).
MIN_TAIL = 20
#: Fewest requests per simulated run by default.
MIN_PROMPTS = 1000
#: Most requests per run chosen by default (a percentile needing more must be asked for
#: with ``num_prompts``).
MAX_DEFAULT_PROMPTS = 20_000
#: Relative width to which a highest sustained rate is bisected.
RATE_TOL = 0.005
#: The same in a sweep of rates, for each candidate contending at some rate.
SWEEP_TOL = 0.02
#: The share of saturation at which a candidate is asked whether it meets the SLOs at all.
LOW_LOAD = 1e-3
#: Slack on the throughput ceiling of screening (step 2 of the module docstring).
BOUND_MARGIN = 0.05
#: Candidates searched at a time (fixed, so that what was pruned never depends on workers).
WAVE = 8
#: Most replicas an answer may count.
MAX_FLEET = 1_000_000
#: Most rates one sweep prices.
MAX_SWEEP_RATES = 200
#: Relative tolerance when a latency is compared with its ceiling.
SLACK = 1e-12


# ---------------------------------------------------------------- SLOs
@dataclass(frozen=True)
class SLO:
    """One latency target: ``key`` (``p99_ttft_ms``), its ceiling in ms, the latency
    (``ttft``, ``tpot``, ``itl``, ``e2el``), the statistic (``mean``, ``median``, ``pN``)
    and its percentile (``None`` for the mean, 50 for the median)."""

    key: str
    ceiling_ms: float
    latency: str
    stat: str
    percentile: float | None

    def met(self, value: float) -> bool:
        return value <= self.ceiling_ms * (1.0 + SLACK)

    def text(self) -> str:
        return f"{self.key} <= {self.ceiling_ms:g}"


def parse_slo_key(key: str) -> tuple[str, str, float | None]:
    """``(latency, stat, percentile)`` of an SLO key; :class:`ParameterError` on ``slo``."""
    found = _KEY.match(key.strip())
    if not found:
        raise ParameterError(
            "slo",
            f"unknown SLO {key!r}: expected mean|median|pN _ ttft|tpot|itl|e2el _ms, e.g. "
            "p99_ttft_ms or p99.9_itl_ms",
        )
    stat, pct, latency = found.group(1), found.group(2), found.group(3)
    if pct is not None:
        p = float(pct)
        if not 0 < p < 100:
            raise ParameterError("slo", f"{key}: the percentile must lie in (0, 100), got {pct}")
        return latency, stat, p
    return latency, stat, 50.0 if stat == "median" else None


def parse_slos(items: Sequence[str] | Mapping[str, float]) -> tuple[SLO, ...]:
    """SLOs from ``KEY=MS`` strings (or a mapping of key to ms). Each key once; ceilings
    finite and positive. :class:`ParameterError` on ``slo`` otherwise."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        for item in items:
            if not isinstance(item, str):
                raise ParameterError("slo", f"expected KEY=MS, got {item!r}")
            key, sep, value = item.partition("=")
            if not sep:
                raise ParameterError("slo", f"expected KEY=MS (e.g. p99_ttft_ms=500), got {item!r}")
            pairs.append((key.strip(), value.strip()))
    if not pairs:
        raise ParameterError("slo", "give at least one SLO, KEY=MS (e.g. p99_ttft_ms=500)")
    out: list[SLO] = []
    seen: dict[tuple, str] = {}
    for key, value in pairs:
        latency, stat, pct = parse_slo_key(key)
        # one statistic once, however it is written (p99 and p99.0; median and p50)
        what = (latency, "mean") if pct is None else (latency, pct)
        try:
            ms = float(value)
        except (TypeError, ValueError):
            raise ParameterError("slo", f"{key}: {value!r} is not a number of ms") from None
        if not (math.isfinite(ms) and ms > 0):
            raise ParameterError(
                "slo", f"{key}: the ceiling must be a positive number of ms, got {value}"
            )
        if what in seen:
            same = "" if seen[what] == key else f" (as {seen[what]})"
            raise ParameterError("slo", f"{key} is given twice{same}")
        seen[what] = key
        out.append(SLO(key, ms, latency, stat, pct))
    return tuple(out)


def default_num_prompts(slos: Sequence[SLO]) -> tuple[int, str]:
    """Requests per run, and why: at least :data:`MIN_TAIL` beyond the highest percentile
    asked, at least :data:`MIN_PROMPTS`, at most :data:`MAX_DEFAULT_PROMPTS`."""
    tails = [100.0 - s.percentile for s in slos if s.percentile is not None and s.percentile > 50]
    need = MIN_PROMPTS
    top = None
    if tails:
        tail = min(tails)
        top = 100.0 - tail
        need = max(MIN_PROMPTS, math.ceil(MIN_TAIL * 100.0 / tail - 1e-9))
    n = min(need, MAX_DEFAULT_PROMPTS)
    if top is None:
        why = f"{n:,} requests per run (at least {MIN_PROMPTS:,}: no SLO reads a tail percentile)"
    else:
        why = (
            f"{n:,} requests per run: at least {MIN_TAIL} lie beyond the highest percentile "
            f"asked (p{top:g}), so that it is read from a tail of {MIN_TAIL} or more "
            "requests, not one or two, and moves little with the seed"
        )
        if n < need:
            why += (
                f" (capped at {MAX_DEFAULT_PROMPTS:,}; p{top:g} would want {need:,}: give "
                "num_prompts for a steadier tail)"
            )
    return n, why


# ---------------------------------------------------------------- candidates
@dataclass(frozen=True, eq=False)
class Candidate:
    """A configuration at a ``max_num_seqs``."""

    config: Configuration
    max_num_seqs: int

    def key(self) -> tuple:
        """Ties between equal costs: the simpler configuration
        (:meth:`~allocator.analysis.replica.Configuration.tie_key`: speculation off, fewer
        drafters, a fixed ``k`` before a schedule, smaller ``k``), then the smaller
        ``max_num_seqs``."""
        return (*self.config.tie_key(), self.max_num_seqs)

    def label(self) -> str:
        return f"{self.config.label()}, max_num_seqs {self.max_num_seqs}"


def ladder(top: int) -> list[int]:
    """``max_num_seqs`` tried up to ``top``: the powers of two below it, and ``top``."""
    out = []
    p = 1
    while p < top:
        out.append(p)
        p *= 2
    out.append(top)
    return out


def _reach(step: ProblemStepTime) -> int:
    """The largest ``max_num_seqs`` the configuration can run: every decode batch size up to
    it has a step time at the ``k`` it runs there."""
    reach = {k: step.measured_to(k) for k in step.ks}
    for b in range(1, step.max_num_seqs + 1):
        if b > reach[int(step.k_of[b])]:
            return b - 1
    return step.max_num_seqs


def candidates(
    problem: Problem,
    *,
    engine: str = "vllm",
    pooled: bool = False,
    max_num_seqs: Sequence[int] | None = None,
) -> tuple[list[Candidate], list[str]]:
    """Every candidate (module docstring) and notes on what was left out."""
    from ..engines import servable
    from .fleet import configurations

    limits = scheduler_limits(problem)
    top = limits.max_num_seqs
    if max_num_seqs is not None:
        asked = sorted({int(s) for s in max_num_seqs})
        if not asked or asked[0] < 1:
            raise ParameterError("max_num_seqs", "values must be integers >= 1")
        top = max(top, asked[-1])
    restricted, notes = servable(problem, engine, pooled)
    members, ks, over_budget = configurations(restricted)
    configs: list[Configuration] = [Configuration.off(problem.names)]
    for row, k in zip(members[1:], ks[1:], strict=True):
        configs.append(Configuration(problem.names, row.copy(), int(k), pooled=pooled))
    if over_budget:
        caps = ", ".join(f"{m} <= {c:g}" for m, c in problem.budget.items())
        notes.append(
            f"{over_budget:,} speculative configuration(s) left out by the budget ({caps})"
        )
    singles = [i for i in range(problem.n) if not restricted.excluded[i]]
    for i in singles:
        try:
            cfg, _ = configuration(
                restricted if not pooled else problem,
                [problem.names[i]],
                schedule=True,
                max_num_seqs=top,
                engine=engine,
                pooled=True,  # already restricted
            )
        except InputError:
            continue  # no speculative step time anywhere: no schedule to run
        if cfg.speculative and cfg.max_k > 0:
            configs.append(Configuration(cfg.names, cfg.members, None, cfg.ranges, pooled=pooled))
    out: list[Candidate] = []
    untimed: list[str] = []
    past: list[str] = []
    budget = limits.max_num_batched_tokens
    for cfg in configs:
        step = ProblemStepTime(problem, cfg, top, budget)
        reach = _reach(step)
        if reach == 0:
            untimed.append(cfg.label())
            continue
        if max_num_seqs is None:
            sizes = ladder(min(reach, limits.max_num_seqs))
        else:
            sizes = [s for s in asked if s <= reach]
            if len(sizes) < len(asked):
                past.append(f"{cfg.label()} (step times to batch {reach})")
        out += [Candidate(cfg.truncated(s), s) for s in sizes]
    if untimed:
        notes.append(f"left out, no step time at decode batch size 1: {'; '.join(untimed)}")
    if past:
        notes.append("max_num_seqs past the measured step times left out for: " + "; ".join(past))
    if max_num_seqs is None:
        notes.append(
            "max_num_seqs tried: the powers of two below the largest each configuration can "
            f"run and that largest (serving.scheduler.max_num_seqs {limits.max_num_seqs}, cut "
            "to the decode batch sizes its step times reach)"
        )
    return out, notes


# ---------------------------------------------------------------- bounds
@dataclass(frozen=True)
class Bounds:
    """A candidate's screening numbers: ``rate`` the throughput ceiling (requests/s), and a
    floor of each SLO's value (ms, by key)."""

    rate: float
    floors: dict[str, float]


def bounds(problem: Problem, cand: Candidate, source: RequestSource, slos: Sequence[SLO]) -> Bounds:
    """Step 1 and 2 of the module docstring, from the step times and the pmf alone."""
    limits = scheduler_limits(problem)
    budget = limits.max_num_batched_tokens
    step = ProblemStepTime(problem, cand.config, cand.max_num_seqs, budget)
    e = {k: float(emitted_pmf(problem, cand.config.members, k) @ np.arange(k + 2)) for k in step.ks}
    b = np.arange(1, cand.max_num_seqs + 1)
    k_of = step.k_of[1:]
    dec = np.array([step.dec[int(k)][i + 1] for i, k in enumerate(k_of)])
    tokens_s = b * 1000.0 * np.array([e[int(k)] for k in k_of]) / dec
    t_star = float(np.nanmax(tokens_s))
    x = np.arange(1, budget + 1)
    per_token = step.pre[1:] / x
    r_min = float(np.nanmin(per_token)) if np.isfinite(per_token).any() else 0.0
    p = source.prompt_tokens.astype(float)
    o = source.output_tokens.astype(float)
    ms_per_request = float(p.mean()) * r_min + float((o - 1).mean()) * 1000.0 / t_star
    rate = math.inf if ms_per_request <= 0 else 1000.0 / ms_per_request
    d_min = float(np.nanmin(dec))
    k_max = cand.config.max_k
    steps = np.ceil((o - 1) / (k_max + 1))
    ttft = p * r_min
    floors: dict[str, float] = {}
    for s in slos:
        if s.latency == "ttft":
            values = ttft
        elif s.latency == "e2el":
            values = ttft + steps * d_min
        elif s.latency == "tpot":
            many = o > 1
            values = steps[many] * d_min / (o[many] - 1) if many.any() else np.zeros(1)
        else:
            values = np.array([min(d_min, float(np.nanmin(step.pre[1:])))])
        if s.percentile is None:
            floors[s.key] = float(values.mean())
        else:
            floors[s.key] = float(np.percentile(values, s.percentile))
    return Bounds(rate, floors)


def replicas_at_least(request_rate: float, rate: float) -> int:
    """The fewest replicas a per-replica ceiling ``rate`` allows for ``request_rate``."""
    if math.isinf(rate):
        return 1
    return max(1, math.ceil(request_rate / rate * (1.0 - SLACK)))


# ---------------------------------------------------------------- jobs
@dataclass(frozen=True, eq=False)
class Job:
    """One candidate's search, run by a worker (:func:`run_job`). ``kind``: ``replicas``
    (the fewest replicas for ``request_rate``, at most ``cap``), ``rate`` (the highest
    sustained rate between ``lo`` and ``hi``) or ``curve`` (the highest sustained rate)."""

    kind: str
    problem: Any
    candidate: Candidate
    source: RequestSource
    slos: tuple[SLO, ...]
    seed: int
    request_rate: float = 0.0
    cap: int | None = None
    lo: float = 0.0
    hi: float = 0.0
    hi_fails: bool = False
    saturation: float = math.nan
    allowed: tuple[tuple[float, int], ...] | None = None


@dataclass
class Probe:
    """One simulated run of a candidate at ``rate``: the SLOs' values (ms, by key), whether
    all are met, and the run's metrics."""

    rate: float
    values: dict[str, float]
    ok: bool
    metrics: dict[str, float | int]


@dataclass
class Outcome:
    """What a job found: ``replicas`` (``None``: none within its cap, or the SLOs are met at
    no rate: ``reachable`` False), ``rate`` (kind ``rate``/``curve``), ``saturation`` (the
    request throughput with every request sent at once), the probes and the run count."""

    replicas: int | None = None
    rate: float | None = None
    saturation: float = math.nan
    reachable: bool = True
    low: Probe | None = None
    probes: dict[float, Probe] = field(default_factory=dict)
    runs: int = 0

    def at(self, rate: float) -> Probe:
        return self.probes[rate]


class _Searcher:
    """One candidate on one worker: runs cached by rate."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.rep = replica(job.problem, job.candidate.config, job.candidate.max_num_seqs)
        self.out = Outcome(saturation=job.saturation)

    def probe(self, rate: float) -> Probe:
        found = self.out.probes.get(rate)
        if found is not None:
            return found
        from ..sim import metric, summary

        result = run(self.job.problem, self.rep, self.job.source.at(rate), self.job.seed)
        values = {s.key: metric(result, s.key) for s in self.job.slos}
        ok = all(s.met(values[s.key]) for s in self.job.slos)
        p = Probe(rate, values, ok, summary(result))
        self.out.probes[rate] = p
        self.out.runs += 1
        return p

    def saturation(self) -> float:
        if math.isnan(self.out.saturation):
            self.out.saturation = float(self.probe(math.inf).metrics["request_throughput"])
        return self.out.saturation

    def sustains(self, rate: float) -> bool:
        """Every SLO met at ``rate`` (simulated first: a run that misses one needs no
        saturation run) and ``rate`` at most the saturation throughput."""
        known = math.isnan(self.out.saturation)
        if not known and rate > self.out.saturation * (1.0 + SLACK):
            return False
        if not self.probe(rate).ok:
            return False
        return rate <= self.saturation() * (1.0 + SLACK)

    def reachable(self) -> bool:
        low = self.probe(self.saturation() * LOW_LOAD)
        self.out.low = low
        self.out.reachable = low.ok
        return low.ok


def run_job(job: Job) -> Outcome:
    """Run one job (module docstring, step 3); a module-level function, for the workers."""
    s = _Searcher(job)
    if job.kind == "replicas":
        _fewest_replicas(s, job)
    elif job.kind == "rate":
        s.out.rate = _highest_rate(s, job.lo, job.hi, job.hi_fails)
    elif job.kind == "curve":
        s.out.rate = _curve(s, job)
    else:  # pragma: no cover - internal
        raise ValueError(job.kind)
    return s.out


def _fewest_replicas(s: _Searcher, job: Job) -> None:
    rate = job.request_rate
    cap = job.cap

    def ok(n: int) -> bool:
        return s.sustains(rate / n)

    if cap is not None:
        if not ok(cap):  # one run: most capped candidates end here
            return
        hi = cap
        lo_n = replicas_at_least(rate, s.saturation())  # fewer would run above saturation
    else:
        sat = s.saturation()
        lo_n = replicas_at_least(rate, sat)
        if not s.reachable():
            return
        top = replicas_at_least(rate, sat * LOW_LOAD)
        if top > MAX_FLEET:
            top = MAX_FLEET
        n, stride, last_bad = lo_n, 1, lo_n - 1
        while True:
            if n >= top:
                n = top
                if not ok(n):  # only past the low-load probe: no fleet this size
                    s.out.reachable = False
                    return
                hi = n
                break
            if ok(n):
                hi = n
                break
            last_bad = n
            n += stride
            stride *= 2
        lo_n = last_bad + 1
    bad = lo_n - 1  # known not to sustain (or 0)
    while hi - bad > 1:
        mid = (hi + bad) // 2
        if ok(mid):
            hi = mid
        else:
            bad = mid
    s.out.replicas = hi


def _curve(s: _Searcher, job: Job) -> float | None:
    """A candidate's highest sustained rate for a sweep (to :data:`SWEEP_TOL`), or ``None``:
    it meets the SLOs at no rate, or (``job.allowed``: the most replicas at each swept rate
    that could still make it a side's cheapest) it cannot beat the best already found."""

    def useless(top: float) -> bool:
        if job.allowed is None:
            return False
        return all(replicas_at_least(r, top) > n for r, n in job.allowed)

    sat = s.saturation()
    if useless(sat):
        return None
    if s.sustains(sat):
        return sat
    x = sat / 2.0
    while x >= sat * LOW_LOAD:  # halving until sustained: brackets within a factor 2
        if s.sustains(x):
            if useless(2.0 * x):
                return None
            return _highest_rate(s, x, 2.0 * x, True, SWEEP_TOL)
        x /= 2.0
    s.out.reachable = False
    return None


def _highest_rate(
    s: _Searcher, lo: float, hi: float, hi_fails: bool = False, tol: float = RATE_TOL
) -> float:
    """Bisection (geometric) between a sustained ``lo`` and ``hi`` to ``tol``; ``hi`` itself
    when sustained (not asked when ``hi_fails``: known not to be)."""
    if not hi_fails and s.sustains(hi):
        return hi
    while hi / lo - 1.0 > tol:
        mid = math.sqrt(lo * hi)
        if s.sustains(mid):
            lo = mid
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------- the answer
@dataclass
class RateFleet:
    """One side's fleet: the candidate, its replicas at the request rate, what it costs, the
    highest rate one replica sustains, and the metrics of one replica at its share."""

    candidate: Candidate
    replicas: int
    gpus_per_replica: int
    request_rate: float
    cost_per_hour: float
    cost_per_mtok: float
    max_request_rate_per_replica: float
    metrics: dict[str, float | int]

    @property
    def per_replica_request_rate(self) -> float:
        return self.request_rate / self.replicas

    def document(self) -> dict:
        from .bench import plain_metrics

        c = self.candidate
        return {
            "replicas": self.replicas,
            "gpus": self.replicas * self.gpus_per_replica,
            "drafters": c.config.drafters,
            "k": c.config.k_document(),
            "max_num_seqs": c.max_num_seqs,
            "per_replica_request_rate": self.per_replica_request_rate,
            "max_request_rate_per_replica": self.max_request_rate_per_replica,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_mtok": self.cost_per_mtok,
            "metrics": plain_metrics(self.metrics),
        }


@dataclass
class RateSweep:
    """$/h against request rate, each side's cheapest fleet (from each candidate's highest
    sustained rate)."""

    rates: np.ndarray
    with_speculation: np.ndarray
    without_speculation: np.ndarray
    fleets: list[tuple[dict | None, dict | None]]
    crossings: list[dict]

    def document(self) -> dict:
        return {
            "points": [
                {"request_rate": float(r), "with_speculation": a, "without_speculation": b}
                for r, (a, b) in zip(self.rates, self.fleets, strict=True)
            ],
            "crossings": self.crossings,
        }


@dataclass
class RateCapacityResult:
    """``allocator capacity --request-rate``'s answer (module docstring). ``best`` the
    cheapest fleet, ``baseline`` the cheapest without speculation (``None``: none meets the
    SLOs)."""

    problem: str
    request_rate: float
    slos: tuple[SLO, ...]
    num_prompts: int
    best: RateFleet
    baseline: RateFleet | None
    notes: list[str] = field(default_factory=list)
    sweep: RateSweep | None = None
    simulations: int = 0

    @property
    def saving(self) -> float | None:
        if self.baseline is None:
            return None
        return 1.0 - self.best.cost_per_hour / self.baseline.cost_per_hour

    def to_dict(self) -> dict:
        """``capacity --request-rate --json``: the best fleet's fields, ``baseline`` (the same
        fields without speculation), ``saving`` and ``notes`` (and ``sweep`` with a sweep)."""
        doc = self.best.document()
        doc["baseline"] = None if self.baseline is None else self.baseline.document()
        doc["saving"] = self.saving
        doc["notes"] = list(self.notes)
        if self.sweep is not None:
            doc["sweep"] = self.sweep.document()
        return doc


def bench_command(
    problem_path: str, cand: Candidate, rate: float, source: RequestSource, n: int, seed: int
) -> str:
    """The ``allocator bench`` command that reproduces one replica's metrics."""
    words = ["allocator", "bench", problem_path]
    c = cand.config
    if c.speculative:
        words += ["--drafters", ",".join(c.drafters)]
        words += ["--k", str(c.k)] if c.k is not None else ["--schedule"]
        if c.pooled and len(c.drafters) > 1:
            words.append("--pooled")
    words += ["--max-num-seqs", str(cand.max_num_seqs), "--request-rate", repr(float(rate))]
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


def _search(
    workers: Workers,
    jobs_for: Any,
    order: list[int],
    floor: dict[int, int],
    keys: dict[int, tuple],
    best: tuple[int, tuple, int] | None,
    outcomes: dict[int, Outcome],
) -> tuple[tuple[int, tuple, int] | None, int, int]:
    """Branch and bound over candidates ``order`` (sorted by their floors): returns the best
    ``(replicas, key, index)``, how many candidates were simulated and how many runs."""
    simulated = runs = 0
    pending = list(order)
    while pending:
        wave: list[int] = []
        # until something is found, one at a time: the first answer caps every later search
        size = WAVE if best is not None else 1
        while pending and len(wave) < size:
            i = pending.pop(0)
            if best is not None and (floor[i], keys[i]) > (best[0], best[1]):
                continue  # cannot beat the best: its floor is higher (or equal, tie lost)
            wave.append(i)
        if not wave:
            break
        jobs = []
        for i in wave:
            cap = None
            if best is not None:
                cap = best[0] if keys[i] < best[1] else best[0] - 1
            jobs.append(jobs_for(i, cap))
        got = [(i, j) for i, j in zip(wave, jobs, strict=True) if j.cap is None or j.cap >= 1]
        results = workers.map(run_job, [j for _, j in got])
        for (i, _), out in zip(got, results, strict=True):
            simulated += 1
            runs += out.runs
            outcomes[i] = out
            if out.replicas is not None:
                mine = (out.replicas, keys[i], i)
                if best is None or mine[:2] < best[:2]:
                    best = mine
    return best, simulated, runs


def size_for_rate(
    problem: Problem,
    request_rate: float,
    slos: Sequence[SLO],
    source: RequestSource,
    *,
    seed: int = 0,
    engine: str = "vllm",
    pooled: bool = False,
    max_num_seqs: Sequence[int] | None = None,
    sweep_rates: Sequence[float] | np.ndarray | None = None,
    workers: Workers | None = None,
    problem_path: str = "PROBLEM",
    notes: Sequence[str] = (),
) -> RateCapacityResult:
    """The cheapest fleet serving ``request_rate`` requests/s within ``slos`` (module
    docstring), beside the cheapest without speculation; with ``sweep_rates`` also $/h
    against the rate.

    Raises :class:`InfeasibleError` on ``slo`` when no candidate meets every SLO at any
    rate, naming the SLO and the lowest value reached."""
    from .fleet import price_of

    r = float(request_rate)
    if not (math.isfinite(r) and r > 0):
        raise ParameterError(
            "request_rate",
            f"the fleet's load must be a positive number of requests/s, got {request_rate}",
        )
    slos = tuple(slos)
    if not slos:
        raise ParameterError("slo", "give at least one SLO, KEY=MS (e.g. p99_ttft_ms=500)")
    price = price_of(problem)
    serving = problem.serving
    assert serving is not None
    gpus = int(serving.gpus_per_replica)
    cands, cand_notes = candidates(problem, engine=engine, pooled=pooled, max_num_seqs=max_num_seqs)
    own = Workers(workers=1) if workers is None else workers
    try:
        return _size(
            problem, r, slos, source, seed, cands, list(notes) + cand_notes, own, price, gpus,
            sweep_rates, problem_path,
        )  # fmt: skip
    finally:
        if workers is None:
            own.close()


def _size(
    problem: Problem,
    r: float,
    slos: tuple[SLO, ...],
    source: RequestSource,
    seed: int,
    cands: list[Candidate],
    notes: list[str],
    workers: Workers,
    price: float,
    gpus: int,
    sweep_rates: Sequence[float] | np.ndarray | None,
    path: str,
) -> RateCapacityResult:
    n_prompts = len(source)
    bnd = [bounds(problem, c, source, slos) for c in cands]
    keys = {i: c.key() for i, c in enumerate(cands)}
    hopeless = [i for i, b in enumerate(bnd) if any(not s.met(b.floors[s.key]) for s in slos)]
    live = [i for i in range(len(cands)) if i not in set(hopeless)]
    floor = {i: replicas_at_least(r, bnd[i].rate * (1 + BOUND_MARGIN)) for i in live}

    def jobs_for(i: int, cap: int | None) -> Job:
        return Job("replicas", problem, cands[i], source, slos, seed, request_rate=r, cap=cap)

    outcomes: dict[int, Outcome] = {}
    off = sorted(
        (i for i in live if not cands[i].config.speculative), key=lambda i: (floor[i], keys[i])
    )
    spec = sorted(
        (i for i in live if cands[i].config.speculative), key=lambda i: (floor[i], keys[i])
    )
    base, sim_a, runs_a = _search(workers, jobs_for, off, floor, keys, None, outcomes)
    best, sim_b, runs_b = _search(workers, jobs_for, spec, floor, keys, base, outcomes)
    runs = runs_a + runs_b
    if best is None:
        raise _unreachable(cands, bnd, outcomes, slos, r)
    if best[0] > MAX_FLEET:  # pragma: no cover - capped in the search
        raise InputError("request_rate", f"needs more than {MAX_FLEET:,} replicas")
    # each side's highest sustained rate per replica, by bisection
    sides = [best] + ([base] if base is not None and base[2] != best[2] else [])
    rate_jobs = []
    for n, _, i in sides:
        sat = outcomes[i].saturation
        # n - 1 replicas were found not to sustain their share (simulated, or above
        # saturation): the bisection's upper end is known to fail
        hi = min(r / (n - 1), sat) if n > 1 else sat
        fails = n > 1 and r / (n - 1) <= sat
        rate_jobs.append(
            Job("rate", problem, cands[i], source, slos, seed, lo=r / n, hi=max(hi, r / n),
                hi_fails=fails, saturation=sat)
        )  # fmt: skip
    rate_out = workers.map(run_job, rate_jobs)
    runs += sum(o.runs for o in rate_out)
    top = {side[2]: o.rate for side, o in zip(sides, rate_out, strict=True)}
    mean_out = source.mean_output

    def fleet(side) -> RateFleet:
        n, _, i = side
        probe = outcomes[i].at(r / n)
        cost = n * price
        return RateFleet(
            candidate=cands[i],
            replicas=n,
            gpus_per_replica=gpus,
            request_rate=r,
            cost_per_hour=cost,
            cost_per_mtok=cost / (3600.0 * r * mean_out) * 1e6,
            max_request_rate_per_replica=float(top[i]),
            metrics=probe.metrics,
        )

    best_fleet = fleet(best)
    base_fleet = None if base is None else fleet(base)
    out_notes = list(notes)
    out_notes += [
        default_num_prompts(slos)[1] if n_prompts == default_num_prompts(slos)[0]
        else f"{n_prompts:,} requests per run (as asked)",
        "replicas split the requests evenly: each is simulated alone at its share, "
        "request_rate / replicas (a trace slowed to that rate)",
        f"{len(cands):,} candidate(s): {len(hopeless):,} meet an SLO at no rate (latency "
        f"floors), {sim_a + sim_b:,} simulated, the rest left out by the throughput bound; "
        f"{runs:,} simulated runs",
        "a replica sustains a rate when it meets every SLO and the rate is at most its "
        "saturation throughput (the same requests sent at once)",
        f"max_request_rate_per_replica bisected to {RATE_TOL:.1%}",
        f"{best_fleet.replicas} replica(s) x {gpus} GPU(s); one replica fewer misses an SLO "
        "or runs above saturation",
        "metrics are one replica's at its share; reproduce: "
        + bench_command(
            path, best_fleet.candidate, best_fleet.per_replica_request_rate, source,
            n_prompts, seed,
        ),
    ]  # fmt: skip
    if base is None:
        out_notes.append("no configuration without speculation meets the SLOs at any rate")
    if best_fleet.candidate.config.pooled and len(best_fleet.candidate.config.drafters) > 1:
        from ..engines import POOLED_BOUND

        if POOLED_BOUND not in out_notes:
            out_notes.append(POOLED_BOUND)
    sweep = None
    if sweep_rates is not None:
        sweep, more = _sweep(problem, np.asarray(sweep_rates, float), slos, source, seed, cands,
                             live, bnd, keys, workers, price, gpus)  # fmt: skip
        runs += more
    return RateCapacityResult(
        problem=problem.name,
        request_rate=r,
        slos=slos,
        num_prompts=n_prompts,
        best=best_fleet,
        baseline=base_fleet,
        notes=out_notes,
        sweep=sweep,
        simulations=runs,
    )


def _unreachable(
    cands: list[Candidate],
    bnd: list[Bounds],
    outcomes: dict[int, Outcome],
    slos: tuple[SLO, ...],
    rate: float,
) -> InfeasibleError:
    """No candidate serves the rate: name an SLO none meets, and the lowest value reached
    (at a very low rate; a latency floor where nothing was simulated); or, when every SLO
    is met at low rates, the rate, which no fleet of at most :data:`MAX_FLEET` replicas
    serves."""
    best: dict[str, tuple[float, str]] = {}
    for i, c in enumerate(cands):
        out = outcomes.get(i)
        if out is not None and out.low is not None:
            values = out.low.values
        else:
            values = bnd[i].floors
        for s in slos:
            v = values.get(s.key)
            if v is None:
                continue
            if s.key not in best or v < best[s.key][0]:
                best[s.key] = (v, c.label())
    if not best:  # nothing could be run or bounded: every candidate was refused
        return InfeasibleError(
            "max_num_seqs",
            "no configuration can run at the max_num_seqs tried: their step times do not "
            "reach that many sequences (never extrapolated); try smaller values",
        )
    missed = [s for s in slos if s.key in best and not s.met(best[s.key][0])]
    if not missed:
        return InfeasibleError(
            "request_rate",
            f"no configuration serves {rate:g} requests/s within {MAX_FLEET:,} replicas, "
            "though the SLOs are met at low rates: the rate is past what this tool sizes",
        )
    s = missed[0]
    v, where = best[s.key]
    return InfeasibleError(
        "slo",
        f"no configuration meets {s.text()} at any request rate; the lowest reached is "
        f"{v:.6g} ms ({where})",
    )


def _sweep(
    problem: Problem,
    rates: np.ndarray,
    slos: tuple[SLO, ...],
    source: RequestSource,
    seed: int,
    cands: list[Candidate],
    live: list[int],
    bnd: list[Bounds],
    keys: dict[int, tuple],
    workers: Workers,
    price: float,
    gpus: int,
) -> tuple[RateSweep, int]:
    rates = np.sort(rates)
    if rates.size == 0 or rates.size > MAX_SWEEP_RATES:
        raise ParameterError("sweep_rate", f"1..{MAX_SWEEP_RATES} rates")
    if not (np.all(np.isfinite(rates)) and rates[0] > 0):
        raise ParameterError("sweep_rate", "rates must be positive numbers of requests/s")
    # each candidate's highest sustained rate, for the contenders at some rate
    order = sorted(live, key=lambda i: (-bnd[i].rate, keys[i]))
    best_rate: dict[bool, dict[int, tuple[int, tuple]]] = {True: {}, False: {}}
    star: dict[int, float | None] = {}
    runs = 0
    pending = list(order)
    while pending:
        wave: list[int] = []
        while pending and len(wave) < WAVE:
            i = pending.pop(0)
            side = cands[i].config.speculative
            useful = False
            for j, x in enumerate(rates):
                floor = replicas_at_least(float(x), bnd[i].rate * (1 + BOUND_MARGIN))
                have = best_rate[side].get(j)
                if have is None or (floor, keys[i]) < have:
                    useful = True
                    break
            if useful:
                wave.append(i)
        if not wave:
            break
        jobs = []
        for i in wave:
            side = cands[i].config.speculative
            allowed: tuple[tuple[float, int], ...] | None = None
            if len(best_rate[side]) == rates.size:  # a best at every rate: prune against it
                allowed = tuple(
                    (float(x), n if keys[i] < key else n - 1)
                    for x, (n, key) in zip(rates, (best_rate[side][j] for j in range(rates.size)),
                                           strict=True)
                )  # fmt: skip
            jobs.append(Job("curve", problem, cands[i], source, slos, seed, allowed=allowed))
        outs = workers.map(run_job, jobs)
        for i, out in zip(wave, outs, strict=True):
            runs += out.runs
            star[i] = out.rate
            if out.rate is None:
                continue
            side = cands[i].config.speculative
            for j, x in enumerate(rates):
                mine = (replicas_at_least(float(x), out.rate), keys[i])
                have = best_rate[side].get(j)
                if have is None or mine < have:
                    best_rate[side][j] = mine
    fleets: list[tuple[dict | None, dict | None]] = []
    cost = {True: np.full(rates.size, np.nan), False: np.full(rates.size, np.nan)}
    for j, x in enumerate(rates):
        pair: list[dict | None] = []
        for side in (True, False):
            choice = None
            for i, s in star.items():
                if s is None or cands[i].config.speculative != side:
                    continue
                pick = (replicas_at_least(float(x), s), keys[i], i)
                if choice is None or pick < choice:
                    choice = pick
            if choice is None:
                pair.append(None)
                continue
            n, _, i = choice
            cost[side][j] = n * price
            c = cands[i]
            pair.append(
                {
                    "replicas": n,
                    "gpus": n * gpus,
                    "drafters": c.config.drafters,
                    "k": c.config.k_document(),
                    "max_num_seqs": c.max_num_seqs,
                    "max_request_rate_per_replica": star[i],
                    "cost_per_hour": n * price,
                }
            )
        fleets.append((pair[0], pair[1]))
    cross = rate_crossings(rates, cost[True], cost[False])
    return RateSweep(rates, cost[True], cost[False], fleets, cross), runs


def rate_crossings(rates: np.ndarray, with_spec: np.ndarray, without: np.ndarray) -> list[dict]:
    """Where the cheaper side changes along a rate sweep: ``{"from_request_rate",
    "to_request_rate", "cheaper"}`` with ``cheaper`` one of ``speculation``, ``no
    speculation``, ``equal`` from the second rate on (rates where a side has no fleet are
    skipped)."""
    ok = np.isfinite(with_spec) & np.isfinite(without)
    idx = np.flatnonzero(ok)
    sign = np.sign(without[idx] - with_spec[idx])
    label = {1.0: "speculation", -1.0: "no speculation", 0.0: "equal"}
    return [
        {
            "from_request_rate": float(rates[idx[a]]),
            "to_request_rate": float(rates[idx[a + 1]]),
            "cheaper": label[float(sign[a + 1])],
        }
        for a in np.flatnonzero(np.diff(sign) != 0)
    ]


__all__ = [
    "BOUND_MARGIN",
    "LOW_LOAD",
    "MAX_DEFAULT_PROMPTS",
    "MAX_FLEET",
    "MAX_SWEEP_RATES",
    "MIN_PROMPTS",
    "MIN_TAIL",
    "RATE_TOL",
    "SLACK",
    "SLO",
    "SWEEP_TOL",
    "WAVE",
    "Bounds",
    "Candidate",
    "Job",
    "Outcome",
    "Probe",
    "RateCapacityResult",
    "RateFleet",
    "RateSweep",
    "bench_command",
    "bounds",
    "candidates",
    "default_num_prompts",
    "ladder",
    "parse_slo_key",
    "parse_slos",
    "rate_crossings",
    "replicas_at_least",
    "run_job",
    "size_for_rate",
]
