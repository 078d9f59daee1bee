"""The trees SGLang's EAGLE builds from ``(num_steps, topk, num_draft_tokens)``, evaluated
under the rank-acceptance model of :mod:`allocator.model.tree`, and their export
(docs/design.md §8.10).

How SGLang expands and prunes the candidate tree, followed from sgl-project/sglang
(versions stored in the search index): ``python/sglang/srt/speculative/spec_utils.py`` at
``00731f0b`` (``select_top_k_tokens``: ``_select_top_k_tokens_first`` / ``_later``),
``python/sglang/srt/speculative/eagle_utils.py`` at ``003ddbce`` (``organize_draft_results``,
``build_tree_kernel_efficient``, ``verify_tree_greedy_func``: greedy verification walks at
most one matching child per node), the older ``build_eagle_tree.py`` at ``009db01a``
(``build_tree_kernel_efficient_preprocess``, the same selection) and
``python/sglang/srt/server_args.py`` (the ``speculative_eagle_topk == 1`` adjustment):

1. Step 0 (the draft pass after the last verification): the root's ``topk`` most likely
   draft tokens, scored by their draft probability, become candidates *and* the frontier.
2. Steps ``1 .. num_steps - 1``: every frontier node gets its own ``topk`` children, scored
   ``parent score × child draft probability`` (``expand_scores``); all ``topk²`` become
   candidates, and the ``topk`` highest-scored of them become the next frontier.
3. The ``num_draft_tokens - 1`` highest-scored candidates of all steps (``torch.topk`` over
   the concatenated ``score_list``, then sorted by index) are verified with the root: the
   verified tree has ``num_draft_tokens`` tokens including the root. A child's score never
   exceeds its parent's, so the selection is closed under parents.
4. ``topk == 1`` forces ``num_draft_tokens = num_steps + 1`` (a chain). Each of the
   ``num_steps`` steps is one draft forward pass over the frontier.

The assumption mapping scores to the model (expected-value version). The engine ranks by
the draft model's probabilities, which vary from token to token; here the draft's
probability of its rank-``r`` token at depth ``ℓ`` is taken to equal ``q_r(ℓ)``, the
probability that this token is the target's (a *calibrated* drafter with its average rank
profile). Under that assumption every candidate's score is exactly its path probability,
the engine's tree is deterministic, and ``E = 1 + Σ`` (the ``num_draft_tokens - 1`` largest
scores). Real scores fluctuate around that profile, so the engine's per-step choice adapts
and can do better than this fixed tree; ties are broken by candidate index (``torch.topk``
leaves them unspecified). Ranks beyond the measured ``acceptance_by_rank`` score 0
(``tree --eagle`` says so in a note when its ``topk`` reaches them).

vLLM. vLLM's ``SpeculativeConfig`` once took ``speculative_token_tree`` (a string list of
node paths of child indices, e.g. ``"[(0,), (1,), (0, 0)]"``, sorted breadth-first in
``__post_init__``; vllm-project/vllm ``vllm/config/speculative.py`` at ``f19b16d9``, used by
``vllm/v1/spec_decode/eagle.py`` with ``vllm/v1/spec_decode/tree_attention.py``). The
current ``vllm/config/speculative.py`` (stored at ``002e77c1``) has no such field: current
vLLM drafts chains only (``num_speculative_tokens``), so :func:`vllm_export` says so and
gives the tree string only for the older versions that took it.

Exports. SGLang's flags are :func:`allocator.engines.sglang.eagle_flags` (algorithm from
the one method table, :mod:`allocator.core.methods`; draft path; the triple), vLLM's
chain :func:`allocator.engines.vllm.speculative_config`: the same code as every other
export. Trees are exported for ``EAGLE`` and ``EAGLE3`` (methods ``eagle``, ``eagle3``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import numpy as np

from ..core.methods import TABLE
from ..exceptions import InputError
from ..model.tree import Tree, edge_weights, make_tree
from .sglang import eagle_flags
from .vllm import DrafterLike, speculative_config

#: SGLang's --speculative-algorithm values whose EAGLE trees this module exports.
TREE_ALGORITHMS: tuple[str, ...] = ("EAGLE", "EAGLE3")


def _weights(p: np.ndarray, depth: int, topk: int) -> np.ndarray:
    """``q_r(ℓ)`` for ``ℓ = 1..depth``, ``r = 1..topk``: ``(depth, topk)``, 0 beyond the
    measured ranks."""
    q = edge_weights(np.atleast_2d(p))
    rows = q[np.minimum(np.arange(depth), q.shape[0] - 1)]
    out = np.zeros((depth, topk))
    w = min(topk, q.shape[1])
    out[:, :w] = rows[:, :w]
    return out


@dataclass(frozen=True)
class Candidates:
    """Every candidate SGLang drafts for ``(steps, topk)``, in its ``score_list`` order:
    ``score``, ``parent`` (candidate index, -1 for the root), ``rank`` (1-based), all
    ``(topk + (steps - 1) * topk**2,)``."""

    score: np.ndarray
    parent: np.ndarray
    rank: np.ndarray


def sglang_candidates(p: np.ndarray, steps: int, topk: int) -> Candidates:
    """The candidates of steps ``0..steps-1`` (see the module docstring)."""
    q = _weights(p, steps, topk)
    score = [q[0].copy()]
    parent = [np.full(topk, -1)]
    rank = [np.arange(1, topk + 1)]
    frontier = np.arange(topk)  # candidate indices
    front_score = q[0].copy()
    offset = topk
    for i in range(1, steps):
        expand = front_score[:, None] * q[i][None, :]  # (topk, topk)
        score.append(expand.ravel())
        parent.append(np.repeat(frontier, topk))
        rank.append(np.tile(np.arange(1, topk + 1), topk))
        order = np.argsort(-expand.ravel(), kind="stable")[:topk]
        frontier = offset + order
        front_score = expand.ravel()[order]
        offset += topk * topk
    return Candidates(np.concatenate(score), np.concatenate(parent), np.concatenate(rank))


def max_draft_tokens(steps: int, topk: int) -> int:
    """Largest ``num_draft_tokens`` SGLang can fill: every candidate plus the root."""
    return 1 if topk == 1 and steps == 0 else topk + (steps - 1) * topk * topk + 1


def check_triple(steps: int, topk: int, tokens: int, field: str = "eagle") -> None:
    if steps < 1 or topk < 1 or tokens < 2:
        raise InputError(field, "needs num_steps >= 1, topk >= 1 and num_draft_tokens >= 2")
    if topk == 1 and tokens != steps + 1:
        raise InputError(
            field, f"topk 1 is a chain: SGLang sets num_draft_tokens = num_steps + 1 = {steps + 1}"
        )
    most = max_draft_tokens(steps, topk)
    if tokens > most:
        raise InputError(
            field,
            f"num_draft_tokens {tokens} exceeds the {most - 1} candidates of {steps} step(s) "
            f"at topk {topk} plus the root ({most})",
        )


def sglang_tree(p: np.ndarray, steps: int, topk: int, tokens: int) -> Tree:
    """The verified tree of ``(steps, topk, tokens)``: node 0 the root, then the selected
    candidates in candidate order (SGLang sorts the selection by index)."""
    check_triple(steps, topk, tokens)
    c = sglang_candidates(p, steps, topk)
    order = np.argsort(-c.score, kind="stable")[: tokens - 1]
    chosen = np.sort(order)
    node_of = {int(cand): i + 1 for i, cand in enumerate(chosen)}
    parents = [-1] + [node_of.get(int(c.parent[x]), 0) for x in chosen]
    ranks = [0] + [int(c.rank[x]) for x in chosen]
    return make_tree(parents, ranks, p)


def sglang_expected(p: np.ndarray, steps: int, topk: int, max_tokens: int) -> np.ndarray:
    """``E`` of ``(steps, topk, T)`` for ``T = 2..max_tokens``: ``(max_tokens - 1,)``,
    NaN where ``T`` exceeds what the steps can fill. Scores are path probabilities, so
    ``E(T) = 1 + (sum of the T - 1 largest scores)``."""
    s = np.sort(sglang_candidates(p, steps, topk).score)[::-1]
    out = np.full(max_tokens - 1, np.nan)
    m = min(s.size, max_tokens - 1)
    out[:m] = 1.0 + np.cumsum(s[:m])
    return out


@dataclass(frozen=True)
class Triples:
    """Evaluated SGLang settings: ``steps``, ``topk``, ``tokens`` (num_draft_tokens) and
    ``expected_accepted`` (tokens per step), all ``(C,)``."""

    steps: np.ndarray
    topk: np.ndarray
    tokens: np.ndarray
    expected_accepted: np.ndarray


def sglang_triples(p: np.ndarray, max_steps: int, max_topk: int, max_nodes: int) -> Triples:
    """Every valid ``(steps ≤ max_steps, topk ≤ max_topk, tokens - 1 ≤ max_nodes)``."""
    rows: list[np.ndarray] = []
    for steps in range(1, max_steps + 1):
        for topk in range(1, max_topk + 1):
            e = sglang_expected(p, steps, topk, max_nodes + 1)
            t = np.arange(2, max_nodes + 2)
            ok = np.isfinite(e) & ((topk > 1) | (t == steps + 1))
            rows.append(np.stack([np.full(ok.sum(), steps), np.full(ok.sum(), topk), t[ok], e[ok]]))
    a = np.concatenate(rows, axis=1)
    return Triples(a[0].astype(int), a[1].astype(int), a[2].astype(int), a[3])


def _tree_method(drafter: DrafterLike, field: str) -> str:
    """The drafter's method, one whose SGLang algorithm builds the EAGLE trees exported
    here; refuses (field ``field``, its ``method``) any other or none."""
    tree_methods = [m for m, info in TABLE.items() if info.sglang in TREE_ALGORITHMS]
    if drafter.method not in tree_methods:
        raise InputError(
            field,
            f"is {drafter.method!r}; SGLang builds EAGLE trees for method "
            f"{' or '.join(tree_methods)} only",
        )
    return drafter.method


def sglang_export(
    field: str, drafter: DrafterLike, steps: int, topk: int, tokens: int
) -> tuple[str, list[str]]:
    """SGLang ``launch_server`` flags for one triple (shell-quoted, one line) and notes;
    ``field`` names the drafter's ``method`` in errors (``drafters.<i>.method``). The
    flags are :func:`allocator.engines.sglang.eagle_flags`, as for a chain."""
    flags, notes = eagle_flags(drafter, _tree_method(drafter, field), steps, topk, tokens)
    return shlex.join(flags) + "\n", notes


def vllm_tree_string(tree: Tree) -> str:
    """The tree as the node paths (child indices from 0) older vLLM took as
    ``speculative_token_tree``, breadth-first."""
    paths: list[tuple[int, ...]] = [()]
    for v in range(1, tree.parents.size):
        paths.append(paths[int(tree.parents[v])] + (int(tree.ranks[v]) - 1,))
    return str(sorted(paths[1:], key=lambda t: (len(t), t)))


def vllm_export(field: str, drafter: DrafterLike, tree: Tree) -> tuple[str, list[str]]:
    """What ``--export vllm`` prints: ``(stdout text, notes)``. Current vLLM takes no tree
    (see the module docstring): the text is the chain it can run instead,
    :func:`allocator.engines.vllm.speculative_config` at the tree's depth, and a note
    says so and gives the tree string for the older versions with
    ``speculative_token_tree``."""
    _tree_method(drafter, field)  # vLLM drafted trees for these methods only
    config, notes = speculative_config(drafter, tree.depth)
    notes.insert(
        0,
        "note: current vLLM has no tree setting (SpeculativeConfig lost "
        "speculative_token_tree); printed is the chain of the tree's depth instead. "
        'vLLM versions that took it: "speculative_token_tree": '
        f"{json.dumps(vllm_tree_string(tree))}",
    )
    return json.dumps(config) + "\n", notes
