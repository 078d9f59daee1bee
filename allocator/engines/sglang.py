"""SGLang's ``launch_server`` flags for one drafter at draft length ``k`` (a chain).

Flags follow ``python/sglang/srt/args/speculative_args.py`` and ``ServerArgs.
_handle_speculative_decoding`` in ``python/sglang/srt/server_args.py`` (sgl-project/
sglang, commit 4bc0b6e6; see :mod:`.methods`):

- ``EAGLE``/``EAGLE3``/``STANDALONE``/``NEXTN`` take ``--speculative-draft-model-path``
  (``NEXTN`` only when a ``model`` is given), ``--speculative-num-steps k``,
  ``--speculative-eagle-topk 1`` (a chain, not a tree) and
  ``--speculative-num-draft-tokens k + 1`` (SGLang counts the root token; with top-k 1
  it resets any other value to ``num_steps + 1``).
- ``NGRAM`` takes no model; its tree breadth ``--speculative-ngram-max-bfs-breadth``
  (default 10, copied into the top-k) is set to 1 for a chain, and
  ``--speculative-num-draft-tokens k + 1`` (default 12). SGLang's n-gram matching
  flags are its own (``--speculative-ngram-*``); vLLM's ``prompt_lookup_min/max`` have
  no SGLang counterpart in that source and are not exported.
"""

from __future__ import annotations

from ..core.methods import required_model, resolve_method, sglang_algorithm
from .vllm import DrafterLike


def launch_flags(drafter: DrafterLike, k: int) -> tuple[list[str], list[str]]:
    """SGLang's flags (argv words) and notes for stderr."""
    method, notes = resolve_method(drafter.name, drafter.method)
    algorithm = sglang_algorithm(drafter.name, method)
    k = int(k)
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
        return flags, notes
    flags, more = eagle_flags(drafter, method, k, 1, k + 1)
    return flags, notes + more


def eagle_flags(
    drafter: DrafterLike, method: str, steps: int, topk: int, tokens: int
) -> tuple[list[str], list[str]]:
    """Flags of the algorithms SGLang runs on its EAGLE worker (``EAGLE``, ``EAGLE3``,
    ``STANDALONE``, ``NEXTN``) for ``method``, and notes: the draft model path where the
    method takes one and the draft tree ``(num_steps, eagle_topk, num_draft_tokens)``; a
    chain of ``k`` is ``(k, 1, k + 1)``, a token tree any triple
    (:mod:`allocator.engines.trees`)."""
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
