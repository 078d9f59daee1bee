"""The pieces every JSON document of docs/design.md §6 is built from.

A command's document is the ``to_dict()`` of the dataclass its API function returns
(:mod:`allocator.api`); those methods build it from the helpers here, so that a point
has one set of fields in one order wherever it appears, the serving fields are added
one way, and a missing value (NaN) is written as ``null`` one way. Plain Python and
numpy only: results in every layer may use it without loading the file edge.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class FrontLike(Protocol):
    """What a front's points are read from (:class:`allocator.core.result.Front`):
    ``members (P, N)``, ``k (P,)``, ``metrics`` ``{name: (P,)}``, ``cost_metric``."""

    @property
    def members(self) -> np.ndarray: ...

    @property
    def k(self) -> np.ndarray: ...

    @property
    def metrics(self) -> Mapping[str, np.ndarray]: ...

    @property
    def cost_metric(self) -> str: ...

    def __len__(self) -> int: ...


#: What a configuration is: its drafters (names), how many, and its draft length.
CONFIG_FIELDS: tuple[str, ...] = ("drafters", "m", "k")
#: The model's metrics of a point after ``throughput`` and ``cost`` (docs/design.md §6).
MODEL_FIELDS: tuple[str, ...] = (
    "expected_accepted",
    "pooled_acceptance",
    "round_time",
    "draft_cost_per_round",
    "draft_cost_per_token",
    "hosting_cost",
)
#: A point's fields, in the order every document writes them.
POINT_FIELDS: tuple[str, ...] = (*CONFIG_FIELDS, "throughput", "cost", *MODEL_FIELDS)
#: Fields a point gains under load (``evaluate --batch``, ``solve --batch``), after
#: :data:`POINT_FIELDS`.
SERVING_FIELDS: tuple[str, ...] = (
    "batch",
    "step_ms",
    "tokens_per_step",
    "tokens_per_s",
    "tokens_per_s_per_seq",
    "tpot_ms",
    "speedup",
    "cost_per_mtok",
)


def number(x: float | None) -> float | None:
    """``x`` as a JSON number: a Python float, or ``None`` (``null``) for NaN or ``None``."""
    if x is None:
        return None
    value = float(x)
    return None if math.isnan(value) else value


def seconds(s: float) -> float:
    """A wall-clock time in seconds as documents give it: rounded to microseconds."""
    return round(float(s), 6)


def names_of(names: Sequence[str], members: Iterable[Any]) -> list[str]:
    """The names whose membership flag is set: ``names (N,)``, ``members (N,)`` bool."""
    return [str(n) for n, on in zip(names, members, strict=True) if on]


def serving_fields(row: Mapping[str, float]) -> dict[str, Any]:
    """The serving fields of a metrics row, in :data:`SERVING_FIELDS` order (none when it
    has no ``tokens_per_s``): ``batch`` an int, ``cost_per_mtok`` ``None`` without a price;
    ``context`` (tokens per sequence) after ``batch`` when the row has one."""
    if "tokens_per_s" not in row:
        return {}
    out: dict[str, Any] = {f: float(row[f]) for f in SERVING_FIELDS}
    out["batch"] = int(row["batch"])
    out["cost_per_mtok"] = number(out["cost_per_mtok"])
    if "context" in row:  # tokens per sequence, when a context was asked for
        c = float(row["context"])
        out = {"batch": out.pop("batch"), "context": int(c) if c.is_integer() else c, **out}
    return out


def point(
    names: Sequence[str],
    members: np.ndarray,
    k: int,
    row: Mapping[str, float],
    cost_metric: str,
) -> dict[str, Any]:
    """One configuration and its metrics as the point of docs/design.md §6.

    names ``(N,)``; members ``(N,)`` bool; row: one value per metric
    (:data:`allocator.model.METRICS`, and the serving metrics under load); ``cost`` is the
    ``cost_metric`` column. Fields: :data:`POINT_FIELDS`, then :data:`SERVING_FIELDS`
    when the row has them.
    """
    return {
        "drafters": names_of(names, members),
        "m": int(np.asarray(members, bool).sum()),
        "k": int(k),
        # null where a metric in verifier-units has no drafter cost (unit_cost left out)
        "throughput": number(row["throughput"]),
        "cost": number(row[cost_metric]),
        **{f: number(row[f]) for f in MODEL_FIELDS},
        **serving_fields(row),
    }


def front_point(front: FrontLike, i: int, names: Sequence[str]) -> dict[str, Any]:
    """Point ``i`` of ``front`` (see :func:`point`)."""
    row = {m: float(v[i]) for m, v in front.metrics.items()}
    return point(names, front.members[i], int(front.k[i]), row, front.cost_metric)


def front_points(front: FrontLike, names: Sequence[str]) -> list[dict[str, Any]]:
    """Every point of ``front``, in its order (cost ascending)."""
    return [front_point(front, i, names) for i in range(len(front))]


__all__ = [
    "CONFIG_FIELDS",
    "MODEL_FIELDS",
    "POINT_FIELDS",
    "SERVING_FIELDS",
    "FrontLike",
    "front_point",
    "front_points",
    "names_of",
    "number",
    "point",
    "seconds",
    "serving_fields",
]
