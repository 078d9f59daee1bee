"""Pairwise error correlations from joint outcome logs, and a one-factor fit.

Two measures per pair of drafters, both pooled over positions:

- ``phi``: the Pearson correlation of the two 0/1 error indicators over all rows.
- ``latent``: the correlation ``r`` of the Gaussian copula (docs/design.md §3) that
  reproduces the observed number of rows where both fail, given each drafter's
  per-position failure rate: ``sum_j n_j Phi2(t_a(j), t_b(j); r) = joint fails``
  with ``t(j) = Phi^-1(1 - a(j))``, solved for ``r`` (a tetrachoric correlation
  that lets the marginals vary by position).

The ``factor`` model's loadings ``beta`` are fitted to the latent correlations by
least squares on ``r_ab ~ beta_a * beta_b`` (pairs with an undefined
correlation are left out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..model.errors.latent import bvn_cdf

if TYPE_CHECKING:
    from scipy import optimize, special
else:
    optimize = lazy_module("scipy.optimize")
    special = lazy_module("scipy.special")

#: Latent correlations are kept inside (-R_MAX, R_MAX) (the copula's range is open there).
R_MAX = 0.999


def phi_correlations(errors: np.ndarray) -> np.ndarray:
    """Pearson correlation of error indicators ``errors`` (rows ``(R, N)``, 0/1): ``(N, N)``.

    Entries of a drafter that never (or always) fails are ``NaN``.
    """
    e = np.asarray(errors, dtype=float)
    centred = e - e.mean(axis=0)
    cov = centred.T @ centred
    sd = np.sqrt(np.diag(cov))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = cov / np.outer(sd, sd)
    out[~np.isfinite(out)] = np.nan
    np.fill_diagonal(out, 1.0)
    return out


def latent_correlations(
    errors: np.ndarray, position_index: np.ndarray, n_positions: int
) -> np.ndarray:
    """Gaussian-copula correlation of every pair (module docstring): ``(N, N)``.

    ``errors``: 0/1 ``(R, N)`` (1 = the drafter's unit was wrong); ``position_index``:
    ``(R,)`` ints in ``0..n_positions-1``. ``NaN`` where a drafter never or always fails.
    """
    e = np.asarray(errors, dtype=float)
    n = e.shape[1]
    rows = np.bincount(position_index, minlength=n_positions).astype(float)  # (J,)
    fails = np.stack(
        [np.bincount(position_index, weights=e[:, i], minlength=n_positions) for i in range(n)]
    )  # (N, J)
    used = rows > 0
    q = np.divide(fails, rows, out=np.zeros_like(fails), where=used)
    t = special.ndtri(np.clip(q, 1e-12, 1 - 1e-12))[:, used]  # (N, J')
    w = rows[used]
    joint = e.T @ e  # (N, N) rows where both fail
    out = np.full((n, n), np.nan)
    np.fill_diagonal(out, 1.0)
    total_fail = e.sum(axis=0)
    for a in range(n):
        for b in range(a + 1, n):
            if total_fail[a] in (0, e.shape[0]) or total_fail[b] in (0, e.shape[0]):
                continue

            def gap(r, a=a, b=b):
                return float(w @ bvn_cdf(t[a], t[b], r)) - joint[a, b]

            lo, hi = gap(-R_MAX), gap(R_MAX)
            if lo >= 0:
                r = -R_MAX
            elif hi <= 0:
                r = R_MAX
            else:
                r = optimize.brentq(gap, -R_MAX, R_MAX, xtol=1e-10)
            out[a, b] = out[b, a] = r
    return out


def fit_loadings(latent: np.ndarray) -> np.ndarray:
    """One-factor loadings ``beta`` ``(N,)`` in [-R_MAX, R_MAX] with ``r_ab ~ beta_a beta_b``.

    Least squares over the defined off-diagonal pairs, started from the leading
    eigenvector of the correlation matrix (undefined entries set to 0). A drafter
    with no defined pair gets loading 0 (independent of the others).
    """
    r = np.array(latent, dtype=float)
    n = r.shape[0]
    iu = np.triu_indices(n, 1)
    ok = np.isfinite(r[iu])
    if n < 2 or not ok.any():
        return np.zeros(n)
    a_idx, b_idx, target = iu[0][ok], iu[1][ok], r[iu][ok]
    filled = np.where(np.isfinite(r), r, 0.0)
    vals, vecs = np.linalg.eigh(filled)
    start = vecs[:, -1] * np.sqrt(n * max(vals[-1] - 1.0, 1e-3) / (n - 1))
    start = np.clip(start, -0.9, 0.9)
    if np.allclose(start, 0):
        start = np.full(n, 0.1)

    def resid(beta):
        return beta[a_idx] * beta[b_idx] - target

    fit = optimize.least_squares(resid, start, bounds=(-R_MAX, R_MAX))
    beta = fit.x
    involved = np.zeros(n, bool)
    involved[a_idx] = involved[b_idx] = True
    beta[~involved] = 0.0
    if beta[involved].sum() < 0:  # the sign of a one-factor model is arbitrary
        beta = -beta
    return beta


__all__ = [
    "R_MAX",
    "fit_loadings",
    "latent_correlations",
    "phi_correlations",
]
