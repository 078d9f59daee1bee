"""SGLang: ``launch_server`` flags for one drafter (a chain) and for an EAGLE token tree, and
the trees SGLang's EAGLE builds from ``(num_steps, topk, num_draft_tokens)``, evaluated under
the rank-acceptance model of :mod:`allocator.model.token_tree` (docs/design.md §8.8, §8.10).

Flags follow SGLang 0.5.23 (its PyPI wheel; paths relative to the wheel root): the fields of
``sglang/srt/arg_groups/fields/spec.py`` and ``fields/schedule.py`` and their resolution in
``sglang/srt/arg_groups/speculative_hook.py`` (see :mod:`allocator.core.methods`):

- ``EAGLE``/``EAGLE3``/``STANDALONE``/``NEXTN`` take ``--speculative-draft-model-path``
  (``NEXTN`` only when a ``model`` is given), ``--speculative-num-steps k``,
  ``--speculative-eagle-topk 1`` (a chain, not a tree) and
  ``--speculative-num-draft-tokens k + 1`` (SGLang counts the root token; with top-k 1
  it resets any other value to ``num_steps + 1``, lines 1255-1266). ``NEXTN`` is rewritten
  to ``EAGLE`` and runs on the EAGLE worker (lines 109-116), so it takes trees too.
- ``NGRAM`` takes no model; its tree breadth ``--speculative-ngram-max-bfs-breadth``
  (default 10, copied into the top-k, lines 1309-1313) is set to 1 for a chain, and
  ``--speculative-num-draft-tokens k + 1`` (default 12; the root plus ``k`` draft nodes,
  ``kernels/jit/csrc/ngram_corpus/param.h``). vLLM's ``prompt_lookup_min/max`` have no
  SGLang counterpart and are not exported.
- ``DFLASH`` takes ``--speculative-num-draft-tokens k + 1``, its block with the anchor
  (num_steps and top-k forced to 1, ``_handle_dflash``); ``DSPARK`` takes
  ``--speculative-dspark-block-size k`` (it sets ``num_draft_tokens = k + 1``,
  ``_handle_dspark``).
- ``--max-running-requests``: with speculation on and the flag unset SGLang sets it to 48
  (lines 1086-1094 and the same block in every algorithm but ``UNO``), a default, not a
  cap. An export for more concurrent sequences sets the flag; one for an unstated batch
  size says so.
- Top-k above 1 with ``--page-size`` above 1 needs ``--attention-backend`` ``flashinfer``,
  ``fa3`` or ``triton`` (lines 1268-1282; ``NGRAM`` ``flashinfer`` only, lines 1355-1366):
  tree exports say so.

How SGLang expands and prunes the candidate tree, followed from sgl-project/sglang
(versions stored in the search index): ``python/sglang/srt/speculative/spec_utils.py`` at
``00731f0b`` (``select_top_k_tokens``: ``_select_top_k_tokens_first`` / ``_later``),
``python/sglang/srt/speculative/eagle_utils.py`` at ``003ddbce`` (``organize_draft_results``,
``build_tree_kernel_efficient``, ``verify_tree_greedy_func``: greedy verification walks at
most one matching child per node), the older ``build_eagle_tree.py`` at ``009db01a``
(``build_tree_kernel_efficient_preprocess``, the same selection); in SGLang 0.5.23 the
selection is ``sglang/srt/speculative/eagle_utils.py`` lines 106-110 (the top
``num_draft_token - 1`` of the ``score_list``, the root prepended at line 152):

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

Tree exports. SGLang's flags are :func:`eagle_flags` (algorithm from the one method table,
:mod:`allocator.core.methods`; draft path; the triple), as for a chain; trees are exported
for the algorithms of the EAGLE worker, ``EAGLE``, ``EAGLE3`` and ``NEXTN`` (methods
``eagle``, ``eagle3``, ``mtp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.methods import required_model, resolve_method, sglang_algorithm
from ..exceptions import ParameterError
from ..io.quoting import shell_join
from ..model.token_tree import edge_weights, make_tree
from .base import DrafterLike, Engine, tree_method

if TYPE_CHECKING:
    from ..model.token_tree import Tree

#: ``--max-running-requests`` SGLang 0.5.23 sets when speculation is on and the flag is
#: unset (``sglang/srt/arg_groups/speculative_hook.py``; a default, not a cap).
SPECULATIVE_RUNNING_DEFAULT = 48
#: Attention backends SGLang 0.5.23 takes for top-k > 1 with page size > 1.
PAGED_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


def running_requests(batch: int | None) -> tuple[list[str], list[str]]:
    """``--max-running-requests`` for ``batch`` concurrent sequences (set above SGLang's
    speculative default of 48), and notes: with ``batch`` unknown, a note saying what
    SGLang does."""
    if batch is None:
        return [], [
            "note: with speculation on SGLang runs at most "
            f"{SPECULATIVE_RUNNING_DEFAULT} requests at once unless --max-running-requests "
            "is given (a default, not a cap): add --max-running-requests N to serve more"
        ]
    if int(batch) > SPECULATIVE_RUNNING_DEFAULT:
        return ["--max-running-requests", str(int(batch))], []
    return [], []


def launch_flags(
    drafter: DrafterLike, k: int, *, batch: int | None = None
) -> tuple[list[str], list[str]]:
    """SGLang's flags (argv words) for ``drafter`` drafting a chain of ``k``, and notes for
    stderr; ``batch``: the concurrent sequences planned (:func:`running_requests`)."""
    method, notes = resolve_method(drafter.name, drafter.method)
    algorithm = sglang_algorithm(drafter.name, method)
    k = int(k)
    running, more = running_requests(batch)
    flags = ["--speculative-algorithm", algorithm]
    if method == "ngram":
        flags += [
            "--speculative-ngram-min-bfs-breadth",
            "1",
            "--speculative-ngram-max-bfs-breadth",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
        if drafter.prompt_lookup_min is not None or drafter.prompt_lookup_max is not None:
            notes.append(
                f"note: drafter {drafter.name!r}: prompt_lookup_min/max are vLLM settings; "
                "SGLang's NGRAM matching is set by its own --speculative-ngram-* flags"
            )
        return flags + running, notes + more
    if method in ("dflash", "dspark"):
        model = required_model(drafter.name, method, drafter.model)
        if model:
            flags += ["--speculative-draft-model-path", model]
        if method == "dflash":
            flags += ["--speculative-num-draft-tokens", str(k + 1)]
        else:
            flags += ["--speculative-dspark-block-size", str(k)]
        notes.append(
            f"note: {algorithm} drafts a block the draft was trained for (SGLang reads its "
            "size from the draft config when the flag is unset): check that this k suits "
            "the draft"
        )
        return flags + running, notes + more
    eagle, extra = eagle_flags(drafter, method, k, 1, k + 1)
    return eagle + running, notes + extra + more


def eagle_flags(
    drafter: DrafterLike, method: str, steps: int, topk: int, tokens: int
) -> tuple[list[str], list[str]]:
    """Flags of the algorithms SGLang runs on its EAGLE worker (``EAGLE``, ``EAGLE3``,
    ``STANDALONE``, ``NEXTN``) for ``method``, and notes: the draft model path where the
    method takes one and the draft tree ``(num_steps, eagle_topk, num_draft_tokens)``; a
    chain of ``k`` is ``(k, 1, k + 1)``, a token tree any triple
    (:func:`sglang_tree`)."""
    notes: list[str] = []
    flags = ["--speculative-algorithm", sglang_algorithm(drafter.name, method)]
    model = required_model(drafter.name, method, drafter.model)
    if model:
        flags += ["--speculative-draft-model-path", model]
    elif method == "mtp":
        notes.append(
            "note: NEXTN without a draft path: SGLang fills it with the target model for "
            "the MTP architectures it knows (DeepSeek-V3 and similar); give model: otherwise"
        )
    flags += [
        "--speculative-num-steps",
        str(int(steps)),
        "--speculative-eagle-topk",
        str(int(topk)),
        "--speculative-num-draft-tokens",
        str(int(tokens)),
    ]
    return flags, notes


# ---------------------------------------------------------------- EAGLE token trees
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
class EagleCandidates:
    """Every candidate SGLang drafts for ``(steps, topk)``, in its ``score_list`` order:
    ``score``, ``parent`` (candidate index, -1 for the root), ``rank`` (1-based), all
    ``(topk + (steps - 1) * topk**2,)``."""

    score: np.ndarray
    parent: np.ndarray
    rank: np.ndarray


def sglang_candidates(p: np.ndarray, steps: int, topk: int) -> EagleCandidates:
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
    return EagleCandidates(np.concatenate(score), np.concatenate(parent), np.concatenate(rank))


def max_draft_tokens(steps: int, topk: int) -> int:
    """Largest ``num_draft_tokens`` SGLang can fill: every candidate plus the root."""
    return 1 if topk == 1 and steps == 0 else topk + (steps - 1) * topk * topk + 1


def check_triple(steps: int, topk: int, tokens: int, field: str = "eagle") -> None:
    """Refuse a setting SGLang does not run (a :class:`ParameterError` naming ``field``):
    ``num_steps >= 1``, ``topk >= 1``, ``num_draft_tokens >= 2``, ``num_draft_tokens =
    num_steps + 1`` at ``topk`` 1, and no more draft tokens than candidates plus the root."""
    if steps < 1 or topk < 1 or tokens < 2:
        raise ParameterError(field, "needs num_steps >= 1, topk >= 1 and num_draft_tokens >= 2")
    if topk == 1 and tokens != steps + 1:
        raise ParameterError(
            field, f"topk 1 is a chain: SGLang sets num_draft_tokens = num_steps + 1 = {steps + 1}"
        )
    most = max_draft_tokens(steps, topk)
    if tokens > most:
        raise ParameterError(
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
class EagleTriples:
    """Evaluated SGLang settings: ``steps``, ``topk``, ``tokens`` (num_draft_tokens) and
    ``expected_accepted`` (tokens per step), all ``(C,)``."""

    steps: np.ndarray
    topk: np.ndarray
    tokens: np.ndarray
    expected_accepted: np.ndarray


def sglang_triples(p: np.ndarray, max_steps: int, max_topk: int, max_nodes: int) -> EagleTriples:
    """Every valid ``(steps ≤ max_steps, topk ≤ max_topk, tokens - 1 ≤ max_nodes)``."""
    rows: list[np.ndarray] = []
    for steps in range(1, max_steps + 1):
        for topk in range(1, max_topk + 1):
            e = sglang_expected(p, steps, topk, max_nodes + 1)
            t = np.arange(2, max_nodes + 2)
            ok = np.isfinite(e) & ((topk > 1) | (t == steps + 1))
            rows.append(np.stack([np.full(ok.sum(), steps), np.full(ok.sum(), topk), t[ok], e[ok]]))
    a = np.concatenate(rows, axis=1)
    return EagleTriples(a[0].astype(int), a[1].astype(int), a[2].astype(int), a[3])


class SGLang(Engine):
    """SGLang (``python -m sglang.launch_server ... <flags>``)."""

    name = "sglang"
    label = "SGLang"
    has_trees = True

    def method_name(self, drafter: str, method: str) -> str:
        return sglang_algorithm(drafter, method)

    def chain_settings(
        self, drafter: DrafterLike, k: int, *, batch: int | None = None
    ) -> tuple[list[str], list[str]]:
        return launch_flags(drafter, k, batch=batch)

    def text(self, settings: dict[str, object] | list[str]) -> str:
        assert isinstance(settings, list)
        return shell_join(settings) + "\n"

    def tree_export(
        self,
        drafter: DrafterLike,
        tree: Tree,
        steps: int,
        topk: int,
        tokens: int,
        *,
        batch: int | None = None,
    ) -> tuple[str, list[str]]:
        """The flags of one triple (shell-quoted, one line) and notes: :func:`eagle_flags`,
        as for a chain, ``--max-running-requests`` for ``batch`` above 48, and with top-k
        above 1 the attention backends SGLang needs for pages above one token. Refused
        (naming ``drafters[NAME].method``) unless the drafter's method is ``eagle``,
        ``eagle3`` or ``mtp``."""
        method = tree_method(drafter, f"drafters[{drafter.name}].method")
        flags, notes = eagle_flags(drafter, method, steps, topk, tokens)
        running, more = running_requests(batch)
        if topk > 1:
            notes.append(
                f"note: SGLang runs top-k {topk} with --page-size above 1 only on "
                f"--attention-backend {', '.join(PAGED_TREE_BACKENDS)} (it refuses others at "
                "start-up); with another backend keep --page-size 1"
            )
        return shell_join(flags + running) + "\n", notes + more


__all__ = [
    "PAGED_TREE_BACKENDS",
    "SPECULATIVE_RUNNING_DEFAULT",
    "EagleCandidates",
    "EagleTriples",
    "SGLang",
    "check_triple",
    "eagle_flags",
    "launch_flags",
    "max_draft_tokens",
    "running_requests",
    "sglang_candidates",
    "sglang_expected",
    "sglang_triples",
    "sglang_tree",
]
