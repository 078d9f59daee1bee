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
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from ..core.memory import check_memory
from ..core.methods import METHOD_FIELDS, method_problem
from ..core.problem import MAX_K, SERVING_COST_METRICS
from ..exceptions import InputError
from .inputs import parse_document, read_input_text
from .quoting import plain_text
from .spec_errors import FieldError, number_text, validation_error_to_input_error

# the serving section's models (allocator.io.spec_serving), re-exported
from .spec_serving import (
    ArchitectureSpec,
    CalibratedFrom,
    DraftFactors,
    HardwareSpec,
    MemorySpec,
    PrefillTable,
    Range,
    RooflineSpec,
    SchedulerSpec,
    ServingSpec,
    Share,
    StepTable,
    VerifyTable,
)

# the file's value types (allocator.io.spec_types), re-exported
from .spec_types import (
    MAX_POSITIONS,
    Acceptance,
    BatchKey,
    BatchSize,
    CostMetric,
    CountKey,
    Frozen,
    Method,
    Name,
    NonNegative,
    Positive,
    Probability,
    StepMs,
    check_rank_acceptance,
    in_closed_unit,
    rank_rows,
)


class PassCostCurve(Frozen):
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


class Verifier(Frozen):
    """Cost of verification, in units of the verifier's per-unit cost."""

    pass_cost: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    token_cost: NonNegative = 0.0
    pass_cost_curve: PassCostCurve | None = None

    @model_validator(mode="after")
    def _one_cost_form(self) -> Verifier:
        if self.pass_cost_curve is not None:
            both = sorted({"pass_cost", "token_cost"} & self.model_fields_set)
            if both:
                raise FieldError(
                    f"verifier.{both[0]}", "give either pass_cost/token_cost or pass_cost_curve"
                )
            if min(self.pass_cost_curve.cost) <= 0.0:
                raise FieldError(
                    "verifier.pass_cost_curve.cost", "a verification pass must cost more than 0"
                )
        return self


Interval = Annotated[
    list[
        Annotated[
            float,
            AfterValidator(in_closed_unit),
            WithJsonSchema({"type": "number", "minimum": 0.0, "maximum": 1.0}),
        ]
    ],
    Field(min_length=2, max_length=2),
]


class Drafter(Frozen):
    """One draft model.

    ``acceptance``: per-unit acceptance, a scalar or a list by position (last repeats).
    ``unit_cost``: draft cost per unit, in units of the verifier's per-unit cost (optional:
    only the answers in verifier-units need it, and they refuse without it).
    ``hosting_cost``: what hosting it costs (memory, GPUs, $/h: any consistent unit).
    ``model``: the serving system's model name or path (for export).
    ``acceptance_interval``: a 95% interval for the acceptance (estimated statistics),
    ``[lo, hi]`` or one ``[lo, hi]`` per position.
    """

    name: Name
    acceptance: Acceptance
    unit_cost: NonNegative | None = None
    hosting_cost: NonNegative = 0.0
    model: Annotated[str, AfterValidator(plain_text)] | None = None
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
    draft_ms: Annotated[dict[BatchKey, StepMs], Field(min_length=1)] | None = None
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
                    raise FieldError(
                        f"drafters[{self.name}].acceptance_by_rank_interval",
                        f"{where}: [{number_text(lo)}, {number_text(hi)}] needs lo < hi",
                    )
        return self


class ErrorsSpec(Frozen):
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
                raise FieldError(f"errors.{f}", f"does not apply to errors.model {self.model!r}")
        if self.model == "exchangeable":
            given = [f for f in own if getattr(self, f) is not None]
            if len(given) != 1:
                raise FieldError(
                    "errors.correlation", "give exactly one of correlation and error_correlation"
                )
            v = getattr(self, given[0])
            if not 0.0 <= v <= 1.0:
                raise FieldError(
                    f"errors.{given[0]}",
                    f"{v} is outside [0, 1] (one correlation for every pair; for negative "
                    "dependence use errors.model gaussian with a matrix)",
                )
        elif len(own) == 1 and getattr(self, own[0]) is None:
            raise FieldError(f"errors.{own[0]}", f"required by errors.model {self.model!r}")
        for name, b in (self.loadings or {}).items():
            if not -1.0 < b < 1.0:
                raise FieldError(
                    f"errors.loadings.{name}",
                    f"{b} is outside the open interval (-1, 1) (a loading of ±1 leaves the "
                    "drafter no errors of its own)",
                )
        if self.matrix is not None:
            n = len(self.matrix)
            if n == 0 or any(len(row) != n for row in self.matrix):
                raise FieldError("errors.matrix", "must be a square list of rows")
        return self


class EnsembleSpec(Frozen):
    members: Annotated[list[str], Field(min_length=1)]
    acceptance: Acceptance


class WorkloadSpec(Frozen):
    name: Name
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    acceptance: dict[str, Acceptance] = {}


class KRange(Frozen):
    min: Annotated[int, Field(ge=1, le=MAX_K)] = 1
    max: Annotated[int, Field(ge=1, le=MAX_K)] = 64

    @model_validator(mode="after")
    def _order(self) -> KRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class MRange(Frozen):
    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)] | None = None  # None: the number of drafters

    @model_validator(mode="after")
    def _order(self) -> MRange:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class SearchSpec(Frozen):
    k: KRange = KRange()
    m: MRange = MRange()
    require: list[str] = []
    exclude: list[str] = []


class Budget(Frozen):
    """Caps on cost metrics; a configuration is feasible when every given cap holds."""

    draft_cost_per_round: NonNegative | None = None
    draft_cost_per_token: NonNegative | None = None
    hosting_cost: NonNegative | None = None
    drafters: Annotated[int, Field(ge=1)] | None = None

    def caps(self) -> dict[str, float]:
        """The caps that are set, by metric name."""
        return {k: float(v) for k, v in self.model_dump().items() if v is not None}


class ProblemSpec(Frozen):
    """A whole problem file. Field names and defaults follow docs/design.md §5.

    ``convention``: ``bonus`` (the verifier's own token counted, as vLLM and SGLang count
    it) by default in a file with a ``serving`` section, ``paper`` otherwise."""

    name: Name
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
                    raise FieldError(f"search.{field}.{i}", f"unknown drafter {n!r}")
        clash = set(self.search.require) & set(self.search.exclude)
        if clash:
            raise FieldError("search.exclude", f"{sorted(clash)} also in search.require")
        for i, e in enumerate(self.ensembles):
            for n in e.members:
                if n not in names:
                    raise FieldError(f"ensembles.{i}.members", f"unknown drafter {n!r}")
        seen: set[str] = set()
        for w in self.workloads:
            if w.name in seen:
                raise FieldError(f"workloads[{w.name}].name", "duplicate workload name")
            seen.add(w.name)
            for n in w.acceptance:
                if n not in names:
                    raise FieldError(f"workloads[{w.name}].acceptance", f"unknown drafter {n!r}")
        self._check_serving(names)
        return self

    def _check_serving(self, names: set[str]) -> None:
        """Step tables name known drafters; the component model has every draft time it
        needs; ``cost_per_mtok`` only with a priced ``serving`` section."""
        s = self.serving
        if self.cost_metric in SERVING_COST_METRICS:
            if s is None:
                raise FieldError(
                    "cost_metric",
                    f"{self.cost_metric} needs a serving section (step times and a GPU price)",
                )
            if s.gpu_cost_per_hour is None:
                raise FieldError(
                    "cost_metric", f"{self.cost_metric} needs serving.gpu_cost_per_hour"
                )
        if s is None:
            return
        for i, t in enumerate(s.step_ms):
            for n in t.drafters:
                if n not in names:
                    raise FieldError(f"serving.step_ms.{i}.drafters", f"unknown drafter {n!r}")
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
                raise FieldError(exc.field, exc.message) from None
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
        raise FieldError(field, "give one [lo, hi] per position of the acceptance list")
    rows: list[list[float]] = iv if nested else [iv]  # type: ignore[assignment, list-item]
    if len(rows) != n_acc:
        raise FieldError(field, f"{len(rows)} intervals for {n_acc} acceptance position(s)")
    for j, (lo, hi) in enumerate(rows):
        if hi <= lo:
            where = f"position {j + 1}: " if nested else ""
            raise FieldError(field, f"{where}[{number_text(lo)}, {number_text(hi)}] needs lo < hi")


def _check_method(d: Drafter, where: str) -> None:
    """A drafter's fields belong to its ``method`` (:mod:`allocator.core.methods`)."""
    given = {f: getattr(d, f) for f in METHOD_FIELDS if getattr(d, f) is not None}
    problem = method_problem(d.method, given, d.model)
    if problem is not None:
        raise FieldError(f"{where}.{problem[0]}", problem[1])


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
    "DraftFactors",
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
    "Share",
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
