"""The capacity-planning curve: the best plan's throughput against hosting cost
(docs/design.md §4.6; fleet sizing for a load is §8.11).

:func:`sweep_hosting` solves the plan programme under a series of hosting caps and
returns the Pareto front of overall throughput against the hosted set's cost.
Candidates are built once, for the largest cap. Two ways to choose the caps:

- a range ``lo..hi`` in ``steps`` equal steps. A plan found under cap ``b`` with hosting
  cost ``c`` is optimal for every cap in ``[c, b]``, so steps in that interval reuse it.
- automatic (no range): every distinct achievable hosting cost. Rather than one
  programme per subset sum, the walk starts from the largest cap and, after a plan of
  cost ``c``, lowers the cap to just below ``c`` (by ``1e-6`` relative: costs closer
  than that are one step); each programme then yields one new point of the front, and
  the front equals the one a solve at every distinct sum would give.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.documents import names_of, number, seconds
from ...core.pareto import front_order
from .candidates import SingleFront, Traffic, build_candidates
from .plan import MAX_CANDIDATES, Plan, hosting_infeasible, plan_from_candidates, with_budget

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Relative step below a plan's hosting cost in the automatic sweep.
AUTO_STEP = 1e-6


@dataclass
class PlanSweep:
    """Plans across hosting caps.

    front : plans on the Pareto front of throughput against hosting cost, by cost ascending
    (throughput strictly increasing).
    steps : ``(cap, plan or None)`` for every cap solved or covered (``None``: no plan
    meets it), by cap ascending.
    single_front : the best single configuration for all traffic against hosting cost.
    exact : every plan proven optimal; auto : caps chosen automatically.
    """

    problem: str
    front: list[Plan]
    steps: list[tuple[float, Plan | None]]
    single_front: SingleFront
    exact: bool
    auto: bool
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``plan --sweep --json`` (docs/design.md §6): the ``front`` of plans against
        hosting cost (each with the best single configuration within its hosting cost)
        and every cap solved (``steps``; ``cap`` null: no cap, the plan's fields null
        where none meets it)."""
        front = []
        for p in self.front:
            single = p.single_front.best_within(p.hosting_cost)
            front.append(
                {
                    "hosting_cost": float(p.hosting_cost),
                    "throughput": float(p.throughput),
                    "hosted": names_of(p.names, p.hosted),
                    "single_throughput": None
                    if single is None
                    else float(p.single_front.throughput[single]),
                    "status": str(p.status),
                    "exact": bool(p.exact),
                    "gap": number(p.gap),
                    "workloads": p.workload_dicts(single),
                }
            )
        steps = [
            {
                "cap": float(cap) if math.isfinite(cap) else None,
                "hosting_cost": None if p is None else float(p.hosting_cost),
                "throughput": None if p is None else float(p.throughput),
            }
            for cap, p in self.steps
        ]
        return {
            "problem": str(self.problem),
            "metric": "hosting_cost",
            "auto": bool(self.auto),
            "exact": bool(self.exact),
            "front": front,
            "steps": steps,
            "seconds": seconds(self.seconds),
            "notes": list(self.notes),
        }


def sweep_hosting(
    problem: Problem,
    caps: np.ndarray | None = None,
    budget: dict[str, float] | None = None,
    max_candidates: int = MAX_CANDIDATES,
    time_limit: float | None = None,
) -> PlanSweep:
    """Plans under each hosting cap in ``caps`` (``(S,)``), or automatically when ``None``.

    ``budget`` overrides the problem's other caps; any ``hosting_cost`` cap in the problem
    is replaced by the sweep's. Raises :class:`InputError` (field ``budget.hosting_cost``,
    with the cheapest plan's hosting cost) when no cap of the sweep admits a plan.
    """
    t0 = time.perf_counter()
    problem = with_budget(problem, budget)
    auto = caps is None
    if auto:
        top = problem.budget.get("hosting_cost", np.inf)
    else:
        caps = np.sort(np.asarray(caps, dtype=float))
        top = float(caps[-1])
    others = {m: c for m, c in problem.budget.items() if m != "hosting_cost"}
    problem = problem.replace(budget=others)
    traffic = Traffic.of(problem)
    cands, single = build_candidates(problem, traffic, top, max_candidates)

    def solve(cap: float) -> Plan | None:
        return plan_from_candidates(problem, traffic, cands, single, cap, time_limit)

    steps: list[tuple[float, Plan | None]] = []
    if auto:
        cap = top
        while True:
            plan = solve(cap)
            if plan is None:
                break
            steps.append((cap, plan))
            nxt = plan.hosting_cost - AUTO_STEP * max(1.0, plan.hosting_cost)
            if nxt < 0:
                break
            cap = nxt
    else:
        last: Plan | None = None
        assert caps is not None  # given when not auto
        for cap in caps[::-1]:
            if last is not None and last.exact and last.hosting_cost <= cap:
                steps.append((float(cap), last))
                continue
            last = solve(float(cap))
            steps.append((float(cap), last))
    steps.reverse()
    plans = [p for _, p in steps if p is not None]
    if not plans:
        raise hosting_infeasible(problem, traffic, top, max_candidates)
    unique = list({id(p): p for p in plans}.values())
    keep = front_order(
        np.array([p.hosting_cost for p in unique]),
        np.array([p.throughput for p in unique]),
        np.array([p.hosted.sum() for p in unique]),
    )
    front = [unique[i] for i in keep]
    notes = sorted({n for p in unique for n in p.notes})
    return PlanSweep(
        problem=problem.name,
        front=front,
        steps=steps,
        single_front=single,
        exact=all(p.exact for p in unique),
        auto=auto,
        seconds=time.perf_counter() - t0,
        notes=notes,
    )


__all__ = [
    "AUTO_STEP",
    "PlanSweep",
    "sweep_hosting",
]
