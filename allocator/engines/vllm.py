"""vLLM's ``--speculative-config`` for one drafter at draft length ``k``.

Field names, values and types follow ``SpeculativeConfig`` in vLLM's
``vllm/config/speculative.py`` (vllm-project/vllm, commit 002e77c1; see
:mod:`.methods`): ``method`` (str), ``model`` (str, the draft model, head or weights),
``num_speculative_tokens`` (int > 0), ``prompt_lookup_min``/``prompt_lookup_max``
(int >= 1, ``ngram`` only).
"""

from __future__ import annotations

from typing import Protocol

from ..core.methods import required_model, resolve_method, vllm_method


class DrafterLike(Protocol):
    """What an export reads of a drafter (``allocator.io.spec.Drafter`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def method(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def prompt_lookup_min(self) -> int | None: ...
    @property
    def prompt_lookup_max(self) -> int | None: ...


def speculative_config(drafter: DrafterLike, k: int) -> tuple[dict[str, object], list[str]]:
    """The JSON object of ``--speculative-config`` and notes for stderr."""
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
