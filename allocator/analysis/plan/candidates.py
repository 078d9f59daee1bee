"""Candidate configurations for a plan: per workload, each subset at its best ``k``.

One pass over the search space evaluates every workload on every subset (chunked, so
memory stays bounded) and keeps, per workload and subset, the ``k`` of highest
throughput among those meeting the per-configuration caps (``draft_cost_per_round``,
``draft_cost_per_token``, ``drafters``) and the hosting cap. The same pass records the
best *single* configuration for all traffic (the weighted harmonic mean of the
workloads' throughputs, within the caps as ``solve`` applies them to the mixture), as a
front against hosting cost.

A candidate ``c`` of workload ``w`` is then dropped when some candidate ``c'`` of the same
workload has ``members(c') ⊆ members(c)`` and ``S_w(c') >= S_w(c)``: whenever ``c`` can run
(its drafters are hosted) so can ``c'``, so dropping ``c`` never changes an optimum.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...core.budget import feasible_mask, infeasible_error, within
from ...core.pareto import front_order
from ...core.space import iter_subsets
from ...exceptions import InputError
from ...model.evaluator import Chunk, Evaluate, chunk_rows, evaluate_space, mask_score
from ...model.metrics import evaluate_subsets

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Metrics a budget caps per configuration; ``hosting_cost`` caps the hosted set instead.
CONFIG_CAPS = ("draft_cost_per_round", "draft_cost_per_token", "drafters")


@dataclass
class Traffic:
    """The workloads of a problem as single-class problems.

    names : ``(W,)`` workload names; weights : ``(W,)`` shares of generated units, sum 1;
    views : one single-class :class:`~allocator.core.problem.Problem` per workload.
    A problem without workloads is one workload (its own name) of weight 1.
    """

    names: tuple[str, ...]
    weights: np.ndarray
    views: tuple

    @classmethod
    def of(cls, problem: Problem) -> Traffic:
        if not problem.workloads:
            return cls((problem.name,), np.ones(1), (problem,))
        return cls(
            tuple(w.name for w in problem.workloads),
            np.array([w.weight for w in problem.workloads]),
            tuple(problem.workload_view(i) for i in range(len(problem.workloads))),
        )

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class Candidates:
    """Candidate configurations of every workload, concatenated.

    workload : ``(C,)`` int, the workload each candidate serves.
    members : ``(C, N)`` bool; k : ``(C,)`` int.
    throughput : ``(C,)`` the candidate's throughput on its own workload
    (accepted units per verifier-unit of time).
    enumerated, pruned, kept : ``(W,)`` int, per workload: subsets with a feasible
    ``k``, left after subset-dominance pruning, kept after the candidate cap.
    cut : true when some workload lost candidates to the cap (the plan is then not
    proven optimal).
    """

    workload: np.ndarray
    members: np.ndarray
    k: np.ndarray
    throughput: np.ndarray
    enumerated: np.ndarray
    pruned: np.ndarray
    kept: np.ndarray
    cut: bool


@dataclass
class SingleFront:
    """Best single configurations for all traffic, as a front against hosting cost.

    members : ``(P, N)`` bool; k : ``(P,)``; hosting_cost : ``(P,)`` ascending;
    throughput : ``(P,)`` mixture throughput ``1 / Σ_w p_w / S_w``, strictly increasing;
    per_workload : ``(P, W)`` each workload's throughput ``S_w`` under that configuration.
    """

    members: np.ndarray
    k: np.ndarray
    hosting_cost: np.ndarray
    throughput: np.ndarray
    per_workload: np.ndarray

    def best_within(self, cap: float) -> int | None:
        """Index of the best configuration whose hosting cost meets ``cap`` (None: none)."""
        ok = np.flatnonzero(within(self.hosting_cost, cap))
        return int(ok[-1]) if ok.size else None


class _WithinHosting:
    """The search space in chunks, less the subsets over the hosting cap (which can never
    run: dropped before they are evaluated). Yields ``(members, hosting cost)`` pairs;
    ``lowest`` is the lowest hosting cost over the whole space (for the error)."""

    def __init__(self, problem: Problem, rows: int, cap: float) -> None:
        self.problem, self.rows, self.cap = problem, rows, cap
        self.lowest = np.inf

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for members in iter_subsets(self.problem, self.rows):
            host = members.astype(float) @ self.problem.hosting_cost
            self.lowest = min(self.lowest, float(host.min()))
            keep = within(host, self.cap)
            if keep.any():
                yield members[keep], host[keep]


def _traffic_evaluation(traffic: Traffic, n_k: int) -> Evaluate:
    """Every workload on a chunk at once: ``throughput`` and ``draft_cost_per_token``
    ``(W, B, K)``; the metrics no workload changes (round time, draft cost per round,
    drafters, hosting cost) ``(B, K)``; and the mixture's ``time_per_unit`` ``Σ_w p_w /
    S_w`` and ``mixture_draft_cost_per_token`` ``Σ_w p_w · (draft cost / E_w)``, ``(B, K)``."""

    def evaluate(members: np.ndarray) -> dict[str, np.ndarray]:
        shape = (members.shape[0], n_k)
        thr = np.empty((len(traffic),) + shape)
        token = np.empty_like(thr)
        time_per_unit = np.zeros(shape)
        mixture_token = np.zeros(shape)
        met: dict[str, np.ndarray] = {}
        for w, view in enumerate(traffic.views):  # workloads are few; subsets are vectorised
            met = evaluate_subsets(view, members)
            thr[w] = met["throughput"]
            token[w] = met["draft_cost_per_token"]
            time_per_unit += traffic.weights[w] / met["throughput"]
            mixture_token += traffic.weights[w] * met["draft_cost_per_token"]
        return {
            **met,
            "throughput": thr,
            "draft_cost_per_token": token,
            "time_per_unit": time_per_unit,
            "mixture_draft_cost_per_token": mixture_token,
        }

    return evaluate


class _BestK:
    """Per subset and workload, the ``k`` of highest throughput within the caps; and the
    chunk's front of the best single configuration for all traffic."""

    def __init__(self, ks: np.ndarray, caps: dict[str, float]) -> None:
        self.ks, self.caps = ks, caps
        self.members: list[np.ndarray] = []
        self.best_k: list[np.ndarray] = []
        self.best_s: list[np.ndarray] = []
        self.singles: list[tuple] = []

    def add(self, chunk: Chunk) -> None:
        members, host, met, ks = chunk.members, chunk.extra, chunk.metrics, self.ks
        thr = met["throughput"]  # (W, B, K)
        s = mask_score(thr, chunk.feasible)
        j = np.argmax(s, axis=2)  # (W, B)
        best_k = ks[j].T
        best_s = np.take_along_axis(s, j[:, :, None], axis=2)[:, :, 0].T
        # one configuration for all traffic meets the caps as `solve` measures them on the
        # mixture: draft_cost_per_token is its long-run value Σ_w p_w · (draft cost / E_w)
        mixture = {
            **met,
            "throughput": met["time_per_unit"],  # the mask's shape, (B, K)
            "draft_cost_per_token": met["mixture_draft_cost_per_token"],
        }
        mix = mask_score(1.0 / met["time_per_unit"], feasible_mask(mixture, self.caps))
        j = np.argmax(mix, axis=1)
        rows_ok = np.flatnonzero(np.isfinite(mix[np.arange(mix.shape[0]), j]))
        if rows_ok.size:
            jj = j[rows_ok]
            keep = front_order(host[rows_ok], mix[rows_ok, jj], members[rows_ok].sum(1), ks[jj])
            r, jk = rows_ok[keep], jj[keep]
            self.singles.append((members[r], ks[jk], host[r], mix[r, jk], thr[:, r, jk].T))
        self.members.append(members)
        self.best_k.append(best_k)
        self.best_s.append(best_s)


def enumerate_configurations(
    problem: Problem, traffic: Traffic, hosting_cap: float, max_cells: int = 1 << 21
) -> tuple[np.ndarray, np.ndarray, np.ndarray, SingleFront]:
    """Evaluate the whole search space once for every workload.

    Returns ``members (B, N)``, ``best_k (B, W)``, ``best_s (B, W)`` (``-inf`` where no
    ``k`` meets the caps) and the :class:`SingleFront`. Raises :class:`InputError` when a
    workload has no configuration within the per-configuration caps or the hosting cap.
    """
    caps = {m: c for m, c in problem.budget.items() if m in CONFIG_CAPS}
    ks = problem.k_values
    n_w = len(traffic)
    source = _WithinHosting(problem, chunk_rows(max_cells, len(ks) * n_w), hosting_cap)
    keeper = _BestK(ks, caps)
    seen = evaluate_space(
        problem,
        keeper,
        evaluate=_traffic_evaluation(traffic, len(ks)),
        chunks=source,
        budget=caps,
        lowest=True,  # among subsets within the hosting cap, per workload
        keys=n_w,
    )
    if not keeper.members:
        raise InputError(
            "budget.hosting_cost",
            f"no configuration meets hosting_cost <= {hosting_cap:g} (the cheapest in the "
            f"search space costs {source.lowest:.6g})",
        )
    members = np.concatenate(keeper.members)
    best_k, best_s = np.concatenate(keeper.best_k), np.concatenate(keeper.best_s)
    for w in range(n_w):
        if np.isfinite(best_s[:, w]).any():
            continue
        where = f"workload {traffic.names[w]!r}: " if problem.workloads else ""
        budget = dict(caps)
        least = {m: float(v[w]) for m, v in seen.lowest.items()}
        if np.isfinite(hosting_cap):
            budget["hosting_cost"], least["hosting_cost"] = hosting_cap, source.lowest
        e = infeasible_error(budget, least)
        raise InputError(e.field, where + e.message)
    return members, best_k, best_s, _single_front(keeper.singles, problem.n, n_w)


def _single_front(parts: list, n: int, n_w: int) -> SingleFront:
    if not parts:
        return SingleFront(
            np.zeros((0, n), bool),
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0),
            np.zeros((0, n_w)),
        )
    members, k, host, thr, per = (np.concatenate(x) for x in zip(*parts, strict=True))
    keep = front_order(host, thr, members.sum(1), k)
    return SingleFront(members[keep], k[keep], host[keep], thr[keep], per[keep])


def dominated_by_subset(members: np.ndarray, s: np.ndarray, word_limit: int = 62) -> np.ndarray:
    """Where a configuration is beaten or tied by one using a proper subset of its drafters.

    members : ``(B, N)`` bool, distinct rows forming the search space (every size between
    its smallest and largest, so a chain of one-drafter removals between two members of
    the space stays inside it); s : ``(B, W)`` throughput per workload, ``-inf`` where
    unusable. Returns ``(B, W)`` bool: ``True`` where some proper subset ``c'`` in the
    space has ``s[c'] >= s[c]`` (always true where ``s`` is ``-inf``).

    A dynamic programme over subset sizes: ``M(c) = max(s[c], max_i M(c - {i}))`` is the
    best throughput of any subset of ``c`` in the space, found by looking each
    ``c - {i}`` up among the previous size's keys: ``O(B·m·log B)``. Keys are int64
    bitmasks up to ``word_limit`` drafters, packed bytes beyond.
    """
    b, n = members.shape
    size = members.sum(axis=1)
    out = np.ones(s.shape, bool)
    prev_keys: np.ndarray | None = None
    prev_best: np.ndarray | None = None
    prev_size = -1
    for m in np.unique(size):
        rows = np.flatnonzero(size == m)
        keys, child = _level_keys(members[rows], int(m), n <= word_limit)
        order = np.argsort(keys, kind="stable")
        rows, keys, child = rows[order], keys[order], child[order]
        best_child = np.full((rows.size, s.shape[1]), -np.inf)
        if prev_size == m - 1:
            assert prev_keys is not None and prev_best is not None
            pos = np.minimum(np.searchsorted(prev_keys, child), prev_keys.size - 1)
            found = prev_keys[pos] == child  # (R, m)
            vals = np.where(found[:, :, None], prev_best[pos], -np.inf)  # (R, m, W)
            best_child = vals.max(axis=1)
        own = s[rows]
        out[rows] = ~(own > best_child)
        prev_keys, prev_best, prev_size = keys, np.maximum(own, best_child), m
    return out


def _level_keys(members: np.ndarray, m: int, as_int: bool) -> tuple[np.ndarray, np.ndarray]:
    """Keys of subsets of one size ``m`` and of each one-drafter-smaller subset.

    members : ``(R, N)`` bool, every row with ``m`` members. Returns ``keys (R,)`` and
    ``child (R, m)``, comparable and sortable: int64 bitmasks when ``as_int`` (``N <= 62``),
    else the packed rows viewed as fixed-width bytes.
    """
    r, n = members.shape
    cols = np.nonzero(members)[1].reshape(r, m)
    if as_int:
        keys = members.astype(np.int64) @ (np.int64(1) << np.arange(n, dtype=np.int64))
        return keys, keys[:, None] - (np.int64(1) << cols.astype(np.int64))
    packed = np.packbits(members, axis=1)  # (R, nb), bit i of a row at byte i // 8
    nb = packed.shape[1]
    kind = np.dtype((np.void, nb))
    child = np.repeat(packed[:, None, :], m, axis=1)  # (R, m, nb)
    ri, ji = np.divmod(np.arange(r * m), m)
    child[ri, ji, cols.ravel() // 8] ^= (0x80 >> (cols.ravel() % 8)).astype(np.uint8)
    keys = np.ascontiguousarray(packed).view(kind).reshape(r)
    return keys, np.ascontiguousarray(child).view(kind).reshape(r, m)


def build_candidates(
    problem: Problem,
    traffic: Traffic,
    hosting_cap: float = np.inf,
    max_candidates: int = 2000,
    max_cells: int = 1 << 21,
) -> tuple[Candidates, SingleFront]:
    """Every workload's candidates (pruned, then cut to ``max_candidates`` each).

    When a workload has more than ``max_candidates`` after pruning, those on its front
    of throughput against hosting cost are kept first, then the fastest others.
    """
    members, best_k, best_s, single = enumerate_configurations(
        problem, traffic, hosting_cap, max_cells
    )
    dominated = dominated_by_subset(members, best_s)
    host = members.astype(float) @ problem.hosting_cost
    parts = []
    counts = np.zeros((3, len(traffic)), np.int64)
    cut = False
    for w in range(len(traffic)):
        rows = np.flatnonzero(~dominated[:, w])
        counts[0, w] = int(np.isfinite(best_s[:, w]).sum())
        counts[1, w] = rows.size
        if rows.size > max_candidates:
            cut = True
            s = best_s[rows, w]
            on_front = np.zeros(rows.size, bool)
            on_front[front_order(host[rows], s)] = True
            rank = np.lexsort((-s, ~on_front))
            rows = np.sort(rows[rank[:max_candidates]])
        counts[2, w] = rows.size
        parts.append((np.full(rows.size, w), members[rows], best_k[rows, w], best_s[rows, w]))
    workload, mem, k, s = (np.concatenate(x) for x in zip(*parts, strict=True))
    return Candidates(workload, mem, k, s, counts[0], counts[1], counts[2], cut), single


__all__ = [
    "CONFIG_CAPS",
    "Candidates",
    "SingleFront",
    "Traffic",
    "build_candidates",
    "dominated_by_subset",
    "enumerate_configurations",
]
