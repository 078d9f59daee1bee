"""The one table of drafter methods: what each is, what it takes, what each engine calls it.

The table and the export rules: docs/design.md §8.8.

A drafter's ``method`` (problem file, ``drafters[].method``) says how a serving engine
runs it. The names are vLLM's ``--speculative-config`` ``method`` values; SGLang calls
them by its ``--speculative-algorithm`` names. Read from the engines' releases (the
PyPI wheels; paths relative to the wheel root):

- vLLM 0.33.0, ``vllm/config/speculative.py``: the ``SpeculativeMethod`` literal (lines
  38-82: ``ngram``, ``draft_model``, ``suffix``, ``custom_class``, ``eagle``, ``eagle3``,
  ``extract_hidden_states``, ``mtp`` and its per-model aliases, ``dflash``,
  ``ngram_gpu``, ``dspark``). The per-model MTP names (``deepseek_mtp``, …) are
  rewritten to ``mtp`` with a deprecation warning (lines 1246-1250), so ``mtp`` is the
  one name exported. ``__post_init__`` (lines 1252-1294) fills in ``model`` itself only
  for ``mtp`` and ``dspark`` (the target's own weights), ``ngram``, ``ngram_gpu``,
  ``suffix`` and ``extract_hidden_states``; any other method without one raises
  "num_speculative_tokens was provided but without speculative model".
  ``prompt_lookup_min``/``prompt_lookup_max`` (integers >= 1, min <= max, both 5 when
  neither is set, lines 1300-1319) belong to the n-gram methods.
- **Gone from vLLM 0.33.0**: ``medusa`` and ``mlp_speculator`` are not in that literal
  (nor anywhere in the wheel). vLLM 0.32.0 is the last release whose
  ``vllm/config/speculative.py`` lists them (read from its PyPI wheel): it still ran
  ``medusa`` (``vllm/v1/spec_decode/medusa.py``); ``mlp_speculator`` it accepted but no
  V1 proposer ran it (vllm-project/vllm#47825, "unrouted in V1 and crashes at engine
  init"). Exports of either to vLLM are refused naming 0.32.0.
- SGLang 0.5.23, ``sglang/srt/arg_groups/fields/spec.py`` (``--speculative-algorithm``, a
  free string: "Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO"),
  ``sglang/srt/speculative/spec_info.py`` (the enum; ``NEXTN`` is a reserved alias of
  ``EAGLE``) and ``sglang/srt/arg_groups/speculative_hook.py`` (``NEXTN`` rewritten to
  ``EAGLE``, lines 109-116, so it runs on the EAGLE worker and takes top-k > 1; for
  the MTP architectures SGLang knows the draft path defaults to the target, lines
  1120-1148). There is no Medusa, MLP-speculator or suffix algorithm.

Draft lengths of the block drafters, the two added since the table was first read:

- ``dflash`` (a DFlash block-diffusion draft): vLLM 0.33.0 drafts
  ``num_speculative_tokens`` tokens (default the draft config's ``n_predict``, lines
  1584-1618); SGLang 0.5.23's ``DFLASH`` verifies a block of ``num_draft_tokens`` whose
  position 0 is the anchor (the last verified token) and drafts the other
  ``block_size - 1`` (``sglang/srt/speculative/dflash_worker_v2.py``: ``gamma =
  self.block_size - 1``; ``speculative_hook.py`` ``_handle_dflash``: steps and top-k forced
  to 1). A chain of ``k``.
- ``dspark`` (a DSpark draft): vLLM 0.33.0 drafts ``num_speculative_tokens`` (default the
  draft's ``block_size``, lines 1592-1599; the model may be the target's own, lines
  1269-1275); SGLang 0.5.23's ``DSPARK`` takes ``--speculative-dspark-block-size gamma``,
  "the number of proposed draft tokens", and sets ``num_draft_tokens = gamma + 1``
  (``_handle_dspark``, lines 806-839). A chain of ``k`` (SGLang's ragged verification
  without an SPS table verifies every draft: ``fields/spec.py``,
  ``--speculative-dspark-sps-table-path``).

Not modelled (no method of the problem file):

- vLLM ``ngram_gpu``: on the V2 model runner (the default) ``ngram`` and ``ngram_gpu``
  run the same GPU speculator (``vllm/v1/worker/gpu/spec_decode/__init__.py`` lines
  87-92, ``use_ngram()``), so ``ngram`` stands for both; ``custom_class`` and
  ``extract_hidden_states`` (a user's proposer; no drafting).
- SGLang ``FROZEN_KV_MTP``: SGLang picks it itself for Gemma-4 assistant drafts asked as
  ``NEXTN``/``EAGLE`` (``speculative_hook.py`` lines 97-116), so ``mtp`` exports as
  ``NEXTN`` and SGLang decides; ``UNO`` verifies two non-draft tokens per request
  (``uno_worker_v2.py``, ``num_non_draft_tokens_per_req = 2``) and needs a LoRA draft
  (``--uno-lora-path``): its draft length does not map onto one ``k`` here.

``allocator.engines.sglang`` (token trees for the methods SGLang's EAGLE worker runs)
reuses this table through :func:`sglang_algorithm`.
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
    "dflash",
    "dspark",
)
#: What a drafter without ``method`` is exported as (the behaviour before ``method``).
DEFAULT_METHOD = "draft_model"
#: Problem-file fields that belong to one method only.
METHOD_FIELDS: tuple[str, ...] = ("prompt_lookup_min", "prompt_lookup_max")
#: The engine releases the table was read from.
VLLM_RELEASE = "0.33.0"
SGLANG_RELEASE = "0.5.23"

_SGLANG_ALGORITHMS = "EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO"


@dataclass(frozen=True)
class MethodInfo:
    """One method.

    ``model``: ``"required"`` (a draft model, head or weights must be named),
    ``"optional"`` (``mtp``, ``dspark``: the target's own layers unless a path is given)
    or ``"none"`` (drafts from the text itself; a ``model`` is refused). ``fields``: its
    own problem-file fields. ``vllm``: vLLM's ``method`` value (``None``: vLLM cannot
    serve it, ``vllm_refusal`` the reason). ``sglang``: SGLang's
    ``--speculative-algorithm`` (``None``: cannot serve it, ``sglang_refusal`` the reason).
    """

    name: str
    what: str
    model: str
    fields: tuple[str, ...]
    vllm: str | None
    sglang: str | None
    sglang_refusal: str | None = None
    vllm_refusal: str | None = None


def _gone_from_vllm(method: str, note: str = "") -> str:
    return (
        f"vLLM {VLLM_RELEASE} has no method {method} (vllm/config/speculative.py); the last "
        f"release that takes it is 0.32.0{note}"
    )


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
        None,
        None,
        f"SGLang has no Medusa algorithm (--speculative-algorithm: {_SGLANG_ALGORITHMS})",
        _gone_from_vllm("medusa"),
    ),
    "mlp_speculator": MethodInfo(
        "mlp_speculator",
        "an MLP speculator",
        "required",
        (),
        None,
        None,
        f"SGLang has no MLP-speculator algorithm (--speculative-algorithm: {_SGLANG_ALGORITHMS})",
        _gone_from_vllm(
            "mlp_speculator",
            ", whose V1 engine did not run it (vllm-project/vllm#47825)",
        ),
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
        f"SGLang has no suffix-decoding algorithm (--speculative-algorithm: {_SGLANG_ALGORITHMS})",
    ),
    "dflash": MethodInfo(
        "dflash", "a DFlash block-diffusion draft", "required", (), "dflash", "DFLASH"
    ),
    "dspark": MethodInfo("dspark", "a DSpark draft", "optional", (), "dspark", "DSPARK"),
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
    """vLLM's ``method`` value for ``method``; refuses what vLLM 0.33.0 cannot serve,
    naming the last release that took it."""
    info = TABLE[method]
    if info.vllm is None:
        raise ParameterError("export", f"drafter {name!r} (method {method}): {info.vllm_refusal}")
    return info.vllm


__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "METHOD_FIELDS",
    "SGLANG_RELEASE",
    "TABLE",
    "VLLM_RELEASE",
    "MethodInfo",
    "method_problem",
    "required_model",
    "resolve_method",
    "sglang_algorithm",
    "vllm_method",
]
