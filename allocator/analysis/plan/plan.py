"""A plan for mixed traffic: the hosted drafters and each workload's configuration.

:func:`make_plan` picks the hosted set ``H`` (``Σ_{i∈H} h_i`` within the hosting cap) and,
per workload ``w``, a configuration (a subset of ``H`` and a ``k``) minimising the
expected time per generated unit ``Σ_w p_w / S_w``; the overall throughput is its
inverse (the weighted harmonic mean, docs/design.md §2.4). Beside it stands the best *single*
configuration for all traffic under the same budget (what ``solve`` picks on the
mixture), so the value of routing each workload separately is visible.

Caps on per-configuration metrics (``draft_cost_per_round``, ``draft_cost_per_token``,
``drafters``) hold for each workload's configuration on that workload's own traffic;
the ``hosting_cost`` cap holds for the hosted set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.budget import budget_limit, within
from ...core.documents import CONFIG_FIELDS, MODEL_FIELDS, names_of, number, seconds
from ...core.result import Front
from ...exceptions import InfeasibleError, InputError, ParameterError, SolverError
from ...model.memory_fit import hosting_room
from ...model.metrics import evaluate_configs
from .candidates import Candidates, SingleFront, Traffic, build_candidates
from .milp import solve_assignment

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Candidates kept per workload after pruning; beyond it the plan is not proven optimal.
MAX_CANDIDATES = 2000


@dataclass
class Plan:
    """One plan.

    names : drafter names ``(N,)``; workloads : workload names ``(W,)``; weights : ``(W,)``
    shares of generated units, sum 1.
    budget : the caps the plan meets (``hosting_cost``: the cap it was solved under).
    hosted : ``(N,)`` bool, the drafters some workload runs; hosting_cost : their sum, in
    the units of the drafters' ``hosting_cost``.
    members : ``(W, N)`` bool and k : ``(W,)``, each workload's configuration.
    metrics : per workload, every metric of its configuration on its own traffic
    (dict of ``(W,)`` arrays keyed by :data:`allocator.model.METRICS`).
    throughput : overall accepted units per verifier-unit of time, ``1 / Σ p_w / S_w``.
    single : index into ``single_front`` of the best one-configuration plan under the
    same hosting cap (``None`` when no single configuration meets every cap).
    status, exact, gap : solver status; proven optimal over the whole search space;
    relative optimality gap ``(objective − bound) / objective`` (0 when proven).
    candidates : those the programme chose from; seconds : wall-clock time to plan;
    notes : caveats for the user (candidates cut, solver stopped, a fallback taken).
    """

    problem: str
    names: tuple[str, ...]
    workloads: tuple[str, ...]
    weights: np.ndarray
    budget: dict[str, float]
    hosted: np.ndarray
    hosting_cost: float
    members: np.ndarray
    k: np.ndarray
    metrics: dict[str, np.ndarray]
    throughput: float
    single_front: SingleFront
    single: int | None
    status: str
    exact: bool
    gap: float
    candidates: Candidates
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def single_throughput(self) -> float | None:
        """Mixture throughput of the best single configuration (``None``: none)."""
        return None if self.single is None else float(self.single_front.throughput[self.single])

    def to_dict(self) -> dict[str, Any]:
        """``plan --json`` (docs/design.md §6): status, exact, gap (``null`` when unknown),
        the caps, overall throughput, the hosted set and its cost, the best ``single``
        configuration for all traffic and the ``routing_gain`` over it, each workload's
        configuration, the candidates per workload, seconds and notes."""
        s = self.single_front
        single: dict[str, Any] | None = None
        if self.single is not None:
            i = self.single
            single = {
                "drafters": names_of(self.names, s.members[i]),
                "m": int(s.members[i].sum()),
                "k": int(s.k[i]),
                "throughput": float(s.throughput[i]),
                "hosting_cost": float(s.hosting_cost[i]),
            }
        c = self.candidates
        counts = {
            key: dict(zip(self.workloads, map(int, getattr(c, key)), strict=True))
            for key in ("enumerated", "pruned", "kept")
        }
        return {
            "problem": str(self.problem),
            "status": str(self.status),
            "exact": bool(self.exact),
            "gap": number(self.gap),
            "budget": {str(m): float(cap) for m, cap in self.budget.items()},
            "throughput": float(self.throughput),
            "hosted": names_of(self.names, self.hosted),
            "hosting_cost": float(self.hosting_cost),
            "single": single,
            "routing_gain": None
            if single is None
            else float(self.throughput) / single["throughput"] - 1.0,
            "workloads": self.workload_dicts(self.single),
            "candidates": {**counts, "cut": bool(c.cut)},
            "seconds": seconds(self.seconds),
            "notes": list(self.notes),
        }

    def workload_dicts(self, single: int | None) -> list[dict[str, Any]]:
        """Per workload: its name, weight, configuration and metrics on its own traffic,
        with ``single_throughput``, its throughput under configuration ``single`` of
        ``single_front`` (``None``: no such configuration)."""
        per = None if single is None else self.single_front.per_workload[single]
        # one point per workload; its `cost` (the hosting cost again) is not a field here
        configs = Front(self.members, self.k, self.metrics, "hosting_cost")
        rows = []
        for w, name in enumerate(self.workloads):
            p = configs.point(w, self.names)
            rows.append(
                {
                    "name": str(name),
                    "weight": float(self.weights[w]),
                    **{f: p[f] for f in CONFIG_FIELDS},
                    "throughput": p["throughput"],
                    "single_throughput": None if per is None else float(per[w]),
                    **{f: p[f] for f in MODEL_FIELDS},
                }
            )
        return rows


def with_budget(problem: Problem, overrides: dict[str, float] | None):
    """``problem`` with some budget caps replaced."""
    if not overrides:
        return problem
    return problem.replace(budget={**problem.budget, **overrides})


def make_plan(
    problem: Problem,
    budget: dict[str, float] | None = None,
    max_candidates: int = MAX_CANDIDATES,
    time_limit: float | None = None,
    batch: int | None = None,
) -> Plan:
    """The optimal plan of ``problem`` under its budget (``budget`` overrides caps).

    ``batch``: each replica must still hold that many sequences, so the hosted drafters'
    ``memory_gb`` may take at most ``kv_cache_gb - batch · kv_per_seq_gb`` of the KV cache
    (``serving.memory``; :mod:`allocator.model.memory_fit`).

    Raises :class:`InputError` (field ``budget.<metric>``) when no plan meets the budget,
    (``--batch``) when none leaves room for the batch.
    """
    t0 = time.perf_counter()
    problem = with_budget(problem, budget)
    traffic = Traffic.of(problem)
    cap = problem.budget.get("hosting_cost", np.inf)
    memory = None if batch is None else hosting_room(problem, batch)
    cands, single = build_candidates(problem, traffic, cap, max_candidates)
    plan = plan_from_candidates(problem, traffic, cands, single, cap, time_limit, memory)
    if plan is None and memory is not None:
        free = plan_from_candidates(problem, traffic, cands, single, cap, time_limit)
        if free is not None:
            raise ParameterError(
                "batch",
                f"no plan's hosted drafters leave KV-cache memory for {batch} sequences "
                f"(they may take {memory[1]:.6g} GB; serving.memory, drafters[].memory_gb)",
            )
    if plan is None:
        raise hosting_infeasible(problem, traffic, cap, max_candidates)
    if memory is not None:
        plan.notes.append(
            f"hosted drafters take {float(memory[0][plan.hosted].sum()):.6g} GB of KV cache, "
            f"leaving room for {batch} sequences per replica"
        )
    plan.seconds = time.perf_counter() - t0
    return plan


def hosting_infeasible(
    problem: Problem, traffic, cap: float, max_candidates: int
) -> InfeasibleError:
    """The error for a hosting cap no plan meets, with the cheapest plan's hosting cost.

    Candidates are rebuilt without the cap, so the cheapest hosted set that lets every
    workload run is found over the whole search space (this runs on the error path only).
    """
    cands, _ = build_candidates(problem, traffic, np.inf, max_candidates)
    cheapest = solve_assignment(
        cands.workload,
        cands.members,
        np.zeros(cands.k.size),
        problem.hosting_cost,
        len(traffic),
        objective="hosting",
    )
    least = (
        float(problem.hosting_cost[cheapest.hosted].sum())
        if cheapest.hosted is not None
        else np.nan
    )
    return InfeasibleError(
        "budget.hosting_cost",
        f"no plan meets hosting_cost <= {cap:g}: hosting drafters for every workload costs "
        f"at least {least:.6g}",
    )


def plan_from_candidates(
    problem: Problem,
    traffic: Traffic,
    cands: Candidates,
    single: SingleFront,
    cap: float,
    time_limit: float | None = None,
    memory: tuple[np.ndarray, float] | None = None,
) -> Plan | None:
    """Solve the programme over ``cands`` under hosting cap ``cap``; ``None`` if infeasible.

    ``cands`` may have been built for a larger cap (a sweep builds them once).
    ``memory``: ``(gb (N,), cap)`` on the hosted drafters' memory (see :func:`make_plan`).
    """
    cost = traffic.weights[cands.workload] / cands.throughput
    usable = within(cands.members.astype(float) @ problem.hosting_cost, cap)
    n_w = len(traffic)
    one = single.best_within(cap)
    if memory is not None:
        usable &= cands.members.astype(float) @ memory[0] <= memory[1]
        fits = within(single.hosting_cost, cap) & (single.members @ memory[0] <= memory[1])
        one = int(np.flatnonzero(fits)[-1]) if fits.any() else None
    # without a per-token cap, one configuration for all traffic is a routed plan too
    one_routable = one is not None and "draft_cost_per_token" not in problem.budget
    notes = []
    if cands.cut:
        notes.append(
            f"candidates were cut to the best {int(cands.kept.max())} per workload "
            f"(of {', '.join(str(int(c)) for c in cands.pruned)} after pruning): the plan is "
            "the best over those, not proven optimal over the whole search space"
        )
    found = None
    if np.bincount(cands.workload[usable], minlength=n_w).min() > 0:
        idx = np.flatnonzero(usable)
        found = solve_assignment(
            cands.workload[idx],
            cands.members[idx],
            cost[idx],
            problem.hosting_cost,
            n_w,
            hosting_cap=budget_limit(cap),
            time_limit=time_limit,
            memory=memory,
        )
        if found.choice is None and found.status not in ("infeasible", "infeasible_inaccurate"):
            field = "time_limit" if found.status == "user_limit" else "plan"
            raise SolverError(
                field, f"the MILP solver stopped without a plan (status {found.status})"
            )
    if found is None or found.choice is None:
        if not (cands.cut and one_routable):
            return None
        assert one is not None  # one_routable
        status, proven, bound = "single_configuration", False, np.nan
        members, k, objective = _single_for_all(single, one, n_w)
        notes.append(
            "the cut candidates admit no plan under this hosting cap; one configuration for "
            "all traffic serves every workload instead"
        )
    else:
        choice = idx[found.choice]
        # Given the drafters the chosen configurations use, each workload takes its best
        # candidate among those they allow (a no-op at a proven optimum; it can only help).
        hosted = cands.members[choice].any(axis=0)
        allowed = ~(cands.members & ~hosted).any(axis=1) & usable
        score = np.where(allowed, -cost, -np.inf)
        order = np.lexsort((-score, cands.workload))
        choice = order[np.searchsorted(cands.workload[order], np.arange(n_w))]
        members, k = cands.members[choice], cands.k[choice]
        objective = float(cost[choice].sum())
        status, proven, bound = found.status, found.status == "optimal", found.bound
        if not proven:
            notes.append(f"the solver stopped with status {status}: the plan is not proven optimal")
        if one is not None and single.throughput[one] > (1.0 + 1e-12) / objective:
            if one_routable:  # an unproven answer can be worse than it, never a proven one
                members, k, objective = _single_for_all(single, one, n_w)
                notes.append(
                    "the solver's plan was slower than one configuration for all traffic; "
                    "that configuration serves every workload instead"
                )
            else:
                notes.append(
                    "one configuration for all traffic is faster here: it meets "
                    "draft_cost_per_token on the mixture's average, while each routed "
                    "configuration meets it on its own workload"
                )
    hosted = members.any(axis=0)
    host_cost = float(problem.hosting_cost[hosted].sum())
    if not within(host_cost, cap):
        raise InputError("plan", f"the plan's hosting cost {host_cost} is over the cap {cap}")
    gap = max(0.0, (objective - bound) / objective) if np.isfinite(bound) else np.nan
    metrics = _workload_metrics(traffic, members, k)
    return Plan(
        problem=problem.name,
        names=problem.names,
        workloads=traffic.names,
        weights=traffic.weights,
        budget={**problem.budget, **({"hosting_cost": cap} if np.isfinite(cap) else {})},
        hosted=hosted,
        hosting_cost=host_cost,
        members=members,
        k=k,
        metrics=metrics,
        throughput=1.0 / objective,
        single_front=single,
        single=one,
        status=status,
        exact=proven and not cands.cut,
        gap=0.0 if proven and gap < 1e-9 else gap,
        candidates=cands,
        notes=notes,
    )


def _single_for_all(single: SingleFront, one: int, n_w: int):
    """Every workload on configuration ``one`` of ``single``: members ``(W, N)``, k ``(W,)``
    and the objective (time per generated unit)."""
    members = np.repeat(single.members[one][None, :], n_w, axis=0)
    return members, np.repeat(single.k[one], n_w), 1.0 / float(single.throughput[one])


def _workload_metrics(traffic: Traffic, members: np.ndarray, k: np.ndarray) -> dict:
    """Every metric of workload ``w``'s configuration on its own traffic: ``(W,)`` arrays."""
    rows = [
        evaluate_configs(v, members[w : w + 1], k[w : w + 1]) for w, v in enumerate(traffic.views)
    ]
    return {m: np.concatenate([r[m] for r in rows]) for m in rows[0]}


__all__ = [
    "MAX_CANDIDATES",
    "Plan",
    "hosting_infeasible",
    "make_plan",
    "plan_from_candidates",
    "with_budget",
]
