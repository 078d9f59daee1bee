"""Round time and cost metrics, in units of the verifier's per-unit cost.

``T = draft + verify``. Drafting is ``sequential`` (``k * sum rho_i``, the paper's A4)
or ``parallel`` (``k * max rho_i``, each drafter on its own device). Verification
costs ``pass_cost + token_cost * m * k`` (the paper's A3 is ``token_cost = 0``), or a
measured ``pass_cost_curve`` interpolated piecewise-linearly in ``m * k``.
"""

from __future__ import annotations

import numpy as np


def draft_time(
    k: np.ndarray, sum_rho: np.ndarray, max_rho: np.ndarray, drafting: str
) -> np.ndarray:
    """Drafting time per round; ``k`` broadcasts against ``sum_rho[:, None]``."""
    if drafting == "sequential":
        return k * sum_rho[:, None]
    if drafting == "parallel":
        return k * max_rho[:, None]
    raise ValueError(f"unknown drafting mode {drafting!r}")


def verify_time(tokens: np.ndarray, pass_cost: float, token_cost: float, curve=None) -> np.ndarray:
    """Cost of one verification pass over ``tokens = m * k`` drafted units.

    ``curve``: optional measured ``(tokens (P,), cost (P,))``, strictly increasing
    tokens; it replaces ``pass_cost + token_cost * tokens`` (see :func:`curve_cost`).
    """
    if curve is not None:
        return curve_cost(tokens, *curve)
    return pass_cost + token_cost * tokens


def curve_cost(tokens: np.ndarray, points: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Piecewise-linear verification cost through measured ``(points, cost)``.

    Between points: linear interpolation. Below the first point: the first cost (a
    pass never costs less than the smallest one measured). Beyond the last point:
    the last segment's slope continues (never falling below the last cost), so
    longer drafts keep paying for the tokens they add.
    """
    tokens = np.asarray(tokens, dtype=float)
    inside = np.interp(tokens, points, cost)
    slope = (cost[-1] - cost[-2]) / (points[-1] - points[-2])
    beyond = cost[-1] + max(slope, 0.0) * (tokens - points[-1])
    return np.where(tokens > points[-1], beyond, inside)


__all__ = [
    "curve_cost",
    "draft_time",
    "verify_time",
]
