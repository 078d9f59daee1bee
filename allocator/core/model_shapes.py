"""Model shapes of this year, read from a Hugging Face ``config.json``: multi-head latent
attention, sliding-window layers, per-component weight dtypes, shared experts and first
dense layers (docs/design.md §8.12; :class:`~allocator.core.model_spec.ModelSpec` holds
the result).

:func:`needs_shapes` says whether a config needs this reader; otherwise
:meth:`ModelSpec.from_hf_config` keeps its own uniform-dtype, full-attention count, so a
config that says nothing of these shapes gives what it gave before.

**Weights by component.** Every weight tensor of the checkpoint is listed once, with
the component it belongs to (:data:`PARTS`) and its module name, so that a quantisation
scheme's ignore list applies to it by name. A *quantisable* tensor is a linear layer's
weight matrix (attention projections, MLPs, experts); biases, norms, attention sinks,
routers, the input embedding and ``lm_head`` stay in the checkpoint's ``torch_dtype``
(vLLM builds every router with ``quant_config=None`` and quantises neither the embedding
nor, under these schemes, ``lm_head``). Bytes per quantised value, scales included
(exact when the matrix dimensions are multiples of the group):

    fp8 (``quant_method: fp8``, DeepSeek's 128 x 128 blocks, ModelOpt ``FP8``)   1
        (a block's fp32 scale adds 4 / 16384 byte per value: left out)
    MXFP4 (``quant_method: mxfp4``, GPT-OSS): 4 bits + an 8-bit scale per 32   0.53125
        (vLLM's Mxfp4Config quantises the routed experts only; every linear layer
        stays unquantised, ``vllm/model_executor/layers/quantization/mxfp4.py``)
    NVFP4 (compressed-tensors float 4-bit group 16, ModelOpt ``NVFP4``):
        4 bits + an fp8 scale per 16 values                                    0.5625
    compressed-tensors int ``n`` bits, group ``g``: n/8 + 2/g (a bf16 scale per group)

(per-tensor scalars, such as NVFP4's fp32 global scales, are left out).

Ignore lists (``modules_to_not_convert``, ``ignored_layers``, ``ignore``,
``exclude_modules``) match a module's name or any dotted prefix of it, exactly or as a
``*`` wildcard; an entry ``re:<pattern>`` is a regular expression matched at the start
of the name (compressed-tensors' rule). Any other ``quant_method`` is refused.

**Multi-head latent attention** (DeepSeek-V2/V3, Kimi K2; the DeepSeek-V3 technical
report §2.1.1). Per token and layer the cache holds one latent ``c_KV`` of
``kv_lora_rank`` values and one decoupled RoPE key of ``qk_rope_head_dim`` (vLLM 0.33.0:
``head_size = kv_lora_rank + qk_rope_head_dim``, ``num_kv_heads = 1``, in
``vllm/model_executor/layers/attention/mla_attention.py``). Attention weights: ``q_a_proj``
``h·q_lora_rank`` + its norm, ``q_b_proj`` ``q_lora_rank·H·(nope + rope)`` (or ``q_proj``
``h·H·(nope + rope)`` without ``q_lora_rank``), ``kv_a_proj_with_mqa`` ``h·(r + rope)`` +
its norm ``r``, ``kv_b_proj`` ``r·H·(nope + v)``, ``o_proj`` ``H·v·h``.

Gemma-3 (``gemma3_text``: q/k norms, four norms a layer, tied embeddings by default) is
read too; a multimodal wrapper's ``text_config`` is the text model (its vision tower is
not counted).

**Sliding windows**, per layer (0: full attention): ``layer_types`` when given
(``sliding_attention`` / ``full_attention``, as Gemma-3 and GPT-OSS write it); else for
Qwen2/Qwen3 layouts the layers ``i >= max_window_layers`` when ``use_sliding_window`` is
true (Hugging Face's Qwen2Config: ``sliding_window`` is null otherwise; vLLM 0.33.0's
``qwen2.py`` serves only the case where every layer slides); else with
``sliding_window_pattern`` ``p`` every layer but each ``p``-th (Gemma-3); GPT-OSS without
``layer_types`` the even layers (vLLM's ``gpt_oss.py``); any other layout every layer
(vLLM's model-level window). A ``sliding_window`` of null or 0 is no window (vLLM 0.33.0
``vllm/config/model.py``).

**Shared experts and dense layers.** DeepSeek: layers ``i >= first_k_dense_replace`` with
``i % moe_layer_freq == 0`` are MoE (router ``h·E``, + ``E`` correction biases under
``topk_method: noaux_tc``; ``E`` experts of ``3·h·moe_intermediate_size``;
``n_shared_experts`` always-on experts of the same size), the others a dense MLP of
``intermediate_size``. Qwen2-MoE: one shared expert of ``shared_expert_intermediate_size``
and its ``h → 1`` gate. Multi-token-prediction layers (``num_nextn_predict_layers``) are
not part of the model vLLM serves as the verifier and are not counted.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import InputError

__all__ = ["MLA_TYPES", "PARTS", "SHAPE_TYPES", "needs_shapes", "read_shapes"]

#: The components weights are grouped by.
PARTS: tuple[str, ...] = (
    "attention",
    "dense_mlp",
    "shared_experts",
    "experts",
    "router",
    "norms",
    "embedding",
    "lm_head",
)
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
_QWEN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
_DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
_MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss")
SHAPE_TYPES = _DENSE + _MOE + MLA_TYPES
_LAYER_TYPES = {"sliding_attention", "full_attention"}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def needs_shapes(cfg: Mapping[str, Any]) -> bool:
    """The config describes a shape :meth:`ModelSpec.from_hf_config`'s own count does not:
    latent attention, a model type only this module knows, a sliding window in effect,
    or a quantisation (which leaves embeddings, norms and routers unquantised)."""
    model_type = cfg.get("model_type")
    if "kv_lora_rank" in cfg or model_type in MLA_TYPES or model_type in ("gpt_oss", "gemma3_text"):
        return True
    if isinstance(model_type, str) and model_type.startswith("deepseek"):
        return True
    window = cfg.get("sliding_window")
    if window not in (None, 0, False) and not (
        model_type in _QWEN and cfg.get("use_sliding_window") is not True
    ):
        return True
    quant = cfg.get("quantization_config")
    return isinstance(quant, dict) and bool(quant)


# ---------------------------------------------------------------- checked reading
class _Config:
    """config.json fields, each checked as it is read; errors name ``field.key``."""

    def __init__(self, cfg: Mapping[str, Any], field: str) -> None:
        self.cfg = cfg
        self.field = field

    def fail(self, key: str, message: str) -> InputError:
        return InputError(f"{self.field}.{key}", message)

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def count(self, key: str, *alts: str, least: int = 1, default: int | None = None) -> int:
        for k in (key, *alts):
            value = self.cfg.get(k)
            if value is None:
                continue
            ok = isinstance(value, int) and not isinstance(value, bool)
            ok = ok or (isinstance(value, float) and value.is_integer())
            if not ok or not least <= int(value) <= 10**12:
                raise self.fail(k, f"{_shown(value)} is not a whole number in {least}..10**12")
            return int(value)
        if default is not None:
            return default
        raise self.fail(key, f"config.json has no {' or '.join((key, *alts))}")

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"{_shown(value)} is not true or false")
        return value

    def text(self, key: str, default: str | None = None) -> str:
        value = self.cfg.get(key)
        if value is None and default is not None:
            return default
        if value is None:
            raise self.fail(key, f"config.json has no {key}")
        if not isinstance(value, str):
            raise self.fail(key, f"{_shown(value)} is not text")
        return value


# ---------------------------------------------------------------- quantisation
def _matches(name: str, patterns: Sequence[str]) -> bool:
    """``name`` or a dotted prefix of it matches an entry (module docstring)."""
    parts = name.split(".")
    prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            return True
    return False


@dataclass(frozen=True)
class _Quant:
    """A quantisation scheme: bytes per quantised value of a module (None: not quantised)."""

    dtype: str
    value_bytes: float
    ignore: tuple[str, ...] = ()
    experts_only: bool = False
    groups: tuple[tuple[tuple[str, ...], str, float], ...] = ()  # (targets, dtype, bytes)
    kv_dtype: str | None = None

    def bytes_of(self, module: str, part: str) -> float | None:
        if self.experts_only and part != "experts":
            return None
        if _matches(module, self.ignore):
            return None
        if not self.groups:
            return self.value_bytes
        for targets, _, b in self.groups:
            if "Linear" in targets or _matches(module, [t for t in targets if t != "Linear"]):
                return b
        return None


def _float_format(bits: int, group: int, where: str) -> tuple[str, float]:
    if bits == 8:
        return "fp8", 1.0
    if bits == 4 and group == 16:
        return "nvfp4", 0.5625
    if bits == 4 and group == 32:
        return "mxfp4", 0.53125
    raise InputError(where, f"float {bits}-bit weights in groups of {group}: format not known")


def _read_quant(c: _Config) -> _Quant | None:
    q = c.cfg.get("quantization_config")
    if q is None or q == {}:
        return None
    key = "quantization_config"
    if not isinstance(q, dict):
        raise c.fail(key, f"{_shown(q)} is not an object")
    method = q.get("quant_method")

    def names(*keys: str) -> tuple[str, ...]:
        for k in keys:
            v = q.get(k)
            if v is None:
                continue
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise c.fail(f"{key}.{k}", f"{_shown(v)} is not a list of module names")
            return tuple(v)
        return ()

    kv = q.get("kv_cache_scheme")
    kv_dtype = None
    if isinstance(kv, dict) and kv.get("type") == "float" and kv.get("num_bits") == 8:
        kv_dtype = "fp8"  # vLLM honours it under kv_cache_dtype "auto" (attention.py)
    if method == "fp8":
        return _Quant("fp8", 1.0, names("modules_to_not_convert", "ignored_layers"))
    if method == "mxfp4":
        return _Quant("mxfp4", 0.53125, names("modules_to_not_convert"), experts_only=True)
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        known = {"FP8": ("fp8", 1.0), "NVFP4": ("nvfp4", 0.5625)}
        if algo not in known:
            raise c.fail(
                f"{key}.quant_algo", f"{_shown(q.get('quant_algo'))}: known are FP8, NVFP4"
            )
        dt, b = known[algo]
        return _Quant(dt, b, names("ignore", "exclude_modules"), kv_dtype=kv_dtype)
    if method == "compressed-tensors":
        raw = q.get("config_groups")
        if not isinstance(raw, dict) or not raw:
            raise c.fail(f"{key}.config_groups", "compressed-tensors needs config_groups")
        groups = []
        for gname, g in raw.items():
            where = f"{c.field}.{key}.config_groups.{gname}"
            w = g.get("weights") if isinstance(g, dict) else None
            targets = g.get("targets") if isinstance(g, dict) else None
            if not isinstance(w, dict) or not isinstance(targets, list):
                raise InputError(where, "needs weights (an object) and targets (a list)")
            bits, kind, size = w.get("num_bits"), w.get("type"), w.get("group_size")
            if not isinstance(bits, int) or kind not in ("float", "int"):
                raise InputError(f"{where}.weights", f"num_bits {bits!r}, type {kind!r}: unknown")
            if kind == "float":
                dt, b = _float_format(bits, int(size or 0) if bits == 4 else 0, where)
            else:
                dt = {4: "int4", 8: "int8"}.get(bits, "")
                if not dt:
                    raise InputError(f"{where}.weights", f"int{bits} weights: not known")
                b = bits / 8 + (2 / size if isinstance(size, int) and size > 0 else 0.0)
            groups.append((tuple(str(t) for t in targets), dt, b))
        return _Quant(
            groups[0][1], groups[0][2], names("ignore"), groups=tuple(groups), kv_dtype=kv_dtype
        )
    raise c.fail(
        f"{key}.quant_method",
        f"{_shown(method)}: bytes per weight not derived (known: fp8, mxfp4, "
        "compressed-tensors, modelopt); give dtype",
    )


# ---------------------------------------------------------------- the tensors
@dataclass(frozen=True)
class _Tensor:
    part: str
    module: str
    params: int
    quantisable: bool = True


def _windows(c: _Config, model_type: str, layers: int) -> tuple[int, ...]:
    if model_type in _QWEN and not c.flag("use_sliding_window"):
        return ()
    raw = c.cfg.get("sliding_window")
    if raw is None or raw == 0:
        return ()
    w = c.count("sliding_window")
    types = c.cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise c.fail("layer_types", f"needs a list of {layers} layer types (one a layer)")
        for i, t in enumerate(types):
            if t not in _LAYER_TYPES:
                raise c.fail(
                    f"layer_types.{i}", f"{_shown(t)}: known are sliding_attention, full_attention"
                )
        out = tuple(w if t == "sliding_attention" else 0 for t in types)
    elif model_type in _QWEN:
        first = c.count("max_window_layers", least=0)
        out = tuple(w if i >= first else 0 for i in range(layers))
    elif c.has("sliding_window_pattern"):
        p = c.count("sliding_window_pattern")
        out = tuple(0 if (i + 1) % p == 0 else w for i in range(layers))
    elif model_type == "gpt_oss":
        out = tuple(w if i % 2 == 0 else 0 for i in range(layers))
    else:
        out = (w,) * layers
    return out if any(out) else ()


def _attention(c: _Config, model_type: str, i: int, h: int, dims: dict[str, int]) -> list[_Tensor]:
    pre = f"model.layers.{i}.self_attn"
    H = dims["heads"]
    if model_type in MLA_TYPES:
        r, rope, nope, v = dims["r"], dims["rope"], dims["nope"], dims["v"]
        out = []
        if dims["q_lora"]:
            ql = dims["q_lora"]
            out += [
                _Tensor("attention", f"{pre}.q_a_proj", h * ql),
                _Tensor("attention", f"{pre}.q_a_layernorm", ql, False),
                _Tensor("attention", f"{pre}.q_b_proj", ql * H * (nope + rope)),
            ]
        else:
            out.append(_Tensor("attention", f"{pre}.q_proj", h * H * (nope + rope)))
        return out + [
            _Tensor("attention", f"{pre}.kv_a_proj_with_mqa", h * (r + rope)),
            _Tensor("attention", f"{pre}.kv_a_layernorm", r, False),
            _Tensor("attention", f"{pre}.kv_b_proj", r * H * (nope + v)),
            _Tensor("attention", f"{pre}.o_proj", H * v * h),
        ]
    K, d = dims["kv_heads"], dims["head_dim"]
    out = [
        _Tensor("attention", f"{pre}.q_proj", h * H * d),
        _Tensor("attention", f"{pre}.k_proj", h * K * d),
        _Tensor("attention", f"{pre}.v_proj", h * K * d),
        _Tensor("attention", f"{pre}.o_proj", H * d * h),
    ]
    bias = model_type in ("qwen2", "qwen2_moe") or c.flag("attention_bias")
    if bias:
        out.append(_Tensor("attention", f"{pre}.qkv_bias", (H + 2 * K) * d, False))
    if c.flag("attention_bias") and model_type not in ("qwen2", "qwen2_moe"):
        out.append(_Tensor("attention", f"{pre}.o_proj.bias", h, False))
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text"):
        out.append(_Tensor("attention", f"{pre}.qk_norm", 2 * d, False))
    if model_type == "gpt_oss":
        out.append(_Tensor("attention", f"{pre}.sinks", H, False))
    return out


def _mlp(part: str, pre: str, h: int, inter: int, count: int = 1) -> list[_Tensor]:
    return [
        _Tensor(part, f"{pre}.{p}", count * h * inter)
        for p in ("gate_proj", "up_proj", "down_proj")
    ]


def _moe_layers(c: _Config, model_type: str, layers: int) -> set[int]:
    if model_type in ("mixtral", "gpt_oss"):
        return set(range(layers))
    if model_type in MLA_TYPES:
        first = c.count("first_k_dense_replace", least=0, default=0)
        freq = c.count("moe_layer_freq", default=1)
        return {i for i in range(layers) if i >= first and i % freq == 0}
    step = c.count("decoder_sparse_step", default=1)
    only_raw = c.cfg.get("mlp_only_layers") or []
    if not isinstance(only_raw, list):
        raise c.fail("mlp_only_layers", f"{_shown(only_raw)} is not a list of layers")
    for j, v in enumerate(only_raw):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise c.fail(f"mlp_only_layers.{j}", f"{_shown(v)} is not a layer number")
    only = set(only_raw)
    return {i for i in range(layers) if i not in only and (i + 1) % step == 0}


def read_shapes(
    cfg: Mapping[str, Any],
    *,
    field: str,
    dtype: str | None,
    kv_dtype: str | None,
    bytes_of: Callable[[str, str], float],
) -> dict[str, Any]:
    """The :class:`ModelSpec` fields of ``cfg`` (a config :func:`needs_shapes`), by the
    module docstring's layouts. ``dtype``/``kv_dtype`` override ``torch_dtype`` (a
    ``dtype`` given stores every weight in it); ``bytes_of(dtype, field)`` the bytes of
    a dtype name."""
    c = _Config(cfg, field)
    model_type = c.text("model_type")
    if "kv_lora_rank" in cfg and model_type not in MLA_TYPES:
        raise c.fail(
            "kv_lora_rank",
            f"latent attention in model_type {model_type!r}: its layout is known for "
            f"{', '.join(MLA_TYPES)} only",
        )
    if model_type not in SHAPE_TYPES:
        raise c.fail(
            "model_type",
            f"cannot derive the parameter count of model_type {model_type!r} (known: "
            f"{', '.join(SHAPE_TYPES)}); give serving.model fields instead",
        )
    h = c.count("hidden_size")
    layers = c.count("num_hidden_layers")
    heads = c.count("num_attention_heads")
    vocab = c.count("vocab_size")
    kv_heads = c.count("num_key_value_heads", default=heads)
    dims: dict[str, int] = {"heads": heads, "kv_heads": kv_heads}
    mla: dict[str, int] = {}
    if model_type in MLA_TYPES:
        if not c.has("kv_lora_rank"):
            raise c.fail("kv_lora_rank", f"model_type {model_type} needs kv_lora_rank")
        if not c.has("qk_rope_head_dim"):
            raise c.fail(
                "qk_rope_head_dim",
                "kv_lora_rank without qk_rope_head_dim: the latent cache is kv_lora_rank + "
                "qk_rope_head_dim per token and layer, config.json must give both",
            )
        dims |= {
            "r": c.count("kv_lora_rank"),
            "rope": c.count("qk_rope_head_dim"),
            "nope": c.count("qk_nope_head_dim"),
            "v": c.count("v_head_dim"),
            "q_lora": c.count("q_lora_rank", default=0),
        }
        mla = {
            "kv_lora_rank": dims["r"],
            "qk_rope_head_dim": dims["rope"],
            "qk_nope_head_dim": dims["nope"],
            "v_head_dim": dims["v"],
        }
        head_dim = dims["nope"] + dims["rope"]
    elif c.has("head_dim"):
        head_dim = c.count("head_dim")
    elif h % heads:
        raise c.fail("head_dim", f"no head_dim and hidden_size {h} is not a multiple of {heads}")
    else:
        head_dim = h // heads
    dims["head_dim"] = head_dim
    tied = c.flag("tie_word_embeddings", default=model_type == "gemma3_text")

    experts = per_token = 0
    moe = set()
    if model_type in _MOE or model_type in MLA_TYPES:
        experts = c.count("num_local_experts", "num_experts", "n_routed_experts")
        per_token = c.count("num_experts_per_tok", "experts_per_token")
        moe = _moe_layers(c, model_type, layers)
    tensors: list[_Tensor] = []
    for i in range(layers):
        tensors += _attention(c, model_type, i, h, dims)
        norms = 4 if model_type == "gemma3_text" else 2
        tensors.append(_Tensor("norms", f"model.layers.{i}.norms", norms * h, False))
        if i not in moe:
            tensors += _mlp("dense_mlp", f"model.layers.{i}.mlp", h, c.count("intermediate_size"))
            continue
        pre = f"model.layers.{i}.mlp"
        if model_type == "mixtral":
            inter = c.count("intermediate_size")
            tensors += [
                _Tensor("router", f"model.layers.{i}.block_sparse_moe.gate", h * experts, False)
            ]
            tensors += [
                _Tensor(
                    "experts",
                    f"model.layers.{i}.block_sparse_moe.experts.0.{w}",
                    experts * h * inter,
                )
                for w in ("w1", "w2", "w3")
            ]
        elif model_type == "gpt_oss":
            inter = c.count("intermediate_size")
            tensors += [
                _Tensor("router", f"{pre}.router", h * experts + experts, False),
                _Tensor("experts", f"{pre}.experts.gate_up_proj", experts * h * 2 * inter),
                _Tensor("experts", f"{pre}.experts.down_proj", experts * inter * h),
                _Tensor("experts", f"{pre}.experts.bias", experts * (2 * inter + h), False),
            ]
        else:
            inter = c.count("moe_intermediate_size")
            router = h * experts
            if model_type in MLA_TYPES and c.cfg.get("topk_method") == "noaux_tc":
                router += experts  # e_score_correction_bias
            tensors.append(_Tensor("router", f"{pre}.gate", router, False))
            tensors += _mlp("experts", f"{pre}.experts.0", h, inter, experts)
            if model_type in MLA_TYPES:
                shared = c.count("n_shared_experts", least=0, default=0)
                if shared:
                    tensors += _mlp("shared_experts", f"{pre}.shared_experts", h, inter * shared)
            elif model_type == "qwen2_moe":
                inter_s = c.count("shared_expert_intermediate_size")
                tensors += _mlp("shared_experts", f"{pre}.shared_expert", h, inter_s)
                tensors.append(_Tensor("shared_experts", f"{pre}.shared_expert_gate", h, False))
    tensors.append(_Tensor("norms", "model.norm", h, False))
    tensors.append(_Tensor("embedding", "model.embed_tokens", vocab * h, False))
    if not tied:
        tensors.append(_Tensor("lm_head", "lm_head", vocab * h, False))

    base = dtype or cfg.get("torch_dtype") or cfg.get("dtype")
    if base is None:
        raise c.fail("torch_dtype", "config.json has no torch_dtype (give dtype)")
    if not isinstance(base, str):
        raise c.fail("torch_dtype", f"{_shown(base)} is not text")
    base_bytes = bytes_of(base, f"{field}.torch_dtype")
    quant = None if dtype is not None else _read_quant(c)
    params = dict.fromkeys(PARTS, 0.0)
    weight = dict.fromkeys(PARTS, 0.0)
    for t in tensors:
        b = quant.bytes_of(t.module, t.part) if quant is not None and t.quantisable else None
        params[t.part] += t.params
        weight[t.part] += t.params * (base_bytes if b is None else b)
    total = sum(params.values())
    expert_total = params["experts"]
    active = total - expert_total * (1 - per_token / experts) if experts else total
    return {
        "params": float(total),
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "dtype": quant.dtype if quant is not None else base,
        "kv_dtype": kv_dtype or (quant.kv_dtype if quant is not None else None) or base,
        "active_params": float(active),
        "experts": experts,
        "experts_per_token": per_token,
        "expert_params": float(expert_total),
        "embedding_params": 0.0 if tied else float(params["embedding"]),
        "windows": _windows(c, model_type, layers),
        "parts": tuple((p, params[p], weight[p]) for p in PARTS if params[p]),
        **mla,
    }
