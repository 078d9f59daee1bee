"""Exchangeable errors: a latent Gaussian copula with one correlation for every pair.

Given as ``correlation`` (the latent correlation ``r`` in [0, 1]) or as
``error_correlation`` (the Pearson correlation ``φ`` of two drafters' error
indicators), converted to the latent scale through the bivariate normal CDF.

* ``r = 0`` is exactly the independent model, ``r = 1`` exactly the comonotone
  limit ``min_i q_i``.
* Otherwise ``Z_i = √r W + √(1 - r) ε_i``: a one-factor model with equal loadings
  ``√r``. When all members have the same marginal at a position, the subset's
  failure probability depends only on its size ``m``, ``∫ Φ((t - √r z)/√(1-r))^m φ(z) dz``,
  so ``fail_prob_all`` needs one integral per size.
* With ``error_correlation`` and drafters whose marginals differ, one ``φ`` means a
  different latent correlation for each pair (and position): the model becomes a
  Gaussian copula with that pairwise matrix, evaluated like ``gaussian`` (and limited
  to the same subset sizes). The matrix must be positive semi-definite.
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ErrorModel, independent_fail_prob, independent_fail_prob_all
from ...exceptions import InputError
from .gaussian import gaussian_fail_prob
from .latent import (
    comonotone_fail_prob,
    comonotone_fail_prob_all,
    conditional_log_fail,
    dedupe_columns,
    factor_fail_prob,
    factor_fail_prob_all,
    factor_nodes,
    latent_from_error_correlation,
    max_error_correlation,
    popcounts,
    sample_factor,
    sample_matrix,
    thresholds,
)

FIELD_PHI = "errors.error_correlation"
#: Marginals whose evaluation plan is kept (one per workload is the usual need).
MAX_PLANS = 16


def _equal_rows(q: np.ndarray) -> bool:
    return bool(np.all(q == q[:1]))


class ExchangeableErrors(ErrorModel):
    """Exactly one of ``correlation`` (latent) and ``error_correlation`` is set, in [0, 1]."""

    name = "exchangeable"

    def __init__(self, correlation: float | None = None, error_correlation: float | None = None):
        self.correlation = correlation
        self.error_correlation = error_correlation

    # ------------------------------------------------------------ the plan
    def latent(self, q: np.ndarray):
        """How to evaluate for marginals ``q (N, J)``.

        Returns ``("independent", None)``, ``("comonotone", None)``, ``("factor", β (N, J))``
        or ``("matrix", R (J, N, N))`` (pairwise latent correlations, one matrix per position),
        read-only. Kept per ``q``: converting ``error_correlation`` for unequal marginals
        bisects every pair (about a second at ``N = 20``), and the search asks again for
        every batch of subsets with the same marginals.
        """
        q = np.ascontiguousarray(q, dtype=float)
        key = (q.shape, q.tobytes())
        plans = self.__dict__.setdefault("_plans", {})
        if key not in plans:
            if len(plans) >= MAX_PLANS:
                plans.clear()
            kind, p = self._latent(q)
            if p is not None:
                p.flags.writeable = False
            plans[key] = kind, p
        return plans[key]

    def _latent(self, q: np.ndarray):
        if self.correlation is not None:
            rc = float(self.correlation)
            if rc == 0.0:
                return "independent", None
            if rc == 1.0:
                return "comonotone", None
            return "factor", np.full(q.shape, np.sqrt(rc))
        assert self.error_correlation is not None  # the spec sets one of the two
        phi = float(self.error_correlation)
        if phi == 0.0:
            return "independent", None
        # a drafter that never fails (q = 0) has no error correlation with anyone: its
        # pairs get latent 0 (any value gives the same orthant probabilities: zero)
        if _equal_rows(q):
            if phi >= 1.0:
                return "comonotone", None
            r = np.where(q[0] > 0, latent_from_error_correlation(phi, q[0], q[0]), 0.0)  # (J,)
            return "factor", np.broadcast_to(np.sqrt(r), q.shape).copy()
        n, j = q.shape
        r = latent_from_error_correlation(phi, q[:, None, :], q[None, :, :])  # (N, N, J)
        r = np.where((q[:, None, :] > 0) & (q[None, :, :] > 0), r, 0.0)
        r = np.moveaxis(r, -1, 0).copy()
        r[:, np.arange(n), np.arange(n)] = 1.0
        return "matrix", r

    def validate(self, q: np.ndarray, where: str = "") -> None:
        if self.error_correlation is None:
            return
        phi = float(self.error_correlation)
        n = q.shape[0]
        if n < 2 or phi == 0.0:
            return
        top = max_error_correlation(q[:, None, :], q[None, :, :])  # (N, N, J)
        top[np.arange(n), np.arange(n)] = np.inf
        top[(q[:, None, :] == 0) | (q[None, :, :] == 0)] = np.inf  # never fails: no constraint
        if phi > top.min() + 1e-12:
            i, j, col = np.unravel_index(np.argmin(top), top.shape)
            raise InputError(
                FIELD_PHI,
                f"{phi} cannot be reached{where}: drafters {i} and {j} fail with probability "
                f"{q[i, col]:.6g} and {q[j, col]:.6g} at position {col + 1}, so their error "
                f"correlation is at most {top[i, j, col]:.6g} (latent correlation 1)",
            )
        kind, r = self.latent(q)
        if kind == "matrix":
            low = np.linalg.eigvalsh(r).min()
            if low < -1e-9:
                raise InputError(
                    FIELD_PHI,
                    f"{phi} implies pairwise latent correlations{where} that form no positive "
                    f"semi-definite matrix (smallest eigenvalue {low:.3g}); give a latent "
                    "errors.correlation instead",
                )

    # ------------------------------------------------------------ evaluation
    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        kind, p = self.latent(q)
        if kind == "independent":
            return independent_fail_prob(members, q)
        if kind == "comonotone":
            return comonotone_fail_prob(members, q)
        if kind == "matrix":
            return gaussian_fail_prob(members, q, p, field=FIELD_PHI)
        if _equal_rows(q):
            by_size = self._by_size(q, p, q.shape[0])
            return by_size[np.asarray(members, dtype=bool).sum(axis=1)]
        qs, inv = dedupe_columns(q)
        # unequal marginals on the factor path: a latent correlation, the same loading
        # everywhere (error_correlation with unequal marginals took the matrix path)
        return factor_fail_prob(members, thresholds(qs), np.full(qs.shape, p.flat[0]))[:, inv]

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        kind, p = self.latent(q)
        if kind == "independent":
            return independent_fail_prob_all(q)
        if kind == "comonotone":
            return comonotone_fail_prob_all(q)
        if kind == "matrix":
            return super().fail_prob_all(q)
        n = q.shape[0]
        if _equal_rows(q):
            return self._by_size(q, p, n)[popcounts(n)]
        qs, inv = dedupe_columns(q)
        return factor_fail_prob_all(thresholds(qs), np.full(qs.shape, p.flat[0]))[:, inv]

    @staticmethod
    def _by_size(q: np.ndarray, beta: np.ndarray, n: int) -> np.ndarray:
        """``P(m members all fail)`` for ``m = 0..n`` when all marginals agree: ``(n + 1, J)``."""
        z, w = factor_nodes(beta[:1])
        logs = conditional_log_fail(thresholds(q[:1]), beta[:1], z)[0]  # (J, G)
        sizes = np.arange(n + 1, dtype=float)[:, None, None]
        out = np.exp(sizes * logs[None]) @ w
        out[0] = 1.0
        return out

    def sample_failures(self, index, q, rounds, rng):
        kind, p = self.latent(q)
        t = thresholds(q[index]).T[None]  # (1, K, m)
        k = q.shape[1]
        if kind == "independent":
            z = rng.standard_normal((rounds, k, len(index)))
        elif kind == "comonotone":
            z = np.repeat(rng.standard_normal((rounds, k, 1)), len(index), axis=2)
        elif kind == "factor":
            z = sample_factor(p[index], rounds, rng)
        else:
            z = sample_matrix(p[:, index][:, :, index], rounds, rng, k)
        return z < t


__all__ = [
    "FIELD_PHI",
    "MAX_PLANS",
    "ExchangeableErrors",
]
