"""vLLM: ``--speculative-config`` for one drafter (a chain), for a ``k`` schedule by batch
size, and what stands in for a token tree.

Everything here follows vLLM 0.33.0 (its PyPI wheel; paths relative to the wheel root).
Field names, values and types are ``SpeculativeConfig``'s in
``vllm/config/speculative.py`` (see :mod:`allocator.core.methods` for the methods):
``method`` (str), ``model`` (str: the draft model, head or weights),
``num_speculative_tokens`` (int, ``Field(gt=0)``), ``prompt_lookup_min``/
``prompt_lookup_max`` (int, ``Field(ge=1)``, the n-gram methods only). The config is a
pydantic dataclass that forbids unknown fields (``vllm/config/utils.py``, ``config``).

The schedule (docs/design.md §8.6): ``num_speculative_tokens_per_batch_size:
list[tuple[int, int, int]] | None`` (``speculative.py`` lines 523-529), "each entry is
``(range_start, range_end, num_speculative_tokens)`` with an inclusive batch-size range"
— three items only; ``vllm/v1/spec_decode/dynamic/utils.py`` lines 30-35 refuse any
other length. ``validate_and_normalize_dynamic_sd_schedule`` (same file, lines 7-74):
a non-empty list, positive sorted non-overlapping ranges, the first starting at 1,
``k >= 0`` (0 turns speculation off). ``build_dynamic_sd_schedule_lookup`` (lines
77-148): a gap between ranges and every batch size past the last range keep the
previous range's ``k``, and the ``k`` used is ``min(num_speculative_tokens, k)``; the
batch size is the number of requests scheduled in the step, decodes and prefills
(``vllm/v1/core/sched/scheduler.py`` lines 1709-1714). ``num_speculative_tokens`` stays
the start-up maximum that buffers and CUDA graphs are sized by. The field was added by
pull request #32374; releases from 0.24.0 take it.

When vLLM 0.33.0 drops the schedule (``vllm/config/vllm.py``), with a warning, and runs
the fixed ``num_speculative_tokens`` at every batch size:

- methods that cannot run on the V2 model runner: ``suffix`` and ``custom_class``
  (``_get_v2_model_runner_unsupported_features``, lines 3053-3087) run on V1, where
  ``_maybe_disable_dynamic_sd_for_v1`` (lines 1088-1108) keeps the schedule only for
  ``ngram, eagle, eagle3, mtp, draft_model, dflash``;
- data parallelism above 1 (``_maybe_disable_dynamic_sd_for_data_parallel``, lines
  1110-1127: "data-parallel ranks can select different speculative-token counts").

The V2 model runner is the default (``use_v2_model_runner``, lines 730-767; env
``VLLM_USE_V2_MODEL_RUNNER`` unset) and honours the per-step ``k``: it truncates drafts
centrally (``vllm/v1/worker/gpu/model_runner.py`` lines 2320-2338), so no environment
setting is needed.

Trees (docs/design.md §8.10): vLLM 0.33.0's ``SpeculativeConfig`` has no tree field.
vLLM 0.20.2 is the last release with ``speculative_token_tree`` (read from its PyPI
wheel; pull request #42121, "Remove tree attention", took it out before 0.21.0). That
field was no tree this project can export: its proposer drafted the same number of
children under every node of a level (``vllm/v1/spec_decode/llm_base_proposer.py``,
``child_drafts_per_level = num_drafts[level] // num_drafts[level - 1]``), needed the
``TREE_ATTN`` attention backend and ``num_speculative_tokens`` equal to the node count,
and its rejection sampler (``vllm/v1/sample/rejection_sampler.py``) has no tree path;
#42121 calls it "not fully supported". So :meth:`VLLM.tree_export` gives the chain
vLLM runs instead and says so, with no legacy tree string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.methods import VLLM_RELEASE, required_model, resolve_method, vllm_method
from ..exceptions import ParameterError
from .base import DrafterLike, Engine, tree_method

if TYPE_CHECKING:
    from ..model.token_tree import Tree

#: The first vLLM release whose ``--speculative-config`` takes the schedule.
VLLM_MIN_VERSION = "0.24.0"
#: The last vLLM release whose ``SpeculativeConfig`` has ``speculative_token_tree``.
VLLM_LAST_TREE_VERSION = "0.20.2"
#: Methods whose schedule vLLM 0.33.0 drops (they run on the V1 model runner only, and
#: V1 keeps the schedule only for ngram, eagle, eagle3, mtp, draft_model and dflash).
SCHEDULE_DROPPED = ("suffix",)


def speculative_config(drafter: DrafterLike, k: int) -> tuple[dict[str, object], list[str]]:
    """The JSON object of ``--speculative-config`` for ``drafter`` drafting ``k`` tokens,
    and notes for stderr. Refuses (a :class:`ParameterError` naming ``export``) a method
    vLLM 0.33.0 does not take, naming the last release that did."""
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
            "note: vLLM's suffix decoding needs the arctic-inference package, runs on the "
            "V1 model runner and treats num_speculative_tokens as a cap (it drafts fewer "
            "tokens when its tree says so)"
        )
    elif method == "mtp":
        notes.append(
            f"note: vLLM requires num_speculative_tokens ({k}) to be at most the model's "
            "n_predict or a multiple of it"
        )
    elif method in ("dflash", "dspark"):
        notes.append(
            f"note: {method} drafts a block the draft was trained for; vLLM defaults "
            "num_speculative_tokens to the draft config's "
            f"{'n_predict' if method == 'dflash' else 'block_size'}: keep k at it unless "
            "the draft says otherwise"
        )
    if method == "mtp" and not model:
        notes.append("note: method mtp without model: vLLM loads the target model's MTP layers")
    elif method == "dspark" and not model:
        notes.append(
            "note: method dspark without model: vLLM loads the DSpark draft from the target "
            "model's own checkpoint"
        )
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


def schedule_notes(method: str, k_max: int) -> list[str]:
    """What ``schedule --export vllm`` says beside the schedule: where vLLM 0.33.0 drops
    it (module docstring) and runs the fixed ``k_max`` instead."""
    notes = []
    if method in SCHEDULE_DROPPED:
        notes.append(
            f"note: vLLM {VLLM_RELEASE} runs method {method} on the V1 model runner, which "
            "does not take num_speculative_tokens_per_batch_size: it discards the schedule "
            f"with a warning and drafts up to num_speculative_tokens = {k_max} at every "
            "batch size (vllm/config/vllm.py, _maybe_disable_dynamic_sd_for_v1)"
        )
    notes.append(
        f"note: with --data-parallel-size above 1, vLLM {VLLM_RELEASE} discards the schedule "
        f"with a warning and runs num_speculative_tokens = {k_max} at every batch size "
        "(ranks could choose different k); serve one schedule per data-parallel rank as "
        "separate servers to keep it"
    )
    return notes


def schedule_config(
    rows: list[dict], drafters: Mapping[str, DrafterLike]
) -> tuple[dict[str, object], list[str]]:
    """vLLM's ``--speculative-config`` for a schedule's ``rows`` (``schedule --json``
    rows), and notes for stderr; ``drafters`` maps names to the problem's drafters.

    The drafter's part (``method``, ``model`` where the method takes one, ngram's
    fields, the notes) is :func:`speculative_config`'s, the same as ``solve --export
    vllm``, at the schedule's largest ``k``; :func:`schedule_notes` says where vLLM
    drops the schedule.
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
    drafter = drafters[sets[0][0]]
    out, notes = speculative_config(drafter, max(ks))
    out["num_speculative_tokens_per_batch_size"] = batch_ranges([r["batch"] for r in rows], ks)
    method, _ = resolve_method(drafter.name, drafter.method)
    return out, notes + schedule_notes(method, max(ks))


def config_text(config: object) -> str:
    """``config`` as the one line of JSON to pass as ``vllm serve --speculative-config
    '<this>'``: every control and non-ASCII character written ``\\uXXXX`` (no newline or
    escape reaches the terminal or the command line), and so is ``'``, so that the line
    is always one word between single quotes. The JSON's value is unchanged."""
    return json.dumps(config, ensure_ascii=True).replace("'", "\\u0027") + "\n"


class VLLM(Engine):
    """vLLM (``vllm serve --speculative-config '<JSON>'``)."""

    name = "vllm"
    label = "vLLM"
    has_trees = True
    has_schedule = True

    def method_name(self, drafter: str, method: str) -> str:
        return vllm_method(drafter, method)

    def chain_settings(
        self, drafter: DrafterLike, k: int, *, batch: int | None = None
    ) -> tuple[dict[str, object], list[str]]:
        return speculative_config(drafter, k)

    def text(self, settings: dict[str, object] | list[str]) -> str:
        return config_text(settings)

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
        """vLLM 0.33.0 takes no tree (see the module docstring): the text is the chain it
        can run instead, :func:`speculative_config` at the tree's depth, and a note says
        so. Refused (naming ``drafters[NAME].method``) unless the drafter's method is one
        whose drafts SGLang builds trees of (``eagle``, ``eagle3``, ``mtp``)."""
        tree_method(drafter, f"drafters[{drafter.name}].method")
        config, notes = speculative_config(drafter, tree.depth)
        notes.insert(
            0,
            f"note: vLLM {VLLM_RELEASE} has no token-tree setting; printed is the chain of "
            f"the tree's depth ({tree.depth}) instead, which drafts one candidate per level "
            f"(its tokens per step are the chain's, below the tree's). No vLLM release "
            f"served this tree: the speculative_token_tree of {VLLM_LAST_TREE_VERSION} and "
            "earlier drafted level-uniform trees verified as one chain",
        )
        return config_text(config), notes

    def schedule_settings(
        self, rows: list[dict], drafters: Mapping[str, DrafterLike]
    ) -> tuple[dict[str, object], list[str]]:
        return schedule_config(rows, drafters)


__all__ = [
    "SCHEDULE_DROPPED",
    "VLLM",
    "VLLM_LAST_TREE_VERSION",
    "VLLM_MIN_VERSION",
    "batch_ranges",
    "config_text",
    "schedule_config",
    "schedule_notes",
    "speculative_config",
]
