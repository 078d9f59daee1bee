"""The one table of drafter methods: what each is, what it takes, what each engine calls it.

The table and the export rules: docs/design.md §8.8.

A drafter's ``method`` (problem file, ``drafters[].method``) says how a serving engine
runs it. The names are vLLM's ``--speculative-config`` ``method`` values; SGLang calls
them by its ``--speculative-algorithm`` names. Read from the engines' source:

- vLLM, ``vllm/config/speculative.py`` (vllm-project/vllm, commit 002e77c1): the
  ``SpeculativeMethod`` literal (``ngram``, ``medusa``, ``mlp_speculator``,
  ``draft_model``, ``suffix``, ``eagle``, ``eagle3``, ``mtp`` and, besides, ``dflash``,
  ``dspark``, ``ngram_gpu``, ``custom_class``, ``extract_hidden_states``). The
  per-model MTP names (``deepseek_mtp``, ``qwen3_next_mtp``, …) are deprecated there and
  rewritten to ``mtp`` with a warning, so ``mtp`` is the one name exported. With no
  ``model``, ``mtp`` loads the target's own weights, ``ngram`` and ``suffix`` need
  none; every other method raises "num_speculative_tokens was provided but without
  speculative model". ``prompt_lookup_min``/``prompt_lookup_max`` (integers >= 1,
  min <= max, both default 5) belong to ``ngram`` only.
- SGLang, ``python/sglang/srt/server_args.py`` and ``python/sglang/srt/args/
  speculative_args.py`` (sgl-project/sglang, commit 4bc0b6e6): ``--speculative-algorithm``
  choices ``EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM``; ``NEXTN`` is rewritten to ``EAGLE``
  (the MTP path; for DeepSeek-V3-like architectures the draft path defaults to the
  target model). There is no Medusa, MLP-speculator or suffix algorithm.

Left out: vLLM's ``dflash``/``dspark``/``ngram_gpu`` and SGLang's ``DFLASH`` and
``FROZEN_KV_MTP`` (python/sglang/srt/speculative/spec_info.py): how their draft length
maps onto ``k`` was not determined from the sources read.

``allocator.engines.sglang`` (token trees for ``eagle``/``eagle3``) reuses this table
through :func:`sglang_algorithm`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import ParameterError

#: Every method, in the order of the problem-file literal (``allocator.io.spec.Method``).
METHODS: tuple[str, ...] = (
    "draft_model",
    "eagle",
    "eagle3",
    "mtp",
    "medusa",
    "mlp_speculator",
    "ngram",
    "suffix",
)
#: What a drafter without ``method`` is exported as (the behaviour before ``method``).
DEFAULT_METHOD = "draft_model"
#: Problem-file fields that belong to one method only.
METHOD_FIELDS: tuple[str, ...] = ("prompt_lookup_min", "prompt_lookup_max")


@dataclass(frozen=True)
class MethodInfo:
    """One method.

    ``model``: ``"required"`` (a draft model, head or weights must be named),
    ``"optional"`` (``mtp``: the target's own MTP layers unless a path is given) or
    ``"none"`` (drafts from the text itself; a ``model`` is refused). ``fields``: its own
    problem-file fields. ``vllm``: vLLM's ``method`` value (``None``: vLLM cannot serve
    it). ``sglang``: SGLang's ``--speculative-algorithm`` (``None``: cannot serve it), and
    ``sglang_refusal`` the reason.
    """

    name: str
    what: str
    model: str
    fields: tuple[str, ...]
    vllm: str | None
    sglang: str | None
    sglang_refusal: str | None = None


TABLE: dict[str, MethodInfo] = {
    "draft_model": MethodInfo(
        "draft_model", "a separate small draft model", "required", (), "draft_model", "STANDALONE"
    ),
    "eagle": MethodInfo("eagle", "an EAGLE (EAGLE-1/2) head", "required", (), "eagle", "EAGLE"),
    "eagle3": MethodInfo("eagle3", "an EAGLE-3 head", "required", (), "eagle3", "EAGLE3"),
    "mtp": MethodInfo(
        "mtp", "the target's multi-token-prediction layers", "optional", (), "mtp", "NEXTN"
    ),
    "medusa": MethodInfo(
        "medusa",
        "Medusa heads",
        "required",
        (),
        "medusa",
        None,
        "SGLang has no Medusa algorithm (--speculative-algorithm: EAGLE, EAGLE3, NEXTN, "
        "STANDALONE, NGRAM)",
    ),
    "mlp_speculator": MethodInfo(
        "mlp_speculator",
        "an MLP speculator",
        "required",
        (),
        "mlp_speculator",
        None,
        "SGLang has no MLP-speculator algorithm (--speculative-algorithm: EAGLE, EAGLE3, "
        "NEXTN, STANDALONE, NGRAM)",
    ),
    "ngram": MethodInfo(
        "ngram",
        "prompt lookup (n-gram matching, no model)",
        "none",
        ("prompt_lookup_min", "prompt_lookup_max"),
        "ngram",
        "NGRAM",
    ),
    "suffix": MethodInfo(
        "suffix",
        "suffix decoding (no model)",
        "none",
        (),
        "suffix",
        None,
        "SGLang has no suffix-decoding algorithm (--speculative-algorithm: EAGLE, EAGLE3, "
        "NEXTN, STANDALONE, NGRAM)",
    ),
}


def method_problem(
    method: str | None, given: dict[str, object], model: str | None
) -> tuple[str, str] | None:
    """The first problem with a drafter's method fields, as ``(field, message)``, or None.

    ``given``: the method-specific fields (:data:`METHOD_FIELDS`) that are set.
    """
    for name in METHOD_FIELDS:
        if name not in given:
            continue
        owners = [m for m, info in TABLE.items() if name in info.fields]
        if method is None:
            return name, f"applies to method {' or '.join(owners)} only: set method: {owners[0]}"
        if name not in TABLE[method].fields:
            return name, f"applies to method {' or '.join(owners)} only, not {method}"
    if method is not None and model is not None and TABLE[method].model == "none":
        return "model", f"method {method} ({TABLE[method].what}) takes no model"
    lo, hi = given.get("prompt_lookup_min"), given.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        return "prompt_lookup_min", f"{lo} exceeds prompt_lookup_max ({hi})"
    return None


def resolve_method(name: str, method: str | None) -> tuple[str, list[str]]:
    """The method a drafter is exported as, and a note when it is the default."""
    if method is not None:
        return method, []
    return DEFAULT_METHOD, [
        f"note: drafter {name!r} has no method; exported as {DEFAULT_METHOD} "
        f"({TABLE[DEFAULT_METHOD].what}); set method: in the problem file to say what it is"
    ]


def required_model(name: str, method: str, model: str | None) -> str | None:
    """The drafter's model where its method takes one; refuses a missing required model."""
    need = TABLE[method].model
    if need == "required" and not model:
        raise ParameterError(
            "export",
            f"drafter {name!r} (method {method}: {TABLE[method].what}) has no `model` "
            "(the serving system's model name or path); add `model:` to it in the problem file",
        )
    return model if need != "none" else None


def sglang_algorithm(name: str, method: str) -> str:
    """SGLang's ``--speculative-algorithm`` for ``method``; refuses what SGLang cannot serve."""
    info = TABLE[method]
    if info.sglang is None:
        raise ParameterError("export", f"drafter {name!r} (method {method}): {info.sglang_refusal}")
    return info.sglang


def vllm_method(name: str, method: str) -> str:
    """vLLM's ``method`` value for ``method``."""
    info = TABLE[method]
    if info.vllm is None:  # every method in the table is served by vLLM today
        raise ParameterError("export", f"drafter {name!r} (method {method}): vLLM cannot serve it")
    return info.vllm


__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "METHOD_FIELDS",
    "TABLE",
    "MethodInfo",
    "method_problem",
    "required_model",
    "resolve_method",
    "sglang_algorithm",
    "vllm_method",
]
