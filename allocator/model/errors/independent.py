"""Independent drafter errors: ``P(all fail) = prod_i (1 - a_i)`` (the paper's A2)."""

from __future__ import annotations

import numpy as np

from .base import ErrorModel


class IndependentErrors(ErrorModel):
    name = "independent"

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        members = np.asarray(members, dtype=bool)
        zero = q <= 0.0  # acceptance 1: the product is exactly 0
        logq = np.log(np.where(zero, 1.0, q))
        m = members.astype(float)
        out = np.exp(m @ logq)
        if zero.any():
            out[(m @ zero.astype(float)) > 0] = 0.0
        return out

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        # lowest-bit recursion: P(S) = P(S without its lowest member) * q_lowest
        n, j = q.shape
        out = np.ones((1 << n, j))
        for i in range(n):
            lo, hi = 1 << i, 1 << (i + 1)
            np.multiply(out[: hi - lo], q[i], out=out[lo:hi])
        return out
