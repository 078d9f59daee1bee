"""The assignment programme: which drafters to host, which candidate each workload runs.

Binary ``y_i`` (drafter ``i`` hosted) and ``x_c`` (candidate ``c`` chosen for its
workload ``w(c)``); solved exactly by HiGHS through cvxpy::

    minimise    Σ_c cost_c · x_c
    subject to  Σ_{c ∈ w} x_c = 1                  for every workload w
                Σ_{c ∈ w, i ∈ c} x_c <= y_i        for every workload w and drafter i
                Σ_i h_i · y_i <= B                 (when a hosting cap is given)

The linking rows aggregate ``x_c <= y_i`` over a workload's candidates; since exactly one
``x_c`` of a workload is 1 they allow the same integer points and a tighter relaxation.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..._lazy import lazy_module

if TYPE_CHECKING:
    import cvxpy as cp
    import highspy
    import scipy.sparse as sp
else:
    cp = lazy_module("cvxpy")
    highspy = lazy_module("highspy")
    sp = lazy_module("scipy.sparse")

#: HiGHS options: prove optimality (no relative or absolute gap allowed), and hold
#: rows to 1e-9 so a hosting cap is not exceeded by the default tolerance of 1e-7.
HIGHS_OPTIONS = {
    "mip_rel_gap": 0.0,
    "mip_abs_gap": 0.0,
    "primal_feasibility_tolerance": 1e-9,
    "mip_feasibility_tolerance": 1e-9,
}


@functools.cache
def _silence_highs_banner() -> None:
    """HiGHS prints a copyright banner on stdout (file descriptor 1) when the first
    ``Highs`` object of a process is made; make that first one with stdout closed, so
    ``--json -`` keeps stdout to the JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass
class Assignment:
    """The solver's answer.

    choice : ``(W,)`` candidate index per workload (``None`` when infeasible).
    hosted : ``(N,)`` bool, the solver's ``y``.
    status : cvxpy status (``optimal``, ``infeasible``, ...).
    bound : the solver's proven lower bound on the objective (``nan`` if none).
    """

    choice: np.ndarray | None
    hosted: np.ndarray | None
    status: str
    bound: float


def solve_assignment(
    workload: np.ndarray,
    members: np.ndarray,
    cost: np.ndarray,
    hosting_cost: np.ndarray,
    n_workloads: int,
    hosting_cap: float | None = None,
    objective: str = "time",
    time_limit: float | None = None,
    memory: tuple[np.ndarray, float] | None = None,
) -> Assignment:
    """Solve the programme.

    Parameters
    ----------
    workload : ``(C,)`` int, each candidate's workload in ``0..W-1``.
    members : ``(C, N)`` bool, each candidate's drafters.
    cost : ``(C,)`` objective coefficient of each candidate (``p_w / S_w(c)``, time per
        generated unit in verifier-units).
    hosting_cost : ``(N,)`` ``h_i``; hosting_cap : ``B`` (``None``: no cap).
    objective : ``"time"`` minimises ``Σ cost_c x_c``; ``"hosting"`` minimises
        ``Σ h_i y_i`` (the cheapest hosted set that serves every workload).
    time_limit : seconds for HiGHS (``None``: no limit).
    memory : ``(gb (N,), cap)``: the hosted drafters' memory ``Σ gb_i y_i <= cap`` (GB of
        KV cache they may take, :func:`allocator.model.memory_fit.hosting_room`), or ``None``.
    """
    _silence_highs_banner()
    c_count, n = members.shape
    x = cp.Variable(c_count, boolean=True)
    y = cp.Variable(n, boolean=True)
    cols = np.arange(c_count)
    choose = sp.csr_matrix((np.ones(c_count), (workload, cols)), shape=(n_workloads, c_count))
    cand, drafter = np.nonzero(members)
    link = sp.csr_matrix(
        (np.ones(cand.size), (workload[cand] * n + drafter, cand)),
        shape=(n_workloads * n, c_count),
    )
    spread = sp.csr_matrix(np.tile(np.eye(n), (n_workloads, 1)))
    constraints = [choose @ x == 1, link @ x - spread @ y <= 0]
    if hosting_cap is not None and np.isfinite(hosting_cap):
        constraints.append(hosting_cost @ y <= hosting_cap)
    if memory is not None:
        constraints.append(memory[0] @ y <= memory[1])
    goal = cost @ x if objective == "time" else hosting_cost @ y
    prog = cp.Problem(cp.Minimize(goal), constraints)
    options = dict(HIGHS_OPTIONS)
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    with warnings.catch_warnings():
        # a stopped solve is reported through `status` (and the plan's notes)
        warnings.filterwarnings("ignore", message="Solution may be inaccurate")
        prog.solve(solver=cp.HIGHS, **options)
    info = (prog.solver_stats.extra_stats if prog.solver_stats else None) or None
    bound = float(getattr(info, "mip_dual_bound", np.nan)) if info is not None else np.nan
    if x.value is None:
        return Assignment(None, None, prog.status, bound)
    xv = x.value.reshape(c_count)
    # per workload, the candidate with the largest x (exactly one is 1 up to tolerance)
    order = np.lexsort((-xv, workload))
    first = np.searchsorted(workload[order], np.arange(n_workloads))
    choice = order[first]
    return Assignment(choice, np.asarray(y.value).reshape(n) > 0.5, prog.status, bound)


__all__ = [
    "HIGHS_OPTIONS",
    "Assignment",
    "solve_assignment",
]
