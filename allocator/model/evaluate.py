"""Every metric of a configuration, for a whole batch at once.

A configuration is a subset of drafters (a row of a bool membership matrix
``(B, N)``) and a draft length ``k``. :func:`evaluate_subsets` evaluates each subset
at every ``k`` of the problem's search range; :func:`evaluate_configs` evaluates one
``k`` per subset. Both return a dict of float arrays keyed by :data:`METRICS`.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import NotSupportedYet
from .acceptance import expected_accepted, mean_acceptance
from .timing import draft_time, verify_time

METRICS: tuple[str, ...] = (
    "throughput",  # accepted units per verifier-unit of time
    "expected_accepted",  # accepted units per round
    "pooled_acceptance",  # mean pooled per-position acceptance over positions 1..k
    "round_time",  # verifier-units of time per round
    "draft_cost_per_round",  # k * sum(rho_i)
    "draft_cost_per_token",  # k * sum(rho_i) / E_k
    "hosting_cost",  # sum(h_i)
    "drafters",  # m
)


def pooled_acceptance(problem, members: np.ndarray) -> np.ndarray:
    """Pooled per-position acceptance ``a_S(j)`` of each subset: ``(B, J)``."""
    if problem.workloads:
        raise NotSupportedYet("workloads", "evaluating a workload mixture")
    q = 1.0 - problem.acceptance
    return 1.0 - problem.errors.fail_prob(members, q)


def _metrics(
    problem, members: np.ndarray, k: np.ndarray, pooled: np.ndarray, e: np.ndarray
) -> dict:
    """Assemble metrics; ``k`` is ``(K,)`` or ``(B, 1)``, ``e`` and ``pooled`` ``(B, K)``."""
    m = members.astype(float)
    sum_rho = m @ problem.unit_cost
    max_rho = np.max(np.where(members, problem.unit_cost, 0.0), axis=1)
    n_members = m.sum(axis=1)
    draft_cost = k * sum_rho[:, None]
    t = draft_time(k, sum_rho, max_rho, problem.drafting) + verify_time(
        n_members[:, None] * k, problem.pass_cost, problem.token_cost
    )
    shape = e.shape
    return {
        "throughput": e / t,
        "expected_accepted": e,
        "pooled_acceptance": np.broadcast_to(pooled, shape),
        "round_time": np.broadcast_to(t, shape),
        "draft_cost_per_round": np.broadcast_to(draft_cost, shape),
        "draft_cost_per_token": draft_cost / e,
        "hosting_cost": np.broadcast_to((m @ problem.hosting_cost)[:, None], shape),
        "drafters": np.broadcast_to(n_members[:, None], shape),
    }


def evaluate_subsets(problem, members: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics of each subset at every ``k`` in ``problem.k_values``.

    ``members``: bool ``(B, N)``. Returns arrays ``(B, K)`` with ``K = len(k_values)``
    (some are read-only broadcast views).
    """
    members = np.asarray(members, dtype=bool)
    a = pooled_acceptance(problem, members)
    ks = problem.k_values
    e = expected_accepted(a, problem.k_max, problem.convention)[:, ks - 1]
    pooled = mean_acceptance(a, problem.k_max)[:, ks - 1]
    return _metrics(problem, members, ks.astype(float), pooled, e)


def evaluate_configs(problem, members: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics of configurations (``members[b]``, ``k[b]``): arrays ``(B,)``."""
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    if k.shape[0] != members.shape[0]:
        raise ValueError("members and k must have the same batch size")
    a = pooled_acceptance(problem, members)
    k_top = int(k.max())
    idx = (k - 1)[:, None]
    e = np.take_along_axis(expected_accepted(a, k_top, problem.convention), idx, axis=1)
    pooled = np.take_along_axis(mean_acceptance(a, k_top), idx, axis=1)
    out = _metrics(problem, members, k[:, None].astype(float), pooled, e)
    return {name: np.array(v[:, 0]) for name, v in out.items()}
