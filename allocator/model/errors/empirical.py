"""Empirical errors from a joint outcome log.

The log is a CSV with one row per verified position and one 0/1 column per
drafter, named as the drafter (1: its unit was correct, 0: it failed), plus
optional ``position`` (1-based) and ``workload`` columns. For every subset ``S``
the fraction of rows where all members failed is the superset sum of the
histogram of failure masks,

``F(S) = Σ_{T ⊇ S} h(T) / rows``,

computed for all ``2**N`` subsets at once by the zeta transform in ``O(N 2**N)``
per position, whatever the number of rows. With a ``position`` column each
position has its own histogram and the last logged position stands for every
later one; without one, every position shares the whole log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..._lazy import lazy_module
from ...core.errors import ErrorModel
from ...exceptions import InputError
from ..acceptance import extend_positions

if TYPE_CHECKING:
    from scipy import stats
else:
    stats = lazy_module("scipy.stats")

FIELD = "errors.outcomes"
#: Largest table ``2**N x positions`` precomputed by the zeta transform.
MAX_TABLE = 1 << 24
#: Bitmasks are int64.
MAX_DRAFTERS = 62
#: A log contradicts a stated acceptance when a two-sided binomial test rejects at this level.
CONTRADICTION_P = 1e-6


def zeta_superset(hist: np.ndarray) -> np.ndarray:
    """Superset sums ``F(S) = Σ_{T ⊇ S} hist(T)`` over the leading bitmask axis ``(2**N, ...)``."""
    out = np.array(hist, dtype=float)
    n = out.shape[0].bit_length() - 1
    tail = out.shape[1:]
    for i in range(n):
        v = out.reshape((-1, 2, 1 << i) + tail)
        v[:, 0] += v[:, 1]
    return out


class EmpiricalErrors(ErrorModel):
    """Failure masks of a log, grouped by position.

    Parameters
    ----------
    n : number of drafters.
    masks : one int64 array per logged position: the distinct failure masks (bit ``i``
        set when drafter ``i`` failed).
    counts : matching row counts.
    table : optional ``(2**n, P)`` superset-sum table divided by rows (built by
        :meth:`from_failures` when it fits in :data:`MAX_TABLE`).
    """

    name = "empirical"

    def __init__(self, n: int, masks: list[np.ndarray], counts: list[np.ndarray], table=None):
        self.n = n
        self.masks = masks
        self.counts = counts
        self.table = table

    @classmethod
    def from_failures(cls, fail: np.ndarray, position: np.ndarray | None = None) -> EmpiricalErrors:
        """Build from failure indicators ``fail (R, N)`` bool and 1-based ``position (R,)``."""
        r, n = fail.shape
        bits = fail.astype(np.int64) @ (np.int64(1) << np.arange(n, dtype=np.int64))
        pos = np.zeros(r, np.int64) if position is None else np.asarray(position) - 1
        masks, counts = [], []
        for p in range(int(pos.max()) + 1):
            u, c = np.unique(bits[pos == p], return_counts=True)
            masks.append(u)
            counts.append(c)
        return cls.from_counts(n, masks, counts)

    @classmethod
    def from_counts(
        cls, n: int, masks: list[np.ndarray], counts: list[np.ndarray]
    ) -> EmpiricalErrors:
        """Build from each position's distinct failure masks and their counts (rows, or
        any non-negative weights); the superset-sum table is precomputed when
        ``2**n x positions`` fits in :data:`MAX_TABLE`."""
        table = None
        if (1 << n) * len(masks) <= MAX_TABLE:
            hist = np.zeros((1 << n, len(masks)))
            for p, (u, c) in enumerate(zip(masks, counts, strict=True)):
                hist[u, p] = c
            table = zeta_superset(hist) / hist.sum(axis=0)
        return cls(n, masks, counts, table)

    @property
    def positions(self) -> int:
        return len(self.masks)

    def rows(self) -> np.ndarray:
        """Logged rows per position: ``(P,)``."""
        return np.array([c.sum() for c in self.counts])

    def _widen(self, out: np.ndarray, j: int) -> np.ndarray:
        """``out (B, P)`` with its last position repeated out to ``j`` columns, never cut."""
        return extend_positions(out, max(j, out.shape[1]))

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        members = np.asarray(members, dtype=bool)
        bits = members.astype(np.int64) @ (np.int64(1) << np.arange(self.n, dtype=np.int64))
        if self.table is not None:
            return self._widen(self.table[bits], q.shape[1])
        out = np.empty((bits.shape[0], self.positions))
        for p, (u, c) in enumerate(zip(self.masks, self.counts, strict=True)):
            rows = max(1, (1 << 22) // max(1, u.size))
            for lo in range(0, bits.shape[0], rows):
                b = bits[lo : lo + rows, None]
                out[lo : lo + rows, p] = ((u[None, :] & b) == b) @ c / c.sum()
        return self._widen(out, q.shape[1])

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self._widen(self.table, q.shape[1])
        return super().fail_prob_all(q)

    def sample_failures(self, index, q, rounds, rng):
        k = q.shape[1]
        out = np.empty((rounds, k, len(index)), bool)
        for j in range(k):
            p = min(j, self.positions - 1)
            u, c = self.masks[p], self.counts[p]
            drawn = u[rng.choice(u.size, size=rounds, p=c / c.sum())]
            out[:, j, :] = (drawn[:, None] >> np.asarray(index, dtype=np.int64)[None]) & 1
        return out

    def check_marginals(self, acceptance: np.ndarray, names, where: str = "") -> None:
        """Refuse a log whose per-drafter success rates contradict ``acceptance (N, J)``."""
        width = max(acceptance.shape[1], self.positions)
        stated = extend_positions(acceptance, width)
        single = np.int64(1) << np.arange(self.n, dtype=np.int64)
        fails = np.stack(
            [
                ((u[None, :] & single[:, None]) != 0) @ c
                for u, c in zip(self.masks, self.counts, strict=True)
            ],
            axis=1,
        )  # (N, P)
        n_rows = extend_positions(self.rows()[None, :], width)
        successes = n_rows - extend_positions(fails, width)

        low = stats.binom.cdf(successes, n_rows, stated)
        high = stats.binom.sf(successes - 1, n_rows, stated)
        p_value = np.minimum(1.0, 2.0 * np.minimum(low, high))
        if p_value.min() < CONTRADICTION_P:
            i, j = np.unravel_index(np.argmin(p_value), p_value.shape)
            rate = successes[i, j] / n_rows[0, j]
            raise InputError(
                FIELD,
                f"drafter {names[i]!r} is correct in {rate:.4g} of {int(n_rows[0, j])} logged "
                f"rows at position {j + 1}{where}, but its stated acceptance is "
                f"{stated[i, j]:.4g} (binomial test p = {p_value[i, j]:.2g}); "
                "the log and drafters.*.acceptance disagree beyond sampling error",
            )


__all__ = [
    "CONTRADICTION_P",
    "FIELD",
    "MAX_DRAFTERS",
    "MAX_TABLE",
    "EmpiricalErrors",
    "zeta_superset",
]
