"""The ``serving`` section as numpy arrays: step-time tables, the component model's
tables, batch sizes and price (docs/design.md §8.1–§8.2). The rules that read them are
in :mod:`allocator.model.under_load`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .hardware import Hardware
from .model_spec import ModelSpec


@dataclass(frozen=True, eq=False)
class StepTableArrays:
    """One measured ``step_ms`` table.

    members : ``(N,)`` bool, the configuration measured.
    batch : ``(Bt,)`` float, measured batch sizes ascending.
    k : ``(Kt,)`` float, every ``k`` measured at some batch size, ascending (includes 0).
    ms : ``(Bt, Kt)`` float, step wall time in ms; NaN where ``k`` was not measured at
        that batch size.
    """

    members: np.ndarray
    batch: np.ndarray
    k: np.ndarray
    ms: np.ndarray


#: The largest ``k`` a roofline step time is given for (it has no measured range).
ROOFLINE_K_LIMIT = 64
#: Most sequences one replica may run at once (serving.scheduler.max_num_seqs; engines
#: default to 256-1024), most tokens one step may schedule (max_num_batched_tokens: the
#: simulator keeps a prefill time per token up to it), most tokens a KV cache may hold.
MAX_NUM_SEQS = 65_536
MAX_BATCHED_TOKENS = 1_048_576
MAX_KV_TOKENS = 10**10


@dataclass(frozen=True)
class SchedulerLimits:
    """The engine scheduler's limits (``serving.scheduler``; vLLM's names): most running
    requests, most tokens per step, KV-cache capacity in tokens (``None``: from
    ``serving.memory``), tokens per KV block, whether steps are scheduled asynchronously
    (vLLM's default) and whether prefix caching is on (vLLM's default)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int | None = None
    block_size: int = 16
    async_scheduling: bool = True
    enable_prefix_caching: bool = True


@dataclass(frozen=True, eq=False)
class Serving:
    """The ``serving`` section as numpy arrays (built by
    :func:`allocator.io.build.serving_from_spec`, never changed).

    batch_sizes : ``(S,)`` int, the batch sizes to plan for.
    gpu_cost_per_hour : $/h of one replica, NaN without a price.
    tables : measured step tables.
    verify_batch, verify_tokens : ``(Vb,)``, ``(Vt,)`` float axes of the component
        model (empty without ``verify_ms``); verify_ms : ``(Vb, Vt)`` ms.
    draft_batch, draft_ms : per drafter ``(D_i,)`` float batch sizes and ms per drafted
        token (empty arrays for a drafter without ``draft_ms``).
    overhead_ms : ms added to every speculative step of the component model.
    drafting : ``"sequential"`` (member draft times add) or ``"parallel"`` (max).
    gpus_per_replica : GPUs one replica takes (its price is ``gpu_cost_per_hour``).
    scheduler : the engine's scheduler limits, or ``None``.
    prefill_tokens, prefill_ms : ``(P,)`` the measured prefill table (empty without one).
    hardware, model : the replica's accelerators and the verifier's architecture (the
        roofline step time), or ``None``; drafter_models : per drafter its architecture
        or ``None``; roofline : the roofline's fitted factors (``serving.roofline``).
    calibrated_from : the measured domain of a calibrated file, ``{"batch": (lo, hi),
        "k": (lo, hi), "context": (lo, hi) or None, "speculative_batch": (lo, hi) or None,
        "rows": n}``, or ``None``.
    drafter_memory_gb : per drafter its ``memory_gb`` (0 without), for the memory cap from
        the specs when the file gives no ``serving.memory``.
    """

    batch_sizes: np.ndarray
    gpu_cost_per_hour: float
    tables: tuple[StepTableArrays, ...]
    verify_batch: np.ndarray
    verify_tokens: np.ndarray
    verify_ms: np.ndarray
    draft_batch: tuple[np.ndarray, ...]
    draft_ms: tuple[np.ndarray, ...]
    overhead_ms: float
    drafting: str
    gpus_per_replica: int = 1
    scheduler: SchedulerLimits | None = None
    prefill_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hardware: Hardware | None = None
    model: ModelSpec | None = None
    drafter_models: tuple[ModelSpec | None, ...] = ()
    roofline: Mapping[str, Any] = field(default_factory=dict)
    calibrated_from: Mapping[str, Any] | None = None
    drafter_memory_gb: tuple[float, ...] = ()

    @property
    def has_roofline(self) -> bool:
        """The step time can come from the roofline (``hardware`` and ``model`` given)."""
        return self.hardware is not None and self.model is not None

    @property
    def has_component_model(self) -> bool:
        return self.verify_tokens.size > 0

    @property
    def k_limit(self) -> int:
        """The largest ``k`` any table measures or the component model reaches (``m = 1``)."""
        ks = [int(t.k[-1]) for t in self.tables]
        if self.has_component_model:
            ks.append(int(self.verify_tokens[-1] - 1))
        if self.has_roofline:
            ks.append(ROOFLINE_K_LIMIT)
        return max(ks, default=0)


__all__ = [
    "MAX_BATCHED_TOKENS",
    "MAX_KV_TOKENS",
    "MAX_NUM_SEQS",
    "ROOFLINE_K_LIMIT",
    "SchedulerLimits",
    "Serving",
    "StepTableArrays",
]
