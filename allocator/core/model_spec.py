"""A transformer's architecture as the step-time model needs it, and the memory cap.

:class:`ModelSpec` is the verifier's (or a draft model's) shape: parameter counts,
layers, attention heads, dtypes and, for a mixture of experts, the experts. It is built
from the problem file's fields (:meth:`ModelSpec.from_fields`) or from a Hugging Face
``config.json`` (:meth:`ModelSpec.from_hf_config`).

**Parameter count from a config.** Derived for the architectures whose layout is known
here: dense Llama / Mistral / Qwen2 / Qwen3 decoders (grouped-query attention, SwiGLU
MLP, RMSNorm) and their mixture-of-experts forms Mixtral, Qwen2-MoE and Qwen3-MoE. With
``h`` the hidden size, ``H``/``K`` query/KV heads of ``d`` dims, ``V`` the vocabulary:

    attention   = h·H·d + 2·h·K·d + H·d·h          (q, k, v, o; + (H + 2K)·d biases for Qwen2,
                                                    + 2·d for Qwen3's q/k norms)
    dense MLP   = 3·h·I                             (gate, up, down; I = intermediate_size)
    MoE layer   = E·3·h·I_e + h·E                   (E experts of I_e, the router)
                  [+ 3·h·I_s + h for Qwen2-MoE's shared expert and its gate]
    per layer   = attention + MLP + 2·h             (two RMSNorms)
    total       = L·per layer + h + V·h·(1 if tied else 2)

and the active parameters per token replace ``E·3·h·I_e`` by ``k_e·3·h·I_e``. Any other
``model_type``, or a config without a field these need, is an :class:`InputError` naming
the field. A config with this year's shapes (multi-head latent attention, sliding-window
layers, weights quantised by component, DeepSeek's shared experts and first dense layers,
GPT-OSS) is read by :mod:`allocator.core.model_shapes` instead, which keeps the weights'
bytes by component (:attr:`ModelSpec.parts`).

**KV cache** per token: ``2 · layers · kv_heads · head_dim · bytes(kv_dtype)`` bytes, or
``layers · (kv_lora_rank + qk_rope_head_dim) · bytes(kv_dtype)`` for latent attention; a
sequence of ``C`` tokens holds ``min(C, window)`` of them on a sliding-window layer.

**Bytes read per step.** A decoding step reads every weight except the input embedding
table (only the rows of the step's tokens): ``dense_read_bytes`` is that, less the routed
experts; each routed expert (over all its layers) is ``expert_bytes`` (both by component
when :attr:`ModelSpec.parts` gives the bytes). FLOPs per token are ``2 · (active params −
embedding params)``; attention adds ``4 · layers · heads · head_dim`` FLOPs per (query
token × cached token) (latent attention: :attr:`ModelSpec.attention_flops_per_context`).

**Memory cap** (:func:`max_batch`): with ``M`` the replica's memory, ``u`` the fraction the
engine may use, ``W`` the weights and ``W_d`` the hosted drafters' weights,

    max_batch(C) = ⌊(M · u − W − W_d) / (kv_bytes_per_token · C)⌋

sequences of ``C`` cached tokens each (a hosted draft model's own KV per token is added
to the denominator).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..exceptions import InputError
from .model_shapes import needs_shapes, read_shapes

if TYPE_CHECKING:
    from .hardware import Hardware

__all__ = ["DTYPE_BYTES", "UTILISATION", "ModelSpec", "compute_dtype", "dtype_bytes", "max_batch"]

#: Bytes per value of each dtype name accepted (config.json spellings included).
DTYPE_BYTES: Mapping[str, float] = {
    "float32": 4.0,
    "fp32": 4.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "fp8": 1.0,
    "float8": 1.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    # 4-bit floats with their scales: MXFP4 an 8-bit scale per 32 values, NVFP4 an fp8
    # scale per 16 (allocator/core/model_shapes.py)
    "mxfp4": 0.53125,
    "nvfp4": 0.5625,
}

_CANONICAL = {
    "float32": "fp32",
    "fp32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "int8": "int8",
    "int4": "int4",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
}

_DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")


def _canonical(dtype: str, field_name: str) -> str:
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in _CANONICAL:
        raise InputError(
            field_name, f"unknown dtype {dtype!r} (known: {', '.join(sorted(DTYPE_BYTES))})"
        )
    return _CANONICAL[key]


def dtype_bytes(dtype: str, field_name: str = "serving.model.dtype") -> float:
    """Bytes per value of ``dtype``; :class:`InputError` on ``field_name`` if unknown."""
    return DTYPE_BYTES[_canonical(dtype, field_name)]


def compute_dtype(dtype: str, field_name: str = "serving.model.dtype") -> str:
    """The tensor-core dtype a model stored in ``dtype`` computes in: ``bf16``/``fp16``
    as stored, ``fp8`` and ``int8`` as stored (weights and activations quantised),
    ``int4`` in ``bf16`` (weight-only), and so ``mxfp4``/``nvfp4`` (the GPU table gives
    no fp4 figure: on a GPU with fp4 tensor cores an upper bound on the arithmetic's
    time). ``fp32`` has no tensor figure: refused."""
    d = _canonical(dtype, field_name)
    if d == "fp32":
        raise InputError(field_name, "fp32 has no tensor-core throughput in the hardware table")
    return "bf16" if d in ("int4", "mxfp4", "nvfp4") else d


def _shown(value: Any) -> str:
    """A config.json value for a message: short, control characters escaped."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), (str, "text"), (int, "a number"), (float, "a number"),
             (list, "a list"), (dict, "an object"))  # fmt: skip
    if value is None:
        return "null"
    return next((k for t, k in kinds if isinstance(value, t)), type(value).__name__)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder's architecture (counts are parameters, not billions).

    params : total parameters. active_params : parameters used per token (``params`` for a
    dense model). layers, hidden, heads, kv_heads, head_dim : the attention shape.
    dtype, kv_dtype : weight and KV-cache dtypes (:data:`DTYPE_BYTES` names).
    experts, experts_per_token : routed experts ``E`` and experts per token ``k_e`` (0, 0:
    dense). expert_params : parameters of all routed experts of all layers together.
    embedding_params : the input embedding table (not read by a step; 0 when unknown or
    tied to the output layer). name : for messages.
    kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim : multi-head latent
    attention's dimensions (all 0: per-head K and V). windows : each layer's sliding
    window in tokens, 0 for full attention (empty: every layer full). parts : ``(component,
    parameters, bytes)`` of the weights by component (empty: every weight in ``dtype``).
    """

    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bf16"
    kv_dtype: str = ""
    active_params: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0
    embedding_params: float = 0.0
    name: str = ""
    field: str = "serving.model"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    windows: tuple[int, ...] = ()
    parts: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self) -> None:
        f = self.field
        dtype = _canonical(self.dtype, f"{f}.dtype")
        object.__setattr__(self, "dtype", dtype)
        kv = _canonical(self.kv_dtype or dtype, f"{f}.kv_dtype")
        object.__setattr__(self, "kv_dtype", kv)
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim"):
            v = getattr(self, key)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise InputError(f"{f}.{key}", f"{v!r} is not a whole number >= 1")
            object.__setattr__(self, key, int(v))
        if not math.isfinite(self.params) or self.params <= 0:
            raise InputError(f"{f}.params_b", f"{self.params!r} parameters: must be > 0")
        if self.kv_heads > self.heads:
            raise InputError(f"{f}.kv_heads", f"{self.kv_heads} KV heads exceed {self.heads} heads")
        e, k = int(self.experts), int(self.experts_per_token)
        if e < 0 or k < 0 or (e == 0) != (k == 0) or k > e:
            raise InputError(
                f"{f}.experts_per_token",
                f"experts {e}, experts_per_token {k}: need 1 <= experts_per_token <= experts "
                "(both 0 for a dense model)",
            )
        object.__setattr__(self, "experts", e)
        object.__setattr__(self, "experts_per_token", k)
        if e == 0:
            if self.expert_params:
                raise InputError(f"{f}.experts", "expert parameters given for a dense model")
            if not self.active_params:
                object.__setattr__(self, "active_params", float(self.params))
        if not self.active_params:
            # active = params - X + X·k/E, X the routed-expert parameters
            object.__setattr__(
                self, "active_params", float(self.params - self.expert_params * (1 - k / e))
            )
        if e and not self.expert_params:
            # X from the active count: X = (params - active) / (1 - k/E)
            if k == e:
                raise InputError(f"{f}.expert_params_b", "needed when every expert is active")
            object.__setattr__(
                self, "expert_params", float((self.params - self.active_params) / (1 - k / e))
            )
        if not 0 < self.active_params <= self.params * (1 + 1e-12):
            raise InputError(
                f"{f}.active_params_b",
                f"{self.active_params:g} active parameters for {self.params:g} in total",
            )
        self._check_shapes()
        if not 0 <= self.expert_params <= self.params or not (
            0 <= self.embedding_params < self.params - self.expert_params
        ):
            raise InputError(
                f"{f}.params_b",
                "expert and embedding parameters do not fit in the total "
                f"({self.expert_params:g} + {self.embedding_params:g} of {self.params:g})",
            )

    def _check_shapes(self) -> None:
        f = self.field
        if bool(self.kv_lora_rank) != bool(self.qk_rope_head_dim):
            raise InputError(
                f"{f}.qk_rope_head_dim",
                f"kv_lora_rank {self.kv_lora_rank} with qk_rope_head_dim "
                f"{self.qk_rope_head_dim}: latent attention needs both",
            )
        mla = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        for key in mla:
            v = getattr(self, key)
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise InputError(f"{f}.{key}", f"{v!r} is not a whole number >= 0")
        windows = tuple(self.windows)
        if windows and (
            len(windows) != self.layers
            or any(isinstance(w, bool) or int(w) != w or w < 0 for w in windows)
        ):
            raise InputError(
                f"{f}.windows", f"needs {self.layers} whole numbers >= 0 (one a layer)"
            )
        object.__setattr__(self, "windows", tuple(int(w) for w in windows))
        if self.parts:
            got = sum(p for _, p, _ in self.parts)
            if not math.isclose(got, self.params, rel_tol=1e-9) or any(
                not (p >= 0 and b >= 0) for _, p, b in self.parts
            ):
                raise InputError(f"{f}.params_b", "weights by component do not add up")

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_fields(
        cls,
        *,
        params_b: float,
        layers: int,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int | None = None,
        dtype: str = "bf16",
        kv_dtype: str | None = None,
        active_params_b: float | None = None,
        experts: int = 0,
        experts_per_token: int = 0,
        expert_params_b: float | None = None,
        embedding_params_b: float = 0.0,
        name: str = "",
        field: str = "serving.model",
    ) -> ModelSpec:
        """From the problem file's ``serving.model`` fields (counts in billions).
        ``head_dim`` defaults to ``hidden / heads``; a mixture of experts needs
        ``active_params_b`` or ``expert_params_b``."""
        if head_dim is None:
            if hidden % heads:
                raise InputError(f"{field}.head_dim", f"hidden {hidden} is not a multiple of heads")
            head_dim = hidden // heads
        if experts and active_params_b is None and expert_params_b is None:
            raise InputError(
                f"{field}.active_params_b",
                "a mixture of experts needs active_params_b (or expert_params_b)",
            )
        return cls(
            params=float(params_b) * 1e9,
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            kv_dtype=kv_dtype or "",
            active_params=float(active_params_b or 0.0) * 1e9,
            experts=experts,
            experts_per_token=experts_per_token,
            expert_params=float(expert_params_b or 0.0) * 1e9,
            embedding_params=float(embedding_params_b) * 1e9,
            name=name,
            field=field,
        )

    @classmethod
    def from_hf_config(
        cls,
        config: Mapping[str, Any] | str | Path,
        *,
        name: str = "",
        field: str = "serving.model.config",
        dtype: str | None = None,
        kv_dtype: str | None = None,
    ) -> ModelSpec:
        """From a Hugging Face ``config.json`` (a path or its parsed mapping); the
        parameter count derived as the module docstring says. ``dtype``/``kv_dtype``
        override ``torch_dtype``."""
        if isinstance(config, (str, Path)):
            path = Path(config)
            try:
                cfg = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InputError(field, f"cannot read {path}: {type(exc).__name__}") from None
            if not isinstance(cfg, dict):
                raise InputError(field, f"{path} is not a JSON object")
            name = name or path.parent.name
        else:
            cfg = dict(config)
        outer = {k: v for k, v in cfg.items() if k != "text_config"}
        inner = cfg.get("text_config") or {}
        if not isinstance(inner, dict):
            raise InputError(f"{field}.text_config", "must be a JSON object")
        cfg = {**outer, **inner}
        if needs_shapes(cfg):
            shaped = read_shapes(
                cfg, field=field, dtype=dtype, kv_dtype=kv_dtype, bytes_of=dtype_bytes
            )
            named = cfg.get("_name_or_path")
            named = name or (named if isinstance(named, str) else "")
            return cls(**shaped, name=named, field=field)

        def need(key: str, *alts: str) -> Any:
            for k in (key, *alts):
                if cfg.get(k) is not None:
                    return cfg[k]
            names = " or ".join((key, *alts))
            raise InputError(f"{field}.{key}", f"config.json has no {names}")

        def whole(key: str, value: Any, least: int = 1) -> int:
            """A count of config.json: a whole number >= ``least`` (not text, not 32.5)."""
            ok = isinstance(value, int) and not isinstance(value, bool)
            ok = ok or (isinstance(value, float) and value.is_integer())
            if not ok or int(value) < least or int(value) > 10**12:
                raise InputError(
                    f"{field}.{key}",
                    f"{_shown(value)} is not a whole number in {least}..10**12"
                    + (" (a fraction is not rounded)" if isinstance(value, float) else ""),
                )
            return int(value)

        def count(key: str, *alts: str, least: int = 1) -> int:
            """A count config.json must give (:func:`need`), checked by :func:`whole`."""
            for k in (key, *alts):
                if cfg.get(k) is not None:
                    return whole(k, cfg[k], least)
            return whole(key, need(key, *alts), least)

        def text(key: str, value: Any) -> str:
            if not isinstance(value, str):
                raise InputError(f"{field}.{key}", f"{_shown(value)} is {_kind(value)}, not text")
            return value

        def flag(key: str) -> bool:
            value = cfg.get(key, False)
            if value is None:
                return False
            if not isinstance(value, bool):
                raise InputError(
                    f"{field}.{key}", f"{_shown(value)} is {_kind(value)}, not true or false"
                )
            return value

        model_type = text("model_type", need("model_type"))
        if model_type not in _DENSE_TYPES + _MOE_TYPES:
            raise InputError(
                f"{field}.model_type",
                f"cannot derive the parameter count of model_type {model_type!r} (known: "
                f"{', '.join(_DENSE_TYPES + _MOE_TYPES)}); give serving.model fields instead",
            )
        h = count("hidden_size")
        layers = count("num_hidden_layers")
        heads = count("num_attention_heads")
        given_kv = cfg.get("num_key_value_heads")
        kv_heads = heads if given_kv is None else whole("num_key_value_heads", given_kv)
        if cfg.get("head_dim") is not None:
            d = whole("head_dim", cfg["head_dim"])
        elif h % heads:
            raise InputError(
                f"{field}.head_dim",
                f"config.json has no head_dim and hidden_size {h} is not a multiple of "
                f"num_attention_heads {heads}",
            )
        else:
            d = h // heads
        vocab = count("vocab_size")
        tied = flag("tie_word_embeddings")
        torch_dtype = dtype or cfg.get("torch_dtype") or cfg.get("dtype")
        if torch_dtype is None:
            raise InputError(f"{field}.torch_dtype", "config.json has no torch_dtype (give dtype)")
        if dtype is None:
            text("torch_dtype" if cfg.get("torch_dtype") else "dtype", torch_dtype)
        quant = cfg.get("quantization_config")
        if quant is not None and not isinstance(quant, dict):
            raise InputError(
                f"{field}.quantization_config", f"{_shown(quant)} is {_kind(quant)}, not an object"
            )
        if quant and dtype is None:
            method = text("quantization_config.quant_method", quant.get("quant_method", ""))
            if method != "fp8":
                raise InputError(
                    f"{field}.quantization_config",
                    f"quant_method {method!r}: bytes per weight not derived; give dtype",
                )
            torch_dtype = "fp8"

        attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h
        if model_type.startswith("qwen2") or flag("attention_bias"):
            attn += (heads + 2 * kv_heads) * d
        if model_type.startswith("qwen3"):
            attn += 2 * d
        norms = 2 * h
        experts = k_e = 0
        expert_layer = dense_mlp = shared = 0
        moe_layers = 0
        if model_type in _MOE_TYPES:
            experts = count("num_local_experts", "num_experts")
            k_e = count("num_experts_per_tok")
            if model_type == "mixtral":
                i_e = count("intermediate_size")
                sparse = set(range(layers))
            else:
                i_e = count("moe_intermediate_size")
                step = 1
                if cfg.get("decoder_sparse_step") is not None:
                    step = whole("decoder_sparse_step", cfg["decoder_sparse_step"])
                only_layers = cfg.get("mlp_only_layers")
                if only_layers is None:
                    only_layers = []
                if not isinstance(only_layers, list):
                    raise InputError(
                        f"{field}.mlp_only_layers",
                        f"{_shown(only_layers)} is {_kind(only_layers)}, not a list of layers",
                    )
                only = {
                    whole(f"mlp_only_layers.{j}", v, least=0) for j, v in enumerate(only_layers)
                }
                sparse = {i for i in range(layers) if i not in only and (i + 1) % step == 0}
                if len(sparse) < layers:
                    dense_mlp = 3 * h * count("intermediate_size")
            if model_type == "qwen2_moe":
                i_s = count("shared_expert_intermediate_size")
                shared = 3 * h * i_s + h
            moe_layers = len(sparse)
            expert_layer = 3 * h * i_e
            router = h * experts
            per_moe_layer = attn + norms + router + shared + experts * expert_layer
            per_dense_layer = attn + norms + dense_mlp
            body = moe_layers * per_moe_layer + (layers - moe_layers) * per_dense_layer
        else:
            body = layers * (attn + norms + 3 * h * count("intermediate_size"))
        embed = vocab * h
        total = body + h + embed * (1 if tied else 2)
        expert_total = moe_layers * experts * expert_layer
        active = total - expert_total + moe_layers * k_e * expert_layer
        return cls(
            params=float(total),
            layers=layers,
            hidden=h,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=d,
            dtype=str(torch_dtype),
            kv_dtype=kv_dtype or "",
            active_params=float(active),
            experts=experts,
            experts_per_token=k_e,
            expert_params=float(expert_total),
            embedding_params=0.0 if tied else float(embed),
            name=name
            or (cfg["_name_or_path"] if isinstance(cfg.get("_name_or_path"), str) else ""),
            field=field,
        )

    def with_dtype(self, dtype: str | None = None, kv_dtype: str | None = None) -> ModelSpec:
        """The same architecture stored in another ``dtype`` (every weight in it) and/or
        ``kv_dtype``."""
        parts = self.parts
        if dtype is not None and parts:
            b = dtype_bytes(dtype, f"{self.field}.dtype")
            parts = tuple((n, p, p * b) for n, p, _ in parts)
        return replace(
            self,
            dtype=dtype or self.dtype,
            kv_dtype=kv_dtype or (self.kv_dtype if dtype is None else ""),
            parts=parts,
        )

    # ------------------------------------------------------------ derived figures
    @property
    def params_b(self) -> float:
        """Total parameters, billions."""
        return self.params / 1e9

    @property
    def bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.dtype]

    def part_bytes(self) -> dict[str, float]:
        """Bytes of the weights by component (:data:`model_shapes.PARTS`; ``{}`` when
        every weight is in ``dtype`` and no config said otherwise)."""
        return {n: b for n, _, b in self.parts}

    @property
    def weight_bytes(self) -> float:
        """Memory the weights take, bytes (every parameter; by component when known)."""
        if self.parts:
            return float(sum(b for _, _, b in self.parts))
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache per token over every layer, bytes (at a context within every window):
        ``2 · layers · kv_heads · head_dim · bytes(kv_dtype)``, or with latent attention
        ``layers · (kv_lora_rank + qk_rope_head_dim) · bytes(kv_dtype)``."""
        if self.kv_lora_rank:
            per_layer = self.kv_lora_rank + self.qk_rope_head_dim
            return float(self.layers * per_layer) * DTYPE_BYTES[self.kv_dtype]
        return 2.0 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[self.kv_dtype]

    @property
    def window_shares(self) -> tuple[tuple[int, float], ...]:
        """``(window, share of the layers)`` of each sliding window (``()``: none); every
        layer caches as much per token, so it is also their share of KV bytes and of
        attention arithmetic."""
        if not self.windows:
            return ()
        sizes = sorted({w for w in self.windows if w})
        return tuple((w, self.windows.count(w) / self.layers) for w in sizes)

    def attended(self, context: float) -> float:
        """Cached tokens a sequence of ``context`` tokens reads per layer, on average:
        ``context`` on full layers, ``min(context, window)`` on windowed ones (vLLM
        0.33.0's SlidingWindowManager frees the blocks before the window,
        ``vllm/v1/core/single_type_kv_cache_manager.py``, so this is also what it
        holds, within one block per layer)."""
        shares = self.window_shares
        if not shares:
            return context
        full = 1.0 - sum(s for _, s in shares)
        return context * full + sum(s * min(context, w) for w, s in shares)

    def kv_bytes_at(self, context: float) -> float:
        """KV bytes one sequence of ``context`` cached tokens holds (:meth:`attended`)."""
        return self.kv_bytes_per_token * self.attended(context)

    def tp_kv_factor(self, tp: int, field: str = "serving.hardware.count") -> float:
        """How many times a replica of ``tp`` GPUs under tensor parallelism stores each
        token's KV: the heads are split between the GPUs (``tp`` must divide the
        attention heads, vLLM 0.33.0 ``vllm/config/model.py``); KV heads fewer than the
        GPUs are replicated (``tp`` a multiple of them, ``tp / kv_heads`` copies, vLLM's
        ``qwen2.py``/``llama.py``); the latent cache of latent attention, one
        ``num_kv_heads = 1`` head, is on every GPU (``tp`` copies)."""
        if tp == 1:
            return 1.0
        name = self.name or self.field
        if self.heads % tp:
            raise InputError(
                field, f"tensor parallelism {tp} does not divide the {self.heads} heads of {name}"
            )
        if self.kv_lora_rank:
            return float(tp)
        k = self.kv_heads
        if (k >= tp and k % tp) or (k < tp and tp % k):
            raise InputError(
                field,
                f"tensor parallelism {tp} neither divides nor is a multiple of the {k} KV "
                f"heads of {name}",
            )
        return max(1.0, tp / k)

    @property
    def dense_read_bytes(self) -> float:
        """Bytes of non-expert weights a step reads (all but the input embedding), bytes."""
        if self.parts:
            b = self.part_bytes()
            skip = b.get("experts", 0.0) + (
                b.get("embedding", 0.0) if self.embedding_params else 0.0
            )
            return self.weight_bytes - skip
        return (self.params - self.expert_params - self.embedding_params) * self.bytes_per_param

    @property
    def expert_bytes(self) -> float:
        """Bytes of one routed expert over all its layers (0 for a dense model)."""
        if self.parts and self.experts:
            return self.part_bytes().get("experts", 0.0) / self.experts
        return self.expert_params / self.experts * self.bytes_per_param if self.experts else 0.0

    @property
    def flops_per_token(self) -> float:
        """Linear-layer FLOPs per token processed: ``2 · (active − embedding) params``."""
        return 2.0 * (self.active_params - self.embedding_params)

    @property
    def attention_flops_per_context(self) -> float:
        """Attention FLOPs per (query token × cached token): ``4 · layers · heads · head_dim``
        (QKᵀ and AV, a multiply-add each). Latent attention decodes in vLLM's
        data-movement form ("forward_mqa", ``mla_attention.py``): every head scores the
        ``kv_lora_rank + qk_rope_head_dim`` latent and sums ``kv_lora_rank`` values,
        ``2 · layers · heads · (2·kv_lora_rank + qk_rope_head_dim)``."""
        if self.kv_lora_rank:
            r, rope = self.kv_lora_rank, self.qk_rope_head_dim
            return 2.0 * self.layers * self.heads * (2 * r + rope)
        return 4.0 * self.layers * self.heads * self.head_dim

    @property
    def prefill_attention_ratio(self) -> float:
        """Prefill's attention FLOPs per pair over :attr:`attention_flops_per_context`: 1,
        but for latent attention, which vLLM prefills in the compute form ("forward_mha":
        keys of ``qk_nope_head_dim + qk_rope_head_dim``, values of ``v_head_dim`` per
        head), ``(nope + rope + v) / (2·kv_lora_rank + rope)``."""
        if not self.kv_lora_rank:
            return 1.0
        r, rope = self.kv_lora_rank, self.qk_rope_head_dim
        return (self.qk_nope_head_dim + rope + self.v_head_dim) / (2 * r + rope)

    @property
    def compute_dtype(self) -> str:
        """The tensor-core dtype it computes in (:func:`compute_dtype`)."""
        return compute_dtype(self.dtype, f"{self.field}.dtype")


#: vLLM's default share of GPU memory the engine takes (``gpu_memory_utilization``;
#: vLLM 0.33.0, vllm/config/cache.py: ``Field(default=0.92, gt=0, le=1)``).
UTILISATION = 0.92


def max_batch(
    hardware: Hardware,
    model: ModelSpec,
    context: float,
    *,
    utilisation: float = UTILISATION,
    drafters: Sequence[ModelSpec] = (),
) -> int:
    """Most sequences of ``context`` cached tokens one replica holds (module docstring).

    ``utilisation`` in ``(0, 1]``: the share of the replica's memory the engine may take
    (vLLM's ``gpu_memory_utilization``); ``drafters``: hosted draft models (their weights
    leave the KV cache, their KV per token adds to the verifier's). 0 when the weights
    leave no room for one sequence. A sequence holds :meth:`ModelSpec.kv_bytes_at` its
    context (sliding windows), times :meth:`ModelSpec.tp_kv_factor` on several GPUs.
    """
    if not 0 < utilisation <= 1:
        raise InputError("serving.memory.utilisation", f"{utilisation} is not in (0, 1]")
    if not math.isfinite(context) or context <= 0:
        raise InputError("context", f"{context} tokens: must be > 0")
    room = hardware.memory_bytes * utilisation - model.weight_bytes
    room -= sum(d.weight_bytes for d in drafters)
    tp = hardware.count
    models = (model, *drafters)
    if room <= 0:
        return 0
    if any(m.windows for m in models):
        per_seq = sum(m.kv_bytes_at(context) * m.tp_kv_factor(tp) for m in models)
        return int(math.floor(room / per_seq * (1 + 1e-12)))
    per_token = model.kv_bytes_per_token * model.tp_kv_factor(tp) + sum(
        d.kv_bytes_per_token * d.tp_kv_factor(tp) for d in drafters
    )
    return int(math.floor(room / (per_token * context) * (1 + 1e-12)))
