"""Independent drafter errors: ``P(all fail) = prod_i (1 - a_i)`` (the paper's A2)."""

from __future__ import annotations

import numpy as np

from .base import ErrorModel, fold_all_subsets


def independent_fail_prob(members: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``prod_{i in S} q_i`` for each row of ``members (B, N)``: ``(B, J)``; exact zeros kept."""
    members = np.asarray(members, dtype=bool)
    zero = q <= 0.0  # acceptance 1: the product is exactly 0
    logq = np.log(np.where(zero, 1.0, q))
    m = members.astype(float)
    out = np.exp(m @ logq)
    if zero.any():
        out[(m @ zero.astype(float)) > 0] = 0.0
    return out


def independent_fail_prob_all(q: np.ndarray) -> np.ndarray:
    """``prod q_i`` for every subset in bitmask order (lowest-bit recursion): ``(2**N, J)``."""
    return fold_all_subsets(q, np.multiply)


class IndependentErrors(ErrorModel):
    name = "independent"

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        return independent_fail_prob(members, q)

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        return independent_fail_prob_all(q)

    def sample_failures(self, index, q, rounds, rng):
        u = rng.random((rounds, q.shape[1], len(index)))
        return u < q[index].T[None]
