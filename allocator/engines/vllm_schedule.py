"""A k schedule by batch size as vLLM's dynamic speculative decoding takes it.

The ranges and their reasons: docs/design.md §8.6.

vLLM reads ``num_speculative_tokens_per_batch_size`` from ``--speculative-config``:
a list of ``[range_start, range_end, k]`` entries, each an inclusive range of batch
sizes (concurrent sequences in a scheduling step). Followed here, as read in
vllm-project/vllm:

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
:func:`allocator.engines.vllm.speculative_config`'s, the one vLLM drafter export.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..exceptions import ParameterError
from .vllm import DrafterLike
from .vllm import speculative_config as drafter_config

#: The first vLLM release whose ``--speculative-config`` takes the schedule.
VLLM_MIN_VERSION = "0.24.0"


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


def speculative_config(
    rows: list[dict], drafters: Mapping[str, DrafterLike]
) -> tuple[dict[str, object], list[str]]:
    """vLLM's ``--speculative-config`` for a schedule's ``rows`` (``schedule --json``
    rows), and notes for stderr; ``drafters`` maps names to their problem-file entries.

    The drafter's part (``method``, ``model`` where the method takes one, ngram's
    fields, the notes) is :func:`allocator.engines.vllm.speculative_config`'s, the same
    as ``solve --export vllm``, at the schedule's largest ``k``.
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
    out, notes = drafter_config(drafters[sets[0][0]], max(ks))
    out["num_speculative_tokens_per_batch_size"] = batch_ranges([r["batch"] for r in rows], ks)
    return out, notes


def export_text(rows: list[dict], drafters: Mapping[str, DrafterLike]) -> tuple[str, list[str]]:
    """The JSON to pass as ``vllm serve --speculative-config '<this>'`` (one line), and
    notes for stderr."""
    config, notes = speculative_config(rows, drafters)
    return json.dumps(config) + "\n", notes
