"""One-factor Gaussian copula: one loading ``β_i`` per drafter.

``Z_i = β_i W + √(1 - β_i²) ε_i``; conditional on the factor ``W`` the drafters fail
independently, so ``P(all i in S fail) = ∫ Π_{i∈S} Φ((t_i - β_i z)/√(1 - β_i²)) φ(z) dz``,
a one-dimensional quadrature where every subset is a sum of logs at each node
(:func:`~.latent.factor_fail_prob`). Pairwise latent correlation is ``β_i β_j``.
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ErrorModel, independent_fail_prob, independent_fail_prob_all
from .latent import (
    dedupe_columns,
    factor_fail_prob,
    factor_fail_prob_all,
    sample_factor,
    thresholds,
)


class FactorErrors(ErrorModel):
    """Loadings ``(N,)`` in the open interval (-1, 1), in drafter order."""

    name = "factor"

    def __init__(self, loadings: np.ndarray):
        self.loadings = loadings

    def _beta(self, q: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.loadings, dtype=float)[:, None], q.shape)

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        if not np.any(self.loadings):
            return independent_fail_prob(members, q)
        qs, inv = dedupe_columns(q)
        return factor_fail_prob(members, thresholds(qs), self._beta(qs))[:, inv]

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        if not np.any(self.loadings):
            return independent_fail_prob_all(q)
        qs, inv = dedupe_columns(q)
        return factor_fail_prob_all(thresholds(qs), self._beta(qs))[:, inv]

    def sample_failures(self, index, q, rounds, rng):
        z = sample_factor(self._beta(q)[index], rounds, rng)
        return z < thresholds(q[index]).T[None]


__all__ = [
    "FactorErrors",
]
