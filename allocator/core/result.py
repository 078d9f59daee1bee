"""What a search returns: the front, the configuration behind every point, and how it was found."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.evaluate import METRICS


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
        """One point as the plain dict of docs/design.md §6 (drafters, m, k, throughput, ...)."""
        row = {m: float(v[i]) for m, v in self.metrics.items()}
        cost = row[self.cost_metric]
        return {
            "drafters": [n for n, on in zip(names, self.members[i], strict=True) if on],
            "m": int(self.members[i].sum()),
            "k": int(self.k[i]),
            "throughput": row["throughput"],
            "cost": cost,
            "expected_accepted": row["expected_accepted"],
            "pooled_acceptance": row["pooled_acceptance"],
            "round_time": row["round_time"],
            "draft_cost_per_round": row["draft_cost_per_round"],
            "draft_cost_per_token": row["draft_cost_per_token"],
            "hosting_cost": row["hosting_cost"],
            **serving_fields(row),
        }


#: Fields a point gains under load (``evaluate --batch``, ``solve --batch``).
SERVING_FIELDS: tuple[str, ...] = (
    "batch",
    "step_ms",
    "tokens_per_step",
    "tokens_per_s",
    "tokens_per_s_per_seq",
    "itl_ms",
    "speedup",
    "cost_per_mtok",
)


def serving_fields(row: dict[str, float]) -> dict:
    """The serving fields of a metrics row (none when it has no ``tokens_per_s``);
    ``batch`` as int, ``cost_per_mtok`` ``None`` without a price."""
    if "tokens_per_s" not in row:
        return {}
    out: dict = {f: row[f] for f in SERVING_FIELDS}
    out["batch"] = int(row["batch"])
    if np.isnan(out["cost_per_mtok"]):
        out["cost_per_mtok"] = None
    return out


@dataclass
class SolveResult:
    """A strategy's answer. ``exact`` is true only when the front is proven complete."""

    problem: str
    names: tuple[str, ...]
    strategy: str
    exact: bool
    front: Front
    evaluated: int
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def cost_metric(self) -> str:
        return self.front.cost_metric

    def points(self) -> list[dict]:
        return [self.front.point(i, self.names) for i in range(len(self.front))]
