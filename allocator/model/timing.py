"""Round time and cost metrics, in units of the verifier's per-unit cost.

``T = draft + verify``. Drafting is ``sequential`` (``k * sum rho_i``, the paper's A4)
or ``parallel`` (``k * max rho_i``, each drafter on its own device). Verification
costs ``pass_cost + token_cost * m * k`` (the paper's A3 is ``token_cost = 0``).
"""

from __future__ import annotations

import numpy as np

DRAFTING = ("sequential", "parallel")


def draft_time(
    k: np.ndarray, sum_rho: np.ndarray, max_rho: np.ndarray, drafting: str
) -> np.ndarray:
    """Drafting time per round; ``k`` broadcasts against ``sum_rho[:, None]``."""
    if drafting == "sequential":
        return k * sum_rho[:, None]
    if drafting == "parallel":
        return k * max_rho[:, None]
    raise ValueError(f"unknown drafting mode {drafting!r}")


def verify_time(tokens: np.ndarray, pass_cost: float, token_cost: float) -> np.ndarray:
    """Cost of one verification pass over ``tokens = m * k`` drafted units."""
    return pass_cost + token_cost * tokens
