"""A full latent correlation matrix (Gaussian copula): multivariate normal orthants.

``P(all i in S fail at j) = Φ_S(t_S(j); R_SS)``, the multivariate normal CDF of the
members' thresholds under their correlation block. Singletons are exact (``q_i``),
pairs use the vectorised bivariate CDF of :func:`~.latent.bvn_cdf`, larger subsets
SciPy's quasi-Monte Carlo integration (seeded, so results are reproducible), one
call per subset covering all positions at once. Subsets larger than
:data:`MAX_SUBSET` are refused: the integration error would exceed ~1e-6.

One integral takes from ~5 ms (small, weakly correlated subsets) to over a second
(12 strongly correlated drafters failing often: the absolute error 1e-6 then needs
millions of points). A call with many integrals first times a seeded sample of them
(:data:`PILOT`, kept) and refuses, naming the way out, when the projected time exceeds
:data:`MAX_SECONDS`; ``auto`` asks the same estimate (:func:`integration_estimate`)
before choosing exact search. Results are kept per subset, so a heuristic search that
meets a subset again does not integrate it again.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from ..._lazy import lazy_module
from ...core.errors import ErrorModel
from ...core.space import subset_sizes
from ...exceptions import InputError, NotModelledError
from ..acceptance import first_positions
from .latent import bvn_cdf, dedupe_columns, sample_matrix, thresholds

if TYPE_CHECKING:
    from scipy import stats

    from ...core.problem import Problem
else:
    stats = lazy_module("scipy.stats")

#: Largest subset whose orthant probability is integrated (quasi-Monte Carlo).
MAX_SUBSET = 12
#: Most quasi-Monte Carlo integrations in one call (each takes ~5-40 ms).
MAX_INTEGRALS = 50_000
#: Absolute error requested from the quasi-Monte Carlo integration.
ABS_ERROR = 1e-6
#: Integrals timed before a long call, and the call size from which this is done.
PILOT, PILOT_FROM = 8, 200
#: Refuse a call projected to integrate for longer than this, seconds.
MAX_SECONDS = 120.0
#: Subsets whose results are kept per model (one per row of an exhaustive 2**16 space).
CACHE_ROWS = 1 << 16


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
        raise NotModelledError(
            field,
            f"a subset of {int(sizes.max())} drafters is too large to integrate accurately "
            f"under a full correlation matrix (at most {MAX_SUBSET}); cap search.m.max at "
            f"{MAX_SUBSET} or use errors.model factor",
        )
    integrals = int((sizes >= 3).sum()) * j
    if integrals > MAX_INTEGRALS:
        raise NotModelledError(
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
    big = np.flatnonzero(sizes >= 3)
    out[big] = 0.0
    done: set[tuple[int, int]] = set()
    if integrals >= PILOT_FROM:
        _pilot(members, t, matrix, big, out, done, integrals, field)
    for row in big:
        for col in range(j):
            if (int(row), col) not in done:
                out[row, col] = _orthant(members[row], t, matrix, col)
    out = np.clip(out, 0.0, None)
    return out[:, inverse] if matrix.ndim == 2 else out


def _orthant(row: np.ndarray, t: np.ndarray, matrix: np.ndarray, col: int) -> float:
    """P(all members of ``row (N,)`` fail) at position ``col``: one integral.

    ``t (N, J)`` thresholds; ``matrix`` ``(N, N)`` or ``(J, N, N)``.
    """
    idx = np.flatnonzero(row)
    tt = t[idx, col]
    if not np.all(np.isfinite(tt)):  # a -inf threshold: that member never fails
        return 0.0
    cov = matrix[np.ix_(idx, idx)] if matrix.ndim == 2 else matrix[col][np.ix_(idx, idx)]
    return float(
        stats.multivariate_normal.cdf(
            tt,
            cov=cov,
            allow_singular=True,
            abseps=ABS_ERROR,
            releps=0.0,
            rng=np.random.default_rng(0),
        )
    )


def _pilot(
    members: np.ndarray,
    t: np.ndarray,
    matrix: np.ndarray,
    big: np.ndarray,
    out: np.ndarray,
    done: set[tuple[int, int]],
    integrals: int,
    field: str,
) -> None:
    """Integrate a seeded sample of the call's integrals (into ``out``, marked ``done``)
    and refuse when the whole call is projected past :data:`MAX_SECONDS`."""
    import scipy.stats  # noqa: F401  # imported before the clock starts

    rng = np.random.default_rng(0)
    rows = rng.choice(big, size=min(PILOT, big.size), replace=False)
    cols = rng.integers(0, t.shape[1], size=rows.size)
    start = time.perf_counter()
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        if (row, col) not in done:
            out[row, col] = _orthant(members[row], t, matrix, col)
            done.add((row, col))
    each = (time.perf_counter() - start) / max(len(done), 1)
    projected = each * integrals
    if projected > MAX_SECONDS:
        raise NotModelledError(field, too_slow(integrals, each))


def too_slow(integrals: int, each: float) -> str:
    """The refusal for ``integrals`` integrals of ``each`` seconds (measured)."""
    return (
        f"{integrals:,} multivariate normal integrations (subsets of 3 or more drafters x "
        f"positions) at ~{each:.2g} s each here would take about "
        f"{integrals * each / 60:.0f} min (limit {MAX_SECONDS / 60:.0f} min); lower "
        "search.m.max, use --strategy optuna (bounded by --trials / --timeout), or "
        "errors.model factor"
    )


def integration_estimate(problem: Problem) -> tuple[int, float]:
    """``(integrals, seconds each)`` exact search of ``problem`` would need under its
    gaussian matrix: subsets of 3 or more drafters in the space x distinct acceptance
    columns, and the mean time of a seeded sample of :data:`PILOT` of them."""

    errors = problem.errors
    assert isinstance(errors, GaussianErrors)
    q = 1.0 - first_positions(problem.acceptance, problem.k_max)  # the columns a search pools
    qs, _ = dedupe_columns(q)
    n_req = int(problem.required.sum())
    free = np.flatnonzero(~problem.required & ~problem.excluded)
    sizes = [s for s in subset_sizes(problem) if s + n_req >= 3]
    counts = [math.comb(free.size, s) for s in sizes]
    integrals = sum(counts) * qs.shape[1]
    if integrals == 0:
        return 0, 0.0
    import scipy.stats  # noqa: F401  # imported before the clock starts

    rng = np.random.default_rng(0)
    t = thresholds(qs)
    matrix = np.asarray(errors.matrix, dtype=float)
    weights = np.array(counts, dtype=float) / float(sum(counts))
    start, n = time.perf_counter(), 0
    for _ in range(PILOT):
        size = sizes[int(rng.choice(len(sizes), p=weights))]
        row = problem.required.copy()
        row[rng.choice(free, size=size, replace=False)] = True
        _orthant(row, t, matrix, int(rng.integers(0, qs.shape[1])))
        n += 1
    return integrals, (time.perf_counter() - start) / n


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
        """As :func:`gaussian_fail_prob`; each subset is integrated once per ``q``."""
        members = np.asarray(members, dtype=bool)
        cache: dict[bytes, np.ndarray] = self.__dict__.setdefault("_rows", {})
        key_q = (q.shape, np.ascontiguousarray(q, dtype=float).tobytes())
        if self.__dict__.get("_rows_q") != key_q or len(cache) > CACHE_ROWS:
            cache.clear()
            self.__dict__["_rows_q"] = key_q
        keys = [r.tobytes() for r in np.packbits(members, axis=1)]
        todo = {k: i for i, k in enumerate(keys) if k not in cache}
        if todo:
            rows = np.fromiter(todo.values(), dtype=np.int64, count=len(todo))
            vals = gaussian_fail_prob(members[rows], q, np.asarray(self.matrix, dtype=float))
            cache.update(zip(todo, vals, strict=True))
        return np.stack([cache[k] for k in keys]) if keys else np.zeros((0, q.shape[1]))

    def sample_failures(self, index, q, rounds, rng):
        sub = np.asarray(self.matrix, dtype=float)[np.ix_(index, index)]
        z = sample_matrix(sub, rounds, rng, q.shape[1])
        return z < thresholds(q[index]).T[None]


__all__ = [
    "ABS_ERROR",
    "CACHE_ROWS",
    "MAX_INTEGRALS",
    "MAX_SECONDS",
    "MAX_SUBSET",
    "GaussianErrors",
    "check_correlation_matrix",
    "gaussian_fail_prob",
    "integration_estimate",
    "too_slow",
]
