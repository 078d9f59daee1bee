"""Capacity for a request rate under SLO percentiles: how many replicas of which
configuration serve ``R`` requests/s with every latency target met, at the lowest $/h.

The SLOs are :mod:`.slo`'s; the candidates, their bounds and the search of one are
:mod:`.rate_search`'s; this module sizes the fleet from them.

**Replicas split the requests evenly**: with ``n`` replicas each is simulated alone at
``R / n`` (generated arrivals at that rate; a trace slowed to it, so that a burst of the
trace reaches one replica for ``n`` times as long: pessimistic for bursts). A candidate
needs the fewest ``n`` whose share it sustains; the answer is the candidate of least cost
``n · gpu_cost_per_hour`` (ties: the simpler configuration, see
:meth:`.rate_search.Candidate.key`), beside the cheapest without speculation (the
baseline). Its ``metrics`` are the run at ``R / n``: ``allocator bench`` with the same
requests, seed, configuration and ``max_num_seqs`` at that rate gives the same numbers (the
notes print the command). ``max_request_rate_per_replica`` is the highest rate one replica
sustains, found by bisection between ``R / n`` (sustained) and ``R / (n − 1)`` (not), to
:data:`.rate_search.RATE_TOL`.

**Behind a router** (``router``, a name of :data:`allocator.sim.routers.ROUTERS`): ``n``
replicas are simulated as one fleet behind the router at ``R`` (the same requests, as
``vllm bench serve`` against the router would send them; the per-replica sample is then
about ``num_prompts / n`` requests), and a candidate needs the fewest ``n`` whose fleet
meets every SLO on the fleet's metrics (:mod:`.rate_search`): no division of the rate.
``metrics`` are then the fleet's: ``allocator bench --replicas n --router NAME`` at ``R``
gives the same numbers. ``max_request_rate_per_replica`` stays one replica's, alone. Without
a router the even split above is the answer (and the only one a sweep of rates prices).

**A sweep of rates** (``sweep_rates``): for each candidate contending at some rate, its
highest sustained rate ``r*`` (saturation, then halving until sustained, then bisection to
:data:`.rate_search.SWEEP_TOL`; a candidate whose bracket can no longer beat a side's best
at any swept rate stops there); at each rate each side (with and without speculation)
needs ``min ⌈R / r*⌉`` replicas; where the cheaper side changes is listed
(:func:`.crossings.crossings`).

Simulations are independent jobs run by
:class:`~allocator.analysis.capacity.workers.Workers` (this process, local processes or
Ray): the same answer wherever they ran.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engines import POOLED_BOUND
from ...exceptions import InfeasibleError, InputError, ParameterError
from ...sim.routers import get_router
from ..bench import plain_metrics
from ..limits import acceptance_notes, lengths_note, provenance_notes
from ..request_source import RequestSource, check_router_keys
from .by_load import price_or_gpus
from .crossings import crossings
from .rate_search import (
    BOUND_MARGIN,
    MAX_FLEET,
    RATE_TOL,
    Bounds,
    Candidate,
    Context,
    Job,
    Outcome,
    bounds,
    candidates,
    replicas_at_least,
    run_job,
)
from .slo import SLO, default_num_prompts, thin_tail
from .workers import Workers

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Most rates one sweep prices.
MAX_SWEEP_RATES = 200


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
    router: str | None = None

    @property
    def saving(self) -> float | None:
        if self.baseline is None:
            return None
        return 1.0 - self.best.cost_per_hour / self.baseline.cost_per_hour

    def to_dict(self) -> dict:
        """``capacity --request-rate --json``: the best fleet's fields, ``baseline`` (the same
        fields without speculation), ``saving`` and ``notes`` (and ``sweep`` with a sweep)."""
        doc = self.best.document()
        if self.router is not None:
            doc["router"] = self.router
        doc["baseline"] = None if self.baseline is None else self.baseline.document()
        doc["saving"] = self.saving
        doc["notes"] = list(self.notes)
        if self.sweep is not None:
            doc["sweep"] = self.sweep.document()
        return doc


def bench_command(
    problem_path: str,
    cand: Candidate,
    rate: float,
    source: RequestSource,
    n: int,
    seed: int,
    fleet: tuple[int, str] | None = None,
) -> str:
    """The ``allocator bench`` command that reproduces one replica's metrics (``fleet``:
    ``(replicas, router)``, the fleet's at the fleet's ``rate``)."""
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
    elif source.lengths:
        words += [*source.lengths, "--burstiness", repr(float(source.burstiness))]
    else:
        words += [
            "--input-len", str(int(source.prompt_tokens[0])),
            "--output-len", str(int(source.output_tokens[0])),
            "--burstiness", repr(float(source.burstiness)),
        ]  # fmt: skip
    words += list(source.flags)
    words += ["--num-prompts", str(n), "--seed", str(seed)]
    if fleet is not None and fleet[0] > 1:
        words += ["--replicas", str(fleet[0]), "--router", fleet[1]]
    return shlex.join(words)


def _search(
    workers: Workers,
    ctx: Context,
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
        # until something is found, one at a time: the first answer caps every later
        # search; then as many at a time as there are workers (the pruning is exact, so the
        # answer does not depend on it)
        size = workers.wave if best is not None else 1
        while pending and len(wave) < size:
            i = pending.pop(0)
            if best is not None and (floor[i], keys[i]) > (best[0], best[1]):
                workers.expect(-1)  # cannot beat the best: its floor is higher (or tie lost)
                continue
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
        workers.expect(len(got) - len(wave))
        results = workers.map(run_job, [j for _, j in got], ctx)
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
    router: str | None = None,
) -> RateCapacityResult:
    """The cheapest fleet serving ``request_rate`` requests/s within ``slos`` (module
    docstring), beside the cheapest without speculation; with ``sweep_rates`` also $/h
    against the rate.

    Raises :class:`InfeasibleError` on ``slo`` when no candidate meets every SLO at any
    rate, naming the SLO and the lowest value reached. ``router``: fleets behind it are
    simulated (module docstring); ``None``: the even split."""
    if router is not None:
        get_router(router)
        check_router_keys(router, source)
    r = float(request_rate)
    if not (math.isfinite(r) and r > 0):
        raise ParameterError(
            "request_rate",
            f"the fleet's load must be a positive number of requests/s, got {request_rate}",
        )
    slos = tuple(slos)
    if not slos:
        raise ParameterError("slo", "give at least one SLO, KEY=MS (e.g. p99_ttft_ms=500)")
    if not np.any(source.output_tokens > 1):
        undefined = [s.key for s in slos if s.latency in ("tpot", "itl")]
        if undefined:
            raise ParameterError(
                "slo",
                f"{undefined[0]} is undefined: every request has one output token, so none "
                "has a time per output token or a gap between chunks",
            )
    price, price_notes = price_or_gpus(problem)
    notes = [*notes, *price_notes]
    serving = problem.serving
    assert serving is not None
    gpus = int(serving.gpus_per_replica)
    cands, cand_notes = candidates(problem, engine=engine, pooled=pooled, max_num_seqs=max_num_seqs)
    own = Workers(workers=1) if workers is None else workers
    try:
        return _size(
            problem, r, slos, source, seed, cands, list(notes) + cand_notes, own, price, gpus,
            sweep_rates, problem_path, router,
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
    router: str | None = None,
) -> RateCapacityResult:
    n_prompts = len(source)
    bnd = [bounds(problem, c, source, slos) for c in cands]
    keys = {i: c.key() for i, c in enumerate(cands)}
    hopeless = [i for i, b in enumerate(bnd) if any(not s.met(b.floors[s.key]) for s in slos)]
    live = [i for i in range(len(cands)) if i not in set(hopeless)]
    floor = {i: replicas_at_least(r, bnd[i].rate * (1 + BOUND_MARGIN)) for i in live}

    def jobs_for(i: int, cap: int | None) -> Job:
        return Job("replicas", cands[i], request_rate=r, cap=cap)

    outcomes: dict[int, Outcome] = {}
    off = sorted(
        (i for i in live if not cands[i].config.speculative), key=lambda i: (floor[i], keys[i])
    )
    spec = sorted(
        (i for i in live if cands[i].config.speculative), key=lambda i: (floor[i], keys[i])
    )
    ctx = Context(problem, source, slos, seed, router)
    # the total progress reports: every live candidate searched, then each side's rate
    workers.expect(len(live) + 2)
    base, sim_a, runs_a = _search(workers, ctx, jobs_for, off, floor, keys, None, outcomes)
    best, sim_b, runs_b = _search(workers, ctx, jobs_for, spec, floor, keys, base, outcomes)
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
            Job("rate", cands[i], lo=r / n, hi=max(hi, r / n), hi_fails=fails,
                saturation=sat)
        )  # fmt: skip
    workers.expect(len(rate_jobs) - 2)
    rate_out = workers.map(run_job, rate_jobs, ctx)
    runs += sum(o.runs for o in rate_out)
    top = {side[2]: o.rate for side, o in zip(sides, rate_out, strict=True)}
    mean_out = source.mean_output

    def fleet(side) -> RateFleet:
        n, _, i = side
        probe = outcomes[i].fleets[n] if router is not None else outcomes[i].at(r / n)
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
        else f"{n_prompts:,} requests per run (as asked){thin_tail(slos, n_prompts)}",
        (
            f"{best_fleet.replicas} replica(s) simulated as one fleet behind {router} at the "
            "whole rate (the metrics are the fleet's); max_request_rate_per_replica is one "
            "replica's alone"
            if router is not None
            else "replicas split the requests evenly: each is simulated alone at its share, "
            "request_rate / replicas (a trace slowed to that rate)"
        ),
        f"{len(cands):,} candidate(s): {len(hopeless):,} meet an SLO at no rate (latency "
        f"floors), {sim_a + sim_b:,} simulated, the rest left out by the throughput bound; "
        f"{runs:,} simulated runs ({workers.where})",
        "a replica sustains a rate when it meets every SLO and the rate is at most its "
        "saturation throughput (the same requests sent at once)",
        f"max_request_rate_per_replica bisected to {RATE_TOL:.1%}",
        f"{best_fleet.replicas} replica(s) x {gpus} GPU(s); one replica fewer misses an SLO "
        "or runs above saturation",
        (
            "metrics are the fleet's; reproduce: "
            + bench_command(
                path, best_fleet.candidate, r, source, n_prompts, seed,
                (best_fleet.replicas, router),
            )
            if router is not None
            else "metrics are one replica's at its share; reproduce: "
            + bench_command(
                path, best_fleet.candidate, best_fleet.per_replica_request_rate, source,
                n_prompts, seed,
            )
        ),
    ]  # fmt: skip
    if base is None:
        out_notes.append("no configuration without speculation meets the SLOs at any rate")
    out_notes += provenance_notes(problem)
    chosen = best_fleet.candidate.config
    out_notes += acceptance_notes(problem, chosen.members, chosen.max_k)
    out_notes += lengths_note(
        source.fixed_lengths, int(source.prompt_tokens[0]), int(source.output_tokens[0])
    )
    if best_fleet.candidate.config.pooled and len(best_fleet.candidate.config.drafters) > 1:
        if POOLED_BOUND not in out_notes:
            out_notes.append(POOLED_BOUND)
    sweep = None
    if sweep_rates is not None:
        if router is not None:
            out_notes.append("the sweep of rates prices the even split (no router)")
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
        router=router,
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
    is met at low rates, the rate, which no fleet of at most :data:`.rate_search.MAX_FLEET` replicas
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
    ctx = Context(problem, source, slos, seed)
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
    workers.expect(len(order))
    while pending:
        wave: list[int] = []
        while pending and len(wave) < workers.wave:
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
            else:
                workers.expect(-1)
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
            jobs.append(Job("curve", cands[i], allowed=allowed))
        outs = workers.map(run_job, jobs, ctx)
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
    cross = crossings(rates, cost[True], cost[False], "request_rate")
    return RateSweep(rates, cost[True], cost[False], fleets, cross), runs


__all__ = [
    "MAX_SWEEP_RATES",
    "RateCapacityResult",
    "RateFleet",
    "RateSweep",
    "bench_command",
    "size_for_rate",
]
