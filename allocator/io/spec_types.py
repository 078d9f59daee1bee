"""The problem file's value types: names, probabilities, acceptance lists, batch keys,
the methods, rank acceptance, and :class:`Frozen`, the base of every model; the models
that use them are in :mod:`allocator.io.spec` and :mod:`allocator.io.spec_serving`
(:mod:`allocator.io.spec` re-exports every name here)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from ..core.problem import MAX_K
from .quoting import one_line
from .spec_errors import number_text


class Frozen(BaseModel):
    """The base of every problem-file model: frozen, no unknown field, strict (no bool or
    str is a number); ``defer_build``: validators built on first use (docs/design.md §9)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)


#: A name (of the problem, a drafter, a workload): one line, shown in tables and scripts.
Name = Annotated[str, Field(min_length=1), AfterValidator(one_line)]

CostMetric = Literal[
    "draft_cost_per_round", "draft_cost_per_token", "hosting_cost", "drafters", "cost_per_mtok"
]


def in_open_closed_unit(v: float) -> float:
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{number_text(v)} is outside (0, 1]")
    return v


def in_closed_unit(v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{number_text(v)} is outside [0, 1]")
    return v


#: A probability in (0, 1]; out of range it is refused naming the interval (a list's
#: element too: ``acceptance.1: 1.2 is outside (0, 1]``).
Probability = Annotated[
    float,
    AfterValidator(in_open_closed_unit),
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
#: A measured step or pass time, ms: no GPU step is shorter than a picosecond or longer than
#: hours, and a time outside that range (a subnormal ``1e-320``, ``1e308``) would give
#: infinite or zero tokens/s downstream. Calibrated files floor their times at 1e-9 ms.
StepMs = Annotated[float, Field(ge=1e-12, le=1e7, allow_inf_nan=False)]
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


__all__ = [
    "MAX_POSITIONS",
    "Acceptance",
    "BatchKey",
    "BatchSize",
    "CostMetric",
    "CountKey",
    "Frozen",
    "Method",
    "Name",
    "NonNegative",
    "Positive",
    "StepMs",
    "Probability",
    "check_rank_acceptance",
    "rank_rows",
    "in_closed_unit",
    "in_open_closed_unit",
]
