"""What a search returns: the front, the configuration behind every point, and how it was
found; one evaluated configuration (:class:`Point`). Each result's ``to_dict()`` is its
command's JSON document (docs/design.md §6), built with :mod:`allocator.core.documents`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from .documents import front_point, front_points, point, seconds

#: The model's metrics of a configuration, in order (docs/design.md §6).
METRICS: tuple[str, ...] = (
    "throughput",  # accepted units per verifier-unit of time
    "expected_accepted",  # accepted units per round
    "pooled_acceptance",  # mean pooled per-position acceptance over positions 1..k
    "round_time",  # verifier-units of time per round
    "draft_cost_per_round",  # k * sum(rho_i)
    "draft_cost_per_token",  # k * sum(rho_i) / E_k
    "hosting_cost",  # sum(h_i)
    "drafters",  # m
)


@dataclass
class Front:
    """Points of a front, sorted by cost ascending.

    members : bool ``(P, N)``; k : int ``(P,)``; metrics : dict of ``(P,)`` float arrays
    keyed by :data:`allocator.model.METRICS`; cost : ``(P,)`` the cost-metric column.
    """

    members: np.ndarray
    k: np.ndarray
    metrics: dict[str, np.ndarray]
    cost_metric: str

    def __len__(self) -> int:
        return int(self.k.shape[0])

    @property
    def cost(self) -> np.ndarray:
        return self.metrics[self.cost_metric]

    @property
    def throughput(self) -> np.ndarray:
        return self.metrics["throughput"]

    def take(self, idx: np.ndarray) -> Front:
        return Front(
            self.members[idx],
            self.k[idx],
            {m: v[idx] for m, v in self.metrics.items()},
            self.cost_metric,
        )

    @classmethod
    def empty(cls, n: int, cost_metric: str) -> Front:
        return cls(
            np.zeros((0, n), bool),
            np.zeros(0, np.int64),
            {m: np.zeros(0) for m in METRICS},
            cost_metric,
        )

    def point(self, i: int, names: tuple[str, ...]) -> dict:
        """One point as the plain dict of docs/design.md §6 (drafters, m, k, throughput, ...;
        :func:`allocator.core.documents.point`)."""
        return front_point(self, i, names)


@dataclass(frozen=True, eq=False)
class Point(Mapping[str, Any]):
    """One configuration and every metric of it (``evaluate``'s answer).

    names : drafter names ``(N,)``; members : ``(N,)`` bool (none at ``k = 0``, no
    speculation); k : draft length; metrics : one value per metric
    (:data:`allocator.model.METRICS`, with the serving metrics under load); cost_metric :
    the problem's cost axis. Read it as the point document of docs/design.md §6
    (``point["throughput"]``), which :meth:`to_dict` returns.
    """

    names: tuple[str, ...]
    members: np.ndarray
    k: int
    metrics: dict[str, float]
    cost_metric: str

    @classmethod
    def of(cls, front: Front, i: int, names: tuple[str, ...]) -> Point:
        """Point ``i`` of ``front``."""
        metrics = {m: float(v[i]) for m, v in front.metrics.items()}
        return cls(names, front.members[i].copy(), int(front.k[i]), metrics, front.cost_metric)

    def to_dict(self) -> dict[str, Any]:
        """``evaluate --json``: the point's fields (docs/design.md §6)."""
        return point(self.names, self.members, self.k, self.metrics, self.cost_metric)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


class Uncertainty(Protocol):
    """What :meth:`SolveResult.with_uncertainty` attaches (an
    :class:`allocator.analysis.uncertainty.UncertaintyReport`): its sample count, robust
    quantile, front, and its document over the problem's drafter ``names``."""

    samples: int
    quantile: float | None
    front: Front

    def to_dict(self, names: tuple[str, ...]) -> dict[str, Any]: ...


@dataclass
class SolveResult:
    """A strategy's answer. ``exact`` is true only when the front is proven complete.

    ``uncertainty``: the sampling analysis of the front (``solve --samples``), when run.
    """

    problem: str
    names: tuple[str, ...]
    strategy: str
    exact: bool
    front: Front
    evaluated: int
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    uncertainty: Uncertainty | None = None

    @property
    def cost_metric(self) -> str:
        return self.front.cost_metric

    def points(self) -> list[dict]:
        return front_points(self.front, self.names)

    def with_uncertainty(self, report: Uncertainty) -> SolveResult:
        """This result with ``report`` attached; a robust report (one with a quantile)
        replaces the front by its own, which no longer claims to be exact."""
        if report.quantile is None:
            return replace(self, notes=list(self.notes), uncertainty=report)
        note = (
            f"robust: front of cost against the {report.quantile:g}-quantile of throughput "
            f"over {report.samples} posterior draws (throughput shown at the point estimate)"
        )
        return replace(
            self, front=report.front, exact=False, notes=[*self.notes, note], uncertainty=report
        )

    def to_dict(self) -> dict[str, Any]:
        """``solve --json``: ``front`` sorted by cost ascending; ``uncertainty`` with
        ``--samples`` or ``--robust`` (docs/design.md §4.7, §6)."""
        doc: dict[str, Any] = {
            "problem": str(self.problem),
            "strategy": str(self.strategy),
            "exact": bool(self.exact),
            "cost_metric": str(self.cost_metric),
            "evaluated": int(self.evaluated),
            "seconds": seconds(self.seconds),
            "front": self.points(),
            "notes": list(self.notes),
        }
        if self.uncertainty is not None:
            doc["uncertainty"] = self.uncertainty.to_dict(self.names)
        return doc


__all__ = ["METRICS", "Front", "Point", "SolveResult", "Uncertainty"]
