"""``allocator validate``'s comparison (:mod:`allocator.analysis.validation` replays the
runs): the metric keys compared under vLLM's names, ``error_pct = 100 · (predicted /
measured − 1)`` (``None`` for a measured 0), each run's metrics beside its replay's, and
per key the mean and median ``|error_pct|`` over the runs; the answer's dataclasses.
:mod:`allocator.analysis.validation` re-exports every name here."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..sim import LATENCIES

#: Throughput keys compared, in the order reported.
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
#: The acceptance length key (tokens per decode step, bonus included).
ACCEPTANCE = "spec_decode_acceptance_length"
#: Statistics of a latency compared (``std`` is not: its error is not a latency's).
LATENCY_KEY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
#: The metric families of the plot and the table, by key.
FAMILIES = ("TTFT", "TPOT", "ITL", "E2EL", "throughput")


def family(key: str) -> str | None:
    """The family a compared key is drawn in (``None``: the acceptance length)."""
    if key in THROUGHPUTS:
        return "throughput"
    m = LATENCY_KEY.match(key)
    return m.group(3).upper() if m else None


def _key_order(key: str) -> tuple:
    if key in THROUGHPUTS:
        return (0, THROUGHPUTS.index(key), 0.0)
    m = LATENCY_KEY.match(key)
    if m:
        stat = m.group(1)
        rank = -2.0 if stat == "mean" else -1.0 if stat == "median" else float(m.group(2))
        return (1, LATENCIES.index(m.group(3)), rank)
    return (2, 0, 0.0)


def error_pct(measured: float, predicted: float | None) -> float | None:
    """``100 · (predicted / measured − 1)``; ``None`` for a measured 0 or no prediction."""
    if predicted is None or measured == 0 or not math.isfinite(predicted):
        return None
    return 100.0 * (predicted / measured - 1.0)


# ---------------------------------------------------------------- answers
@dataclass(frozen=True)
class MetricError:
    """One metric of one run: measured, predicted, ``error_pct``."""

    measured: float
    predicted: float | None
    error_pct: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunComparison:
    """One measured run beside its replay: ``replayed`` says what was sent again."""

    source: str
    metrics: Mapping[str, MetricError]
    replayed: Mapping[str, object]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "replayed": dict(self.replayed),
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class MetricSummary:
    """One key over the runs: the mean and median ``|error_pct|``, and how many runs."""

    mean_abs_error_pct: float
    median_abs_error_pct: float
    runs: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ValidationReport:
    """``allocator validate``'s answer (``to_dict()`` is its ``--json``)."""

    problem: str
    seed: int
    runs: tuple[RunComparison, ...]
    summary: Mapping[str, MetricSummary]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "problem": self.problem,
            "seed": self.seed,
            "runs": [r.to_dict() for r in self.runs],
            "summary": {k: v.to_dict() for k, v in self.summary.items()},
            "notes": list(self.notes),
        }


def summarise(runs: Sequence[RunComparison]) -> dict[str, MetricSummary]:
    """Per key, in the report's order, the mean and median ``|error_pct|`` over the runs
    where it has one."""
    errors: dict[str, list[float]] = {}
    for run in runs:
        for key, m in run.metrics.items():
            if m.error_pct is not None:
                errors.setdefault(key, []).append(abs(m.error_pct))
    return {
        key: MetricSummary(float(np.mean(v)), float(np.median(v)), len(v))
        for key, v in sorted(errors.items(), key=lambda kv: _key_order(kv[0]))
    }


def compare(
    measured: Mapping[str, float], predicted: Mapping[str, object]
) -> dict[str, MetricError]:
    """Every key both have, in the report's order."""
    out = {}
    for key in sorted(measured, key=_key_order):
        value = predicted.get(key)
        if key not in predicted:
            continue
        p = None if value is None else float(value)  # type: ignore[arg-type]
        if p is not None and math.isnan(p):
            p = None
        m = float(measured[key])
        out[key] = MetricError(m, p, error_pct(m, p))
    return out


__all__ = [
    "ACCEPTANCE",
    "FAMILIES",
    "LATENCY_KEY",
    "THROUGHPUTS",
    "MetricError",
    "MetricSummary",
    "RunComparison",
    "ValidationReport",
    "compare",
    "error_pct",
    "family",
    "summarise",
]
