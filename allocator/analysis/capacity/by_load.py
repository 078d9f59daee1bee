"""Fleet sizing for a token load under a TPOT target: replicas, batch size, drafters and
``k`` that carry a load at the lowest $/h, against the cheapest fleet that does not
speculate (docs/design.md §8.11). (Capacity for a *request rate* under SLO percentiles,
simulated request by request, is :mod:`.by_rate`.)

(:mod:`allocator.analysis.plan.hosting_sweep` is a different question: which drafters to *host*
under a hosting budget. This module sizes a *fleet of replicas* for a traffic load.)

The serving model (:mod:`allocator.model.under_load`) gives, at every integer batch size ``b``
from 1 to the largest the step times reach (:func:`.grid.batch_limit`; ``serving.batch_sizes``
plays no part), every configuration's ``tokens_per_s(b)`` (one replica, whole batch) and
``tpot_ms(b) = step_ms / E``, the mean time per output token of one sequence (vLLM's
TPOT; a streaming client sees the ``E`` tokens of a step arrive together, so the gap
between its chunks, vLLM's ITL, is the whole step). A configuration here is a subset of the
search space with a ``k`` in ``search.k`` up to the largest ``k`` any step time reaches,
within the problem's ``budget`` caps (on the model's metrics, the same test as
``schedule``: :func:`allocator.core.budget.feasible_mask`), plus ``k = 0`` (no speculation,
no drafter, a candidate whatever the budget). A candidate ``(b, config)`` is *feasible* when
it has a measured or modelled step time at ``b`` (a pair outside every measured range, or a
drafter with neither a table nor ``draft_ms``, is left out and counted in a note, never a
refusal of the file), ``tpot_ms(b) <= Y`` and the replica can hold ``b`` sequences
(:mod:`allocator.model.memory_fit`: hosted drafters take KV-cache memory). For a load of ``X``
tokens/s (generated, over the whole fleet) it needs

    replicas = ceil(X / tokens_per_s(b))      cost_per_hour = replicas · gpu_cost_per_hour

and the answer is the feasible candidate of least cost; ties go to fewer replicas (the
same thing at one price), then lower ``tpot_ms``, then smaller batch, fewer drafters,
smaller ``k``. ``cost_per_mtok`` is the fleet's cost per million tokens *at the load
served*: ``cost_per_hour / (3600 · X) · 10⁶`` (idle headroom of the last replica included).
``gpus`` is ``replicas · serving.gpus_per_replica``. A note says when the answer's batch is
the last its step times reach (a larger one is unmeasured, not worse) or its memory cap.

Why the search is small: if candidate ``c'`` comes before ``c`` in the tie order above
(so ``tpot' <= tpot``) and ``tokens_per_s' >= tokens_per_s``, then ``c'`` needs no more
replicas than ``c`` at any load, so ``c`` never wins. Sorting the feasible candidates by
that order and keeping those that beat every earlier one's throughput leaves a short
staircase; each load takes the lexicographic minimum of ``(replicas, position)`` on it.
Everything is vectorised over configurations (the only Python loop is over the batch
sizes).

The same argument shows what a load sweep can show: cost is ``ceil(X / T*) · price``
with ``T*`` the largest feasible throughput of each side (with and without speculation),
so whichever side has the larger ``T*`` costs no more at *every* load. Speculation
"winning at low load and losing at high load" means: at low load both sides need the
same replicas (speculation is then chosen for its lower latency), and from some load on
the side without speculation needs fewer. The sweep reports where the costs separate.

Mixed traffic (``workloads``, shares ``p_w`` of generated tokens): the answer above is one
configuration for all traffic, with the mixture's expected tokens per step (the serving
model's ``E = 1 / Σ_w p_w / E_w``). Beside it, :func:`size_routes` sizes the routes of
``plan`` (each workload its own drafters and ``k``, one hosted set) as one fleet: at batch
``b`` workload ``w`` needs ``p_w · X / tokens_per_s_w(b)`` replicas' worth of time, so

    replicas = ceil(Σ_w p_w · X / tokens_per_s_w(b))

with every route's ``tpot_ms_w(b) <= Y`` and ``b`` within the hosted set's memory cap.
What this approximates: a replica's batch mixes workloads, each sequence running its own
route's ``k``; the formula treats the replica as time-shared between batches of one
workload each (engines run one ``k`` per step, so a mixed batch is slower than this
says), and the routes are ``plan``'s, chosen for verifier-unit throughput, not re-chosen
per batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ...exceptions import (
    InfeasibleError,
    InputError,
    NotModelledError,
    ParameterError,
    SolverError,
)
from ...model.memory_fit import max_batch
from ..limits import provenance_notes
from ..plan import make_plan
from .crossings import crossings
from .grid import ServingGrid, batch_limit, fleet_serving, serving_grid, serving_model

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Relative slack when comparing a fleet's throughput with the load and a latency
#: with its target, so that an exact fit is not lost to rounding.
SLACK = 1e-12

#: Most replicas a fleet may count (a load needing more is refused, not overflowed: the
#: counts are int64 and the tie-break key multiplies them by the number of candidates).
MAX_REPLICAS = 10**12


@dataclass(frozen=True)
class Fleet:
    """One sized fleet (``cost_per_hour`` in $/h, ``tpot_ms`` in ms, throughput tokens/s;
    ``gpus`` = replicas × ``serving.gpus_per_replica``)."""

    replicas: int
    batch: int
    drafters: list[str]
    k: int
    tpot_ms: float
    tokens_per_s_per_replica: float
    cost_per_hour: float
    cost_per_mtok: float
    gpus: int = 0

    def document(self) -> dict:
        return {
            "replicas": self.replicas,
            "gpus": self.gpus,
            "batch": self.batch,
            "drafters": self.drafters,
            "k": self.k,
            "tpot_ms": self.tpot_ms,
            "tokens_per_s_per_replica": self.tokens_per_s_per_replica,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_mtok": self.cost_per_mtok,
        }


@dataclass(frozen=True)
class RoutedFleet:
    """Plan's per-workload routes sized as one fleet (see :func:`size_routes`).

    hosted : drafter names hosted on every replica; routes : per workload ``{"workload",
    "weight", "drafters", "k", "tpot_ms", "tokens_per_s_per_replica"}`` at the fleet's
    batch; tpot_ms : the worst route's; tokens_per_s_per_replica : the mixture's,
    ``1 / Σ_w p_w / tokens_per_s_w``.
    """

    replicas: int
    batch: int
    hosted: list[str]
    tpot_ms: float
    tokens_per_s_per_replica: float
    cost_per_hour: float
    cost_per_mtok: float
    routes: list[dict]
    gpus: int = 0

    def document(self) -> dict:
        return {
            "replicas": self.replicas,
            "gpus": self.gpus,
            "batch": self.batch,
            "hosted": self.hosted,
            "tpot_ms": self.tpot_ms,
            "tokens_per_s_per_replica": self.tokens_per_s_per_replica,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_mtok": self.cost_per_mtok,
            "routes": self.routes,
        }


@dataclass
class LoadSweep:
    """$/h against load: ``loads (L,)`` tokens/s; ``with_speculation`` and
    ``without_speculation`` ``(L,)`` $/h of the cheapest fleet of each side (NaN: none
    meets the target); ``fleets``: per load, each side's :class:`Fleet` or ``None``;
    ``crossings``: loads where the cheaper side changes (see :func:`crossings`)."""

    loads: np.ndarray
    with_speculation: np.ndarray
    without_speculation: np.ndarray
    fleets: list[tuple[Fleet | None, Fleet | None]]
    crossings: list[dict]

    @property
    def cheaper_from(self) -> dict | None:
        """Where the sweep settles: the first load from which one side is strictly cheaper
        at every later load of the sweep, ``{"tokens_per_s", "cheaper"}``; ``None`` when
        the last load ties (or a side has no fleet there)."""
        ok = np.isfinite(self.with_speculation) & np.isfinite(self.without_speculation)
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return None
        sign = np.sign(self.without_speculation[idx] - self.with_speculation[idx])
        if sign[-1] == 0:
            return None
        other = np.flatnonzero(sign != sign[-1])
        start = 0 if other.size == 0 else int(other[-1]) + 1
        return {
            "tokens_per_s": float(self.loads[idx[start]]),
            "cheaper": "speculation" if sign[-1] > 0 else "no speculation",
        }

    def document(self) -> dict:
        return {
            "points": [
                {
                    "tokens_per_s": float(x),
                    "with_speculation": None if a is None else a.document(),
                    "without_speculation": None if b is None else b.document(),
                }
                for x, (a, b) in zip(self.loads, self.fleets, strict=True)
            ],
            "crossings": self.crossings,
            "cheaper_from": self.cheaper_from,
        }


@dataclass
class CapacityResult:
    """The cheapest fleet for a load, and the cheapest without speculation (``None``: no
    configuration without speculation meets the target). ``saving`` is the fraction of
    the latter's cost the former saves (``None`` without it).

    With :func:`capacity`, also plan's per-workload routes sized as one fleet
    (``routed``, when ``with_routes``; ``None`` when they meet the target at no batch size
    or could not be planned) and the load sweep (``sweep``, when asked for).
    """

    problem: str
    tokens_per_s: float
    tpot_target_ms: float
    best: Fleet
    without_speculation: Fleet | None
    notes: list[str] = field(default_factory=list)
    with_routes: bool = False
    routed: RoutedFleet | None = None
    sweep: LoadSweep | None = None

    @property
    def saving(self) -> float | None:
        w = self.without_speculation
        return None if w is None else 1.0 - self.best.cost_per_hour / w.cost_per_hour

    def document(self) -> dict:
        """The sizing alone: the cheapest fleet, ``without_speculation`` and ``saving``."""
        w = self.without_speculation
        return {
            **self.best.document(),
            "without_speculation": None if w is None else w.document(),
            "saving": self.saving,
        }

    def to_dict(self) -> dict:
        """The ``capacity --json`` document: :meth:`document`, then ``routed`` (with
        routes) and ``sweep`` (with a load sweep), then ``notes``."""
        doc = self.document()
        if self.with_routes:
            doc["routed"] = None if self.routed is None else self.routed.document()
        if self.sweep is not None:
            doc["sweep"] = self.sweep.document()
        doc["notes"] = list(self.notes)
        return doc


# ---------------------------------------------------------------- sizing
def replicas_needed(load: np.ndarray | float, tokens_per_s: np.ndarray) -> np.ndarray:
    """Smallest replica count carrying ``load`` (tokens/s) at ``tokens_per_s`` each
    (broadcast shapes; at least 1): ``ceil(load / tokens_per_s)`` up to :data:`SLACK`.
    Counts above :data:`MAX_REPLICAS` are returned as ``MAX_REPLICAS + 1`` (too many)."""
    r = np.ceil(np.asarray(load, float) * (1.0 - SLACK) / np.asarray(tokens_per_s, float))
    return np.clip(r, 1.0, MAX_REPLICAS + 1.0).astype(np.int64)


def _too_many(load: float, tokens_per_s: float, option: str) -> InputError:
    return InputError(
        option,
        f"{load:g} tokens/s needs more than {MAX_REPLICAS:,} replicas (the fastest "
        f"replica makes {tokens_per_s:.6g} tokens/s): give a load in the units the step "
        "times were measured in",
    )


def cheapest(
    tokens_per_s: np.ndarray, tpot_ms: np.ndarray, loads: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest feasible candidate at each load.

    tokens_per_s, tpot_ms : ``(F,)`` of feasible candidates, listed in tie-break order
    after ``tpot_ms`` (an earlier row wins a tie of replicas and latency); loads : ``(L,)``.
    Returns ``choice (L,)`` indices into ``F`` and ``replicas (L,)``; both empty-safe
    (``F = 0`` gives ``-1`` and ``0``).
    """
    loads = np.atleast_1d(np.asarray(loads, float))
    f = tokens_per_s.size
    if f == 0:
        return np.full(loads.size, -1), np.zeros(loads.size, np.int64)
    order = np.lexsort((np.arange(f), tpot_ms))  # latency first, then the given order
    t = tokens_per_s[order]
    earlier = np.maximum.accumulate(np.concatenate([[-np.inf], t[:-1]]))
    stairs = order[t > earlier]  # each beats the throughput of all before it
    rep = replicas_needed(loads[:, None], tokens_per_s[stairs][None, :])  # (L, P)
    key = rep * stairs.size + np.arange(stairs.size)[None, :]
    j = np.argmin(key, axis=1)
    return stairs[j], rep[np.arange(loads.size), j]


def _candidates(grid: ServingGrid, tpot_target: float, speculative: bool | None):
    """Feasible ``(batch index, config index)`` pairs in tie-break order after latency:
    smaller batch, fewer drafters, smaller ``k``. ``speculative``: only ``k > 0``
    (True), only ``k = 0`` (False), or both (None)."""
    ok = grid.fits() & (grid.tpot_ms <= tpot_target * (1.0 + SLACK))
    if speculative is not None:
        ok &= ((grid.k > 0) == speculative)[None, :]
    s_idx, c_idx = np.nonzero(ok)
    m = grid.members.sum(axis=1)
    order = np.lexsort((grid.k[c_idx], m[c_idx], grid.batch[s_idx]))
    return s_idx[order], c_idx[order]


def _gpus(problem: Problem) -> int:
    return int(fleet_serving(problem).gpus_per_replica)


def _fleets(
    grid: ServingGrid,
    loads: np.ndarray,
    tpot_target: float,
    price: float,
    speculative: bool | None,
    option: str = "tokens_per_s",
    gpus: int = 1,
) -> list[Fleet | None]:
    sm = serving_model()
    s_idx, c_idx = _candidates(grid, tpot_target, speculative)
    tps, tpot = grid.tokens_per_s[s_idx, c_idx], grid.tpot_ms[s_idx, c_idx]
    choice, rep = cheapest(tps, tpot, loads)
    out: list[Fleet | None] = []
    for x, j, r in zip(loads, choice, rep, strict=True):  # one per load, not per configuration
        if j < 0:
            out.append(None)
            continue
        if r > MAX_REPLICAS:
            raise _too_many(float(x), float(np.max(tps)), option)
        c = int(c_idx[j])
        cost = float(r) * price
        out.append(
            Fleet(
                replicas=int(r),
                batch=int(grid.batch[s_idx[j]]),
                drafters=[n for n, on in zip(grid.names, grid.members[c], strict=True) if on],
                k=int(grid.k[c]),
                tpot_ms=float(tpot[j]),
                tokens_per_s_per_replica=float(tps[j]),
                cost_per_hour=cost,
                cost_per_mtok=float(sm.cost_per_mtok(cost, float(x))),
                gpus=int(r) * gpus,
            )
        )
    return out


def price_of(problem: Problem) -> float:
    """``serving.gpu_cost_per_hour``, the price of one replica; an :class:`InputError`
    naming it when the file has none."""
    price = float(fleet_serving(problem).gpu_cost_per_hour)
    if not np.isfinite(price):
        raise InputError(
            "serving.gpu_cost_per_hour",
            "required to size a fleet: the price of one replica in $/h (the deployment "
            "the step times were measured on)",
        )
    return price


def price_or_gpus(problem: Problem) -> tuple[float, list[str]]:
    """The price of one replica (:func:`price_of`) and no note; without
    ``serving.gpu_cost_per_hour``, the replica's GPU count as its price, so that the
    cheapest fleet is the one of fewest GPUs, and a note saying so (a planner asking "how
    many GPUs?" need not invent a price)."""
    if np.isfinite(float(fleet_serving(problem).gpu_cost_per_hour)):
        return price_of(problem), []
    gpus = _gpus(problem)
    return float(gpus), [
        "no serving.gpu_cost_per_hour: fleets ranked by GPU count, every cost shown in "
        f"GPU-hours per hour ({gpus} per replica), not in $"
    ]


def check_load(tokens_per_s: float, option: str = "tokens_per_s") -> float:
    if not (np.isfinite(tokens_per_s) and tokens_per_s > 0):
        raise InputError(
            option, f"the load must be a positive number of tokens/s (got {tokens_per_s:g})"
        )
    return float(tokens_per_s)


def check_tpot(tpot_ms: float | None) -> float:
    """The TPOT target in ms (``inf`` for none); a :class:`ParameterError` on ``tpot_ms``
    unless positive and finite."""
    if tpot_ms is None:
        return float("inf")
    if not (np.isfinite(tpot_ms) and tpot_ms > 0):
        raise ParameterError(
            "tpot_ms", f"the TPOT target must be a positive number of ms (got {tpot_ms:g})"
        )
    return float(tpot_ms)


def _infeasible(grid: ServingGrid, tpot_target: float) -> InputError:
    """The error when nothing meets the target: the lowest TPOT any candidate reaches."""
    ok = grid.fits()
    if not ok.any():
        return NotModelledError(
            "serving",
            "no configuration has a step time at any batch size within its memory cap",
        )
    tpot = np.where(ok, grid.tpot_ms, np.inf)
    s, c = np.unravel_index(int(np.argmin(tpot)), tpot.shape)
    names = [n for n, on in zip(grid.names, grid.members[c], strict=True) if on]
    # no square brackets: the error line is printed through rich, which took "[eagle3]"
    # for a style tag and dropped the drafter's name
    what = f"drafters {'+'.join(names)}, k={int(grid.k[c])}" if names else "no speculation"
    return InfeasibleError(
        "tpot_ms",
        f"no configuration meets tpot_ms <= {tpot_target:g} at any batch size; the lowest "
        f"TPOT reachable is {float(tpot[s, c]):.6g} ms ({what}, batch {int(grid.batch[s])})",
    )


def tree_notes(problem: Problem) -> list[str]:
    """A note when a drafter of the problem carries ``acceptance_by_rank``: the sizing
    runs chains (its ``acceptance``, rank 1) only, never the token trees it could draft."""
    ranked = [d.name for d in problem.drafters if d.acceptance_by_rank is not None]
    if not ranked:
        return []
    return [
        f"drafter(s) {', '.join(ranked)} carry acceptance_by_rank, but capacity sizes "
        "chains only (acceptance, one candidate per position), not token trees; "
        "`allocator tree` evaluates their trees"
    ]


def edge_notes(grid: ServingGrid, fleet: Fleet, label: str = "the answer") -> list[str]:
    """Notes when a fleet's batch is the last its configuration's step times reach (a larger
    batch is unmeasured, not known to be worse) or its memory cap."""
    names = grid.names
    members = np.array([n in fleet.drafters for n in names], bool)
    rows = np.flatnonzero((grid.k == fleet.k) & np.all(grid.members == members, axis=1))
    if rows.size == 0:
        return []
    c = int(rows[0])
    out = []
    what = "speculation off" if fleet.k == 0 else f"{'+'.join(fleet.drafters)} at k={fleet.k}"
    if fleet.batch == int(grid.measured_to()[c]):
        out.append(
            f"{label} runs batch {fleet.batch}, the last batch size the step times of {what} "
            "reach (never extrapolated): a larger batch is unmeasured, not known to be worse"
        )
    if fleet.batch == int(grid.max_batch[c]):
        out.append(
            f"{label} runs batch {fleet.batch}, the memory cap of {what} (serving.memory: "
            "the KV cache holds no more sequences)"
        )
    return out


def size_fleet(
    problem: Problem,
    tokens_per_s: float,
    tpot_ms: float | None = None,
    grid: ServingGrid | None = None,
) -> CapacityResult:
    """The cheapest fleet carrying ``tokens_per_s`` (generated tokens/s over the fleet)
    with every sequence's mean time per output token at most ``tpot_ms`` (ms; ``None``:
    no target).

    Raises :class:`InputError` on a non-positive load or target (``--tokens-per-s``,
    ``--tpot-ms``), without ``serving.gpu_cost_per_hour``, or when no configuration meets
    the target (``--tpot-ms``, naming the lowest TPOT reachable).
    """
    load = check_load(tokens_per_s)
    target = check_tpot(tpot_ms)
    price = price_of(problem)
    gpus = _gpus(problem)
    grid = serving_grid(problem) if grid is None else grid
    loads = np.array([load])
    best = _fleets(grid, loads, target, price, None, gpus=gpus)[0]
    if best is None:
        raise _infeasible(grid, target)
    plain = _fleets(grid, loads, target, price, False, gpus=gpus)[0]
    notes = list(grid.notes)
    if grid.over_budget:
        caps = ", ".join(f"{m} <= {c:g}" for m, c in problem.budget.items())
        notes.append(
            f"{grid.over_budget:,} speculative configuration(s) left out by the budget "
            f"({caps}), as schedule leaves them out"
        )
    notes += tree_notes(problem)
    notes += edge_notes(grid, best)
    if plain is not None and plain is not best and plain.document() != best.document():
        notes += edge_notes(grid, plain, "the fleet without speculation")
    notes.append(
        "tpot_ms is the mean time per output token of one sequence (step_ms / E, vLLM's "
        "TPOT); a streaming client gets a step's tokens together, so the gap between its "
        "chunks (vLLM's ITL) is the whole step: for ITL or tail targets, size for a request "
        "rate (--request-rate with --slo)"
    )
    notes += provenance_notes(problem)
    return CapacityResult(problem.name, load, target, best, plain, notes)


def size_routes(
    problem: Problem, tokens_per_s: float, tpot_ms: float | None = None, members=None, k=None
) -> RoutedFleet | None:
    """Per-workload routes sized as one fleet (module doc); ``None`` when no batch size
    meets the target for every route.

    members ``(W, N)`` and k ``(W,)``: the routes; by default ``plan``'s (the MILP of
    :func:`allocator.analysis.plan.make_plan` under the problem's budget).
    """
    sm = serving_model()
    load = check_load(tokens_per_s)
    target = check_tpot(tpot_ms)
    price = price_of(problem)
    if not problem.workloads:
        raise InputError("workloads", "routes per workload need a problem with workloads")
    if members is None or k is None:
        plan = make_plan(problem)
        members, k = plan.members, plan.k
    members = np.asarray(members, bool)
    k = np.asarray(k, np.int64)
    weights = np.array([w.weight for w in problem.workloads])
    e = np.array(
        [
            sm.bonus_expected(problem.workload_view(w), members[w : w + 1], k[w : w + 1])[0]
            for w in range(weights.size)  # a few workloads; each one configuration
        ]
    )
    hosted = members.any(axis=0)
    room = int(max_batch(problem, hosted[None, :])[0])
    batch = np.arange(1, batch_limit(problem)[0] + 1, dtype=np.int64)
    step = np.array([sm.step_ms_or_nan(problem, members, k, float(b)) for b in batch])  # (S, W)
    tps = sm.tokens_per_s(e[None, :], step, batch[:, None])
    tpot = step / e[None, :]
    ok = np.isfinite(tps).all(axis=1) & (batch <= room)
    ok &= np.where(np.isfinite(tpot), tpot, np.inf).max(axis=1) <= target * (1.0 + SLACK)
    if not ok.any():
        return None
    mix = 1.0 / (weights[None, :] / tps).sum(axis=1)  # (S,) tokens/s of one replica
    rep = np.where(ok, replicas_needed(load, np.where(ok, mix, 1.0)), np.iinfo(np.int64).max)
    worst = np.where(ok, tpot.max(axis=1), np.inf)
    i = int(np.lexsort((batch, worst, rep))[0])
    if rep[i] > MAX_REPLICAS:
        raise _too_many(load, float(mix[i]), "tokens_per_s")
    names = problem.names
    cost = float(rep[i]) * price
    return RoutedFleet(
        replicas=int(rep[i]),
        batch=int(batch[i]),
        hosted=[n for n, on in zip(names, hosted, strict=True) if on],
        tpot_ms=float(worst[i]),
        tokens_per_s_per_replica=float(mix[i]),
        cost_per_hour=cost,
        cost_per_mtok=float(sm.cost_per_mtok(cost, load)),
        routes=[
            {
                "workload": wl.name,
                "weight": float(weights[w]),
                "drafters": [n for n, on in zip(names, members[w], strict=True) if on],
                "k": int(k[w]),
                "tpot_ms": float(tpot[i, w]),
                "tokens_per_s_per_replica": float(tps[i, w]),
            }
            for w, wl in enumerate(problem.workloads)
        ],
        gpus=int(rep[i]) * _gpus(problem),
    )


def sweep_load(
    problem: Problem,
    loads: np.ndarray,
    tpot_ms: float | None = None,
    grid: ServingGrid | None = None,
) -> LoadSweep:
    """$/h against load (``loads (L,)`` tokens/s, ascending), with speculation (the
    cheapest fleet with ``k > 0``) and without (``k = 0``)."""
    loads = np.sort(np.asarray(loads, float))
    for x in loads:
        check_load(float(x), "sweep_load")
    target = check_tpot(tpot_ms)
    price = price_of(problem)
    gpus = _gpus(problem)
    grid = serving_grid(problem) if grid is None else grid
    spec = _fleets(grid, loads, target, price, True, "sweep_load", gpus)
    plain = _fleets(grid, loads, target, price, False, "sweep_load", gpus)
    if all(f is None for f in spec) and all(f is None for f in plain):
        raise _infeasible(grid, target)
    a = np.array([np.nan if f is None else f.cost_per_hour for f in spec])
    b = np.array([np.nan if f is None else f.cost_per_hour for f in plain])
    return LoadSweep(loads, a, b, list(zip(spec, plain, strict=True)), crossings(loads, a, b))


def capacity(
    problem: Problem,
    tokens_per_s: float,
    tpot_ms: float | None = None,
    loads: np.ndarray | None = None,
    routes: bool | None = None,
) -> CapacityResult:
    """``allocator capacity --tokens-per-s``: :func:`size_fleet`, with plan's per-workload
    routes sized as one fleet beside it (:func:`size_routes`; ``routes=None``: when the
    problem has workloads) and $/h against ``loads (L,)`` tokens/s (:func:`sweep_load`), on
    one grid.

    An error while planning the routes leaves the main answer standing, with a note.
    """
    grid = serving_grid(problem)
    result = size_fleet(problem, tokens_per_s, tpot_ms, grid=grid)
    notes = list(result.notes)
    with_routes = bool(problem.workloads) if routes is None else routes
    routed = None
    if with_routes:
        try:
            routed = size_routes(problem, tokens_per_s, tpot_ms)
        except (InfeasibleError, NotModelledError, SolverError) as exc:  # the answer stands
            notes.append(f"per-workload routes not sized: {exc.field}: {exc.message}")
        if routed is None:
            notes.append("plan's per-workload routes meet the TPOT target at no batch size")
        else:
            cheaper = routed.cost_per_hour < result.best.cost_per_hour
            notes.append(
                f"mixed traffic: plan's per-workload routes on one fleet need {routed.replicas} "
                f"replica(s) at batch {routed.batch} (${routed.cost_per_hour:,.2f}/h), "
                + ("cheaper than" if cheaper else "no cheaper than")
                + " one configuration for all traffic (see README: what routing approximates)"
            )
    swept = None if loads is None else sweep_load(problem, loads, tpot_ms, grid=grid)
    return replace(result, notes=notes, with_routes=with_routes, routed=routed, sweep=swept)


__all__ = [
    "MAX_REPLICAS",
    "SLACK",
    "CapacityResult",
    "Fleet",
    "LoadSweep",
    "RoutedFleet",
    "capacity",
    "cheapest",
    "check_load",
    "check_tpot",
    "edge_notes",
    "price_of",
    "replicas_needed",
    "size_fleet",
    "size_routes",
    "sweep_load",
    "tree_notes",
]
