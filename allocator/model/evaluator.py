"""One evaluation loop for every search and analysis.

Each of them walks the same loop: enumerate the search space in chunks of subsets
(memory stays bounded whatever its size), evaluate a whole chunk in one vectorised call
(the chunk's subsets on a leading batch axis), mask what the budget allows, and keep
what the question needs. :func:`evaluate_space` is that loop; the caller supplies the
evaluation (by default the model's :func:`~allocator.model.metrics.evaluate_subsets`)
and what to keep, as one or more *keepers*: objects with ``add(chunk)``, called once per
evaluated :class:`Chunk` in enumeration order. The keepers here cover the common needs:

- :class:`FrontKeeper`: the Pareto front (cost down, a score up) of the feasible cells,
  each chunk's own front kept, merged at the end (a front of chunk fronts is the front
  of the whole);
- :class:`BestPerKey`: the best cell for each of several keys (posterior draws, batch
  sizes), ties broken by given values and then by enumeration order;
- :class:`GridMax`: the best score for each key and column (e.g. batch size and ``k``);
- :class:`FeasibleCells`: every feasible ``(subset, k)``, in enumeration order.

The budget rules themselves (what "within the budget" means, the error when nothing is)
are :mod:`allocator.core.budget`.

Shapes: ``B`` subsets in a chunk, ``N`` drafters, ``K`` values of ``k``; a cell is one
``(subset, k)``. An evaluation may put a key axis before the subsets (``(G, B, K)``:
workloads, posterior draws); the budget mask then has that shape too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..core.budget import feasible_mask
from ..core.pareto import front_order
from ..core.result import Front
from ..core.space import iter_subsets
from .metrics import METRICS, evaluate_subsets

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Cells (subsets x k, times any key axis) evaluated per chunk unless the caller says.
DEFAULT_CELLS = 1 << 21

#: ``evaluate(members (B, N)) -> metrics``: arrays with the chunk's subsets on their
#: batch axis. An evaluation that knows its own budget mask (one per posterior draw, say)
#: returns it under ``"feasible"``; otherwise the mask is the budget's
#: :func:`~allocator.core.budget.feasible_mask` on the metrics.
Evaluate = Callable[[np.ndarray], dict[str, np.ndarray]]


@dataclass
class Chunk:
    """One chunk of the search space, evaluated.

    members : ``(B, N)`` bool, the subsets in enumeration order.
    metrics : the evaluation's arrays, ``(B, K)`` (or ``(G, B, K)`` with a key axis).
    feasible : bool, the shape of ``metrics["throughput"]`` (or of the evaluation's own
        ``"feasible"``): the cells within the budget.
    start : subsets of the space enumerated before this chunk.
    extra : what the chunk source gave with these subsets (``None`` unless it yields
        ``(members, extra)`` pairs), e.g. their hosting cost, computed before evaluating.
    """

    members: np.ndarray
    metrics: dict[str, np.ndarray]
    feasible: np.ndarray
    start: int
    extra: Any = None


class Keeper(Protocol):
    """What a caller keeps of the evaluated space: ``add`` is called once per chunk."""

    def add(self, chunk: Chunk) -> None: ...


@dataclass
class Pass:
    """What :func:`evaluate_space` saw, after (or, for ``progress``, during) the loop.

    subsets : subsets evaluated; cells : cells evaluated (the size of every chunk's
    budget mask); lowest : per capped metric, its lowest value over every cell evaluated
    (``inf`` before any; with ``keys``, a ``(G,)`` array per metric), when asked for.
    """

    subsets: int = 0
    cells: int = 0
    lowest: dict[str, Any] = field(default_factory=dict)


def chunk_rows(max_cells: int, cells_per_subset: int) -> int:
    """Subsets per chunk so that a chunk holds at most ``max_cells`` cells (at least 1)."""
    return max(1, max_cells // max(1, cells_per_subset))


def _lowest(value: np.ndarray, keys: int | None, ndim: int) -> Any:
    """The lowest of ``value``; per key (``(G,)``) when ``keys`` is given, ``value`` then
    ``(G, ...)`` of ``ndim`` axes or without the key axis (the same for every key)."""
    v = np.asarray(value)
    if keys is None:
        return float(v.min())
    if v.ndim == ndim and v.shape[0] == keys:
        return v.min(axis=tuple(range(1, v.ndim)))
    return np.full(keys, float(v.min()))


def evaluate_space(
    problem: Problem,
    keep: Keeper | Sequence[Keeper] = (),
    *,
    evaluate: Evaluate | None = None,
    chunks: Iterable[Any] | None = None,
    budget: Mapping[str, float] | None = None,
    rows: int | None = None,
    max_cells: int = DEFAULT_CELLS,
    cells_per_subset: int | None = None,
    lowest: bool = False,
    keys: int | None = None,
    progress: Callable[[Pass], None] | None = None,
) -> Pass:
    """Enumerate, evaluate, mask and keep: the loop of every search (module docstring).

    problem : the problem whose search space is walked (``search.m``, ``require``,
        ``exclude``) and, by default, evaluated.
    keep : keepers, each given every :class:`Chunk` in enumeration order.
    evaluate : the vectorised evaluation (:data:`Evaluate`); default
        :func:`~allocator.model.metrics.evaluate_subsets` on ``problem``.
    chunks : the subsets to evaluate, as membership chunks ``(B, N)`` (or
        ``(members, extra)`` pairs); default the whole space,
        :func:`~allocator.core.space.iter_subsets` in chunks of ``rows``.
    budget : caps ``{metric: cap}``; default ``problem.budget``.
    rows : subsets per chunk; default :func:`chunk_rows` of ``max_cells`` and
        ``cells_per_subset`` (default ``len(problem.k_values)``).
    lowest : track each capped metric's lowest value (for
        :func:`~allocator.core.budget.infeasible_error`).
    keys : the size ``G`` of a leading key axis of the evaluation, to track ``lowest``
        per key.
    progress : called after each chunk with the :class:`Pass` so far.

    Returns the :class:`Pass`.
    """
    budget = problem.budget if budget is None else budget
    keepers = list(keep) if isinstance(keep, Sequence) else [keep]
    if evaluate is None:

        def evaluate(members: np.ndarray) -> dict[str, np.ndarray]:
            return evaluate_subsets(problem, members)

    if chunks is None:
        if rows is None:
            per = len(problem.k_values) if cells_per_subset is None else cells_per_subset
            rows = chunk_rows(max_cells, per)
        chunks = iter_subsets(problem, rows)
    seen = Pass(lowest=dict.fromkeys(budget, np.inf) if lowest else {})
    for item in chunks:
        members, extra = item if isinstance(item, tuple) else (item, None)
        met = evaluate(members)
        ok = met["feasible"] if "feasible" in met else feasible_mask(met, budget)
        if lowest:
            for name in budget:
                seen.lowest[name] = np.minimum(seen.lowest[name], _lowest(met[name], keys, ok.ndim))
        chunk = Chunk(members, met, ok, seen.subsets, extra)
        seen.subsets += members.shape[0]
        seen.cells += int(ok.size)
        for k in keepers:
            k.add(chunk)
        if progress is not None:
            progress(seen)
    if lowest and keys is None:
        seen.lowest = {name: float(v) for name, v in seen.lowest.items()}
    return seen


def mask_score(score: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``score`` where ``ok``, ``-inf`` elsewhere (shapes broadcasting together)."""
    return np.where(ok, score, -np.inf)


# ---------------------------------------------------------------- keepers
def concat_fronts(parts: Sequence[Front], cost_metric: str) -> Front:
    """Fronts (or any point sets) concatenated, not filtered; metrics of the first part's
    keys, in its order."""
    return Front(
        np.concatenate([p.members for p in parts]),
        np.concatenate([p.k for p in parts]),
        {m: np.concatenate([p.metrics[m] for p in parts]) for m in parts[0].metrics},
        cost_metric,
    )


class FrontKeeper:
    """The front of cost (``metrics[cost_metric]``, down) against a score (up; the
    throughput unless given) over every cell offered, ties broken by fewer drafters, then
    smaller ``k`` (:func:`~allocator.core.pareto.front_order`).

    Each offer keeps its own front; :meth:`front` merges them. ``len`` is the number of
    points kept so far (at least the merged front's size).

    ks : ``(K,)`` the ``k`` of each column of the cells offered; metrics : the metric
    names a point carries (by default the model's :data:`METRICS`).
    """

    def __init__(self, cost_metric: str, ks: np.ndarray, metrics: Sequence[str] = METRICS) -> None:
        self.cost_metric = cost_metric
        self.ks = np.asarray(ks)
        self.metrics = tuple(metrics)
        self.parts: list[Front] = []
        self.scores: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def add(self, chunk: Chunk) -> None:
        """The chunk's feasible cells, scored by throughput."""
        self.offer(chunk.members, chunk.metrics, chunk.feasible)

    def offer(
        self,
        members: np.ndarray,
        metrics: Mapping[str, np.ndarray],
        feasible: np.ndarray,
        score: np.ndarray | None = None,
    ) -> None:
        """Cells: ``members (B, N)``, ``metrics`` ``(B, K)`` arrays (at least the cost
        metric, ``drafters`` and the names in ``self.metrics``), ``feasible (B, K)``;
        ``score (B, K)`` (default ``metrics["throughput"]``)."""
        b, j = np.nonzero(feasible)
        if not b.size:
            return
        s = (metrics["throughput"] if score is None else score)[b, j]
        keep = front_order(
            metrics[self.cost_metric][b, j], s, metrics["drafters"][b, j], self.ks[j]
        )
        s, b, j = s[keep], b[keep], j[keep]
        self.parts.append(
            Front(
                members[b],
                self.ks[j],
                {m: np.array(metrics[m][b, j]) for m in self.metrics},
                self.cost_metric,
            )
        )
        self.scores.append(s)

    def offer_points(
        self,
        members: np.ndarray,
        k: np.ndarray,
        metrics: Mapping[str, np.ndarray],
        score: np.ndarray | None = None,
    ) -> None:
        """Points already gathered: ``members (P, N)``, ``k (P,)``, ``metrics`` of ``(P,)``
        arrays (every one is kept, in the given order); ``score (P,)`` (default
        ``metrics["throughput"]``)."""
        s = metrics["throughput"] if score is None else score
        keep = front_order(metrics[self.cost_metric], s, metrics["drafters"], k)
        self.parts.append(
            Front(
                members[keep], k[keep], {m: v[keep] for m, v in metrics.items()}, self.cost_metric
            )
        )
        self.scores.append(s[keep])

    def front(self) -> Front | None:
        """The merged front, sorted by cost; ``None`` when no cell was feasible."""
        if not self.parts:
            return None
        merged = concat_fronts(self.parts, self.cost_metric)
        score = np.concatenate(self.scores)
        keep = front_order(merged.cost, score, merged.metrics["drafters"], merged.k)
        return merged.take(keep)


class BestPerKey:
    """The best cell for each of ``G`` keys over every offer: the highest score; ties to
    the smallest tie-break values (compared in the order given), then to the cell offered
    first (row-major within an offer, offers in order), so a starting point wins every
    tie it is part of.

    n_keys : ``G``; n : drafters; ks : ``(K,)`` the ``k`` of each column.
    score, k, members, tiebreak : the starting point of each key (default: none, score
    ``-inf``): ``(G,)``, ``(G,)``, ``(G, N)`` and one tuple of tie-break values per key.

    Attributes ``score (G,)``, ``k (G,)``, ``members (G, N)``, ``tiebreak`` (list of
    tuples) hold the best so far.
    """

    def __init__(
        self,
        n_keys: int,
        n: int,
        ks: np.ndarray,
        score: np.ndarray | None = None,
        k: np.ndarray | None = None,
        members: np.ndarray | None = None,
        tiebreak: Sequence[tuple] | None = None,
    ) -> None:
        self.ks = np.asarray(ks)
        self.score = np.full(n_keys, -np.inf) if score is None else np.array(score, float)
        self.k = np.zeros(n_keys, np.int64) if k is None else np.array(k, np.int64)
        self.members = np.zeros((n_keys, n), bool) if members is None else np.array(members, bool)
        self.tiebreak = [()] * n_keys if tiebreak is None else [tuple(t) for t in tiebreak]

    def add(self, chunk: Chunk) -> None:
        """A chunk evaluated with the key axis first: ``metrics["throughput"]`` and
        ``feasible`` ``(G, B, K)``."""
        self.offer_all(chunk.members, mask_score(chunk.metrics["throughput"], chunk.feasible))

    def offer_all(self, members: np.ndarray, masked: np.ndarray) -> np.ndarray:
        """Every key at once, without tie-break values: ``masked (G, B, K)`` scores
        (``-inf`` where not allowed). Returns ``(G,)`` bool, the keys whose best changed."""
        g = masked.shape[0]
        t = masked.reshape(g, -1)
        flat = np.argmax(t, axis=1)
        val = t[np.arange(g), flat]
        better = val > self.score
        b, j = np.divmod(flat, self.ks.size)
        self.score[better] = val[better]
        self.members[better] = members[b[better]]
        self.k[better] = self.ks[j[better]]
        return better

    def offer(
        self,
        key: int,
        members: np.ndarray,
        masked: np.ndarray,
        tiebreak: Sequence[np.ndarray] = (),
    ) -> tuple[int, int] | None:
        """One key: ``masked (B, K)`` scores (``-inf`` where not allowed, at least one
        cell allowed); ``tiebreak``: arrays broadcasting to ``(B, K)``, smaller wins.
        Returns the winning cell ``(row, column)`` when it beats the key's best, else
        ``None``."""
        top = masked.max()
        r, j = np.nonzero(masked == top)
        values = [np.broadcast_to(t, masked.shape)[r, j] for t in tiebreak]
        pick = int(np.lexsort(values[::-1])[0]) if values else 0
        r0, j0 = int(r[pick]), int(j[pick])
        won = tuple(v[pick].item() for v in values)
        if (-float(top), *won) < (-float(self.score[key]), *self.tiebreak[key]):
            self.score[key] = top
            self.k[key] = self.ks[j0]
            self.members[key] = members[r0]
            self.tiebreak[key] = won
            return r0, j0
        return None


class GridMax:
    """The best score for each key and column over every offer: ``values (G, C)``, NaN
    where no cell was allowed."""

    def __init__(self, n_keys: int, n_cols: int) -> None:
        self.values = np.full((n_keys, n_cols), np.nan)

    def offer(self, key: int, masked: np.ndarray, ok: np.ndarray) -> None:
        """``masked (B, C)`` scores (``-inf`` where not allowed); ``ok (B, C)`` bool."""
        col = masked.max(axis=0)
        col[~ok.any(axis=0)] = np.nan
        self.values[key] = np.fmax(self.values[key], col)


class FeasibleCells:
    """Every feasible cell as a configuration, in enumeration order (each subset's ``k``
    ascending): :meth:`members` ``(C, N)`` and :meth:`k` ``(C,)``; ``left_out`` counts the
    cells outside the budget."""

    def __init__(self, ks: np.ndarray) -> None:
        self.ks = np.asarray(ks)
        self.left_out = 0
        self._members: list[np.ndarray] = []
        self._k: list[np.ndarray] = []

    def add(self, chunk: Chunk) -> None:
        ok = chunk.feasible
        self.left_out += int((~ok).sum())
        r, c = np.nonzero(ok)  # row-major: each subset's k in ascending order
        self._members.append(chunk.members[r])
        self._k.append(self.ks[c])

    def members(self, n: int) -> np.ndarray:
        return np.concatenate(self._members) if self._members else np.zeros((0, n), bool)

    def k(self) -> np.ndarray:
        return np.concatenate(self._k) if self._k else np.zeros(0, np.int64)


__all__ = [
    "DEFAULT_CELLS",
    "BestPerKey",
    "Chunk",
    "Evaluate",
    "FeasibleCells",
    "FrontKeeper",
    "GridMax",
    "Keeper",
    "Pass",
    "chunk_rows",
    "concat_fronts",
    "evaluate_space",
    "mask_score",
]
