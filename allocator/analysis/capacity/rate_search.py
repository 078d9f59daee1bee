"""The candidates of capacity at a request rate, their bounds, and the search one
candidate runs (a job: its fewest replicas, or its highest sustained rate), for
:mod:`allocator.analysis.capacity.by_rate`.

**Candidates** (:func:`candidates`): every configuration the named engine serves (one
drafter, unless ``pooled``; :func:`allocator.engines.servable`) within the problem's budget
(as ``schedule`` applies it): speculation off, each drafter at each ``k`` of ``search.k``
with a step time, and each drafter's ``k`` by batch size (its schedule,
:func:`~allocator.analysis.replica.schedule_configuration`); each at every ``max_num_seqs`` of
a ladder, the powers of two below the largest it can run and that largest (the file's
``serving.scheduler.max_num_seqs``, cut to the decode batch sizes its step times reach), or
at the values given.

**A replica sustains a rate** ``r`` when a simulated run (:mod:`allocator.analysis.replica`,
the same requests and seed at every rate) meets every SLO and ``r`` is no more than the
replica's saturation throughput, the request throughput of the same requests sent all at
once: without it a target on TPOT or ITL alone would be met by a replica whose queue grows
without bound.

**The search is exhaustive over the candidates** and simulates only contenders:

1. *Latency floors*: every request's TTFT is at least its prompt at the cheapest prefill
   rate (ms per token, over chunks up to ``max_num_batched_tokens``), its TPOT at least its
   fewest decode steps (``⌈(O − 1)/(k + 1)⌉``) at the fastest step over ``O − 1``, every
   ITL gap at least the fastest step; a statistic of these floors is a floor of the
   statistic. A candidate whose floor exceeds a ceiling meets it at no rate: left out.
2. *A throughput ceiling*: a replica cannot complete more than ``1 / (mean prompt · least
   prefill ms per token + mean (O − 1) / T*)`` requests/s, ``T*`` the most decode tokens/s
   of the existing model (:mod:`allocator.model.under_load`: ``b · 1000 · E / step_ms`` at
   every decode batch size up to ``max_num_seqs``), so it needs at least ``⌈R / (that ·
   (1 + BOUND_MARGIN))⌉`` replicas (the margin covers a run's random acceptances beating
   their mean).
3. Candidates are taken in order of that bound, the first alone, then :data:`~.by_rate.WAVE` at a
   time (what is pruned never depends on how many workers run them); a candidate whose
   bound exceeds the best found so far is left out unsimulated; one simulated searches
   its fewest replicas no more than the best so far: its saturation run bounds it from
   below (``⌈R / saturation⌉``), a run at a very low rate (:data:`LOW_LOAD` of saturation)
   tells whether it meets the SLOs at all, then doubling and bisection on ``n``, so that
   ``n`` is sustained and ``n − 1`` is not (simulated, or above saturation). This takes
   the metrics not to improve as the rate rises (the same requests and draws at every
   rate, only the arrival times scaled).

**Behind a router** (``Context.router`` set): ``n`` replicas sustain the rate ``R`` when a
fleet of ``n`` behind the router (:func:`~allocator.sim.fleet.simulate_fleet`, the same
requests at ``R``, the same seed) meets every SLO on the fleet's metrics and ``R`` is at
most ``n`` times one replica's saturation throughput. The search on ``n`` is the same
(from the saturation bound ``⌈R / saturation⌉``, doubling, then bisection), each step a
fleet simulation, so the answer is exact for the candidates searched (under the same
assumption: more replicas never do worse); fleets past
:data:`~allocator.sim.fleet.MAX_REPLICAS` are not simulated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engines import ENGINES, servable
from ...exceptions import InputError, ParameterError
from ...model.accepted_pmf import emitted_pmf
from ...sim import SimResult, metric, summary
from ...sim.fleet import MAX_REPLICAS
from ..bench import run_fleet
from ..replica import (
    Configuration,
    ProblemStepTime,
    configuration,
    replica,
    run,
    scheduler_limits,
)
from ..request_source import RequestSource
from ..schedule import schedule_engines
from .grid import configurations
from .slo import SLACK, SLO, clock_ms

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Relative width to which a highest sustained rate is bisected.
RATE_TOL = 0.005
#: The same in a sweep of rates, for each candidate contending at some rate.
SWEEP_TOL = 0.02
#: The share of saturation at which a candidate is asked whether it meets the SLOs at all.
LOW_LOAD = 1e-3
#: Slack on the throughput ceiling of screening (step 2 of the module docstring).
BOUND_MARGIN = 0.05
#: Most replicas an answer may count.
MAX_FLEET = 1_000_000


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
    if singles and engine not in schedule_engines():
        label = ENGINES[engine].label
        notes.append(f"no k by batch size (schedule) candidates: {label} takes no k schedule")
        singles = []
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
    if limits.enable_prefix_caching and source.content is not None:
        # requests that share tokens may find all of a prompt cached but its last block
        bs = limits.block_size
        p = p - bs * ((source.prompt_tokens - 1) // bs)
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
class Context:
    """What every job of one search reads: sent once to each worker, not with each job.
    ``router``: ``None``, replicas split the requests evenly; a router's name, fleets
    behind it are simulated (module docstring)."""

    problem: Any
    source: RequestSource
    slos: tuple[SLO, ...]
    seed: int
    router: str | None = None


@dataclass(frozen=True, eq=False)
class Job:
    """One candidate's search, run by a worker (:func:`run_job`). ``kind``: ``replicas``
    (the fewest replicas for ``request_rate``, at most ``cap``), ``rate`` (the highest
    sustained rate between ``lo`` and ``hi``) or ``curve`` (the highest sustained rate)."""

    kind: str
    candidate: Candidate
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
    fleets: dict[int, Probe] = field(default_factory=dict)

    def at(self, rate: float) -> Probe:
        return self.probes[rate]


class _Searcher:
    """One candidate on one worker: runs cached by rate."""

    def __init__(self, ctx: Context, job: Job) -> None:
        self.ctx = ctx
        self.job = job
        self.rep = replica(ctx.problem, job.candidate.config, job.candidate.max_num_seqs)
        self.out = Outcome(saturation=job.saturation)

    def probe(self, rate: float) -> Probe:
        found = self.out.probes.get(rate)
        if found is not None:
            return found

        ctx = self.ctx
        result = run(ctx.problem, self.rep, ctx.source.at(rate), ctx.seed)
        p = self.measured(rate, result)
        self.out.probes[rate] = p
        return p

    def measured(self, rate: float, result: SimResult) -> Probe:
        """A run's probe: its SLO values, whether all are met, its metrics."""
        slos = self.ctx.slos
        values = {s.key: metric(result, s.key) for s in slos}
        clock = clock_ms(result)
        ok = all(s.met(values[s.key], clock) for s in slos)
        self.out.runs += 1
        return Probe(rate, values, ok, summary(result))

    def fleet_probe(self, rate: float, n: int) -> Probe:
        """``n`` replicas behind the context's router at ``rate`` (one: :meth:`probe`)."""
        if n == 1:
            p = self.probe(rate)
            self.out.fleets[1] = p
            return p
        found = self.out.fleets.get(n)
        if found is not None:
            return found
        ctx = self.ctx
        assert ctx.router is not None
        fleet = run_fleet(ctx.problem, self.rep, ctx.source.at(rate), ctx.seed, n, ctx.router)
        p = self.measured(rate, fleet.fleet)
        self.out.fleets[n] = p
        return p

    def fleet_sustains(self, rate: float, n: int) -> bool:
        """``n`` replicas behind the router meet every SLO at ``rate`` and ``rate`` is at
        most ``n`` saturations; a fleet past :data:`MAX_REPLICAS` is not simulated."""
        known = math.isnan(self.out.saturation)
        if not known and rate > n * self.out.saturation * (1.0 + SLACK):
            return False
        if n > MAX_REPLICAS or not self.fleet_probe(rate, n).ok:
            return False
        return rate <= n * self.saturation() * (1.0 + SLACK)

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


def run_job(ctx: Context, job: Job) -> Outcome:
    """Run one job (module docstring, step 3); a module-level function, for the workers."""
    s = _Searcher(ctx, job)
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
    fleet = s.ctx.router is not None

    def ok(n: int) -> bool:
        if fleet:
            return s.fleet_sustains(rate, n)
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
        if fleet and top > MAX_REPLICAS:
            top = MAX_REPLICAS
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


__all__ = [
    "BOUND_MARGIN",
    "LOW_LOAD",
    "MAX_FLEET",
    "RATE_TOL",
    "SWEEP_TOL",
    "Bounds",
    "Candidate",
    "Context",
    "Job",
    "Outcome",
    "Probe",
    "bounds",
    "candidates",
    "ladder",
    "replicas_at_least",
    "run_job",
]
