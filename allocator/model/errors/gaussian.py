"""A full latent correlation matrix (Gaussian copula): multivariate normal orthants.

``P(all i in S fail at j) = Φ_S(t_S(j); R_SS)``, the multivariate normal CDF of the
members' thresholds under their correlation block. Singletons are exact (``q_i``),
pairs use the vectorised bivariate CDF of :func:`~.latent.bvn_cdf`, larger subsets
SciPy's quasi-Monte Carlo integration (seeded, so results are reproducible), one
call per subset covering all positions at once. Subsets larger than
:data:`MAX_SUBSET` are refused: the integration error would exceed ~1e-6.
"""

from __future__ import annotations

import numpy as np

from ...exceptions import InputError
from .base import ErrorModel
from .latent import bvn_cdf, dedupe_columns, sample_matrix, thresholds

#: Largest subset whose orthant probability is integrated (quasi-Monte Carlo).
MAX_SUBSET = 12
#: Most quasi-Monte Carlo integrations in one call (each takes ~5-40 ms).
MAX_INTEGRALS = 50_000
#: Absolute error requested from the quasi-Monte Carlo integration.
ABS_ERROR = 1e-6


def gaussian_fail_prob(
    members: np.ndarray, q: np.ndarray, matrix: np.ndarray, field: str = "errors.matrix"
) -> np.ndarray:
    """Orthant probabilities ``(B, J)``; ``matrix (N, N)``, or one per position ``(J, N, N)``."""
    members = np.asarray(members, dtype=bool)
    qs, inverse = dedupe_columns(q) if matrix.ndim == 2 else (q, np.arange(q.shape[1]))
    t = thresholds(qs)
    b, j = members.shape[0], qs.shape[1]
    sizes = members.sum(axis=1)
    if sizes.max(initial=0) > MAX_SUBSET:
        raise InputError(
            field,
            f"a subset of {int(sizes.max())} drafters is too large to integrate accurately "
            f"under a full correlation matrix (at most {MAX_SUBSET}); cap search.m.max at "
            f"{MAX_SUBSET} or use errors.model factor",
        )
    integrals = int((sizes >= 3).sum()) * j
    if integrals > MAX_INTEGRALS:
        raise InputError(
            field,
            f"{integrals:,} multivariate normal integrations (subsets of 3 or more drafters "
            f"x positions) would take about {integrals * 0.02 / 60:.0f} min; lower "
            "search.m.max, use the optuna strategy, or errors.model factor",
        )
    out = np.empty((b, j))
    one = sizes == 1
    out[one] = qs[np.argmax(members[one], axis=1)]
    two = sizes == 2
    if two.any():
        first = np.argmax(members[two], axis=1)
        second = members.shape[1] - 1 - np.argmax(members[two][:, ::-1], axis=1)
        r = matrix[first, second][:, None] if matrix.ndim == 2 else matrix[:, first, second].T
        out[two] = bvn_cdf(t[first], t[second], r)
    if np.any(sizes >= 3):
        from scipy.stats import multivariate_normal  # slow to import: only when integrating
    for row in np.flatnonzero(sizes >= 3):
        idx = np.flatnonzero(members[row])
        tt = t[idx]  # (m, J)
        vals = np.zeros(j)
        live = np.all(np.isfinite(tt), axis=0)  # a -inf threshold: that member never fails
        for col in np.flatnonzero(live):
            cov = matrix[np.ix_(idx, idx)] if matrix.ndim == 2 else matrix[col][np.ix_(idx, idx)]
            vals[col] = multivariate_normal.cdf(
                tt[:, col],
                cov=cov,
                allow_singular=True,
                abseps=ABS_ERROR,
                releps=0.0,
                rng=np.random.default_rng(0),
            )
        out[row] = vals
    out = np.clip(out, 0.0, None)
    return out[:, inverse] if matrix.ndim == 2 else out


def check_correlation_matrix(matrix: np.ndarray, field: str) -> None:
    """Symmetric, unit diagonal, entries in [-1, 1], positive semi-definite."""
    if not np.all(np.isfinite(matrix)):
        raise InputError(field, "entries must be finite numbers")
    if not np.allclose(matrix, matrix.T, atol=1e-12, rtol=0):
        i, j = np.unravel_index(np.argmax(np.abs(matrix - matrix.T)), matrix.shape)
        raise InputError(
            field,
            f"not symmetric: entry [{i}][{j}] = {matrix[i, j]} but [{j}][{i}] = {matrix[j, i]}",
        )
    if not np.allclose(np.diag(matrix), 1.0, atol=1e-12, rtol=0):
        raise InputError(field, "the diagonal must be all 1 (a correlation matrix)")
    if np.abs(matrix).max() > 1.0 + 1e-12:
        raise InputError(field, "correlations must lie in [-1, 1]")
    low = float(np.linalg.eigvalsh(matrix).min())
    if low < -1e-9:
        raise InputError(
            field,
            f"not positive semi-definite (smallest eigenvalue {low:.3g}): no joint "
            "distribution has these correlations",
        )


class GaussianErrors(ErrorModel):
    """Gaussian copula with latent correlation ``matrix (N, N)`` (validated when built)."""

    name = "gaussian"

    def __init__(self, matrix: np.ndarray):
        self.matrix = matrix

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        return gaussian_fail_prob(members, q, np.asarray(self.matrix, dtype=float))

    def sample_failures(self, index, q, rounds, rng):
        sub = np.asarray(self.matrix, dtype=float)[np.ix_(index, index)]
        z = sample_matrix(sub, rounds, rng, q.shape[1])
        return z < thresholds(q[index]).T[None]
