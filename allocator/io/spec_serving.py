"""The problem file's ``serving`` section (docs/design.md §5, §8): step-time tables, the
component model, memory, the scheduler, prefill, hardware, the roofline and the calibrated
domain, and a model's architecture (a drafter's too). :mod:`allocator.io.spec` re-exports
every name here; import them from there."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ..core.hardware import GPUS
from ..core.serving import MAX_BATCHED_TOKENS, MAX_KV_TOKENS, MAX_NUM_SEQS
from .spec_errors import FieldError
from .spec_types import BatchKey, BatchSize, CountKey, Frozen, NonNegative, Positive, StepMs


class ArchitectureSpec(Frozen):
    """A model's architecture, for the roofline step time (docs/design.md §8.12): a Hugging
    Face ``config`` (path to its ``config.json``, relative to the problem file) or the
    fields; parameter counts in billions, ``dtype``/``kv_dtype`` as ``bf16``, ``fp8``, ..."""

    config: Annotated[str, Field(min_length=1)] | None = None
    params_b: Positive | None = None
    layers: Annotated[int, Field(ge=1)] | None = None
    hidden: Annotated[int, Field(ge=1)] | None = None
    heads: Annotated[int, Field(ge=1)] | None = None
    kv_heads: Annotated[int, Field(ge=1)] | None = None
    head_dim: Annotated[int, Field(ge=1)] | None = None
    dtype: Annotated[str, Field(min_length=1)] | None = None
    kv_dtype: Annotated[str, Field(min_length=1)] | None = None
    active_params_b: Positive | None = None
    experts: Annotated[int, Field(ge=0)] = 0
    experts_per_token: Annotated[int, Field(ge=0)] = 0
    expert_params_b: Positive | None = None
    embedding_params_b: NonNegative = 0.0

    @model_validator(mode="after")
    def _one_form(self) -> ArchitectureSpec:
        core = ("params_b", "layers", "hidden", "heads", "kv_heads")
        given = [f for f in core if getattr(self, f) is not None]
        if self.config is not None:
            if given:
                raise ValueError(f"give config or the fields, not both ({given[0]} with config)")
            return self
        missing = [f for f in core if getattr(self, f) is None]
        if missing:
            raise ValueError(f"missing {missing[0]} (or give config: a config.json path)")
        return self


class StepTable(Frozen):
    """Measured wall time of one decoding step (draft + verify) of one configuration, ms.

    ``drafters``: the configuration measured (exact set); ``by_batch``: ``{batch: {k: ms}}``,
    where ``k = 0`` is decoding without speculation (required at every batch size).
    Between measured ``k`` at one batch size the time is linear in ``k``; between
    measured batch sizes linear in the batch; nothing is extrapolated.
    """

    drafters: Annotated[list[str], Field(min_length=1)]
    by_batch: Annotated[
        dict[BatchKey, Annotated[dict[CountKey, StepMs], Field(min_length=1)]],
        Field(min_length=1),
    ]

    def batch_range(self) -> tuple[int, int]:
        """Smallest and largest measured batch size."""
        return min(self.by_batch), max(self.by_batch)


class VerifyTable(Frozen):
    """Component model: the verifier's forward pass, ms, by batch size and by verified
    tokens per sequence (``tokens = 1`` is a plain decoding step; a chain of ``k``
    drafted tokens from ``m`` drafters verifies ``m * k + 1``). ``ms[i][j]`` is at
    ``batch[i]``, ``tokens[j]``; bilinear between them, never outside."""

    batch: Annotated[list[BatchSize], Field(min_length=1)]
    tokens: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    ms: Annotated[list[list[StepMs]], Field(min_length=1)]

    def batch_range(self) -> tuple[int, int]:
        """Smallest and largest modelled batch size."""
        return self.batch[0], self.batch[-1]


class MemorySpec(Frozen):
    """What caps the batch of one replica: KV-cache memory with no drafter hosted, and
    one sequence's KV footprint at the traffic's context length (both GB)."""

    kv_cache_gb: Positive
    kv_per_seq_gb: Positive


class SchedulerSpec(Frozen):
    """The serving engine's scheduler, as vLLM names its settings (vLLM 0.33.0,
    vllm/config/scheduler.py), for the request-level simulator.

    ``max_num_seqs``: most requests running at once; ``max_num_batched_tokens``: most
    tokens one step processes (prefill chunks plus every decoding sequence's 1 + k);
    ``kv_cache_tokens``: tokens the KV cache holds (vLLM's start-up line ``GPU KV cache
    size: N tokens``; without it, from ``serving.memory``); ``block_size``: tokens per KV
    block (vLLM's default 16); ``async_scheduling``: each step scheduled while the one
    before it runs (vLLM's ``--async-scheduling``, on by default in vLLM 0.33.0,
    ``vllm/config/vllm.py``; false: the synchronous scheduler); ``enable_prefix_caching``:
    vLLM's automatic prefix caching (on by default, as in vLLM 0.33.0:
    ``vllm/config/cache.py``).
    """

    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_NUM_SEQS)]
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=MAX_BATCHED_TOKENS)]
    kv_cache_tokens: Annotated[int, Field(ge=1, le=MAX_KV_TOKENS)] | None = None
    block_size: Annotated[int, Field(ge=1, le=4096)] = 16
    async_scheduling: bool = True
    enable_prefix_caching: bool = True

    @model_validator(mode="after")
    def _budget_holds_the_batch(self) -> SchedulerSpec:
        # vLLM refuses it at start-up: vllm/config/scheduler.py (0.33.0) lines 331-336
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise FieldError(
                "serving.scheduler.max_num_batched_tokens",
                f"must be >= max_num_seqs ({self.max_num_seqs}), as vLLM requires",
            )
        return self


class PrefillTable(Frozen):
    """Measured wall time of prefilling ``tokens[i]`` prompt tokens in one step, ms
    (``ms[i]``): linear between measured points, the first point's time below it (a
    prefill chunk costs at least that pass), nothing past the last point."""

    tokens: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    ms: Annotated[list[Positive], Field(min_length=1)]

    @model_validator(mode="after")
    def _shape(self) -> PrefillTable:
        if len(self.tokens) != len(self.ms):
            raise FieldError("serving.prefill_ms.ms", "needs one value per entry of tokens")
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:], strict=False)):
            raise FieldError("serving.prefill_ms.tokens", "must be strictly increasing")
        return self


class HardwareSpec(Frozen):
    """The replica's accelerators: ``gpu`` from the bundled table, ``count`` of them under
    tensor parallelism over ``interconnect`` (default the GPU's link; core/interconnect.py).
    ``pp``: not modelled, only 1 accepted. ``ep``: expert parallelism, 1 or ``count``
    (vLLM's ``--enable-expert-parallel`` with one data-parallel rank: a mixture of experts'
    experts spread whole over the ``count`` GPUs, attention tensor-parallel; a dense
    model is refused) (:class:`allocator.core.hardware.Hardware`)."""

    gpu: Annotated[str, Field(min_length=1)]
    count: Annotated[int, Field(ge=1)] = 1
    interconnect: Annotated[str, Field(min_length=1)] | None = None
    pp: Annotated[int, Field(ge=1)] = 1
    ep: Annotated[
        int,
        Field(
            ge=1,
            description="Expert-parallel degree: 1, or count (vLLM's --enable-expert-parallel "
            "with one data-parallel rank: a mixture of experts' routed experts spread whole "
            "over the count GPUs, attention tensor-parallel). Other values and a dense "
            "model are refused.",
        ),
    ] = 1

    @field_validator("gpu")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in GPUS:
            raise ValueError(f"unknown GPU {value!r} (known: {', '.join(sorted(GPUS))})")
        return value


class DraftFactors(Frozen):
    """One drafter's fitted pass times in the roofline (docs/design.md §8.12): ms per
    drafting pass (``fixed_ms``) and per decoding sequence per pass (``seq_ms``), beside
    the bandwidth and arithmetic of its ``architecture`` where it has one (without one its
    pass is ``fixed_ms + seq_ms · b``, at every batch size)."""

    fixed_ms: NonNegative = 0.0
    seq_ms: NonNegative = 0.0


#: A share of a peak rate reached, in (0, 1]; omitted (``None``): the GPU's default.
Share = Annotated[
    float,
    Field(
        gt=0.0,
        le=1.0,
        description="Share of peak reached, in (0, 1]. Default: the GPU's fitted default "
        "(allocator.core.defaults.default_factors), the peak itself for a GPU without one.",
    ),
]


class RooflineSpec(Frozen):
    """The roofline's fitted factors (docs/design.md §8.12): the share of peak bandwidth
    (``mem_eff``), throughput reached by decoding tokens (``compute_eff``) and by prefill
    tokens (``prefill_eff``) and of the link (``comm_eff``), each omitted for the GPU's
    default (:func:`allocator.core.defaults.default_factors`), ms per pass
    (``fixed_ms``), per decoding sequence per pass (``seq_ms``) and per speculative step
    (``overhead_ms``), how memory and compute combine (``form``: ``max`` or ``pnorm`` with
    exponent ``p``), whether the KV write of processed tokens is counted, and each
    drafter's pass times (``drafters``: name → ``fixed_ms``, ``seq_ms``; a drafter listed
    here drafts by the roofline, not by its measured ``draft_ms``)."""

    form: Literal["max", "pnorm"] = "max"
    p: Annotated[float, Field(ge=1.0, le=64.0)] = 8.0
    mem_eff: Share | None = None
    compute_eff: Share | None = None
    prefill_eff: Share | None = None
    comm_eff: Share | None = None
    fixed_ms: NonNegative = 0.0
    seq_ms: NonNegative = 0.0
    overhead_ms: NonNegative = 0.0
    kv_write: bool = True
    drafters: dict[Annotated[str, Field(min_length=1)], DraftFactors] = {}


Range = Annotated[
    list[Annotated[float, Field(ge=0.0, allow_inf_nan=False)]], Field(min_length=2, max_length=2)
]


class CalibratedFrom(Frozen):
    """The measured domain behind a calibrated ``serving`` section (written by
    ``allocator calibrate``): ``[lo, hi]`` of batch size, ``k`` and context tokens over the
    fitted rows, the batch sizes and ``k`` of the speculative rows among them
    (``speculative_batch``, ``speculative_k``), and how many rows. Commands note when they
    plan outside it."""

    batch: Range
    k: Range
    context: Range | None = None
    speculative_batch: Range | None = None
    speculative_k: Range | None = None
    rows: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _ordered(self) -> CalibratedFrom:
        for key in ("batch", "k", "context", "speculative_batch", "speculative_k"):
            r = getattr(self, key)
            if r is not None and r[0] > r[1]:
                raise FieldError(
                    f"serving.calibrated_from.{key}", f"[{r[0]:g}, {r[1]:g}] is reversed"
                )
        return self


class ServingSpec(Frozen):
    """Serving under load: batch sizes to plan for, price, and step times (measured
    tables, a component model, or the roofline from ``hardware`` and ``model``).

    ``ttft_overhead_ms``: ms each request spends outside the engine's steps (API server,
    tokenisation, detokenisation, streaming), added to its time to first token and its
    end-to-end latency by the request-level simulator; omitted: the GPU's default
    (:func:`allocator.core.defaults.default_factors`) with the roofline, else 0 (a
    measured table or component model gives no GPU to take a default of, and its times
    are measured at the engine).

    ``gpu_cost_per_hour``: $/h of one replica, the deployment the step times are of (gives
    ``cost_per_mtok``); ``gpus_per_replica``: the GPUs it takes (default
    ``hardware.count``, else 1). ``overhead_ms``: added to every speculative step
    (``k > 0``) of the component model. ``scheduler`` and ``prefill_ms``: the engine's
    scheduler and its prefill time, for the request-level simulator (``bench``, capacity
    for a request rate). ``calibrated_from``: the measured domain of a calibrated file.
    """

    batch_sizes: Annotated[list[BatchSize], Field(min_length=1)]
    gpu_cost_per_hour: Positive | None = None
    gpus_per_replica: Annotated[int, Field(ge=1)] | None = None
    step_ms: list[StepTable] = []
    verify_ms: VerifyTable | None = None
    overhead_ms: NonNegative = 0.0
    ttft_overhead_ms: (
        Annotated[
            float,
            Field(
                ge=0.0,
                allow_inf_nan=False,
                description="ms per request outside the engine's steps, added to TTFT and "
                "E2EL. Default: the GPU's fitted default with serving.hardware and "
                "serving.model (allocator.core.defaults.default_factors), else 0.",
            ),
        ]
        | None
    ) = None
    memory: MemorySpec | None = None
    scheduler: SchedulerSpec | None = None
    prefill_ms: PrefillTable | None = None
    hardware: HardwareSpec | None = None
    model: ArchitectureSpec | None = None
    roofline: RooflineSpec | None = None
    calibrated_from: CalibratedFrom | None = None

    @model_validator(mode="after")
    def _tables(self) -> ServingSpec:
        f = "serving"
        if (self.hardware is None) != (self.model is None):
            given, other = ("hardware", "model") if self.model is None else ("model", "hardware")
            raise FieldError(f"{f}.{other}", f"the roofline step time needs {other} beside {given}")
        if self.roofline is not None and self.model is None:
            raise FieldError(f"{f}.roofline", "needs serving.hardware and serving.model")
        if not self.step_ms and self.verify_ms is None and self.model is None:
            raise FieldError(
                f,
                "give step times: measured step_ms tables, a verify_ms component model, or "
                "hardware and model (the roofline)",
            )
        if (
            self.hardware is not None
            and self.gpus_per_replica is not None
            and self.gpus_per_replica < self.hardware.count
        ):
            raise FieldError(
                f"{f}.gpus_per_replica",
                f"{self.gpus_per_replica} is fewer than serving.hardware.count "
                f"({self.hardware.count} GPUs under tensor parallelism)",
            )
        if any(b <= a for a, b in zip(self.batch_sizes, self.batch_sizes[1:], strict=False)):
            raise FieldError(f"{f}.batch_sizes", "must be strictly increasing")
        seen: set[frozenset[str]] = set()
        for i, t in enumerate(self.step_ms):
            if len(set(t.drafters)) != len(t.drafters):
                raise FieldError(f"{f}.step_ms.{i}.drafters", "a drafter is named twice")
            key = frozenset(t.drafters)
            if key in seen:
                raise FieldError(
                    f"{f}.step_ms.{i}.drafters", "the same drafters are measured in two tables"
                )
            seen.add(key)
            for b, by_k in t.by_batch.items():
                if 0 not in by_k:
                    raise FieldError(
                        f"{f}.step_ms.{i}.by_batch.{b}",
                        "no k = 0 entry: decoding without speculation is the baseline and "
                        "is required at every batch size",
                    )
        v = self.verify_ms
        if v is not None:
            g = f"{f}.verify_ms"
            if any(b <= a for a, b in zip(v.batch, v.batch[1:], strict=False)):
                raise FieldError(f"{g}.batch", "must be strictly increasing")
            if any(b <= a for a, b in zip(v.tokens, v.tokens[1:], strict=False)):
                raise FieldError(f"{g}.tokens", "must be strictly increasing")
            if v.tokens[0] != 1:
                raise FieldError(
                    f"{g}.tokens", "must include 1 (a plain decoding step, the k = 0 baseline)"
                )
            if len(v.ms) != len(v.batch):
                raise FieldError(f"{g}.ms", f"{len(v.ms)} rows for {len(v.batch)} batch sizes")
            for i, row in enumerate(v.ms):
                if len(row) != len(v.tokens):
                    raise FieldError(
                        f"{g}.ms.{i}", f"{len(row)} values for {len(v.tokens)} token counts"
                    )
        # a planned batch size outside every measured range is refused by the commands that
        # plan at serving.batch_sizes (schedule), not here: capacity and bench never read
        # them, and a file is not refused for a batch size a command does not use
        return self


__all__ = [
    "ArchitectureSpec",
    "CalibratedFrom",
    "DraftFactors",
    "HardwareSpec",
    "MemorySpec",
    "PrefillTable",
    "Range",
    "RooflineSpec",
    "SchedulerSpec",
    "Share",
    "ServingSpec",
    "StepTable",
    "VerifyTable",
]
