"""The budget rules every search and analysis applies: what "within the budget" means.

A budget is a mapping from a capped metric's name (``draft_cost_per_round``,
``draft_cost_per_token``, ``hosting_cost``, ``drafters``, ...) to its cap, in that
metric's units (docs/design.md §2.5). A value is within a cap up to the slack
:data:`BUDGET_RTOL`, so that floating-point rounding never decides feasibility.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..exceptions import InfeasibleError

#: Budgets are met up to this relative slack, absorbing floating-point rounding
#: (``3 * 0.05 * 4`` is ``0.6000000000000001``).
BUDGET_RTOL = 1e-9


def budget_limit(cap: float) -> float:
    """The largest value within the budget cap ``cap`` (in the capped metric's units).

    ``cap`` plus the slack :data:`BUDGET_RTOL`, relative, and absolute below 1; an
    infinite cap stays infinite.
    """
    return cap + BUDGET_RTOL * max(1.0, abs(cap))


def within(value: np.ndarray | float, cap: float) -> np.ndarray:
    """``value <= cap`` with the budget slack (bool, shaped like ``value``)."""
    return np.asarray(value) <= budget_limit(cap)


def feasible_mask(metrics: Mapping[str, np.ndarray], budget: Mapping[str, float]) -> np.ndarray:
    """Where every budget cap holds; arrays of any common shape.

    metrics : arrays keyed by metric name, broadcastable to the shape of
    ``metrics["throughput"]``, which is the shape of the bool result.
    """
    ok = np.ones(np.shape(metrics["throughput"]), bool)
    for name, cap in budget.items():
        ok &= metrics[name] <= budget_limit(cap)
    return ok


def infeasible_error(budget: Mapping[str, float], lowest: Mapping[str, float]) -> InfeasibleError:
    """The error for a budget no configuration meets, naming the cap that binds.

    ``lowest`` holds, per capped metric, its lowest value over the search space.
    """
    alone = [m for m, cap in budget.items() if lowest[m] > budget_limit(cap)]
    if alone:
        m = alone[0]
        return InfeasibleError(
            f"budget.{m}",
            f"no configuration meets {m} <= {budget[m]:g} (the lowest in the search space "
            f"is {lowest[m]:.6g})",
        )
    caps = " and ".join(f"{m} <= {c:g}" for m, c in budget.items())
    return InfeasibleError("budget", f"no configuration meets {caps} at once")


__all__ = ["BUDGET_RTOL", "budget_limit", "feasible_mask", "infeasible_error", "within"]
