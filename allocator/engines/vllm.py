"""vLLM: ``--speculative-config`` for one drafter (a chain), for a ``k`` schedule by batch
size, and what stands in for a token tree.

Field names, values and types follow ``SpeculativeConfig`` in vLLM's
``vllm/config/speculative.py`` (vllm-project/vllm, commit 002e77c1; see
:mod:`allocator.core.methods`): ``method`` (str), ``model`` (str, the draft model, head
or weights), ``num_speculative_tokens`` (int > 0), ``prompt_lookup_min``/
``prompt_lookup_max`` (int >= 1, ``ngram`` only).

The schedule (docs/design.md §8.6). vLLM reads ``num_speculative_tokens_per_batch_size``
from ``--speculative-config``: a list of ``[range_start, range_end, k]`` entries, each an
inclusive range of batch sizes (concurrent sequences in a scheduling step). Followed
here, as read in vllm-project/vllm:

- ``vllm/config/speculative.py`` (``SpeculativeConfig``): the field
  ``num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None``,
  "each entry is ``(range_start, range_end, num_speculative_tokens)`` with an
  inclusive batch-size range"; ``num_speculative_tokens`` (``> 0``) stays the start-up
  maximum, used to size buffers.
- ``vllm/v1/spec_decode/dynamic/utils.py`` (``validate_and_normalize_dynamic_sd_schedule``,
  ``build_dynamic_sd_schedule_lookup``): ranges positive, sorted and non-overlapping,
  the first starting at 1; ``k >= 0`` (0 turns speculation off); a gap between ranges
  and every batch size past the last range inherit the previous range's ``k``; the
  ``k`` used is ``min(num_speculative_tokens, k)``. (Newer sources also take 5-item
  entries with a context-length range; the 3-item form written here is accepted by
  both.)
- Pull request #32374 ("[V1][Spec Decode] Add Dynamic SD") added it; the
  documentation page ``docs/features/speculative_decoding/dynamic_speculative_decoding.md``
  of vLLM 0.24.0 shows this list-of-lists form, with ``VLLM_USE_V2_MODEL_RUNNER=0``
  (issue #51510 reports the V2 model runner ignoring the per-step ``k``).
  Releases before 0.24.0 reject the field.

The ranges written: planned batch sizes ``b_1 < … < b_S`` with ``k_i`` give
``[1, b_2 - 1, k_1], [b_2, b_3 - 1, k_2], …, [b_S, b_S, k_S]`` (runs of equal ``k``
merged): between two planned sizes the lower one's plan holds, and past ``b_S`` vLLM
keeps ``k_S``. vLLM serves one drafter, so the speculative rows of the schedule must
all use the same single drafter; its fields (``method``, ``model``, prompt lookup) are
:func:`speculative_config`'s, the one vLLM drafter export.

Trees (docs/design.md §8.10). vLLM's ``SpeculativeConfig`` once took
``speculative_token_tree`` (a string list of node paths of child indices, e.g.
``"[(0,), (1,), (0, 0)]"``, sorted breadth-first in ``__post_init__``;
``vllm/config/speculative.py`` at ``f19b16d9``, used by ``vllm/v1/spec_decode/eagle.py``
with ``vllm/v1/spec_decode/tree_attention.py``). The current ``vllm/config/speculative.py``
(stored at ``002e77c1``) has no such field: current vLLM drafts chains only
(``num_speculative_tokens``), so :meth:`VLLM.tree_export` says so and gives the tree
string only for the older versions that took it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.methods import required_model, resolve_method, vllm_method
from ..exceptions import ParameterError
from .base import DrafterLike, Engine, tree_method

if TYPE_CHECKING:
    from ..model.tree import Tree

#: The first vLLM release whose ``--speculative-config`` takes the schedule.
VLLM_MIN_VERSION = "0.24.0"


def speculative_config(drafter: DrafterLike, k: int) -> tuple[dict[str, object], list[str]]:
    """The JSON object of ``--speculative-config`` for ``drafter`` drafting ``k`` tokens,
    and notes for stderr."""
    method, notes = resolve_method(drafter.name, drafter.method)
    config: dict[str, object] = {"method": vllm_method(drafter.name, method)}
    model = required_model(drafter.name, method, drafter.model)
    if model:
        config["model"] = model
    config["num_speculative_tokens"] = int(k)
    if method == "ngram":
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            value = getattr(drafter, key)
            if value is not None:
                config[key] = int(value)
        if drafter.prompt_lookup_min is None and drafter.prompt_lookup_max is None:
            notes.append(
                f"note: drafter {drafter.name!r} sets neither prompt_lookup_min nor "
                "prompt_lookup_max: vLLM's defaults (5 and 5) apply"
            )
    elif method == "suffix":
        notes.append(
            "note: vLLM's suffix decoding needs the arctic-inference package and treats "
            "num_speculative_tokens as a cap (it drafts fewer tokens when its tree says so)"
        )
    elif method in ("mtp", "medusa", "mlp_speculator"):
        notes.append(
            f"note: vLLM requires num_speculative_tokens ({k}) to be at most the model's "
            "n_predict or a multiple of it"
        )
    if method == "mtp" and not model:
        notes.append("note: method mtp without model: vLLM loads the target model's MTP layers")
    return config, notes


# ---------------------------------------------------------------- k schedule by batch size
def batch_ranges(batch: list[int], k: list[int]) -> list[list[int]]:
    """``[[start, end, k], ...]`` covering batch sizes 1..``batch[-1]`` (inclusive ranges,
    equal neighbours merged); ``batch`` ascending, one ``k`` per batch size."""
    if not batch or len(batch) != len(k):
        raise ValueError("one k per planned batch size")
    starts = [1] + list(batch[1:])
    ends = [b - 1 for b in batch[1:]] + [batch[-1]]
    out: list[list[int]] = []
    for s, e, kk in zip(starts, ends, k, strict=True):
        if out and out[-1][2] == kk:
            out[-1][1] = e
        else:
            out.append([s, e, int(kk)])
    return out


def schedule_config(
    rows: list[dict], drafters: Mapping[str, DrafterLike]
) -> tuple[dict[str, object], list[str]]:
    """vLLM's ``--speculative-config`` for a schedule's ``rows`` (``schedule --json``
    rows), and notes for stderr; ``drafters`` maps names to the problem's drafters.

    The drafter's part (``method``, ``model`` where the method takes one, ngram's
    fields, the notes) is :func:`speculative_config`'s, the same as ``solve --export
    vllm``, at the schedule's largest ``k``.
    """
    sets = sorted({tuple(r["drafters"]) for r in rows if r["k"] > 0})
    if not sets:
        raise ParameterError(
            "export",
            "the schedule never speculates: serve without a speculative config",
        )
    if len(sets) > 1 or len(sets[0]) != 1:
        used = ", ".join("+".join(s) for s in sets)
        raise ParameterError(
            "export",
            f"the schedule uses {used}; vLLM serves one drafter for every batch size "
            "(set search.m.max: 1 and keep one drafter, e.g. with search.require)",
        )
    ks = [int(r["k"]) for r in rows]
    out, notes = speculative_config(drafters[sets[0][0]], max(ks))
    out["num_speculative_tokens_per_batch_size"] = batch_ranges([r["batch"] for r in rows], ks)
    return out, notes


def schedule_text(rows: list[dict], drafters: Mapping[str, DrafterLike]) -> tuple[str, list[str]]:
    """The JSON to pass as ``vllm serve --speculative-config '<this>'`` (one line), and
    notes for stderr."""
    config, notes = schedule_config(rows, drafters)
    return json.dumps(config) + "\n", notes


# ---------------------------------------------------------------- token trees
def vllm_tree_string(tree: Tree) -> str:
    """The tree as the node paths (child indices from 0) older vLLM took as
    ``speculative_token_tree``, breadth-first."""
    paths: list[tuple[int, ...]] = [()]
    for v in range(1, tree.parents.size):
        paths.append(paths[int(tree.parents[v])] + (int(tree.ranks[v]) - 1,))
    return str(sorted(paths[1:], key=lambda t: (len(t), t)))


class VLLM(Engine):
    """vLLM (``vllm serve --speculative-config '<JSON>'``)."""

    name = "vllm"
    label = "vLLM"
    has_trees = True
    has_schedule = True

    def method_name(self, drafter: str, method: str) -> str:
        return vllm_method(drafter, method)

    def chain_settings(self, drafter: DrafterLike, k: int) -> tuple[dict[str, object], list[str]]:
        return speculative_config(drafter, k)

    def text(self, settings: dict[str, object] | list[str]) -> str:
        return json.dumps(settings) + "\n"

    def tree_export(
        self, drafter: DrafterLike, tree: Tree, steps: int, topk: int, tokens: int
    ) -> tuple[str, list[str]]:
        """Current vLLM takes no tree (see the module docstring): the text is the chain it
        can run instead, :func:`speculative_config` at the tree's depth, and a note says
        so and gives the tree string for the older versions with
        ``speculative_token_tree``. Refused (naming ``drafters[NAME].method``) unless the
        drafter's method is ``eagle`` or ``eagle3``, the ones vLLM drafted trees for."""
        tree_method(drafter, f"drafters[{drafter.name}].method")
        config, notes = speculative_config(drafter, tree.depth)
        notes.insert(
            0,
            "note: current vLLM has no tree setting (SpeculativeConfig lost "
            "speculative_token_tree); printed is the chain of the tree's depth instead. "
            'vLLM versions that took it: "speculative_token_tree": '
            f"{json.dumps(vllm_tree_string(tree))}",
        )
        return json.dumps(config) + "\n", notes

    def schedule_settings(
        self, rows: list[dict], drafters: Mapping[str, DrafterLike]
    ) -> tuple[dict[str, object], list[str]]:
        return schedule_config(rows, drafters)


__all__ = [
    "VLLM",
    "VLLM_MIN_VERSION",
    "batch_ranges",
    "schedule_config",
    "schedule_text",
    "speculative_config",
    "vllm_tree_string",
]
