"""The engines' own schemas for what ``allocator`` exports, transcribed from their releases.

Neither engine's parser imports here (both need their GPU stack: SGLang's argument groups
need msgspec, orjson and torch, vLLM's ``SpeculativeConfig`` torch and transformers), so
the rules are copied from the source of the PyPI wheels, version-pinned, and not taken
from ``allocator``:

- vLLM 0.33.0: ``vllm/config/speculative.py`` (``SpeculativeConfig``: its fields, the
  ``SpeculativeMethod`` literal, ``__post_init__``), ``vllm/config/utils.py`` (``@config``:
  extra fields forbidden), ``vllm/v1/spec_decode/dynamic/utils.py``
  (``validate_and_normalize_dynamic_sd_schedule``).
- SGLang 0.5.23: ``sglang/srt/arg_groups/fields/spec.py`` and ``fields/schedule.py`` (the
  flags, their types and defaults; flag names are ``"--" + name.replace("_", "-")``,
  ``arg_utils.py``), ``sglang/srt/speculative/spec_info.py`` (the algorithms) and
  ``sglang/srt/arg_groups/speculative_hook.py`` (how the flags resolve and what is
  refused).

:func:`check_vllm` and :func:`check_sglang` raise ``AssertionError`` on anything the
engine would refuse, rewrite with a warning, or fill in differently from what was asked.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"

# ----------------------------------------------------------------- vLLM 0.33.0

#: ``MTPModelTypes`` (speculative.py lines 38-66); all but ``mtp`` are rewritten to it.
VLLM_MTP_TYPES = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp",
    "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
})  # fmt: skip
#: ``SpeculativeMethod`` (lines 67-82): no ``medusa``, no ``mlp_speculator``.
VLLM_METHODS = frozenset({
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "dflash", "ngram_gpu", "dspark",
}) | VLLM_MTP_TYPES  # fmt: skip
#: ``__post_init__`` (lines 1252-1294) fills ``model`` in itself only for these.
VLLM_NO_MODEL = frozenset(
    {"mtp", "dspark", "ngram", "ngram_gpu", "suffix", "extract_hidden_states"}
)
#: Every field of ``SpeculativeConfig`` (the ``@config`` dataclass forbids others).
VLLM_FIELDS = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method",
    "draft_tensor_parallel_size", "tensor_parallel_size", "quantization", "moe_backend",
    "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "disable_lookahead_block_hashes", "draft_lm_head_quantization",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config",
    "num_speculative_tokens_per_batch_size", "draft_model_config", "draft_parallel_config",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "draft_load_config",
    "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk", "xpress_topc",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
})  # fmt: skip


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_vllm_schedule(schedule: object, k_max: int) -> None:
    """``num_speculative_tokens_per_batch_size`` as ``dynamic/utils.py`` (lines 7-74)
    validates it: a non-empty list of 3-item entries ``(start, end, k)``, ``start, end >
    0``, ``start <= end``, ``k >= 0``, sorted and non-overlapping, the first at 1."""
    assert isinstance(schedule, list) and schedule, schedule
    previous_end = 0
    for entry in schedule:
        # "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence"
        assert isinstance(entry, list | tuple) and len(entry) == 3, entry
        start, end, k = entry
        assert _int(start) and _int(end) and _int(k), entry
        assert start > 0 and end > 0 and start <= end and k >= 0, entry
        assert start > previous_end, ("ranges must be non-overlapping and sorted", schedule)
        previous_end = end
    assert schedule[0][0] == 1, "the first batch-size range must start at 1"
    # the k used is min(num_speculative_tokens, k): a larger k would be silently clamped
    assert all(e[2] <= k_max for e in schedule), (schedule, k_max)


def check_vllm(config: object, k: int | None = None) -> dict:
    """A ``--speculative-config`` object vLLM 0.33.0 takes as written: known fields of the
    right types, a method of the literal (no alias it rewrites), a model where
    ``__post_init__`` needs one and none where it names the model itself, prompt lookup
    only on the n-gram methods, a valid schedule. ``k``: the expected
    ``num_speculative_tokens``."""
    assert isinstance(config, dict), config
    assert set(config) <= VLLM_FIELDS, set(config) - VLLM_FIELDS
    method = config.get("method")
    assert isinstance(method, str) and method in VLLM_METHODS, method
    assert method not in VLLM_MTP_TYPES - {"mtp"}, "deprecated alias, rewritten to mtp"
    n = config.get("num_speculative_tokens")
    assert _int(n) and n > 0, n  # Field(default=None, gt=0)
    if k is not None:
        assert n == k, (n, k)
    if "model" in config:
        assert isinstance(config["model"], str) and config["model"], config
        assert method not in ("ngram", "ngram_gpu", "suffix"), "vLLM names these itself"
    else:
        assert method in VLLM_NO_MODEL, f"{method}: provided but without speculative model"
    lookup = {
        key: config[key] for key in ("prompt_lookup_min", "prompt_lookup_max") if key in config
    }
    for key, value in lookup.items():
        assert _int(value) and value >= 1, (key, value)  # Field(default=None, ge=1)
    if lookup:
        assert method in ("ngram", "ngram_gpu"), method
        lo = lookup.get("prompt_lookup_min", lookup.get("prompt_lookup_max"))
        hi = lookup.get("prompt_lookup_max", lo)
        assert lo <= hi  # "prompt_lookup_min ... must be <= prompt_lookup_max"
    if "num_speculative_tokens_per_batch_size" in config:
        check_vllm_schedule(config["num_speculative_tokens_per_batch_size"], n)
    return config


# ----------------------------------------------------------------- SGLang 0.5.23

#: ``SpeculativeAlgorithm`` members (spec_info.py lines 39-47) and the reserved alias
#: ``NEXTN`` (spec_registry.py line 183); ``from_string`` upper-cases the name.
SGLANG_ALGORITHMS = frozenset(
    {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}
)
#: Algorithms resolved by ``_handle_eagle_family`` (speculative_hook.py 1072-1282).
SGLANG_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
#: ``--max-running-requests`` set when it is unset and speculation is on.
SGLANG_RUNNING_DEFAULT = 48


def sglang_parser() -> argparse.ArgumentParser:
    """The flags of ``fields/spec.py`` and ``fields/schedule.py`` that exports use, with
    their types and defaults (a value of another type is a parse error)."""
    p = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    p.add_argument("--speculative-algorithm", type=str, default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-dflash-block-size", type=int, default=None)
    p.add_argument("--speculative-dspark-block-size", type=int, default=None)
    p.add_argument("--speculative-ngram-min-bfs-breadth", type=int, default=1)
    p.add_argument("--speculative-ngram-max-bfs-breadth", type=int, default=10)
    p.add_argument("--max-running-requests", type=int, default=None)
    return p


@dataclass(frozen=True)
class SGLangSettings:
    """What SGLang 0.5.23 runs after resolving the flags: ``algorithm`` (as resolved:
    ``NEXTN`` becomes ``EAGLE``), ``steps``, ``topk``, ``draft_tokens`` (the verified
    tokens per request, root included), ``draft_path``, ``max_running_requests``."""

    algorithm: str
    asked: str
    steps: int
    topk: int
    draft_tokens: int
    draft_path: str | None
    max_running_requests: int

    @property
    def drafted(self) -> int:
        """Draft tokens proposed per round: ``num_draft_tokens - 1`` (the root is the last
        verified token)."""
        return self.draft_tokens - 1


def check_sglang(argv: list[str]) -> SGLangSettings:
    """``launch_server`` flags SGLang 0.5.23 takes as written (no warning rewriting a
    value, no assertion failing, no refusal), resolved the way ``speculative_hook.py``
    resolves them."""
    words = list(argv)
    flags = [w for w in words if w.startswith("--")]
    assert len(set(flags)) == len(flags), words
    ns, extra = sglang_parser().parse_known_args(words)
    assert not extra, extra
    asked = ns.speculative_algorithm
    assert isinstance(asked, str) and asked.upper() in SGLANG_ALGORITHMS, asked
    algo = asked.upper()
    running = SGLANG_RUNNING_DEFAULT if ns.max_running_requests is None else ns.max_running_requests
    assert running >= 1
    path = ns.speculative_draft_model_path
    if algo == "NGRAM":
        assert path is None, "NGRAM drafts from the text"
        topk = ns.speculative_ngram_max_bfs_breadth  # copied into the top-k (1309-1313)
        assert 1 <= ns.speculative_ngram_min_bfs_breadth <= topk
        tokens = 12 if ns.speculative_num_draft_tokens is None else ns.speculative_num_draft_tokens
        steps = ns.speculative_num_steps if ns.speculative_num_steps is not None else tokens // topk
        return SGLangSettings("NGRAM", asked, steps, topk, tokens, None, running)
    if algo == "DFLASH":
        assert path, "DFLASH requires setting --speculative-draft-model-path"  # 324-327
        # num_steps and topk other than 1 are overridden with a warning
        assert ns.speculative_num_steps in (None, 1) and ns.speculative_eagle_topk in (None, 1)
        block, tokens = ns.speculative_dflash_block_size, ns.speculative_num_draft_tokens
        if block is not None:
            assert block > 0 and (tokens is None or tokens == block)
            tokens = block
        assert tokens is not None, "without it SGLang reads the draft config (or takes 16)"
        assert tokens >= 2
        return SGLangSettings("DFLASH", asked, 1, 1, tokens, path, running)
    if algo == "DSPARK":
        gamma = ns.speculative_dspark_block_size
        assert gamma is not None and gamma > 0, "without it SGLang reads the draft config"
        tokens = gamma + 1  # "must equal gamma + 1" (806-839)
        assert ns.speculative_num_draft_tokens in (None, tokens)
        return SGLangSettings("DSPARK", asked, 1, 1, tokens, path, running)
    assert algo in SGLANG_EAGLE_FAMILY, f"{algo}: not an algorithm allocator exports"
    steps, topk, tokens = (
        ns.speculative_num_steps,
        ns.speculative_eagle_topk,
        ns.speculative_num_draft_tokens,
    )
    # without --speculative-num-steps the hook asserts topk and draft tokens are unset too
    # and chooses all three itself (1159-1174): exports always give the three
    assert steps is not None and topk is not None and tokens is not None, words
    assert steps >= 1 and topk >= 1 and tokens >= 2
    if topk == 1:
        # "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" (1255-1266)
        assert tokens == steps + 1, (steps, topk, tokens)
    else:
        # eagle_utils.py 106-110: the top num_draft_tokens - 1 of the candidates
        assert tokens - 1 <= topk + (steps - 1) * topk * topk, (steps, topk, tokens)
    resolved = "EAGLE" if algo == "NEXTN" else algo  # lines 109-116
    return SGLangSettings(resolved, asked, steps, topk, tokens, path, running)


__all__ = [
    "SGLANG_ALGORITHMS",
    "SGLANG_EAGLE_FAMILY",
    "SGLANG_RUNNING_DEFAULT",
    "SGLANG_VERSION",
    "VLLM_FIELDS",
    "VLLM_METHODS",
    "VLLM_MTP_TYPES",
    "VLLM_NO_MODEL",
    "VLLM_VERSION",
    "SGLangSettings",
    "check_sglang",
    "check_vllm",
    "check_vllm_schedule",
    "sglang_parser",
]
