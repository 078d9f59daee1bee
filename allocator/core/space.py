"""The search space of subsets: sizes allowed by ``search.m``, ``require`` and ``exclude``.

Subsets are produced as bool membership matrices ``(B, N)`` in chunks, so memory
stays bounded whatever the size of the space. Order: by size, then lexicographic.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..exceptions import InputError

if TYPE_CHECKING:
    from .problem import Problem

#: Refuse exhaustive enumeration of more subsets than this.
MAX_SUBSETS = 50_000_000


def combinations(n: int, r: int) -> np.ndarray:
    """All ``r``-subsets of ``range(n)`` as sorted index rows, lexicographic: ``(C(n, r), r)``."""
    if r == 0:
        return np.zeros((1, 0), np.int64)
    if r > n:
        return np.zeros((0, r), np.int64)
    combos = np.arange(n - r + 1, dtype=np.int64)[:, None]
    for level in range(1, r):
        last = combos[:, -1]
        counts = (n - r + level) - last  # next value ranges over last+1 .. n-r+level
        starts = np.repeat(last + 1, counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        combos = np.column_stack([np.repeat(combos, counts, axis=0), starts + offsets])
    return combos


def subset_sizes(problem: Problem) -> range:
    """Sizes ``s`` of the free part (drafters neither required nor excluded)."""
    n_req = int(problem.required.sum())
    n_free = int((~problem.required & ~problem.excluded).sum())
    lo = max(0, problem.m_min - n_req, 1 - n_req)
    hi = min(n_free, problem.m_max - n_req)
    return range(lo, hi + 1)


def size_allowed(problem: Problem, m: np.ndarray) -> np.ndarray:
    """Bool, shaped like ``m``: subset sizes ``m`` (drafter counts) that ``search.m`` allows.

    A subset holds at least one drafter whatever ``search.m.min`` says.
    """
    return (m >= max(problem.m_min, 1)) & (m <= problem.m_max)


def count_subsets(problem: Problem) -> int:
    """Number of subsets in the search space."""
    n_free = int((~problem.required & ~problem.excluded).sum())
    return sum(math.comb(n_free, s) for s in subset_sizes(problem))


def iter_subsets(problem: Problem, chunk_rows: int) -> Iterator[np.ndarray]:
    """Membership chunks ``(B <= chunk_rows, N)`` covering the search space once."""
    for members, _ in iter_subset_chunks(problem, chunk_rows):
        yield members


def iter_subset_chunks(
    problem: Problem, chunk_rows: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Like :func:`iter_subsets`, also giving each chunk's member indices ``(B, m)``."""
    total = count_subsets(problem)
    if total == 0:
        raise InputError("search", "the search space holds no subset of drafters")
    if total > MAX_SUBSETS:
        raise InputError(
            "search.m.max",
            f"{total:,} subsets are too many to enumerate exactly; lower search.m.max "
            "(for solve, --strategy knapsack or optuna also reach large pools)",
        )
    free = np.flatnonzero(~problem.required & ~problem.excluded)
    req = np.flatnonzero(problem.required)
    for s in subset_sizes(problem):
        combos = free[combinations(len(free), s)]
        for lo in range(0, combos.shape[0], chunk_rows):
            part = combos[lo : lo + chunk_rows]
            members = np.zeros((part.shape[0], problem.n), bool)
            members[:, problem.required] = True
            np.put_along_axis(members, part, True, axis=1)
            yield members, np.hstack([np.broadcast_to(req, (part.shape[0], req.size)), part])


__all__ = [
    "MAX_SUBSETS",
    "combinations",
    "count_subsets",
    "iter_subset_chunks",
    "iter_subsets",
    "size_allowed",
    "subset_sizes",
]
