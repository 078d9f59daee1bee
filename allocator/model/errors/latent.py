"""Latent Gaussian machinery shared by the copula error models.

Drafter ``i`` fails at a position when its latent standard normal ``Z_i`` falls
below ``t_i = Φ⁻¹(q_i)``, ``q_i = 1 - a_i`` its marginal failure probability. The
models differ only in how the ``Z_i`` are correlated.

Everything here is vectorised: thresholds are ``(N, J)`` arrays (drafters by
positions), subsets are bool membership rows ``(B, N)``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from ..._lazy import lazy_module
from ...core.errors import fold_all_subsets

if TYPE_CHECKING:
    from scipy import sparse as scipy_sparse
    from scipy import special
else:
    scipy_sparse = lazy_module("scipy.sparse")
    special = lazy_module("scipy.special")

#: Half-width of the quadrature domain for the common factor: φ(9) ≈ 1e-18.
HALF_WIDTH = 9.0
#: Largest node spacing of the trapezoid rule (the rule is spectrally accurate for
#: the smooth integrand; spacing below the narrowest conditional width keeps the
#: aliasing error below ~1e-8).
MAX_SPACING = 0.5
#: Upper bound on quadrature nodes (reached for latent correlation above ~0.9999;
#: at 0.999999 the error is still below 1e-4).
MAX_NODES = 4001
#: A log-probability standing for log 0 that stays finite in matrix products.
LOG_ZERO = -1e300


@functools.cache
def _gauss_legendre() -> tuple[np.ndarray, np.ndarray]:
    """The 96-point Gauss–Legendre nodes and weights on ``[-1, 1]``, each shape ``(96,)``,
    computed on first use (an eigenvalue problem, tens of ms at start-up otherwise, for a
    command whose error model never calls :func:`bvn_cdf`)."""
    return np.polynomial.legendre.leggauss(96)


def thresholds(q: np.ndarray) -> np.ndarray:
    """Latent failure thresholds ``Φ⁻¹(q)``; ``q = 0`` gives ``-inf``."""
    return special.ndtri(np.asarray(q, dtype=float))


def bvn_cdf(h: np.ndarray, k: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``P(Z_1 < h, Z_2 < k)`` for standard normals with correlation ``r`` (broadcast).

    Plackett's identity ``Φ₂ = Φ(h)Φ(k) + (1/2π)∫_0^{asin r} exp(-(h² - 2hk sinθ + k²)
    / (2cos²θ)) dθ`` integrated by 96-point Gauss–Legendre; ``|r| = 1`` exactly is
    the comonotone (``Φ(min(h, k))``) or countermonotone limit.
    """
    h, k, r = np.broadcast_arrays(
        np.asarray(h, dtype=float), np.asarray(k, dtype=float), np.asarray(r, dtype=float)
    )
    hc, kc = np.clip(h, -40.0, 40.0), np.clip(k, -40.0, 40.0)
    top = np.arcsin(np.clip(r, -1.0, 1.0))
    gl_x, gl_w = _gauss_legendre()
    theta = 0.5 * top[..., None] * (gl_x + 1.0)  # (..., 96)
    s, c2 = np.sin(theta), np.cos(theta) ** 2
    hh, kk = hc[..., None], kc[..., None]
    expo = -(hh * hh - 2.0 * hh * kk * s + kk * kk) / (2.0 * np.maximum(c2, 1e-300))
    integral = 0.5 * top * (np.exp(expo) @ gl_w)
    out = special.ndtr(hc) * special.ndtr(kc) + integral / (2.0 * np.pi)
    out = np.where(r >= 1.0, special.ndtr(np.minimum(hc, kc)), out)
    out = np.where(r <= -1.0, np.maximum(0.0, special.ndtr(hc) - special.ndtr(-kc)), out)
    return np.clip(out, 0.0, np.minimum(special.ndtr(hc), special.ndtr(kc)))


def error_correlation(r: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Pearson correlation of two error indicators with failure probabilities ``q1, q2``
    under latent correlation ``r`` (broadcast). Zero where an indicator is constant."""
    q1, q2 = np.asarray(q1, dtype=float), np.asarray(q2, dtype=float)
    joint = bvn_cdf(thresholds(q1), thresholds(q2), r)
    sd = np.sqrt(q1 * (1 - q1) * q2 * (1 - q2))
    return np.divide(joint - q1 * q2, sd, out=np.zeros(np.broadcast(joint, sd).shape), where=sd > 0)


def max_error_correlation(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """The largest reachable error correlation (latent ``r = 1``): ``(min q - q1 q2) / sd``."""
    q1, q2 = np.asarray(q1, dtype=float), np.asarray(q2, dtype=float)
    sd = np.sqrt(q1 * (1 - q1) * q2 * (1 - q2))
    num = np.minimum(q1, q2) - q1 * q2
    return np.divide(num, sd, out=np.zeros(np.broadcast(num, sd).shape), where=sd > 0)


def latent_from_error_correlation(phi: float, q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Latent correlation in ``[0, 1]`` giving error correlation ``phi >= 0`` (broadcast).

    Vectorised bisection (the error correlation increases with ``r``). The caller
    checks reachability (``phi <= max_error_correlation``); unreachable targets
    return 1.
    """
    q1, q2 = np.broadcast_arrays(np.asarray(q1, dtype=float), np.asarray(q2, dtype=float))
    lo, hi = np.zeros(q1.shape), np.ones(q1.shape)
    if phi <= 0.0:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = error_correlation(mid, q1, q2) < phi
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------- one factor
def factor_nodes(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid nodes ``z (G,)`` and weights ``w (G,)`` for ``∫ f(z) φ(z) dz``.

    The spacing follows the narrowest conditional width ``√(1-β²)/|β|`` over the
    loadings ``beta`` (any shape, ``|β| < 1``), so the rule stays accurate as the
    loadings approach 1.
    """
    b = np.abs(np.asarray(beta, dtype=float)).ravel()
    b = b[b > 0]
    width = np.min(np.sqrt(1.0 - b * b) / b) if b.size else np.inf
    h = min(MAX_SPACING, float(width) / 2.0)
    count = min(MAX_NODES, int(np.ceil(2 * HALF_WIDTH / h)) + 1)
    z = np.linspace(-HALF_WIDTH, HALF_WIDTH, count)
    w = (z[1] - z[0]) * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    return z, w


def conditional_log_fail(t: np.ndarray, beta: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``log P(Z_i < t_i | factor = z) = log Φ((t - βz)/√(1-β²))``: ``(N, J, G)``.

    ``t`` and ``beta`` are ``(N, J)``; ``-inf`` thresholds give :data:`LOG_ZERO`.
    """
    sigma = np.sqrt(1.0 - beta * beta)
    arg = (t[..., None] - beta[..., None] * z) / sigma[..., None]
    return np.maximum(special.log_ndtr(arg), LOG_ZERO)


def factor_fail_prob(
    members: np.ndarray, t: np.ndarray, beta: np.ndarray, max_cells: int = 1 << 22
) -> np.ndarray:
    """P(all members fail) under a one-factor copula: ``(B, J)``.

    ``members (B, N)`` bool, ``t (N, J)`` thresholds, ``beta (N, J)`` loadings. At each
    node the members' conditional log-failures add up (a matrix product); the
    exponentials are integrated against the normal weights. Chunked over ``B``.
    """
    z, w = factor_nodes(beta)
    n, j = t.shape
    logs = conditional_log_fail(t, beta, z).reshape(n, j * z.size)
    members = np.asarray(members, dtype=bool)
    # small subsets of a large pool: a sparse product costs B * m * G, not B * N * G
    sparse = n > 32 and members.mean() < 0.25
    out = np.empty((members.shape[0], j))
    rows = max(1, max_cells // (j * z.size))
    for lo in range(0, members.shape[0], rows):
        part = members[lo : lo + rows]
        if sparse:
            sums = scipy_sparse.csr_matrix(part, dtype=float) @ logs
        else:
            sums = part.astype(float) @ logs
        out[lo : lo + rows] = np.exp(sums).reshape(-1, j, z.size) @ w
    return out


def factor_fail_prob_all(t: np.ndarray, beta: np.ndarray, max_cells: int = 1 << 22) -> np.ndarray:
    """P(all fail) for every subset (bitmask order) under a one-factor copula: ``(2**N, J)``.

    Conditional on the factor the failures are independent, so at each node all
    subsets come from the lowest-bit product recursion; nodes are processed in
    chunks that bound memory at ``max_cells`` floats.
    """
    z, w = factor_nodes(beta)
    n, j = t.shape
    cond = np.exp(conditional_log_fail(t, beta, z))  # (N, J, G)
    out = np.zeros((1 << n, j))
    step = max(1, max_cells // ((1 << n) * j))
    for g0 in range(0, z.size, step):
        table = fold_all_subsets(cond[:, :, g0 : g0 + step].reshape(n, -1), np.multiply)
        out += table.reshape(1 << n, j, -1) @ w[g0 : g0 + step]
    out[0] = 1.0
    return out


def comonotone_fail_prob(members: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Latent correlation 1: every member fails together, ``min_i q_i``: ``(B, J)``."""
    members = np.asarray(members, dtype=bool)
    out = np.empty((members.shape[0], q.shape[1]))
    rows = max(1, (1 << 22) // max(1, q.size))
    for lo in range(0, members.shape[0], rows):
        part = members[lo : lo + rows, :, None]
        out[lo : lo + rows] = np.where(part, q[None], np.inf).min(axis=1)
    return out


def comonotone_fail_prob_all(q: np.ndarray) -> np.ndarray:
    """``min_i q_i`` for every subset in bitmask order (lowest-bit recursion): ``(2**N, J)``."""
    return fold_all_subsets(q, np.minimum)


def popcounts(n: int) -> np.ndarray:
    """Number of set bits of ``0 .. 2**n - 1``: ``(2**n,)`` int."""
    out = np.zeros(1 << n, np.int64)
    for i in range(n):
        out[1 << i : 1 << (i + 1)] = out[: 1 << i] + 1
    return out


def dedupe_columns(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct position columns of ``q (N, J)`` and the inverse index ``(J,)``."""
    if q.shape[1] == 1:
        return q, np.zeros(1, np.int64)
    uniq, inverse = np.unique(q, axis=1, return_inverse=True)
    return uniq, inverse.reshape(-1)


# ------------------------------------------------------------------- sampling
def sample_factor(beta: np.ndarray, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Latent draws ``(rounds, K, m)`` of a one-factor copula with loadings ``beta (m, K)``.

    One common factor per round and position; ``|β| = 1`` is allowed here (the
    drafter's latent is the factor itself).
    """
    m, k = beta.shape
    w = rng.standard_normal((rounds, k, 1))
    e = rng.standard_normal((rounds, k, m))
    b = beta.T[None]  # (1, K, m)
    return b * w + np.sqrt(np.clip(1.0 - b * b, 0.0, None)) * e


def matrix_root(matrix: np.ndarray) -> np.ndarray:
    """A square root ``A`` with ``A @ A.T == matrix`` for a PSD matrix (``(..., m, m)``)."""
    vals, vecs = np.linalg.eigh(matrix)
    return vecs * np.sqrt(np.clip(vals, 0.0, None))[..., None, :]


def sample_matrix(matrix: np.ndarray, rounds: int, rng: np.random.Generator, k: int) -> np.ndarray:
    """Latent draws ``(rounds, K, m)`` with correlation ``matrix``: ``(m, m)`` or ``(K, m, m)``."""
    root = matrix_root(matrix)
    m = root.shape[-1]
    e = rng.standard_normal((rounds, k, m))
    if root.ndim == 2:
        return e @ root.T
    return np.einsum("rkj,kij->rki", e, root)


__all__ = [
    "HALF_WIDTH",
    "LOG_ZERO",
    "MAX_NODES",
    "MAX_SPACING",
    "bvn_cdf",
    "comonotone_fail_prob",
    "comonotone_fail_prob_all",
    "conditional_log_fail",
    "dedupe_columns",
    "error_correlation",
    "factor_fail_prob",
    "factor_fail_prob_all",
    "factor_nodes",
    "latent_from_error_correlation",
    "matrix_root",
    "max_error_correlation",
    "popcounts",
    "sample_factor",
    "sample_matrix",
    "thresholds",
]
