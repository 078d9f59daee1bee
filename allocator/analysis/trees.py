"""Token trees of one drafter (docs/design.md §8.10): the optimal tree of at most ``n``
nodes, the front of tree size against throughput, the EAGLE trees SGLang builds, and the
optimal tree simulated.

Each question returns a dataclass whose ``to_dict()`` is the ``tree --json`` (or
``simulate --nodes --json``) document. The maths (``E`` of a tree, Sequoia's programme,
the step time) is :mod:`allocator.model.token_tree`; SGLang's tree construction is
:mod:`allocator.engines.sglang`; the Monte Carlo is :mod:`allocator.analysis.rounds`.

Units: ``expected_accepted`` in tokens per step (bonus convention: the verifier's own
token counted); ``round_time`` in verifier-units of time; ``throughput`` in tokens per
verifier-unit; the ``serving`` rows in the units of :mod:`allocator.model.under_load`
(ms, tokens/s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import validate
from ..core.problem import Problem
from ..engines.sglang import check_triple, sglang_tree, sglang_triples
from ..exceptions import NotModelledError, ParameterError
from ..model.memory_fit import max_batch
from ..model.metrics import require_unit_cost
from ..model.token_tree import (
    MAX_DEPTH,
    MAX_NODES,
    Tree,
    TreeProgramme,
    edge_weights,
    from_unconditional,
    make_tree,
    node_depths,
    round_time,
    tree_serving,
    tree_step_ms,
)
from ..model.under_load import baseline_ms, metrics_from, step_time_notes
from .rounds import TreeSimulation, simulate_tree

#: Tree sizes of the front (and the node budget of the engine search) when ``nodes`` is
#: not given.
FRONT_NODES = 64
#: Deepest depth when ``depth`` is not given.
DEFAULT_DEPTH = 16
#: Largest ``topk`` of one SGLang setting (SGLang's own defaults stay below 10).
MAX_TOPK = 64
#: Largest ``topk`` the engine search tries without ``width``: it drafts
#: ``topk + (steps - 1)·topk²`` candidates per setting, so a drafter with hundreds of
#: measured ranks would take minutes; SGLang's own defaults stay below 10.
ENGINE_TOPK = 16


# ---------------------------------------------------------------- ranks the programme needs
@dataclass(frozen=True)
class ProgrammeRanks:
    """The rank acceptance an optimal tree of at most ``nodes`` nodes can use, for
    :class:`~allocator.model.token_tree.TreeProgramme`: ``p`` ``(L', W')`` conditional, and
    ``ranks`` ``(L', W')`` the original (1-based) rank of each column, or ``None`` when
    ``p`` is the drafter's own (cut at ``width``).

    Why it is exact: a node's children hold distinct ranks and a tree of ``n`` nodes has
    at most ``n`` of them; a child's subtree contributes ``q_r(ℓ)`` times its own value,
    which does not depend on the rank, so moving a subtree from rank ``r`` to an unused
    rank ``r'`` with ``q_r'(ℓ) ≥ q_r(ℓ)`` never lowers ``E``. Some optimal tree therefore
    uses only the ``n`` ranks of largest ``q`` at each depth (ties to the lower rank), and
    the programme over those ranks, in their order, with ``p'`` rebuilt from their ``q``
    (:func:`~allocator.model.token_tree.from_unconditional`), finds its ``E``. Rows equal to the
    last one are dropped (the last row repeats for every deeper level anyway). This
    bounds the programme's cost at ``O(L · D · min(W, n) · n²)`` whatever the number of
    measured ranks ``W`` (5,000 ranks took minutes before).
    """

    p: np.ndarray
    ranks: np.ndarray | None

    def tree(self, tree: Tree, p: np.ndarray) -> Tree:
        """``tree`` found on :attr:`p` with its ranks the drafter's own, evaluated under the
        drafter's ``p``."""
        if self.ranks is None:
            return tree
        depth = node_depths(tree.parents[None])[0]
        ranks = tree.ranks.copy()
        rows = np.minimum(depth[1:] - 1, self.ranks.shape[0] - 1)
        ranks[1:] = self.ranks[rows, tree.ranks[1:] - 1]
        return make_tree(tree.parents.tolist(), ranks.tolist(), p)


def programme_ranks(p: np.ndarray, nodes: int, width: int | None = None) -> ProgrammeRanks:
    """The ranks an optimal tree of at most ``nodes`` nodes and ``width`` children per node
    can use (:class:`ProgrammeRanks`)."""
    p = np.atleast_2d(np.asarray(p, dtype=float))
    if width is not None:
        p = p[:, : max(1, min(int(width), p.shape[1]))]
    rows = p.shape[0]
    while rows > 1 and np.array_equal(p[rows - 2], p[rows - 1]):
        rows -= 1
    p = p[:rows]
    if p.shape[1] <= nodes:
        return ProgrammeRanks(p, None)
    q = edge_weights(p)
    keep = np.sort(np.argsort(-q, axis=1, kind="stable")[:, :nodes], axis=1)
    kept = np.take_along_axis(q, keep, axis=1)
    return ProgrammeRanks(from_unconditional(kept), keep + 1)


def best_programme_tree(p: np.ndarray, nodes: int, depth: int, width: int | None) -> Tree:
    """:meth:`TreeProgramme.best` over the ranks such a tree can use
    (:func:`programme_ranks`), as a tree of the drafter's own ranks."""
    ranks = programme_ranks(p, nodes, width)
    return ranks.tree(TreeProgramme(ranks.p, nodes, depth).best(), p)


def programme_values(p: np.ndarray, nodes: int, depth: int, width: int | None) -> np.ndarray:
    """:meth:`TreeProgramme.values` over the ranks such trees can use."""
    return TreeProgramme(programme_ranks(p, nodes, width).p, nodes, depth).values()


# ---------------------------------------------------------------- arguments
def check_tree_options(
    *,
    nodes: int | None = None,
    max_nodes: int | None = None,
    depth: int = DEFAULT_DEPTH,
    width: int | None = None,
) -> None:
    """Refuse tree sizes (speculated nodes) outside ``1..MAX_NODES``, a depth outside
    ``1..MAX_DEPTH`` and a width below 1 (:class:`ParameterError` naming the parameter)."""
    for name, value, top in (("nodes", nodes, MAX_NODES), ("max_nodes", max_nodes, MAX_NODES)):
        if value is not None:
            validate.whole(value, name, lo=1, hi=top)
    validate.whole(depth, "depth", lo=1, hi=MAX_DEPTH)
    if width is not None:
        validate.whole(width, "width", lo=1)


def tree_drafter(problem: Problem, drafters: str | Sequence[str]) -> tuple[int, np.ndarray]:
    """The one drafter that drafts the tree (``drafters``: its name, or a list holding only
    it) as ``(index, acceptance_by_rank (L, W))``; refuses several names, an unknown name
    and a drafter without ``acceptance_by_rank``."""
    chosen = [drafters] if isinstance(drafters, str) else list(drafters)
    if len(chosen) != 1:
        raise ParameterError(
            "drafters", f"name one drafter (one model drafts a tree); got {len(chosen)}"
        )
    index = int(np.flatnonzero(problem.mask(chosen, "drafters"))[0])
    p = problem.drafter(index).acceptance_by_rank
    if p is None:
        raise ParameterError(
            "drafters",
            f"drafter {chosen[0]!r} has no acceptance_by_rank (the acceptance of its rank-r "
            "candidate; `allocator estimate` writes it from per-rank columns NAME@r)",
        )
    return index, p


def check_eagle(steps: int, topk: int, tokens: int) -> None:
    """Refuse an SGLang setting ``(num_steps, topk, num_draft_tokens)`` beyond the caps of
    the optimal tree (``MAX_DEPTH``, ``MAX_NODES + 1``) or a ``topk`` above ``MAX_TOPK``
    (so the ``topk + (steps - 1)·topk²`` candidates SGLang drafts stay countable), and
    one SGLang would not run (:func:`allocator.engines.sglang.check_triple`)."""
    for what, value, top in (
        ("num_steps", steps, MAX_DEPTH),
        ("topk", topk, MAX_TOPK),
        ("num_draft_tokens", tokens, MAX_NODES + 1),
    ):
        if value > top:
            raise ParameterError("eagle", f"{what} {value} is above {top}, the most planned")
    check_triple(steps, topk, tokens)


def rank_one_note(problem: Problem, index: int, p: np.ndarray) -> str | None:
    """A note when ``acceptance`` and ``acceptance_by_rank``'s rank 1 (``p (L, W)``)
    disagree by more than 0.005 at some depth (the last entry of each repeating): the
    chain commands read the first, trees the second, so their answers would not be of one
    drafter."""
    chain = np.asarray(problem.acceptance[index], dtype=float)
    rank1 = p[:, 0]
    n = max(chain.size, rank1.size)
    a = chain[np.minimum(np.arange(n), chain.size - 1)]
    b = rank1[np.minimum(np.arange(n), rank1.size - 1)]
    j = int(np.argmax(np.abs(a - b)))
    if abs(a[j] - b[j]) <= 0.005:
        return None
    return (
        f"drafters.{index}.acceptance gives {a[j]:.4g} at position {j + 1} where "
        f"acceptance_by_rank's rank 1 gives {b[j]:.4g}: chains (solve, evaluate, capacity) "
        "read acceptance, trees acceptance_by_rank; make rank 1 the chain's acceptance"
    )


def drafter_round_time(problem: Problem, index: int, nodes, depth) -> np.ndarray:
    """Verifier-units of one step of drafter ``index``'s tree of ``nodes`` speculated nodes
    and ``depth`` levels (:func:`allocator.model.token_tree.round_time`); any shapes
    broadcasting together. Refused for a drafter without ``unit_cost``."""
    member = np.zeros(problem.n, bool)
    member[index] = True
    require_unit_cost(problem, member, "a tree's round time")
    return round_time(
        nodes,
        depth,
        float(problem.unit_cost[index]),
        problem.pass_cost,
        problem.token_cost,
        problem.pass_cost_curve,
    )


# ---------------------------------------------------------------- results
@dataclass(frozen=True)
class TreeServingRow:
    """Per batch size, the tree (``nodes``, ``depth``) of most tokens/s, and its serving
    metrics (:func:`allocator.model.under_load.metrics_from`'s keys; ``None``: not finite)."""

    batch: int
    nodes: int
    depth: int
    metrics: dict[str, float | None]

    def to_dict(self) -> dict:
        return {"batch": self.batch, "nodes": self.nodes, "depth": self.depth, **self.metrics}


@dataclass(frozen=True)
class EagleServingRow:
    """Per batch size, SGLang's setting of most tokens/s, and its serving metrics."""

    batch: int
    num_steps: int
    topk: int
    num_draft_tokens: int
    metrics: dict[str, float | None]

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "num_steps": self.num_steps,
            "topk": self.topk,
            "num_draft_tokens": self.num_draft_tokens,
            **self.metrics,
        }


@dataclass
class BestTree:
    """``tree --nodes N``: the tree of at most ``max_nodes`` speculated nodes and depth at
    most ``max_depth`` with the most expected tokens per step, its step time and
    throughput; ``simulation`` with ``rounds``. ``rank_note``: see :func:`rank_one_note`."""

    drafter: str
    tree: Tree
    max_nodes: int
    max_depth: int
    round_time: float
    throughput: float
    simulation: TreeSimulation | None = None
    rank_note: str | None = None

    @property
    def notes(self) -> list[str]:
        return [] if self.rank_note is None else [self.rank_note]

    def to_dict(self) -> dict:
        doc: dict = {
            "drafter": self.drafter,
            **self.tree.to_dict(),
            "max_nodes": self.max_nodes,
            "max_depth": self.max_depth,
            "round_time": self.round_time,
            "throughput": self.throughput,
        }
        if self.simulation is not None:
            doc["simulation"] = self.simulation.to_dict()
        if self.rank_note is not None:
            doc["notes"] = [self.rank_note]
        return doc


@dataclass(frozen=True)
class FrontRow:
    """One tree size of the front: the depth of most throughput and its ``E``, the most
    ``E`` at any depth, the step time and throughput at that depth."""

    nodes: int
    expected_accepted: float
    depth: int
    expected_accepted_any_depth: float
    round_time: float
    throughput: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TreeFront:
    """``tree`` without ``--nodes``: per size ``1..max_nodes`` the best tree of depth at
    most ``max_depth`` (:class:`FrontRow`), ``best`` the size of most throughput, and with
    a ``serving`` section the tree of most tokens/s per batch size (``None`` without);
    ``serving_notes``: the batch sizes left out."""

    drafter: str
    max_nodes: int
    max_depth: int
    front: list[FrontRow]
    best: FrontRow
    serving: list[TreeServingRow] | None = None
    serving_notes: list[str] = field(default_factory=list)
    rank_note: str | None = None

    @property
    def notes(self) -> list[str]:
        return [*self.serving_notes, *([] if self.rank_note is None else [self.rank_note])]

    def to_dict(self) -> dict:
        doc: dict = {
            "max_nodes": self.max_nodes,
            "max_depth": self.max_depth,
            "front": [r.to_dict() for r in self.front],
            "best": self.best.to_dict(),
        }
        if self.serving is not None:
            doc["serving"] = [r.to_dict() for r in self.serving]
            if self.serving_notes:
                doc["notes"] = list(self.serving_notes)
        doc["drafter"] = self.drafter
        if self.rank_note is not None:
            doc["notes"] = [*doc.get("notes", []), self.rank_note]
        return doc


@dataclass(frozen=True)
class EagleSetting:
    """One SGLang setting and its expected tokens per step."""

    num_steps: int
    topk: int
    num_draft_tokens: int
    expected_accepted: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class EngineTree:
    """``tree --engine`` / ``--eagle``: SGLang's EAGLE setting ``(num_steps, topk,
    num_draft_tokens)`` (searched or given), the tree it builds, its step time and
    throughput, and ``optimal_same_size``, the programme's best ``E`` with at most as many
    nodes and depth at most ``num_steps``.

    Of a search only: ``searched`` (settings evaluated), ``best_expected`` (the setting of
    most ``E``), ``serving`` (per batch size, with a serving section). ``setting_notes``:
    about the ranks searched or scored; ``serving_notes``: batch sizes left out;
    ``simulation`` with ``rounds``.
    """

    drafter: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    tree: Tree
    round_time: float
    throughput: float
    optimal_same_size: float
    searched: int | None = None
    best_expected: EagleSetting | None = None
    serving: list[EagleServingRow] | None = None
    simulation: TreeSimulation | None = None
    setting_notes: list[str] = field(default_factory=list)
    serving_notes: list[str] = field(default_factory=list)
    rank_note: str | None = None

    engine = "sglang"

    @property
    def notes(self) -> list[str]:
        rank = [] if self.rank_note is None else [self.rank_note]
        return [*self.setting_notes, *self.serving_notes, *rank]

    def to_dict(self) -> dict:
        doc: dict = {}
        if self.setting_notes:
            doc["notes"] = list(self.setting_notes)
        if self.searched is not None:
            doc["searched"] = self.searched
        if self.best_expected is not None:
            doc["best_expected"] = self.best_expected.to_dict()
        if self.serving is not None:
            doc["serving"] = [r.to_dict() for r in self.serving]
            if self.serving_notes:
                doc["notes"] = [*doc.get("notes", []), *self.serving_notes]
        doc.update(
            {
                "engine": self.engine,
                "num_steps": self.num_steps,
                "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens,
                **self.tree.to_dict(),
                "round_time": self.round_time,
                "throughput": self.throughput,
                "optimal_same_size": self.optimal_same_size,
            }
        )
        if self.simulation is not None:
            doc["simulation"] = self.simulation.to_dict()
        doc["drafter"] = self.drafter
        if self.rank_note is not None:
            doc["notes"] = [*doc.get("notes", []), self.rank_note]
        return doc


@dataclass
class SimulatedTree:
    """``simulate --nodes``: the optimal tree of at most ``nodes`` nodes played for
    ``simulation.rounds`` steps, beside the model; throughputs per verifier-unit."""

    drafters: list[str]
    tree: Tree
    simulation: TreeSimulation
    throughput: float
    model_throughput: float
    round_time: float

    def to_dict(self) -> dict:
        return {
            "drafters": list(self.drafters),
            "tree": self.tree.to_dict(),
            **self.simulation.to_dict(),
            "throughput": self.throughput,
            "model_throughput": self.model_throughput,
            "round_time": self.round_time,
        }


# ---------------------------------------------------------------- the questions
def best_tree(
    problem: Problem,
    drafters: str | Sequence[str],
    nodes: int,
    depth: int = DEFAULT_DEPTH,
    width: int | None = None,
    rounds: int | None = None,
    seed: int = 0,
) -> BestTree:
    """The tree of at most ``nodes`` speculated nodes, depth at most ``depth`` and at most
    ``width`` children per node (default: every measured rank) with the most expected
    tokens per step (Sequoia's programme, exact); simulated for ``rounds`` steps when
    given."""
    check_tree_options(nodes=nodes, depth=depth, width=width)
    if rounds is not None:
        validate.seed(seed)
    index, p = tree_drafter(problem, drafters)
    tree = best_programme_tree(p, nodes, depth, width)
    t = float(drafter_round_time(problem, index, tree.nodes, tree.depth))
    return BestTree(
        drafter=problem.names[index],
        tree=tree,
        max_nodes=nodes,
        max_depth=depth,
        round_time=t,
        throughput=tree.expected_accepted / t,
        simulation=None if rounds is None else simulate_tree(tree, p, rounds, seed),
        rank_note=rank_one_note(problem, index, p),
    )


def tree_front(
    problem: Problem,
    drafters: str | Sequence[str],
    max_nodes: int = FRONT_NODES,
    depth: int = DEFAULT_DEPTH,
    width: int | None = None,
) -> TreeFront:
    """``E`` of the best tree per size ``1..max_nodes`` and depth cap ``1..depth``;
    throughput is maximised over the depth (the smallest on ties), and with a ``serving``
    section tokens/s per batch size over every size and depth."""
    check_tree_options(max_nodes=max_nodes, depth=depth, width=width)
    index, p = tree_drafter(problem, drafters)
    e = programme_values(p, max_nodes, depth, width)[:, 1:]  # (depth, max_nodes): 1..max_nodes
    n = np.arange(1, max_nodes + 1)
    d = np.arange(1, depth + 1)[:, None]
    thr = e / drafter_round_time(problem, index, n[None, :], d)
    thr = np.where(np.isfinite(e), thr, -np.inf)
    best_d = thr.argmax(axis=0)
    e_best = np.max(e, axis=0)
    rows = []
    for i, size in enumerate(n):
        if not np.isfinite(e_best[i]):
            continue
        dd = int(best_d[i]) + 1
        rows.append(
            FrontRow(
                nodes=int(size),
                expected_accepted=float(e[dd - 1, i]),
                depth=dd,
                expected_accepted_any_depth=float(e_best[i]),
                round_time=float(drafter_round_time(problem, index, size, dd)),
                throughput=float(thr[dd - 1, i]),
            )
        )
    best = max(rows, key=lambda r: r.throughput)
    result = TreeFront(problem.names[index], max_nodes, depth, rows, best)
    per_batch = _per_batch(problem, index, e, n[None, :], d)
    if per_batch is not None:
        result.serving = [
            TreeServingRow(b, int(n[i % n.size]), int(i // n.size) + 1, m)
            for b, i, m in per_batch[0]
        ]
        result.serving_notes = per_batch[1]
    result.rank_note = rank_one_note(problem, index, p)
    return result


def engine_tree(
    problem: Problem,
    drafters: str | Sequence[str],
    nodes: int | None = None,
    depth: int = DEFAULT_DEPTH,
    width: int | None = None,
    eagle: tuple[int, int, int] | None = None,
    rounds: int | None = None,
    seed: int = 0,
    batch: int | None = None,
) -> EngineTree:
    """SGLang's EAGLE tree: the setting ``eagle = (num_steps, topk, num_draft_tokens)``,
    or without it the search over ``num_steps <= depth``, ``topk <= width`` (default: the
    measured ranks up to :data:`ENGINE_TOPK`) and ``num_draft_tokens - 1 <= nodes``
    (default :data:`FRONT_NODES`) for the setting of most throughput; simulated for
    ``rounds`` steps when given.

    The setting picked is the one of most throughput in verifier-units (the model's time
    per step, one sequence, no serving load); with ``batch`` (one of
    ``serving.batch_sizes``) the one of most tokens/s at that many concurrent sequences,
    the setting to export for a server planned for ``batch``."""
    check_tree_options(nodes=nodes, depth=depth, width=width)
    if rounds is not None:
        validate.seed(seed)
    if batch is not None and eagle is not None:
        raise ParameterError(
            "batch",
            "picks the setting of most tokens/s at a batch size; eagle names one setting",
        )
    index, p = tree_drafter(problem, drafters)
    name = problem.names[index]
    n_max = nodes or FRONT_NODES
    setting_notes: list[str] = []
    serving_notes: list[str] = []
    searched = best_expected = serving = None
    if eagle is not None:
        steps, topk, tokens = (int(x) for x in eagle)
        check_eagle(steps, topk, tokens)
        if topk > p.shape[1]:
            setting_notes.append(
                f"topk {topk} is beyond the {p.shape[1]} measured ranks of "
                f"{name}'s acceptance_by_rank: candidates of rank "
                f"{p.shape[1] + 1}..{topk} are scored 0 (never accepted), so E counts "
                "nothing for them; measure those ranks to evaluate them"
            )
    else:
        topk_max = min(width or ENGINE_TOPK, p.shape[1])
        if width is None and p.shape[1] > ENGINE_TOPK:
            setting_notes.append(
                f"topk searched up to {ENGINE_TOPK} of the {p.shape[1]} measured ranks "
                "(the default cap of --engine); give --width to search wider"
            )
        tri = sglang_triples(p, depth, topk_max, n_max)
        t = drafter_round_time(problem, index, tri.tokens - 1, tri.steps)
        thr = tri.expected_accepted / t
        i = int(np.argmax(thr))
        j = int(np.argmax(tri.expected_accepted))
        searched = int(tri.steps.size)
        best_expected = EagleSetting(
            int(tri.steps[j]),
            int(tri.topk[j]),
            int(tri.tokens[j]),
            float(tri.expected_accepted[j]),
        )
        per_batch = _per_batch(problem, index, tri.expected_accepted, tri.tokens - 1, tri.steps)
        if per_batch is not None:
            serving = [
                EagleServingRow(b, int(tri.steps[c]), int(tri.topk[c]), int(tri.tokens[c]), m)
                for b, c, m in per_batch[0]
            ]
            serving_notes = per_batch[1]
        if batch is not None:
            i = _batch_choice(problem, batch, per_batch)
        steps, topk, tokens = int(tri.steps[i]), int(tri.topk[i]), int(tri.tokens[i])
        if batch is None:
            setting_notes.append(
                f"({steps}, {topk}, {tokens}) is the setting of most throughput in "
                "verifier-units (the model's time per step at one sequence, no serving "
                "load); give --batch B for the setting of most tokens/s at B concurrent "
                "sequences" + (" (the serving rows)" if serving else " (needs a serving section)")
            )
    tree = sglang_tree(p, steps, topk, tokens)
    t_step = float(drafter_round_time(problem, index, tree.nodes, steps))
    same = programme_values(p, tree.nodes, steps, width)[-1]
    optimal = float(np.max(same[np.isfinite(same)]))  # at most as many nodes, as deep
    return EngineTree(
        drafter=name,
        num_steps=steps,
        topk=topk,
        num_draft_tokens=tokens,
        tree=tree,
        round_time=t_step,
        throughput=tree.expected_accepted / t_step,
        optimal_same_size=optimal,
        searched=searched,
        best_expected=best_expected,
        serving=serving,
        simulation=None if rounds is None else simulate_tree(tree, p, rounds, seed),
        setting_notes=setting_notes,
        serving_notes=serving_notes,
        rank_note=rank_one_note(problem, index, p),
    )


def simulate_best_tree(
    problem: Problem,
    drafters: str | Sequence[str],
    nodes: int,
    rounds: int,
    depth: int = DEFAULT_DEPTH,
    seed: int = 0,
) -> SimulatedTree:
    """Play the optimal tree of at most ``nodes`` nodes and depth at most ``depth`` for
    ``rounds`` steps (:func:`allocator.analysis.rounds.simulate_tree`)."""
    check_tree_options(nodes=nodes, depth=depth)
    validate.seed(seed)
    index, p = tree_drafter(problem, drafters)
    tree = best_programme_tree(p, nodes, depth, None)
    t = float(drafter_round_time(problem, index, tree.nodes, tree.depth))
    sim = simulate_tree(tree, p, rounds, seed)
    return SimulatedTree(
        drafters=[problem.names[index]],
        tree=tree,
        simulation=sim,
        throughput=sim.mean_accepted / t,
        model_throughput=tree.expected_accepted / t,
        round_time=t,
    )


def _batch_choice(
    problem: Problem,
    batch: int,
    per_batch: tuple[list[tuple[int, int, dict[str, float | None]]], list[str]] | None,
) -> int:
    """The index into the searched settings of the one of most tokens/s at ``batch`` (one
    of ``serving.batch_sizes``, not left out for memory), from :func:`_per_batch`."""
    if per_batch is None or problem.serving is None:
        raise ParameterError(
            "batch", "needs a serving section (step times under load) in the problem"
        )
    sizes = [int(b) for b in problem.serving.batch_sizes]
    if int(batch) not in sizes:
        raise ParameterError(
            "batch", f"{batch} is not one of serving.batch_sizes ({', '.join(map(str, sizes))})"
        )
    rows, notes = per_batch
    for b, index, _ in rows:
        if b == int(batch):
            return index
    raise ParameterError(
        "batch", next((n for n in notes if n.startswith(f"batch {int(batch)} ")), "left out")
    )


def _per_batch(
    problem: Problem, index: int, e: np.ndarray, nodes: np.ndarray, depth: np.ndarray
) -> tuple[list[tuple[int, int, dict[str, float | None]]], list[str]] | None:
    """Per ``serving`` batch size, the tree with the most tokens/s among candidates with
    ``e`` tokens per step, ``nodes`` speculated nodes and ``depth`` drafting passes (arrays
    broadcasting together, NaN/-inf ``e`` for no tree): ``([(batch, flat index, serving
    metrics)], notes)``, or ``None`` without ``serving``.

    Step times are :func:`~allocator.model.token_tree.tree_step_ms` (the step-time contract:
    the component model, never extrapolated, or the roofline; a batch size where no
    candidate has a step time is a :class:`NotModelledError` naming ``serving``). With
    ``serving.memory``, a batch size the drafter's ``memory_gb`` leaves no room for is left
    out with a note, as ``schedule`` and ``capacity`` leave it out; the notes also say where
    the step times extrapolate a calibrated file's measured domain.
    """

    serving = tree_serving(problem, index)
    if serving is None:
        return None
    e, nodes, depth = (a.ravel() for a in np.broadcast_arrays(e, nodes, depth))
    hosted = np.zeros((1, problem.n), bool)
    hosted[0, index] = True
    room = int(max_batch(problem, hosted)[0])
    rows: list[tuple[int, int, dict[str, float | None]]] = []
    notes: list[str] = []
    chosen: list[tuple[float, float]] = []
    for b in serving.batch_sizes:
        if b > room:
            notes.append(
                f"batch {int(b)} left out: hosting {problem.names[index]!r} "
                f"(drafters[].memory_gb) leaves KV-cache room for {room} sequences "
                "(serving.memory)"
            )
            continue
        ms = tree_step_ms(problem, index, float(b), nodes, depth)
        rate = np.where(np.isfinite(e) & np.isfinite(ms), e / ms, -np.inf)
        if not np.isfinite(rate).any():
            raise NotModelledError(
                "serving",
                f"batch {int(b)}: no tree lies inside the verify_ms table and "
                f"{problem.names[index]}'s draft_ms; step times are never extrapolated",
            )
        i = int(np.argmax(rate))
        chosen.append((float(b), float(nodes[i])))
        base = baseline_ms(problem, float(b))
        met = metrics_from(e[i], ms[i], np.asarray(base), float(b), serving.gpu_cost_per_hour)
        doc = {key: float(v) if np.isfinite(v) else None for key, v in met.items()}
        rows.append((int(b), i, doc))
    if chosen:
        at = np.array(chosen)
        notes += step_time_notes(problem, at[:, 0], at[:, 1], verified_tokens=True)
    return rows, notes


__all__ = [
    "DEFAULT_DEPTH",
    "ENGINE_TOPK",
    "FRONT_NODES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_TOPK",
    "BestTree",
    "EagleServingRow",
    "EagleSetting",
    "EngineTree",
    "FrontRow",
    "SimulatedTree",
    "TreeFront",
    "TreeServingRow",
    "ProgrammeRanks",
    "best_programme_tree",
    "best_tree",
    "check_eagle",
    "check_tree_options",
    "drafter_round_time",
    "engine_tree",
    "programme_ranks",
    "programme_values",
    "rank_one_note",
    "simulate_best_tree",
    "tree_drafter",
    "tree_front",
]
