"""Token trees: expected tokens per step of a draft tree, and the optimal tree (Sequoia).

The model, the programme and why it is exact, and the step time: docs/design.md §8.10.

Rank acceptance. A drafter's ``acceptance_by_rank`` gives ``p_r(ℓ)``: the probability that
its rank-``r`` candidate at a node of depth ``ℓ - 1`` (so the candidate sits at depth ``ℓ``)
is accepted given that the candidates of rank ``< r`` at that node were rejected (Sequoia's
positional-acceptance model, Chen et al. 2024, arXiv:2402.12374, written conditionally). One
list stands for every depth; a list per depth has its last row repeating. Under greedy
verification at most one child of a node is accepted, so the probability that the rank-``r``
child is *the* accepted one is

    q_r(ℓ) = p_r(ℓ) · Π_{s<r} (1 - p_s(ℓ))          (:func:`edge_weights`)

and ``Σ_r q_r ≤ 1``. Rank 1 is the chain: ``q_1 = p_1 = acceptance``.

Sequoia's own acceptance-rate vector is ``q``, not ``p``: its ``tests/test_accept.py``
(Infini-AI-Lab/Sequoia) counts, over verification steps, which rank's child was accepted
and divides by the number of steps, and its ``tree_search.py`` multiplies those shares
along paths directly. Such a vector converts with :func:`from_unconditional`,
``p_r = q_r / (1 - Σ_{s<r} q_s)``; given as ``acceptance_by_rank`` unconverted, every rank
after the first would be discounted twice.

A tree. Node 0 is the root (the last verified token); every other node ``v`` has a parent
``parents[v] < v`` and a rank ``ranks[v] ≥ 1`` among its siblings, the siblings of a node
holding distinct ranks (usually ``1..c``, the top ``c`` candidates of the drafter; a rank
may be left out, which pays when ``q`` rises with rank). Node ``v`` is accepted
when every edge on its path is, so in the bonus convention (the verifier's own token
counted) the expected tokens per step of a tree with ``n`` speculated nodes are

    E = 1 + Σ_{v ≠ 0} Π_{e on root→v} q_{rank(e)}(depth(e)).

(The issue text writes ``Π p_rank(e)``; with ``p`` read as the conditional acceptance above,
the factor of an edge must be the unconditional ``q``, otherwise two children of a node
could both count as accepted.) A width-1 tree is a chain and ``E`` is then
``1 + Σ_i Π_{j≤i} p_1(j)``, :func:`~allocator.model.acceptance.expected_accepted`'s bonus
formula.

The optimal tree. :class:`TreeProgramme` is Sequoia's dynamic programme, exact: the best
subtree with ``s`` nodes whose root sits at depth ``ℓ`` with ``r`` levels left below it is
``1 + max Σ_j q_j · V(ℓ+1, r-1, s_j)`` over splits of ``s - 1`` nodes among children of
ranks ``1..W`` (a rank with no node is left out; a tie keeps it), a max-plus knapsack over
ranks. With one rank list (or below the last per-depth row) ``V`` depends only on ``r``,
so the tables needed are ``(rows of acceptance) × (depth)`` of them, each ``width``
max-plus convolutions of length ``N``: ``O(L · D · W · N²)`` work, vectorised over ``N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..core.serving import Serving
from ..exceptions import InputError, ParameterError
from .timing import verify_time

if TYPE_CHECKING:
    from ..core.problem import Problem
    from . import steptime, under_load
else:  # the serving models: only when a tree is timed
    steptime = lazy_module("allocator.model.steptime")
    under_load = lazy_module("allocator.model.under_load")

#: Largest tree the command line plans (speculated nodes) and its deepest depth.
MAX_NODES = 512
MAX_DEPTH = 64

#: Relative margin by which leaving a rank out must beat keeping it in the programme.
SKIP_MARGIN = 1e-12


def rank_matrix(value: Sequence[float] | Sequence[Sequence[float]]) -> np.ndarray:
    """``acceptance_by_rank`` as ``(L, W)``: row ``ℓ - 1`` gives depth ``ℓ`` (the last row
    repeats below), column ``r - 1`` rank ``r``. Values as given (conditional ``p``)."""
    items: list = list(value)
    rows = items if items and isinstance(items[0], Sequence) else [items]
    return np.asarray([[float(x) for x in row] for row in rows], dtype=float)


def edge_weights(p: np.ndarray) -> np.ndarray:
    """Unconditional rank weights ``q_r = p_r Π_{s<r} (1 - p_s)`` of conditional ``p``
    ``(..., W)``: same shape, rows sum to at most 1."""
    p = np.asarray(p, dtype=float)
    miss = np.cumprod(1.0 - p, axis=-1)
    before = np.concatenate([np.ones(p.shape[:-1] + (1,)), miss[..., :-1]], axis=-1)
    return p * before


def from_unconditional(q: Sequence[float] | np.ndarray) -> np.ndarray:
    """Conditional ``p`` (``acceptance_by_rank``) from unconditional per-rank shares ``q``
    ``(..., W)`` (Sequoia's acceptance-rate vector: the share of steps whose accepted
    child had rank ``r``; rows sum to at most 1): ``p_r = q_r / (1 - Σ_{s<r} q_s)``, same
    shape, the inverse of :func:`edge_weights`. Ranks never accepted (``q_r = 0``) give
    ``p_r = 0``, which ``acceptance_by_rank`` refuses: drop them (and every later rank)."""
    q = np.asarray(q, dtype=float)
    if q.ndim == 0 or q.shape[-1] == 0 or not np.all(np.isfinite(q)):
        raise InputError("acceptance_by_rank", "give a non-empty list of finite shares")
    if np.any(q < 0) or np.any(q.sum(axis=-1) > 1.0 + 1e-9):
        raise InputError(
            "acceptance_by_rank",
            "unconditional shares must be >= 0 and sum to at most 1 per depth",
        )
    left = 1.0 - np.concatenate(
        [np.zeros(q.shape[:-1] + (1,)), np.cumsum(q, axis=-1)[..., :-1]], -1
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(left > 0, q / np.where(left > 0, left, 1.0), 0.0)
    return np.clip(p, 0.0, 1.0)


def node_depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every node (root 0) of trees ``parents (B, n+1)`` (``parents[:, 0] = -1``,
    ``parents[:, v] < v``): int ``(B, n+1)``."""
    parents = np.atleast_2d(np.asarray(parents, dtype=np.int64))
    depth = np.zeros(parents.shape, np.int64)
    rows = np.arange(parents.shape[0])
    for v in range(1, parents.shape[1]):
        depth[:, v] = depth[rows, parents[:, v]] + 1
    return depth


def check_tree(parents: Sequence[int], ranks: Sequence[int], field: str = "tree") -> None:
    """Refuse a malformed tree: root first, parents before children, sibling ranks distinct
    and at least 1 (a rank may be left out, docs/design.md §8.10)."""
    n = len(parents)
    if n == 0 or len(ranks) != n or parents[0] != -1:
        raise InputError(field, "needs node 0 as the root (parent -1) and one rank per node")
    siblings: dict[int, list[int]] = {}
    for v in range(1, n):
        if not 0 <= parents[v] < v:
            raise InputError(field, f"node {v}: parent {parents[v]} must be an earlier node")
        siblings.setdefault(int(parents[v]), []).append(int(ranks[v]))
    for u, rs in siblings.items():
        if min(rs) < 1 or len(set(rs)) != len(rs):
            raise InputError(
                field, f"children of node {u} have ranks {sorted(rs)}, not distinct ranks >= 1"
            )


def path_probabilities(parents: np.ndarray, ranks: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Probability that each node is accepted: ``(B, n+1)`` for trees ``(B, n+1)`` under
    rank acceptance ``p (L, W)`` (conditional; ranks beyond ``W`` have weight 0)."""
    parents = np.atleast_2d(np.asarray(parents, dtype=np.int64))
    ranks = np.atleast_2d(np.asarray(ranks, dtype=np.int64))
    q = edge_weights(np.atleast_2d(p))
    q = np.concatenate([q, np.zeros((q.shape[0], 1))], axis=1)  # column W: out of range
    depth = node_depths(parents)
    out = np.ones(parents.shape)
    rows = np.arange(parents.shape[0])
    width = q.shape[1] - 1
    for v in range(1, parents.shape[1]):
        level = np.minimum(depth[:, v] - 1, q.shape[0] - 1)
        rank = np.where(ranks[:, v] > width, width + 1, ranks[:, v])
        out[:, v] = out[rows, parents[:, v]] * q[level, rank - 1]
    return out


def tree_expected(parents: np.ndarray, ranks: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Expected tokens per step (bonus convention) of trees ``(B, n+1)``: ``(B,)``."""
    return path_probabilities(parents, ranks, p).sum(axis=1)


@dataclass(frozen=True)
class Tree:
    """One draft tree: ``parents``/``ranks`` int ``(n+1,)`` (node 0 the root, parent -1,
    rank 0), ``path_probability (n+1,)`` and ``expected_accepted`` (tokens per step)."""

    parents: np.ndarray
    ranks: np.ndarray
    path_probability: np.ndarray
    expected_accepted: float

    @property
    def nodes(self) -> int:
        """Speculated nodes (the root excluded)."""
        return int(self.parents.size - 1)

    @property
    def depth(self) -> int:
        return int(node_depths(self.parents[None])[0].max())

    def to_dict(self) -> dict:
        """The tree as the documents of ``tree --json`` hold it."""
        return {
            "expected_accepted": float(self.expected_accepted),
            "nodes": self.nodes,
            "depth": self.depth,
            "parents": [int(x) for x in self.parents],
            "ranks": [int(x) for x in self.ranks],
            "path_probability": [float(x) for x in self.path_probability],
        }


def make_tree(parents: Sequence[int], ranks: Sequence[int], p: np.ndarray) -> Tree:
    par = np.asarray(parents, dtype=np.int64)
    rk = np.asarray(ranks, dtype=np.int64)
    prob = path_probabilities(par[None], rk[None], p)[0]
    return Tree(par, rk, prob, float(prob.sum()))


@dataclass
class TreeProgramme:
    """Sequoia's dynamic programme for one drafter's rank acceptance.

    ``p``: conditional rank acceptance ``(L, W0)``; ``nodes``: largest tree (speculated
    nodes); ``depth``: deepest depth; ``width``: most children per node (at most ``W0``).
    The constructor stores these; :meth:`values` and :meth:`tree` do the work, sharing
    their tables.
    """

    p: np.ndarray
    nodes: int
    depth: int
    width: int | None = None
    _tables: dict = field(default_factory=dict, repr=False)

    def _prepare(self) -> None:
        if "q" in self._tables:
            return
        p = np.atleast_2d(np.asarray(self.p, dtype=float))
        w = p.shape[1] if self.width is None else min(self.width, p.shape[1])
        self._tables["q"] = edge_weights(p)[:, :w]
        size = self.nodes + 1  # subtree sizes 0..nodes+1 (the root counts)
        k = np.arange(size + 1)[:, None]
        s = np.arange(1, size + 1)[None, :]
        self._tables["index"] = (np.clip(k - s, 0, None), s <= k)

    def _value(self, level: int, left: int) -> np.ndarray:
        """``V[s]``: best ``Σ path probabilities`` of a subtree of ``s`` nodes (its root
        counting 1) whose root is at canonical depth ``level`` with ``left`` levels below;
        ``(nodes + 2,)``, ``-inf`` where impossible."""
        key = (level, left)
        if key in self._tables:
            return self._tables[key][0]
        q = self._tables["q"]
        size = self.nodes + 1
        v = np.full(size + 1, -np.inf)
        v[1] = 1.0
        args = None
        if left > 0 and size > 1:
            child = self._value(min(level + 1, q.shape[0] - 1), left - 1)
            idx, ok = self._tables["index"]
            weights = q[min(level, q.shape[0] - 1)]
            f = np.full(size + 1, -np.inf)
            f[0] = 0.0
            args = np.zeros((weights.size, size + 1), np.int64)
            for j in range(weights.size - 1, -1, -1):
                finite = np.isfinite(child)
                qc = np.full(child.shape, -np.inf)
                qc[finite] = weights[j] * child[finite]  # 0 * -inf would be NaN
                qc = qc[1:]  # subtree sizes 1..
                m = np.where(ok, qc[None, :] + f[idx], -np.inf)
                best = np.argmax(m, axis=1)
                g = m[np.arange(size + 1), best]
                # or leave rank j + 1 out: better only when q rises with rank (§8.10);
                # a tie keeps the rank, so that q falling with rank gives ranks 1..c
                scale = np.maximum(1.0, np.abs(np.where(np.isfinite(f), f, 0.0)))
                skip = f > g + SKIP_MARGIN * scale
                g = np.where(skip, f, g)
                args[j] = np.where(skip | ~np.isfinite(g), 0, best + 1)
                g[0] = 0.0
                f = g
            v[2:] = 1.0 + f[1:size]
        self._tables[key] = (v, args)
        return v

    def values(self) -> np.ndarray:
        """``E[d - 1, n]``: the best expected tokens per step with exactly ``n`` speculated
        nodes and depth at most ``d``, for ``d = 1..depth``, ``n = 0..nodes``;
        ``(depth, nodes + 1)``, ``-inf`` where no tree of that size fits."""
        self._prepare()
        return np.stack([self._value(0, d)[1:] for d in range(1, self.depth + 1)])

    def best(self) -> Tree:
        """The tree of at most ``nodes`` speculated nodes and depth at most ``depth`` with
        the largest ``E`` (the smallest such tree on ties)."""
        self._prepare()
        e = self._value(0, self.depth)[1:]
        n = int(np.flatnonzero(e >= np.nanmax(e[np.isfinite(e)]) - 1e-12)[0])
        return self.tree(n, self.depth)

    def tree(self, n: int, depth: int) -> Tree:
        """The best tree with exactly ``n`` speculated nodes and depth at most ``depth``."""
        self._prepare()
        q = self._tables["q"]
        if not np.isfinite(self._value(0, depth)[n + 1]):
            raise ParameterError("nodes", f"no tree of {n} nodes fits depth {depth}")
        parents: list[int] = [-1]
        ranks: list[int] = [0]
        stack = [(0, 0, depth, n + 1)]  # (node, level, left, size)
        while stack:
            node, level, left, size = stack.pop(0)
            if size <= 1:
                continue
            args = self._tables[(level, left)][1]
            rest = size - 1
            j = 0
            while rest > 0:
                s = int(args[j][rest])
                if s > 0:  # 0: rank j + 1 left out
                    parents.append(node)
                    ranks.append(j + 1)
                    stack.append((len(parents) - 1, min(level + 1, q.shape[0] - 1), left - 1, s))
                    rest -= s
                j += 1
        return make_tree(parents, ranks, self.p)


# ---------------------------------------------------------------- cost of a tree step
def round_time(
    nodes: np.ndarray,
    depth: np.ndarray,
    unit_cost: float,
    pass_cost: float,
    token_cost: float,
    curve: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Verifier-units of time of one tree step: ``depth`` drafting steps of ``unit_cost``
    each (one draft forward pass per level over the whole frontier, as EAGLE drafts) plus
    verifying ``nodes`` speculated tokens (``pass_cost + token_cost · nodes`` or the
    measured ``pass_cost_curve``, as a chain of ``m · k = nodes`` tokens). Any shape."""
    nodes = np.asarray(nodes, dtype=float)
    return np.asarray(depth, dtype=float) * unit_cost + verify_time(
        nodes, pass_cost, token_cost, curve
    )


def tree_serving(problem: Problem, index: int) -> Serving | None:
    """The problem's serving arrays for token trees of drafter ``index``, or ``None``
    without a ``serving`` section.

    A tree verifies ``nodes + 1`` tokens per sequence, which no measured ``step_ms`` table
    (chains of ``m·k + 1``) covers, so trees take the component model (``verify_ms`` and
    the drafter's ``draft_ms``) or the roofline (``serving.hardware`` and ``serving.model``
    with the drafter's pass from its ``architecture``, its factors in
    ``serving.roofline.drafters`` or its ``draft_ms``), through the step-time contract
    (:func:`tree_step_ms`): an :class:`InputError` naming ``serving`` without either.
    """
    serving = problem.serving
    if serving is None:
        return None
    if not serving.has_component_model and not serving.has_roofline:
        raise InputError(
            "serving",
            "a token tree verifies nodes + 1 tokens per sequence, which the measured step_ms "
            "tables (chains) do not cover: give the verify_ms component model, or "
            "serving.hardware and serving.model (the roofline)",
        )
    has_draft_ms = serving.draft_ms[index].size > 0
    if serving.has_component_model and not has_draft_ms:
        raise InputError(
            "serving",
            f"a token tree of {problem.names[index]!r} needs its draft time per batch size "
            f"(drafters.{index}.draft_ms) for the verify_ms component model",
        )
    if not serving.has_component_model and not has_draft_ms:
        models = serving.drafter_models or (None,) * problem.n
        fitted = serving.roofline.get("drafters") or {}
        if models[index] is None and problem.names[index] not in fitted:
            raise InputError(
                "serving",
                f"a token tree of {problem.names[index]!r} needs its drafting time: its "
                f"architecture, its pass times in serving.roofline.drafters or its draft_ms",
            )
    return serving


def tree_step_ms(
    problem: Problem | Serving,
    index: int,
    batch: float,
    nodes: np.ndarray,
    depth: np.ndarray,
    context: float = 0.0,
) -> np.ndarray:
    """Wall time of one tree step of drafter ``index`` at ``batch`` sequences of
    ``context`` tokens each, ms: the step-time contract
    (:class:`~allocator.model.steptime.ServingPredictor`) with ``depth`` drafting passes
    (one per level over the frontier, as EAGLE drafts) and ``nodes + 1`` tokens verified
    per sequence (the component model: ``verify_ms(b, nodes + 1) + depth · draft_ms(b) +
    overhead_ms``). ``nodes`` and ``depth`` broadcasting together; NaN where there is no
    step time (the component tables do not reach, nothing is extrapolated).
    ``problem``: the problem (its predictor, the roofline included), or only its serving
    arrays (measured tables and the component model)."""

    if isinstance(problem, Serving):
        pred = steptime.ServingPredictor(problem)
        n = len(problem.draft_ms)
    else:
        pred = under_load.predictor(problem)
        n = problem.n
    nodes, depth = np.broadcast_arrays(np.asarray(nodes, dtype=float), np.asarray(depth))
    shape = nodes.shape
    members = np.zeros((nodes.size, n), bool)
    members[:, index] = True
    ms = pred.step_ms(members, depth.ravel(), nodes.ravel() + 1.0, float(batch), context, 0.0)
    return np.asarray(ms).reshape(shape)


__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "SKIP_MARGIN",
    "Tree",
    "TreeProgramme",
    "check_tree",
    "edge_weights",
    "from_unconditional",
    "make_tree",
    "node_depths",
    "path_probabilities",
    "rank_matrix",
    "round_time",
    "tree_expected",
    "tree_serving",
    "tree_step_ms",
]
