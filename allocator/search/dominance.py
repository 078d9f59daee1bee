"""Subset-level dominance: drop subsets that cannot reach the front, before looping over ``k``.

Under ``any-correct`` pooling with one class of traffic, the metrics of a subset
``S`` at draft length ``k`` depend on ``S`` only through its pooled acceptance
``a_S(1..J)`` and a few sums: ``sum rho`` (draft time and draft cost), ``max rho``
(draft time when drafting is parallel), ``m`` (verification time when
``token_cost > 0``, and the ``drafters`` metric) and ``sum h`` (hosting cost).
Throughput ``E_k / T`` rises with every ``a(j)`` and falls with each of those sums,
and every cost metric rises with them (``draft_cost_per_token`` falls with ``E_k``).
So when ``S`` has, at some ``k``, ``E_k`` at least that of ``T`` and every sum that
matters at most that of ``T``, then ``S`` at ``k`` is within every budget ``T`` at
``k`` is, and weakly dominates it: ``T`` at ``k`` can be dropped. This module finds
the subsets that are not dropped at any ``k``; the exact strategy evaluates only those.

The test used is a two-dimensional skyline in (``E_k`` up, ``sum rho`` down) inside
groups of subsets that share exactly every other sum that matters. Grouping only
forgoes some pruning (it never prunes across groups), so the result stays a
superset of the true non-dominated subsets. A skyline of chunk skylines is the
skyline of the whole, so memory stays bounded by the chunk size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..core.space import count_subsets, iter_subset_chunks, subset_sizes
from ..model.acceptance import expected_accepted, first_positions

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Build the table of every bitmask subset at once up to this many float cells.
MAX_TABLE_CELLS = 1 << 25


def pruning_blocker(problem: Problem) -> str | None:
    """Why dominance pruning would be invalid for ``problem``, or ``None`` when it is valid.

    The argument above needs pooled acceptance from the error model alone, one class
    of traffic and verification time linear in ``m * k``.
    """
    if problem.workloads:
        return "a workload mixture"
    if problem.pooling != "any-correct":
        return f"{problem.pooling} pooling"
    if problem.ensembles:
        return "measured ensemble acceptance"
    if problem.pass_cost_curve is not None:
        return "a pass-cost curve"
    return None


def group_columns(problem: Problem) -> list[str]:
    """The sums besides ``sum rho`` that a subset's metrics or budget depend on."""
    used = set(problem.budget) | {problem.cost_metric}
    cols = []
    if problem.token_cost != 0.0 or "drafters" in used:
        cols.append("m")
    if "hosting_cost" in used:
        cols.append("hosting")
    if problem.drafting == "parallel":
        cols.append("max_rho")
    return cols


class SubsetTable:
    """Columns describing a batch of subsets: ``members (B, N)`` bool, ``acc (B, J)``
    pooled acceptance, ``sum_rho (B,)`` and ``groups (B, G)`` (see :func:`group_columns`).
    """

    def __init__(self, members, acc, sum_rho, groups):
        self.members = members
        self.acc = acc
        self.sum_rho = sum_rho
        self.groups = groups

    def take(self, idx) -> SubsetTable:
        return SubsetTable(self.members[idx], self.acc[idx], self.sum_rho[idx], self.groups[idx])

    @staticmethod
    def concat(parts: list[SubsetTable]) -> SubsetTable:
        return SubsetTable(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("members", "acc", "sum_rho", "groups")
            )
        )

    def __len__(self) -> int:
        return int(self.sum_rho.shape[0])


def _group_values(problem: Problem, idx: np.ndarray, cols: list[str]) -> np.ndarray:
    """Group columns ``(B, G)`` of subsets given by member indices ``idx`` ``(B, m)``."""
    out = []
    for c in cols:
        if c == "m":
            out.append(np.full(idx.shape[0], float(idx.shape[1])))
        elif c == "hosting":
            out.append(problem.hosting_cost[idx].sum(axis=1))
        else:
            out.append(problem.unit_cost[idx].max(axis=1))
    return np.column_stack(out) if out else np.zeros((idx.shape[0], 0))


def skyline(problem: Problem, table: SubsetTable) -> np.ndarray:
    """Indices of the subsets of ``table`` not dominated at some ``k`` within their group.

    A subset is dropped at ``k`` when an earlier one in the order (group, ``sum rho``
    ascending, first-position acceptance descending) has ``E_k`` at least as high.
    With one acceptance value per subset (``J = 1``) ``E_k`` is increasing in it for
    every ``k``, so one pass over the acceptance decides all ``k`` at once.
    """
    b = len(table)
    if b == 0:
        return np.zeros(0, np.int64)
    keys = [-table.acc[:, 0], table.sum_rho] + [
        table.groups[:, g] for g in range(table.groups.shape[1])
    ][::-1]
    order = np.lexsort(keys)
    if table.groups.shape[1]:
        g = table.groups[order]
        starts = np.flatnonzero(np.concatenate(([True], np.any(g[1:] != g[:-1], axis=1))))
    else:
        starts = np.array([0])
    bounds = np.append(starts, b)
    if table.acc.shape[1] == 1:
        scores = table.acc[order]  # (B, 1): E_k increases with it at every k
    else:
        ks = problem.k_values
        scores = expected_accepted(table.acc[order], problem.k_max, problem.convention)[:, ks - 1]
    keep = np.zeros(b, bool)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s = scores[lo:hi]
        best_before = np.empty_like(s)
        best_before[0] = -np.inf
        np.maximum.accumulate(s[:-1], axis=0, out=best_before[1:])
        keep[lo:hi] = np.any(s > best_before, axis=1)
    return np.sort(order[keep])


def dominated_by(sky: SubsetTable, table: SubsetTable) -> np.ndarray:
    """Bool ``(B,)``: rows of ``table`` that a row of ``sky`` dominates (a cheap pre-filter).

    Only decided without groups and with one acceptance value per subset (else all
    False): a row is dominated when some ``sky`` row with ``sum rho`` no higher has
    acceptance no lower. ``O(B log S)`` by binary search on ``sky``'s staircase.
    """
    out = np.zeros(len(table), bool)
    if len(sky) == 0 or table.groups.shape[1] or table.acc.shape[1] != 1:
        return out
    order = np.argsort(sky.sum_rho, kind="stable")
    rho = sky.sum_rho[order]
    best = np.maximum.accumulate(sky.acc[order, 0])
    pos = np.searchsorted(rho, table.sum_rho, side="right") - 1
    has = pos >= 0
    out[has] = best[pos[has]] >= table.acc[has, 0]
    return out


def subset_sums(values: np.ndarray, op=np.add) -> np.ndarray:
    """``op``-reduction of ``values[i]`` over the set bits of every mask: ``(2**N, ...)``.

    Lowest-bit recursion: the row of ``s`` combines the row of ``s`` without its
    highest bit with that bit's value, one vectorised step per drafter.
    """
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    out = np.zeros((1 << n,) + values.shape[1:])
    for i in range(n):
        lo, hi = 1 << i, 1 << (i + 1)
        op(out[: hi - lo], values[i], out=out[lo:hi])
    return out


def masks_to_members(masks: np.ndarray, n: int) -> np.ndarray:
    """Bool membership rows ``(B, n)`` of bitmasks ``(B,)``."""
    return ((masks[:, None] >> np.arange(n)) & 1).astype(bool)


def _bitmask_chunks(problem: Problem, rows: int) -> Iterator[SubsetTable]:
    """The whole space from one table over all bitmasks (error model's ``fail_prob_all``)."""
    n = problem.n
    q = 1.0 - first_positions(problem.acceptance, problem.k_max)
    fail = problem.errors.fail_prob_all(q)
    masks = np.arange(1 << n, dtype=np.int64)
    bits = 1 << np.arange(n, dtype=np.int64)
    req, exc = int(bits[problem.required].sum()), int(bits[problem.excluded].sum())
    size = subset_sums(np.ones(n)).astype(np.int64)
    sizes = subset_sizes(problem)
    n_req = int(problem.required.sum())
    ok = ((masks & req) == req) & ((masks & exc) == 0) & (size >= n_req + sizes.start)
    ok &= (size <= n_req + sizes.stop - 1) & (masks != 0)
    masks = masks[ok]
    sum_rho = subset_sums(problem.unit_cost)[ok]
    cols = group_columns(problem)
    groups = []
    for c in cols:
        if c == "m":
            groups.append(size[ok].astype(float))
        elif c == "hosting":
            groups.append(subset_sums(problem.hosting_cost)[ok])
        else:
            groups.append(subset_sums(problem.unit_cost, np.maximum)[ok])
    g = np.column_stack(groups) if groups else np.zeros((masks.size, 0))
    acc = 1.0 - fail[masks]
    for lo in range(0, masks.size, rows):
        sl = slice(lo, lo + rows)
        yield SubsetTable(masks[sl], acc[sl], sum_rho[sl], g[sl])


def _member_chunks(problem: Problem, rows: int) -> Iterator[SubsetTable]:
    """The space chunk by chunk (error model's ``fail_prob`` on membership matrices)."""
    q = 1.0 - first_positions(problem.acceptance, problem.k_max)
    cols = group_columns(problem)
    for members, idx in iter_subset_chunks(problem, rows):
        acc = 1.0 - problem.errors.fail_prob(members, q)
        groups = _group_values(problem, idx, cols)
        yield SubsetTable(members, acc, problem.unit_cost[idx].sum(axis=1), groups)


def use_bitmask_table(problem: Problem) -> bool:
    """Whether one table over all ``2**N`` bitmasks fits and is cheaper than the space."""
    n = problem.n
    cells = (1 << n) * max(min(problem.acceptance.shape[1], problem.k_max), 1)
    return n <= 26 and cells <= MAX_TABLE_CELLS and count_subsets(problem) * 4 >= (1 << n)


def screen(
    problem: Problem, rows: int, progress: Callable[[int, int], None] | None = None
) -> tuple[np.ndarray, int]:
    """Membership rows ``(S, N)`` of every subset that may reach the front, and the number screened.

    ``rows`` bounds the subsets handled at once; ``progress(done, total)`` is called
    after each chunk.
    """
    total = count_subsets(problem)
    bitmask = use_bitmask_table(problem)
    if problem.acceptance.shape[1] > 1:  # (rows, k_max) cells per chunk
        rows = max(1, min(rows, (1 << 22) // problem.k_max))
    chunks = _bitmask_chunks(problem, rows) if bitmask else _member_chunks(problem, rows)
    union, done = None, 0
    for chunk in chunks:
        done += len(chunk)
        if union is not None:
            chunk = chunk.take(np.flatnonzero(~dominated_by(union, chunk)))
        part = chunk.take(skyline(problem, chunk))
        union = part if union is None else SubsetTable.concat([union, part])
        union = union.take(skyline(problem, union))
        if progress is not None:
            progress(done, total)
    assert union is not None  # the space holds at least one subset
    members = masks_to_members(union.members, problem.n) if bitmask else union.members
    return members, done


__all__ = [
    "MAX_TABLE_CELLS",
    "SubsetTable",
    "dominated_by",
    "group_columns",
    "masks_to_members",
    "pruning_blocker",
    "screen",
    "skyline",
    "subset_sums",
    "use_bitmask_table",
]
