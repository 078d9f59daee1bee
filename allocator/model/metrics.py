"""Every metric of a configuration, for a whole batch at once.

A configuration is a subset of drafters (a row of a bool membership matrix
``(B, N)``) and a draft length ``k``. :func:`evaluate_subsets` evaluates each subset
at every ``k`` of the problem's search range; :func:`evaluate_configs` evaluates one
``k`` per subset. Both return a dict of float arrays keyed by :data:`METRICS`.

Workload mixtures (``problem.workloads``, weights ``p_w`` = each workload's share of
generated units): round time does not depend on acceptance, so a workload's rounds
take the same ``T`` and the long-run throughput ``1 / Σ_w p_w / S_w`` equals
``E / T`` with ``E = 1 / Σ_w p_w / E_w``. That ``E`` is the mean accepted units per
round over all rounds (workload ``w`` takes a share ``π_w = (p_w / E_w) · E`` of the
rounds), so for a mixture

* ``expected_accepted`` is ``1 / Σ_w p_w / E_w`` (units per round, averaged over rounds),
* ``throughput`` is ``expected_accepted / round_time``, the renewal-reward rate,
* ``pooled_acceptance`` is the round-weighted mean ``Σ_w π_w ā_w``,
* ``draft_cost_per_token`` is draft cost per generated unit over the long run;
  ``round_time``, ``draft_cost_per_round``, ``hosting_cost`` and ``drafters`` are those
  of any single round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import independent_fail_prob
from ..core.result import METRICS
from ..exceptions import InputError, NotModelledError
from .acceptance import (
    expected_accepted,
    extend_positions,
    first_positions,
    mean_acceptance,
    survival,
)
from .timing import draft_time, verify_time

if TYPE_CHECKING:
    from ..core.problem import Problem


#: Metrics in verifier-units of time, which need each member's ``unit_cost``.
UNIT_COST_METRICS = ("throughput", "round_time", "draft_cost_per_round", "draft_cost_per_token")
#: Budget caps on a draft cost: a mask on them needs every member's ``unit_cost``.
DRAFT_COST_CAPS = ("draft_cost_per_round", "draft_cost_per_token")


def missing_unit_cost(problem: Problem, members: np.ndarray | None = None) -> str | None:
    """The name of the first drafter without a ``unit_cost`` (NaN in the problem: a
    serving file may leave it out) among ``members`` (``(N,)`` or ``(B, N)`` bool, any
    row), or among the drafters the search may use (not ``search.exclude``d) when
    ``None``; ``None`` when every one has it."""
    missing = ~np.isfinite(np.asarray(problem.unit_cost, dtype=float))
    if not missing.any():
        return None
    used = ~problem.excluded if members is None else np.atleast_2d(members).any(axis=0)
    hit = np.flatnonzero(missing & np.asarray(used, bool))
    return problem.names[int(hit[0])] if hit.size else None


def unit_cost_error(name: str, needed_by: str) -> InputError:
    """The refusal of an answer in verifier-units for drafter ``name`` without a cost."""
    return InputError(
        f"drafters[{name}].unit_cost",
        f"missing: {needed_by} needs each drafter's draft cost per unit (unit_cost, in "
        "verifier-units: one verification pass costs 1)",
    )


def require_unit_cost(
    problem: Problem,
    members: np.ndarray | None = None,
    needed_by: str = "an answer in verifier-units",
) -> None:
    """Refuse (:class:`~allocator.exceptions.InputError` naming
    ``drafters[NAME].unit_cost``) when a drafter of ``members`` (default: every drafter
    the search may use) has no ``unit_cost``; ``needed_by`` says what needs it."""
    name = missing_unit_cost(problem, members)
    if name is not None:
        raise unit_cost_error(name, needed_by)


def no_chain_closed_form(model: str) -> NotModelledError:
    """The refusal of ``longest-chain`` pooling under a correlated error ``model``."""
    return NotModelledError(
        "pooling",
        "longest-chain pooling has a closed form only for independent errors "
        f"(errors.model is {model!r}); run `allocator simulate` for correlated chains",
    )


def chain_acceptance(members: np.ndarray, acceptance: np.ndarray, k_max: int) -> np.ndarray:
    """Effective per-position acceptance of ``longest-chain`` pooling: ``(B, k_max)``.

    Each member drafts its own chain; ``P_any(i) = 1 - Π_{d∈S} (1 - Π_{j<=i} a_d(j))`` is the
    probability that some chain survives position ``i`` (independent errors). Column
    ``j - 1`` holds ``P_any(j) / P_any(j - 1)``, so that the ``paper`` and ``bonus``
    sums of :func:`~.acceptance.expected_accepted` reproduce docs/design.md §2.1's
    ``Σ_i [1 - Π_d (1 - survival_d(i))]`` exactly.
    """
    surv = survival(acceptance, k_max)[:, 1:]  # (N, k_max): positions 1..k_max
    p_any = 1.0 - independent_fail_prob(members, 1.0 - surv)  # (B, k_max)
    prev = np.concatenate([np.ones((p_any.shape[0], 1)), p_any[:, :-1]], axis=1)
    return np.divide(p_any, prev, out=np.zeros_like(p_any), where=prev > 0)


def pooled_acceptance(
    problem: Problem, members: np.ndarray, k_max: int | None = None
) -> np.ndarray:
    """Pooled per-position acceptance ``a_S(j)`` of each subset: ``(B, J)``.

    For a single class of traffic (a problem without workloads, or a
    :meth:`~allocator.core.problem.Problem.workload_view`). Measured ``ensembles`` replace
    the model for exactly their subsets. ``longest-chain`` pooling gives the
    effective acceptance of :func:`chain_acceptance` (``J = k_max``, which it needs).
    """
    if problem.workloads:
        raise ValueError("a workload mixture has no single pooled acceptance; use a workload_view")
    return _pooled(problem, members, problem.acceptance, problem.errors, k_max or problem.k_max)


def _pooled(problem: Problem, members, acceptance, errors, k_max) -> np.ndarray:
    members = np.asarray(members, dtype=bool)
    if problem.pooling == "longest-chain":
        if errors.name != "independent":
            raise no_chain_closed_form(errors.name)
        return chain_acceptance(members, acceptance, k_max)
    # positions past k_max are never drafted: pool only the first k_max
    a = 1.0 - errors.fail_prob(members, 1.0 - first_positions(acceptance, k_max))
    for ens in problem.ensembles:
        rows = np.all(members == ens.members, axis=1)
        if rows.any():
            width = max(a.shape[1], ens.acceptance.size)
            a = extend_positions(a, width)
            a[rows] = extend_positions(ens.acceptance, width)
    return a


def curves(problem: Problem, members: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """``E_k`` and mean pooled acceptance for ``k = 1..k_max``: two ``(B, k_max)`` arrays,
    combined over workloads as the module docstring says."""
    if not problem.workloads:
        a = _pooled(problem, members, problem.acceptance, problem.errors, k_max)
        return expected_accepted(a, k_max, problem.convention), mean_acceptance(a, k_max)
    inv: np.ndarray | float = 0.0
    weighted: np.ndarray | float = 0.0
    for w in problem.workloads:
        errors = problem.errors if w.errors is None else w.errors
        a = _pooled(problem, members, w.acceptance, errors, k_max)
        e = expected_accepted(a, k_max, problem.convention)
        share = w.weight / e
        inv = inv + share
        weighted = weighted + share * mean_acceptance(a, k_max)
    return np.asarray(1.0 / inv), np.asarray(weighted / inv)


def _unit_costs(
    problem: Problem, members: np.ndarray, verifier_units: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(sum rho, max rho)`` of each subset ``(B,)``: NaN for a subset with a drafter
    that has no ``unit_cost`` when ``verifier_units`` is false (its metrics in
    verifier-units are then NaN), a refusal naming that drafter when it is true or when
    the budget caps a draft cost (the mask would be wrong)."""
    rho = np.asarray(problem.unit_cost, dtype=float)
    missing = ~np.isfinite(rho)
    if not missing.any():
        m = members.astype(float)
        return m @ rho, np.max(np.where(members, rho, 0.0), axis=1)
    involved = members[:, missing].any(axis=1)
    if involved.any():
        capped = [c for c in DRAFT_COST_CAPS if c in problem.budget]
        if verifier_units or capped:
            name = problem.names[int(np.flatnonzero(missing & members[involved].any(axis=0))[0])]
            needed_by = f"budget.{capped[0]}" if capped else "an answer in verifier-units"
            raise unit_cost_error(name, needed_by)
    known = np.where(missing, 0.0, rho)
    sum_rho = members.astype(float) @ known
    max_rho = np.max(np.where(members, known, 0.0), axis=1)
    sum_rho[involved] = np.nan
    max_rho[involved] = np.nan
    return sum_rho, max_rho


def _metrics(
    problem: Problem,
    members: np.ndarray,
    k: np.ndarray,
    pooled: np.ndarray,
    e: np.ndarray,
    verifier_units: bool = True,
) -> dict:
    """Assemble metrics; ``k`` is ``(K,)`` or ``(B, 1)``, ``e`` and ``pooled`` ``(B, K)``."""
    m = members.astype(float)
    sum_rho, max_rho = _unit_costs(problem, members, verifier_units)
    n_members = m.sum(axis=1)
    draft_cost = k * sum_rho[:, None]
    t = draft_time(k, sum_rho, max_rho, problem.drafting) + verify_time(
        n_members[:, None] * k, problem.pass_cost, problem.token_cost, problem.pass_cost_curve
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


def evaluate_subsets(
    problem: Problem, members: np.ndarray, *, verifier_units: bool = True
) -> dict[str, np.ndarray]:
    """Metrics of each subset at every ``k`` in ``problem.k_values``.

    ``members``: bool ``(B, N)``. Returns arrays ``(B, K)`` with ``K = len(k_values)``
    (some are read-only broadcast views). A member without ``unit_cost`` is refused
    (naming ``drafters[NAME].unit_cost``) unless ``verifier_units`` is false: a caller
    that answers in tokens/s and reads only ``expected_accepted``, ``pooled_acceptance``,
    ``hosting_cost`` and ``drafters`` gets NaN for :data:`UNIT_COST_METRICS` instead
    (still refused when the budget caps a draft cost).
    """
    members = np.asarray(members, dtype=bool)
    ks = problem.k_values
    e, pooled = curves(problem, members, problem.k_max)
    return _metrics(
        problem, members, ks.astype(float), pooled[:, ks - 1], e[:, ks - 1], verifier_units
    )


def evaluate_configs(
    problem: Problem, members: np.ndarray, k: np.ndarray, *, verifier_units: bool = True
) -> dict[str, np.ndarray]:
    """Metrics of configurations (``members[b]``, ``k[b]``): arrays ``(B,)``; a member
    without ``unit_cost`` as in :func:`evaluate_subsets`."""
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    if k.shape[0] != members.shape[0]:
        raise ValueError("members and k must have the same batch size")
    e, pooled = curves(problem, members, int(k.max()))
    idx = (k - 1)[:, None]
    e = np.take_along_axis(e, idx, axis=1)
    pooled = np.take_along_axis(pooled, idx, axis=1)
    out = _metrics(problem, members, k[:, None].astype(float), pooled, e, verifier_units)
    return {name: np.array(v[:, 0]) for name, v in out.items()}


__all__ = [
    "DRAFT_COST_CAPS",
    "METRICS",
    "UNIT_COST_METRICS",
    "chain_acceptance",
    "curves",
    "evaluate_configs",
    "evaluate_subsets",
    "missing_unit_cost",
    "no_chain_closed_form",
    "pooled_acceptance",
    "require_unit_cost",
    "unit_cost_error",
]
