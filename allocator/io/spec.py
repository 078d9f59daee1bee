"""The problem file (docs/design.md §5): frozen pydantic models, read from YAML or JSON.

This module is the edge of the package: it validates what a user wrote and turns
pydantic's errors into one :class:`~allocator.exceptions.InputError` naming the
field. Everything inside the package works on :class:`allocator.core.problem.Problem`,
plain numpy arrays built from a :class:`ProblemSpec`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from ..core.memory import check_memory
from ..core.methods import METHOD_FIELDS, method_problem
from ..core.problem import MAX_K, SERVING_COST_METRICS
from ..core.serving import MAX_BATCHED_TOKENS, MAX_KV_TOKENS, MAX_NUM_SEQS
from ..exceptions import InputError
from .inputs import parse_document, read_input_text

CostMetric = Literal[
    "draft_cost_per_round", "draft_cost_per_token", "hosting_cost", "drafters", "cost_per_mtok"
]


def _number_text(v: float) -> str:
    """A number as a problem file would write it (``1.2``, ``-0.5``, ``1e-12``)."""
    return repr(v) if v != v or abs(v) == float("inf") else f"{v:g}"


def _in_open_closed_unit(v: float) -> float:
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{_number_text(v)} is outside (0, 1]")
    return v


def _in_closed_unit(v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{_number_text(v)} is outside [0, 1]")
    return v


#: A probability in (0, 1]; out of range it is refused naming the interval (a list's
#: element too: ``acceptance.1: 1.2 is outside (0, 1]``).
Probability = Annotated[
    float,
    AfterValidator(_in_open_closed_unit),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0}),
]
#: Most values in one acceptance list: ``k`` is at most ``MAX_K``, so a position past it
#: is never used (and a longer list would only cost memory).
MAX_POSITIONS = MAX_K
Acceptance = (
    Probability | Annotated[list[Probability], Field(min_length=1, max_length=MAX_POSITIONS)]
)
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
BatchSize = Annotated[int, Field(ge=1)]
# Mapping keys are strings in JSON: a key may be an integer written as a string.
BatchKey = Annotated[int, Field(ge=1, strict=False)]
CountKey = Annotated[int, Field(ge=0, strict=False)]

# What kind of drafter it is, as the serving engines name their speculative methods
# (allocator/core/methods.py holds the table; a test checks the two agree).
Method = Literal[
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
]


def rank_rows(value: list[float] | list[list[float]]) -> list[list[float]]:
    """``acceptance_by_rank`` as one row per depth (a flat list is one row for every depth)."""
    items: list = list(value)
    if items and isinstance(items[0], list):
        return [[float(x) for x in row] for row in items]
    return [[float(x) for x in items]]


def check_rank_acceptance(value: object) -> object:
    """Validate ``acceptance_by_rank``: ``[p1, p2, ...]`` or ``[[p1, ...], [p1, ...], ...]``
    (one row per depth, the last repeating), every value in (0, 1], rows of one length.
    Raises ``ValueError`` with a message naming the offending entry."""
    if value is None:
        return value
    if not isinstance(value, list) or not value:
        raise ValueError("give a non-empty list [p1, p2, ...] or one such list per depth")
    nested = [isinstance(v, list) for v in value]
    if any(nested) and not all(nested):
        raise ValueError(
            "mixes numbers and lists: give one list of ranks, or one list of ranks per depth"
        )
    rows = value if all(nested) else [value]
    width = len(rows[0])
    for d, row in enumerate(rows):
        where = f"depth {d + 1}, " if all(nested) else ""
        if not row:
            raise ValueError(f"{where}the list of ranks is empty")
        if len(row) != width:
            raise ValueError(
                f"depth {d + 1} gives {len(row)} ranks where depth 1 gives {width}: every "
                "depth needs the same number of ranks"
            )
        for r, p in enumerate(row):
            if isinstance(p, bool) or not isinstance(p, int | float):
                raise ValueError(f"{where}rank {r + 1}: {p!r} is not a number")
            if not 0.0 < float(p) <= 1.0:
                raise ValueError(f"{where}rank {r + 1}: {p} is outside (0, 1]")
    return value


class _Frozen(BaseModel):
    # strict: a boolean is not a number (``acceptance: true``) and a string is not one
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class PassCostCurve(_Frozen):
    """Measured cost of one verification pass against the number of verified tokens."""

    tokens: Annotated[list[Annotated[float, Field(ge=0, allow_inf_nan=False)]], Field(min_length=2)]
    cost: Annotated[list[NonNegative], Field(min_length=2)]

    @model_validator(mode="after")
    def _shape(self) -> PassCostCurve:
        if len(self.tokens) != len(self.cost):
            raise ValueError("tokens and cost must have the same length")
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:], strict=False)):
            raise ValueError("tokens must be strictly increasing")
        return self


class Verifier(_Frozen):
    """Cost of verification, in units of the verifier's per-unit cost."""

    pass_cost: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    token_cost: NonNegative = 0.0
    pass_cost_curve: PassCostCurve | None = None

    @model_validator(mode="after")
    def _one_cost_form(self) -> Verifier:
        if self.pass_cost_curve is not None:
            both = sorted({"pass_cost", "token_cost"} & self.model_fields_set)
            if both:
                raise _FieldError(
                    f"verifier.{both[0]}", "give either pass_cost/token_cost or pass_cost_curve"
                )
            if min(self.pass_cost_curve.cost) <= 0.0:
                raise _FieldError(
                    "verifier.pass_cost_curve.cost", "a verification pass must cost more than 0"
                )
        return self


Interval = Annotated[
    list[
        Annotated[
            float,
            AfterValidator(_in_closed_unit),
            WithJsonSchema({"type": "number", "minimum": 0.0, "maximum": 1.0}),
        ]
    ],
    Field(min_length=2, max_length=2),
]


class ArchitectureSpec(_Frozen):
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


class Drafter(_Frozen):
    """One draft model.

    ``acceptance``: per-unit acceptance, a scalar or a list by position (last repeats).
    ``unit_cost``: draft cost per unit, in units of the verifier's per-unit cost (optional:
    only the answers in verifier-units need it, and they refuse without it).
    ``hosting_cost``: what hosting it costs (memory, GPUs, $/h: any consistent unit).
    ``model``: the serving system's model name or path (for export).
    ``acceptance_interval``: a 95% interval for the acceptance (estimated statistics),
    ``[lo, hi]`` or one ``[lo, hi]`` per position.
    """

    name: Annotated[str, Field(min_length=1)]
    acceptance: Acceptance
    unit_cost: NonNegative | None = None
    hosting_cost: NonNegative = 0.0
    model: str | None = None
    acceptance_interval: (
        Interval | Annotated[list[Interval], Field(max_length=MAX_POSITIONS)] | None
    ) = None
    # how the engines serve it, and that method's own settings
    method: Method | None = None
    prompt_lookup_min: Annotated[int, Field(ge=1)] | None = None
    prompt_lookup_max: Annotated[int, Field(ge=1)] | None = None
    # token trees: acceptance of the rank-r candidate at a node given ranks < r rejected,
    # one list, or one list per depth (the last repeats); checked by _rank_shape below
    acceptance_by_rank: list[float] | list[list[float]] | None = None
    # 95% interval of each acceptance_by_rank value, the same shape with [lo, hi] leaves
    acceptance_by_rank_interval: list[Interval] | list[list[Interval]] | None = None
    # serving: wall time of one drafting step (one token per sequence), ms, by batch size
    draft_ms: Annotated[dict[BatchKey, Positive], Field(min_length=1)] | None = None
    # serving: accelerator memory hosting it takes from one replica's KV cache, GB
    memory_gb: NonNegative | None = None
    # serving: the draft model's architecture, for the roofline's drafting cost
    architecture: ArchitectureSpec | None = None

    @field_validator("acceptance_by_rank", mode="before")
    @classmethod
    def _rank_shape(cls, value: object) -> object:
        """One list of rank acceptances in (0, 1], or one such list per depth, every depth
        with the same number of ranks."""
        return check_rank_acceptance(value)

    @model_validator(mode="after")
    def _rank_interval_shape(self) -> Drafter:
        iv = self.acceptance_by_rank_interval
        if iv is None:
            return self
        if self.acceptance_by_rank is None:
            raise ValueError("acceptance_by_rank_interval needs acceptance_by_rank")
        rows = rank_rows(self.acceptance_by_rank)
        nested = bool(iv) and isinstance(iv[0][0], list)
        iv_rows = iv if nested else [iv]
        if len(iv_rows) != len(rows) or any(
            len(a) != len(b) for a, b in zip(iv_rows, rows, strict=True)
        ):
            raise ValueError(
                "acceptance_by_rank_interval needs one [lo, hi] per acceptance_by_rank value, "
                "in the same shape"
            )
        pairs: list[list[list[float]]] = iv_rows  # type: ignore[assignment]
        for d, row in enumerate(pairs):
            for r, (lo, hi) in enumerate(row):
                if hi <= lo:
                    where = f"depth {d + 1}, rank {r + 1}" if nested else f"rank {r + 1}"
                    raise _FieldError(
                        f"drafters[{self.name}].acceptance_by_rank_interval",
                        f"{where}: [{_number_text(lo)}, {_number_text(hi)}] needs lo < hi",
                    )
        return self


class ErrorsSpec(_Frozen):
    """Correlated drafter errors (docs/design.md §3); each model takes only its own fields.

    ``exchangeable``: one of ``correlation`` (latent, in [0, 1]) or ``error_correlation``
    (Pearson correlation of error indicators, in [0, 1]); ``factor``: ``loadings``
    ``{drafter: β}`` with ``-1 < β < 1``; ``gaussian``: ``matrix``, the latent
    correlation matrix in drafter order; ``empirical``: ``outcomes``, a CSV path
    relative to the problem file.
    """

    model: Literal["independent", "exchangeable", "factor", "gaussian", "empirical"] = "independent"
    correlation: float | None = None
    error_correlation: float | None = None
    loadings: dict[str, float] | None = None
    matrix: list[list[float]] | None = None
    outcomes: str | None = None

    @model_validator(mode="after")
    def _fields_of_model(self) -> ErrorsSpec:
        own = {
            "independent": (),
            "exchangeable": ("correlation", "error_correlation"),
            "factor": ("loadings",),
            "gaussian": ("matrix",),
            "empirical": ("outcomes",),
        }[self.model]
        for f in ("correlation", "error_correlation", "loadings", "matrix", "outcomes"):
            if getattr(self, f) is not None and f not in own:
                raise _FieldError(f"errors.{f}", f"does not apply to errors.model {self.model!r}")
        if self.model == "exchangeable":
            given = [f for f in own if getattr(self, f) is not None]
            if len(given) != 1:
                raise _FieldError(
                    "errors.correlation", "give exactly one of correlation and error_correlation"
                )
            v = getattr(self, given[0])
            if not 0.0 <= v <= 1.0:
                raise _FieldError(
                    f"errors.{given[0]}",
                    f"{v} is outside [0, 1] (one correlation for every pair; for negative "
                    "dependence use errors.model gaussian with a matrix)",
                )
        elif len(own) == 1 and getattr(self, own[0]) is None:
            raise _FieldError(f"errors.{own[0]}", f"required by errors.model {self.model!r}")
        for name, b in (self.loadings or {}).items():
            if not -1.0 < b < 1.0:
                raise _FieldError(
                    f"errors.loadings.{name}",
                    f"{b} is outside the open interval (-1, 1) (a loading of ±1 leaves the "
                    "drafter no errors of its own)",
                )
        if self.matrix is not None:
            n = len(self.matrix)
            if n == 0 or any(len(row) != n for row in self.matrix):
                raise _FieldError("errors.matrix", "must be a square list of rows")
        return self


class EnsembleSpec(_Frozen):
    members: Annotated[list[str], Field(min_length=1)]
    acceptance: Acceptance


class WorkloadSpec(_Frozen):
    name: Annotated[str, Field(min_length=1)]
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    acceptance: dict[str, Acceptance] = {}


class KRange(_Frozen):
    min: Annotated[int, Field(ge=1, le=MAX_K)] = 1
    max: Annotated[int, Field(ge=1, le=MAX_K)] = 64

    @model_validator(mode="after")
    def _order(self) -> KRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class MRange(_Frozen):
    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)] | None = None  # None: the number of drafters

    @model_validator(mode="after")
    def _order(self) -> MRange:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class SearchSpec(_Frozen):
    k: KRange = KRange()
    m: MRange = MRange()
    require: list[str] = []
    exclude: list[str] = []


class Budget(_Frozen):
    """Caps on cost metrics; a configuration is feasible when every given cap holds."""

    draft_cost_per_round: NonNegative | None = None
    draft_cost_per_token: NonNegative | None = None
    hosting_cost: NonNegative | None = None
    drafters: Annotated[int, Field(ge=1)] | None = None

    def caps(self) -> dict[str, float]:
        """The caps that are set, by metric name."""
        return {k: float(v) for k, v in self.model_dump().items() if v is not None}


class StepTable(_Frozen):
    """Measured wall time of one decoding step (draft + verify) of one configuration, ms.

    ``drafters``: the configuration measured (exact set); ``by_batch``: ``{batch: {k: ms}}``,
    where ``k = 0`` is decoding without speculation (required at every batch size).
    Between measured ``k`` at one batch size the time is linear in ``k``; between
    measured batch sizes linear in the batch; nothing is extrapolated.
    """

    drafters: Annotated[list[str], Field(min_length=1)]
    by_batch: Annotated[
        dict[BatchKey, Annotated[dict[CountKey, Positive], Field(min_length=1)]],
        Field(min_length=1),
    ]

    def batch_range(self) -> tuple[int, int]:
        """Smallest and largest measured batch size."""
        return min(self.by_batch), max(self.by_batch)


class VerifyTable(_Frozen):
    """Component model: the verifier's forward pass, ms, by batch size and by verified
    tokens per sequence (``tokens = 1`` is a plain decoding step; a chain of ``k``
    drafted tokens from ``m`` drafters verifies ``m * k + 1``). ``ms[i][j]`` is at
    ``batch[i]``, ``tokens[j]``; bilinear between them, never outside."""

    batch: Annotated[list[BatchSize], Field(min_length=1)]
    tokens: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    ms: Annotated[list[list[Positive]], Field(min_length=1)]

    def batch_range(self) -> tuple[int, int]:
        """Smallest and largest modelled batch size."""
        return self.batch[0], self.batch[-1]


class MemorySpec(_Frozen):
    """What caps the batch of one replica: KV-cache memory with no drafter hosted, and
    one sequence's KV footprint at the traffic's context length (both GB)."""

    kv_cache_gb: Positive
    kv_per_seq_gb: Positive


class SchedulerSpec(_Frozen):
    """The serving engine's scheduler, as vLLM names its settings (vLLM 0.33.0,
    vllm/config/scheduler.py), for the request-level simulator.

    ``max_num_seqs``: most requests running at once; ``max_num_batched_tokens``: most
    tokens one step processes (prefill chunks plus every decoding sequence's 1 + k);
    ``kv_cache_tokens``: tokens the KV cache holds (vLLM's start-up line ``GPU KV cache
    size: N tokens``; without it, from ``serving.memory``); ``block_size``: tokens per KV
    block (vLLM's default 16).
    """

    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_NUM_SEQS)]
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=MAX_BATCHED_TOKENS)]
    kv_cache_tokens: Annotated[int, Field(ge=1, le=MAX_KV_TOKENS)] | None = None
    block_size: Annotated[int, Field(ge=1, le=4096)] = 16

    @model_validator(mode="after")
    def _budget_holds_the_batch(self) -> SchedulerSpec:
        # vLLM refuses it at start-up: vllm/config/scheduler.py (0.33.0) lines 331-336
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise _FieldError(
                "serving.scheduler.max_num_batched_tokens",
                f"must be >= max_num_seqs ({self.max_num_seqs}), as vLLM requires",
            )
        return self


class PrefillTable(_Frozen):
    """Measured wall time of prefilling ``tokens[i]`` prompt tokens in one step, ms
    (``ms[i]``): linear between measured points, the first point's time below it (a
    prefill chunk costs at least that pass), nothing past the last point."""

    tokens: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    ms: Annotated[list[Positive], Field(min_length=1)]

    @model_validator(mode="after")
    def _shape(self) -> PrefillTable:
        if len(self.tokens) != len(self.ms):
            raise _FieldError("serving.prefill_ms.ms", "needs one value per entry of tokens")
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:], strict=False)):
            raise _FieldError("serving.prefill_ms.tokens", "must be strictly increasing")
        return self


class HardwareSpec(_Frozen):
    """The replica's accelerators: ``gpu`` from the bundled table
    (:data:`allocator.core.hardware.GPUS`), ``count`` of them under tensor parallelism."""

    gpu: Annotated[str, Field(min_length=1)]
    count: Annotated[int, Field(ge=1)] = 1

    @field_validator("gpu")
    @classmethod
    def _known(cls, value: str) -> str:
        from ..core.hardware import GPUS

        if value not in GPUS:
            raise ValueError(f"unknown GPU {value!r} (known: {', '.join(sorted(GPUS))})")
        return value


class DraftFactors(_Frozen):
    """One drafter's fitted pass times in the roofline (docs/design.md §8.12): ms per
    drafting pass (``fixed_ms``) and per decoding sequence per pass (``seq_ms``), beside
    the bandwidth and arithmetic of its ``architecture`` where it has one (without one its
    pass is ``fixed_ms + seq_ms · b``, at every batch size)."""

    fixed_ms: NonNegative = 0.0
    seq_ms: NonNegative = 0.0


class RooflineSpec(_Frozen):
    """The roofline's fitted factors (docs/design.md §8.12): the share of peak bandwidth
    (``mem_eff``) and of peak throughput (``compute_eff``) reached, ms per pass
    (``fixed_ms``), per decoding sequence per pass (``seq_ms``) and per speculative step
    (``overhead_ms``), how memory and compute combine (``form``: ``max`` or ``pnorm`` with
    exponent ``p``), whether the KV write of processed tokens is counted, and each
    drafter's pass times (``drafters``: name → ``fixed_ms``, ``seq_ms``; a drafter listed
    here drafts by the roofline, not by its measured ``draft_ms``)."""

    form: Literal["max", "pnorm"] = "max"
    p: Annotated[float, Field(ge=1.0, le=64.0)] = 8.0
    mem_eff: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    compute_eff: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    fixed_ms: NonNegative = 0.0
    seq_ms: NonNegative = 0.0
    overhead_ms: NonNegative = 0.0
    kv_write: bool = True
    drafters: dict[Annotated[str, Field(min_length=1)], DraftFactors] = {}


Range = Annotated[
    list[Annotated[float, Field(ge=0.0, allow_inf_nan=False)]], Field(min_length=2, max_length=2)
]


class CalibratedFrom(_Frozen):
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
                raise _FieldError(
                    f"serving.calibrated_from.{key}", f"[{r[0]:g}, {r[1]:g}] is reversed"
                )
        return self


class ServingSpec(_Frozen):
    """Serving under load: batch sizes to plan for, price, and step times (measured
    tables, a component model, or the roofline from ``hardware`` and ``model``).

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
            raise _FieldError(
                f"{f}.{other}", f"the roofline step time needs {other} beside {given}"
            )
        if self.roofline is not None and self.model is None:
            raise _FieldError(f"{f}.roofline", "needs serving.hardware and serving.model")
        if not self.step_ms and self.verify_ms is None and self.model is None:
            raise _FieldError(
                f,
                "give step times: measured step_ms tables, a verify_ms component model, or "
                "hardware and model (the roofline)",
            )
        if (
            self.hardware is not None
            and self.gpus_per_replica is not None
            and self.gpus_per_replica < self.hardware.count
        ):
            raise _FieldError(
                f"{f}.gpus_per_replica",
                f"{self.gpus_per_replica} is fewer than serving.hardware.count "
                f"({self.hardware.count} GPUs under tensor parallelism)",
            )
        if any(b <= a for a, b in zip(self.batch_sizes, self.batch_sizes[1:], strict=False)):
            raise _FieldError(f"{f}.batch_sizes", "must be strictly increasing")
        seen: set[frozenset[str]] = set()
        for i, t in enumerate(self.step_ms):
            if len(set(t.drafters)) != len(t.drafters):
                raise _FieldError(f"{f}.step_ms.{i}.drafters", "a drafter is named twice")
            key = frozenset(t.drafters)
            if key in seen:
                raise _FieldError(
                    f"{f}.step_ms.{i}.drafters", "the same drafters are measured in two tables"
                )
            seen.add(key)
            for b, by_k in t.by_batch.items():
                if 0 not in by_k:
                    raise _FieldError(
                        f"{f}.step_ms.{i}.by_batch.{b}",
                        "no k = 0 entry: decoding without speculation is the baseline and "
                        "is required at every batch size",
                    )
        v = self.verify_ms
        if v is not None:
            g = f"{f}.verify_ms"
            if any(b <= a for a, b in zip(v.batch, v.batch[1:], strict=False)):
                raise _FieldError(f"{g}.batch", "must be strictly increasing")
            if any(b <= a for a, b in zip(v.tokens, v.tokens[1:], strict=False)):
                raise _FieldError(f"{g}.tokens", "must be strictly increasing")
            if v.tokens[0] != 1:
                raise _FieldError(
                    f"{g}.tokens", "must include 1 (a plain decoding step, the k = 0 baseline)"
                )
            if len(v.ms) != len(v.batch):
                raise _FieldError(f"{g}.ms", f"{len(v.ms)} rows for {len(v.batch)} batch sizes")
            for i, row in enumerate(v.ms):
                if len(row) != len(v.tokens):
                    raise _FieldError(
                        f"{g}.ms.{i}", f"{len(row)} values for {len(v.tokens)} token counts"
                    )
        # a planned batch size outside every measured range is refused by the commands that
        # plan at serving.batch_sizes (schedule), not here: capacity and bench never read
        # them, and a file is not refused for a batch size a command does not use
        return self


class ProblemSpec(_Frozen):
    """A whole problem file. Field names and defaults follow docs/design.md §5.

    ``convention``: ``bonus`` (the verifier's own token counted, as vLLM and SGLang count
    it) by default in a file with a ``serving`` section, ``paper`` otherwise."""

    name: Annotated[str, Field(min_length=1)]
    convention: Annotated[
        Literal["paper", "bonus"],
        Field(description="Default: bonus with a serving section, else paper."),
    ] = "paper"
    verifier: Verifier = Verifier()
    drafters: Annotated[list[Drafter], Field(min_length=1)]
    errors: ErrorsSpec = ErrorsSpec()
    pooling: Literal["any-correct", "longest-chain"] = "any-correct"
    drafting: Literal["sequential", "parallel"] = "sequential"
    ensembles: list[EnsembleSpec] = []
    workloads: list[WorkloadSpec] = []
    search: SearchSpec = SearchSpec()
    budget: Budget = Budget()
    cost_metric: CostMetric = "draft_cost_per_round"
    serving: ServingSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_convention(cls, data: object) -> object:
        """A file with a ``serving`` section that states no ``convention`` counts as the
        engines do (``bonus``): its acceptance comes from them, and its answers are theirs."""
        if isinstance(data, dict) and "convention" not in data and data.get("serving"):
            return {**data, "convention": "bonus"}
        return data

    @field_validator("drafters")
    @classmethod
    def _unique_names(cls, drafters: list[Drafter]) -> list[Drafter]:
        seen: set[str] = set()
        for d in drafters:
            if d.name in seen:
                raise ValueError(f"duplicate drafter name {d.name!r}")
            seen.add(d.name)
        return drafters

    @model_validator(mode="after")
    def _known_names(self) -> ProblemSpec:
        names = {d.name for d in self.drafters}
        for d in self.drafters:
            _check_interval(d, f"drafters[{d.name}].acceptance_interval")
            _check_method(d, f"drafters[{d.name}]")
        for field in ("require", "exclude"):
            for i, n in enumerate(getattr(self.search, field)):
                if n not in names:
                    raise _FieldError(f"search.{field}.{i}", f"unknown drafter {n!r}")
        clash = set(self.search.require) & set(self.search.exclude)
        if clash:
            raise _FieldError("search.exclude", f"{sorted(clash)} also in search.require")
        for i, e in enumerate(self.ensembles):
            for n in e.members:
                if n not in names:
                    raise _FieldError(f"ensembles.{i}.members", f"unknown drafter {n!r}")
        seen: set[str] = set()
        for w in self.workloads:
            if w.name in seen:
                raise _FieldError(f"workloads[{w.name}].name", "duplicate workload name")
            seen.add(w.name)
            for n in w.acceptance:
                if n not in names:
                    raise _FieldError(f"workloads[{w.name}].acceptance", f"unknown drafter {n!r}")
        self._check_serving(names)
        return self

    def _check_serving(self, names: set[str]) -> None:
        """Step tables name known drafters; the component model has every draft time it
        needs; ``cost_per_mtok`` only with a priced ``serving`` section."""
        s = self.serving
        if self.cost_metric in SERVING_COST_METRICS:
            if s is None:
                raise _FieldError(
                    "cost_metric",
                    f"{self.cost_metric} needs a serving section (step times and a GPU price)",
                )
            if s.gpu_cost_per_hour is None:
                raise _FieldError(
                    "cost_metric", f"{self.cost_metric} needs serving.gpu_cost_per_hour"
                )
        if s is None:
            return
        for i, t in enumerate(s.step_ms):
            for n in t.drafters:
                if n not in names:
                    raise _FieldError(f"serving.step_ms.{i}.drafters", f"unknown drafter {n!r}")
        # a drafter with neither a step_ms table nor draft_ms has no speculative step time:
        # each command leaves its configurations out with a note (the README's rule), the
        # file is not refused for it

    @model_validator(mode="after")
    def _memory_fits(self) -> ProblemSpec:
        """``serving.memory`` leaves room for one sequence, with no drafter and with each
        drafter hosted alone (allocator/core/memory.py gives the batch cap)."""
        mem = self.serving.memory if self.serving is not None else None
        if mem is not None:
            gb = [d.memory_gb or 0.0 for d in self.drafters]
            try:
                check_memory(
                    mem.kv_cache_gb, mem.kv_per_seq_gb, gb, [d.name for d in self.drafters]
                )
            except InputError as exc:
                raise _FieldError(exc.field, exc.message) from None
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.drafters)


def _check_interval(d: Drafter, field: str) -> None:
    """An ``acceptance_interval`` has one ``[lo, hi]`` (``lo < hi``) per acceptance position."""
    iv = d.acceptance_interval
    if iv is None:
        return
    n_acc = len(d.acceptance) if isinstance(d.acceptance, list) else 1
    nested = isinstance(iv[0], list)
    if not nested and n_acc > 1:
        raise _FieldError(field, "give one [lo, hi] per position of the acceptance list")
    rows: list[list[float]] = iv if nested else [iv]  # type: ignore[assignment, list-item]
    if len(rows) != n_acc:
        raise _FieldError(field, f"{len(rows)} intervals for {n_acc} acceptance position(s)")
    for j, (lo, hi) in enumerate(rows):
        if hi <= lo:
            where = f"position {j + 1}: " if nested else ""
            raise _FieldError(
                field, f"{where}[{_number_text(lo)}, {_number_text(hi)}] needs lo < hi"
            )


def _check_method(d: Drafter, where: str) -> None:
    """A drafter's fields belong to its ``method`` (:mod:`allocator.core.methods`)."""
    given = {f: getattr(d, f) for f in METHOD_FIELDS if getattr(d, f) is not None}
    problem = method_problem(d.method, given, d.model)
    if problem is not None:
        raise _FieldError(f"{where}.{problem[0]}", problem[1])


class _FieldError(ValueError):
    """Raised inside validators to report a field other than the one validated."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


#: Parts of a pydantic location that name a union branch or a validator, not a field.
_BRANCH_PREFIXES = ("function-", "list[", "dict[", "constrained-", "json-or-python")
_BRANCH_NAMES = frozenset({"float", "int", "str", "bool", "constrained-float", "none"})


def _is_branch(part: object) -> bool:
    return isinstance(part, str) and (part.startswith(_BRANCH_PREFIXES) or part in _BRANCH_NAMES)


def _loc_to_field(loc: tuple, data: object = None) -> str:
    """A pydantic location as the dotted field path users see; a drafter or workload is
    named by its ``name`` when it has one (``drafters[weak-a].unit_cost``)."""
    # pydantic puts union branch names ("float", "list[...]") into loc; drop them
    parts = [p for p in loc if not _is_branch(p)]
    out: list[str] = []
    for i, p in enumerate(parts):
        named = _item_name(data, parts[:i], p) if i == 1 and isinstance(p, int) else None
        if named is not None:
            out[-1] += f"[{named}]"
        else:
            out.append(str(p))
    return ".".join(out) or "problem"


def _item_name(data: object, parents: list, index: int) -> str | None:
    """The ``name`` of ``data[section][index]`` for the named lists, when it is a string."""
    if not isinstance(data, dict) or parents[0] not in ("drafters", "workloads"):
        return None
    items = data.get(parents[0])
    if not isinstance(items, list) or not 0 <= index < len(items):
        return None
    item = items[index]
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) and name else None


def _shown(value: object) -> str:
    """A user's value as YAML shows it, cut short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return _number_text(value)
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    kinds = {
        bool: "a boolean",
        str: "text",
        list: "a list",
        dict: "a mapping",
        int: "a number",
        float: "a number",
    }
    return kinds.get(type(value), type(value).__name__)


_TYPE_ERRORS = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "bool_type": "true or false",
}

#: Bound errors of pydantic, as a rule on the value.
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "greater than or equal to"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "less than or equal to"),
}


def _branch_kind(loc: tuple) -> str | None:
    """What a union branch in ``loc`` takes: ``"list"``, ``"dict"``, ``"scalar"`` or
    ``None`` (no branch in ``loc``). A branch with a validator is named
    ``function-after[<validator>, <type>]``: its type decides."""
    for part in loc:
        if _is_branch(part):
            text = str(part)
            if text.startswith("function-"):
                text = text.rsplit(", ", 1)[-1]
            if text.startswith("list["):
                return "list"
            return "dict" if text.startswith("dict[") else "scalar"
    return None


def _union_prefix(loc: tuple) -> tuple:
    """``loc`` up to its first union branch (the field the union is for)."""
    for i, part in enumerate(loc):
        if _is_branch(part):
            return tuple(loc[:i])
    return tuple(loc)


def _at(data: object, loc: tuple) -> object:
    """The raw value at a (branch-free) location, or ``None``."""
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _pick(errors: list, data: object) -> dict:
    """The error to report: a misspelt field first (the "field required" pydantic adds for
    the intended spelling follows from it); else, when the first error is one branch of a
    union (``acceptance``: a number or a list), the branch that takes what the user gave
    (a list's element out of range, not "a list is not a number"), the deepest first."""
    unknown = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if unknown is not None:
        return unknown
    first = errors[0]
    if _branch_kind(first["loc"]) is None:
        return first
    prefix = _union_prefix(first["loc"])
    given = _at(data, tuple(p for p in prefix if not _is_branch(p)))
    want = "list" if isinstance(given, list) else "dict" if isinstance(given, dict) else "scalar"
    same = [e for e in errors if _union_prefix(e["loc"]) == prefix]
    matching = [e for e in same if _branch_kind(e["loc"]) == want] or same
    depth = _list_depth(given)
    nested = [e for e in matching if _branch_depth(e["loc"]) == depth] or matching
    return max(nested, key=lambda e: len(e["loc"]))


def _list_depth(value: object) -> int:
    """How deep lists nest in ``value``, by first elements (``[[0.1, 0.2]]``: 2)."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


def _branch_depth(loc: tuple) -> int:
    """How deep the lists of the union branch in ``loc`` nest (``list[list[float]]``: 2)."""
    for part in loc:
        if _is_branch(part):
            return str(part).count("list[")
    return 0


def _element_note(loc: tuple, data: object) -> str:
    """`` (value 2 of the list)`` when ``loc`` ends at an element of a list the user
    wrote (not a mapping's key, not a drafter of ``drafters``), else ``""``."""
    parts = [p for p in loc if not _is_branch(p)]
    if len(parts) < 2 or not isinstance(parts[-1], int):
        return ""
    if len(parts) == 2 and parts[0] in ("drafters", "workloads"):
        return ""
    if not isinstance(_at(data, tuple(parts[:-1])), list):
        return ""
    return f" (value {parts[-1] + 1:,} of the list)"


def validation_error_to_input_error(err: ValidationError, data: object = None) -> InputError:
    """One error of a pydantic ``ValidationError`` as one ``InputError``.

    An unknown (misspelt) field is reported before anything else; a value that one
    branch of a union takes (``acceptance`` is a number or a list of numbers) is judged
    by that branch, so a list's element out of range is named with its bound. ``data``,
    the raw mapping validated, lets drafters and workloads be named by their names.
    """
    errors = err.errors(include_url=False)
    first = _pick(errors, data)
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, _FieldError):
        return InputError(inner.field, inner.message)
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    field = _loc_to_field(first["loc"], data)
    got = first.get("input")
    kind = first["type"]
    note = _element_note(first["loc"], data)
    if "[key]" in first["loc"]:
        field = field.removesuffix(".[key]")
        want = _TYPE_ERRORS.get(kind.replace("_parsing", "_type"), "valid")
        msg = f"the key {_shown(got)} is not {want}"
    elif kind == "extra_forbidden":
        msg = "unknown field (check its spelling against `allocator schema`)"
    elif isinstance(got, float) and got != got:
        msg = "nan is not a number a problem file may hold"
    elif kind == "finite_number":
        msg = f"{_shown(got)} is not a finite number{note}"
    elif kind in _BOUNDS:
        key, rule = _BOUNDS[kind]
        msg = f"{_shown(got)} must be {rule} {_shown(ctx.get(key))}{note}"
    elif kind == "too_long" and isinstance(got, list | dict):
        most = ctx.get("max_length")
        msg = f"holds {len(got):,} values; at most {most:,}" if most else msg
        if isinstance(got, list) and field.endswith(("acceptance", "acceptance_interval")):
            msg += f" (k is at most {MAX_K:,}, so a later position is never used)"
    elif kind == "too_short" and isinstance(got, list | dict):
        least = ctx.get("min_length", 1)
        n = len(got)
        msg = "is empty" if not n else f"holds {n:,} value{'s' if n != 1 else ''}"
        msg += f"; give at least {least:,}"
    elif kind.endswith("_type"):
        want = _TYPE_ERRORS.get(kind, kind.removesuffix("_type"))
        if _branch_kind(first["loc"]) == "scalar" and isinstance(got, list | dict):
            want += " or a list of numbers" if want == "a number" else ""
        msg = (
            f"has no value (null); give {want}"
            if got is None
            else f"{_shown(got)} is {_kind(got)}, not {want}{note}"
        )
    elif kind == "value_error" and note:
        msg += note
    return InputError(field, msg[0].lower() + msg[1:] if msg else "invalid")


def parse_problem(data: object, *, source: str = "problem") -> ProblemSpec:
    """Validate already-parsed data (a dict) as a problem."""
    if not isinstance(data, dict):
        raise InputError(source, "a problem file must hold a mapping at its top level")
    try:
        return ProblemSpec.model_validate(data)
    except ValidationError as err:
        raise validation_error_to_input_error(err, data) from None


def read_problem_data(path: str | Path) -> dict:
    """Read a YAML or JSON file into a dict, with clear errors (see :mod:`allocator.io.inputs`
    for the limits: a regular file, size, nesting, numbers, no duplicate keys)."""
    p = Path(path)
    text = read_input_text(p, "problem")
    data = parse_document(text, "problem", str(p), json_format=p.suffix.lower() == ".json")
    if data is None:
        raise InputError("problem", f"{p} is empty")
    if not isinstance(data, dict):
        raise InputError("problem", "a problem file must hold a mapping at its top level")
    return data


def load_problem(path: str | Path) -> ProblemSpec:
    """Read and validate a problem file (YAML or JSON)."""
    return parse_problem(read_problem_data(path), source="problem")


def problem_json_schema() -> dict:
    """The JSON Schema of the problem-file format."""
    return ProblemSpec.model_json_schema()


__all__ = [
    "Acceptance",
    "ArchitectureSpec",
    "BatchKey",
    "BatchSize",
    "Budget",
    "CalibratedFrom",
    "CostMetric",
    "CountKey",
    "Drafter",
    "EnsembleSpec",
    "ErrorsSpec",
    "HardwareSpec",
    "Interval",
    "KRange",
    "MAX_POSITIONS",
    "MRange",
    "MemorySpec",
    "Method",
    "NonNegative",
    "PassCostCurve",
    "Positive",
    "PrefillTable",
    "Probability",
    "ProblemSpec",
    "Range",
    "RooflineSpec",
    "SchedulerSpec",
    "SearchSpec",
    "ServingSpec",
    "StepTable",
    "Verifier",
    "VerifyTable",
    "WorkloadSpec",
    "check_rank_acceptance",
    "load_problem",
    "parse_problem",
    "problem_json_schema",
    "rank_rows",
    "read_problem_data",
    "validation_error_to_input_error",
]
