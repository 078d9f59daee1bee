"""Plans for mixed traffic: which drafters to host under a budget, and which
configuration (subset and ``k``) each workload runs — exact, by mixed-integer
programming (cvxpy with HiGHS). :func:`make_plan` gives one plan; :func:`sweep_hosting`
the capacity-planning curve of throughput against hosting cost."""

from __future__ import annotations

from .candidates import Candidates, SingleFront, Traffic, build_candidates
from .hosting_sweep import PlanSweep, sweep_hosting
from .plan import MAX_CANDIDATES, Plan, make_plan

__all__ = [
    "MAX_CANDIDATES",
    "Candidates",
    "Plan",
    "PlanSweep",
    "SingleFront",
    "Traffic",
    "build_candidates",
    "make_plan",
    "sweep_hosting",
]
