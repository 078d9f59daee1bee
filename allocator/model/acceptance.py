"""Expected accepted units per round, in the ``paper`` and ``bonus`` conventions.

Acceptance is given per position: ``a[..., j]`` is the probability that the unit
drafted at position ``j + 1`` is accepted given every earlier one was. An array
of ``J`` positions stands for every position: its last column repeats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CONVENTIONS = ("paper", "bonus")


def position_matrix(
    values: Sequence[float | Sequence[float]], width: int | None = None
) -> np.ndarray:
    """Stack scalar or per-position acceptances into one ``(N, J)`` array.

    Each entry is a scalar (the same value at every position) or a list giving
    positions 1, 2, ...; shorter rows are padded with their last value. ``J`` is the
    longest list, or ``width`` when that is larger.
    """
    rows = [np.atleast_1d(np.asarray(v, dtype=float)) for v in values]
    j = max([len(r) for r in rows] + [width or 1])
    out = np.empty((len(rows), j))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        out[i, len(r) :] = r[-1]
    return out


def extend_positions(a: np.ndarray, n: int) -> np.ndarray:
    """Per-position values ``(..., J)`` extended (last column repeated) or cut to ``(..., n)``."""
    j = a.shape[-1]
    if j >= n:
        return a[..., :n]
    idx = np.minimum(np.arange(n), j - 1)
    return a[..., idx]


def first_positions(a: np.ndarray, k_max: int) -> np.ndarray:
    """Per-position values ``(..., J)`` cut to the first ``k_max`` positions when wider
    (never extended): what a draft of at most ``k_max`` units can use. Pooling, error
    models and sums then cost ``O(k_max)`` per subset however long the file's lists are."""
    return a[..., :k_max] if a.shape[-1] > k_max else a


def survival(a: np.ndarray, n: int) -> np.ndarray:
    """``P_i = prod_{j<=i} a(j)`` for ``i = 0..n`` (``P_0 = 1``): shape ``(..., n + 1)``."""
    a_full = extend_positions(np.asarray(a, dtype=float), n)
    out = np.empty(a_full.shape[:-1] + (n + 1,))
    out[..., 0] = 1.0
    np.cumprod(a_full, axis=-1, out=out[..., 1:])
    return out


def expected_accepted(a: np.ndarray, k_max: int, convention: str = "paper") -> np.ndarray:
    """Expected accepted units per round for every draft length ``k = 1..k_max``.

    Parameters
    ----------
    a : array ``(..., J)``
        Pooled per-position acceptance in (0, 1]; the last column repeats.
    k_max : int
        Longest draft length evaluated.
    convention : ``"paper"`` or ``"bonus"``
        ``paper``: at most ``k`` units, the first always kept,
        ``E_k = sum_{i=1..k} prod_{j<i} a(j)``.
        ``bonus``: ``k`` drafted units plus the verifier's own,
        ``E_k = 1 + sum_{i=1..k} prod_{j<=i} a(j)``.

    Returns
    -------
    array ``(..., k_max)``; column ``k - 1`` holds ``E_k`` (units per round).
    Acceptance 1 gives ``k`` (paper) or ``k + 1`` (bonus) exactly: no division.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}")
    p = survival(a, k_max)  # (..., k_max + 1), P_0..P_kmax
    csum = np.cumsum(p, axis=-1)  # csum[n] = sum_{i=0..n} P_i
    if convention == "paper":
        return csum[..., :k_max]  # E_k = csum[k-1]
    return csum[..., 1:]  # E_k = csum[k]


def mean_acceptance(a: np.ndarray, k_max: int) -> np.ndarray:
    """Mean per-position acceptance over positions ``1..k``, ``k = 1..k_max``: ``(..., k_max)``."""
    a_full = extend_positions(np.asarray(a, dtype=float), k_max)
    if a.shape[-1] == 1:
        return np.broadcast_to(a, a.shape[:-1] + (k_max,))
    return np.cumsum(a_full, axis=-1) / np.arange(1, k_max + 1)


__all__ = [
    "CONVENTIONS",
    "expected_accepted",
    "extend_positions",
    "first_positions",
    "mean_acceptance",
    "position_matrix",
    "survival",
]
