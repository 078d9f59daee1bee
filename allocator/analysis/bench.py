"""``allocator bench``: a simulated ``vllm bench serve`` of one replica, from a problem file.

The replica, its configuration, step times and requests come from the problem
(:mod:`allocator.analysis.replica`); this module runs it once and reads the run as
``vllm bench serve`` reads a real one.

The result (:class:`BenchResult`) is ``vllm bench serve --save-result``'s document for the
run (:func:`allocator.sim.summary`: vLLM's keys and formulas, with ``--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99``) headed by vLLM's own ``date``,
``label``, ``num_prompts``, ``request_rate``, ``burstiness`` and ``max_concurrency``, and the
notes. The same seed gives the same document but for ``date``.
"""

from __future__ import annotations

import csv
import datetime
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..engines import POOLED_BOUND
from ..sim import PERCENTILES, Scheduler, SimResult, summary
from .replica import Configuration, replica, run

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .request_source import RequestSource


@dataclass
class BenchResult:
    """``allocator bench``'s answer: the run, its metrics as ``vllm bench serve`` writes
    them (:func:`allocator.sim.summary`), and notes."""

    problem: str
    config: Configuration
    scheduler: Scheduler
    num_prompts: int
    request_rate: float
    burstiness: float
    result: SimResult
    metrics: dict[str, float | int]
    notes: list[str] = field(default_factory=list)
    date: str = ""
    trace: str | None = None

    def label(self) -> str:
        """vLLM's ``label`` of the run: the configuration and ``max_num_seqs``."""
        return f"{self.config.label()}; max_num_seqs {self.scheduler.max_num_seqs}"

    def to_dict(self) -> dict:
        """``bench --json``: vLLM's header keys (``date``, ``label``, ``num_prompts``,
        ``request_rate``, ``burstiness``, ``max_concurrency``), then the metrics under
        ``vllm bench serve --save-result``'s keys and the simulator's own, then ``notes``."""
        rate: float | str = "inf" if math.isinf(self.request_rate) else float(self.request_rate)
        burst: float | str = "inf" if math.isinf(self.burstiness) else float(self.burstiness)
        doc: dict = {
            "date": self.date,
            "label": self.label(),
            "num_prompts": int(self.num_prompts),
            "request_rate": rate,
            "burstiness": burst,
            "max_concurrency": self.scheduler.max_concurrency,
        }
        doc.update(plain_metrics(self.metrics))
        doc["notes"] = list(self.notes)
        return doc

    def per_request_rows(self) -> tuple[list[str], list[list]]:
        """``--per-request``'s header and rows: one per request, in arrival order."""
        cols = self.result.columns()
        names = ["request", *cols]
        rows = []
        n = len(self.result.requests)
        arrays = [np.asarray(v) for v in cols.values()]
        for i in range(n):
            rows.append([i, *(_cell(a[i]) for a in arrays)])
        return names, rows

    def per_request_csv(self) -> str:
        """The per-request table as CSV text (times in s from the start, latencies ms)."""

        names, rows = self.per_request_rows()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        w.writerows(rows)
        return buf.getvalue()


def _cell(x) -> object:
    v = x.item() if hasattr(x, "item") else x
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return v


def plain_metrics(metrics: dict) -> dict:
    """Metrics as JSON values: ints, floats, ``None`` for NaN."""
    out = {}
    for key, v in metrics.items():
        if isinstance(v, float | np.floating):
            value = float(v)
            out[key] = None if math.isnan(value) else value
        else:
            out[key] = int(v)
    return out


#: A queue is taken to grow through a run when the requests sent in its last quarter wait
#: longer than this (s) and more than :data:`GROWTH` times those of its first quarter.
QUEUE_GROWN_S = 1.0
GROWTH = 4.0


def overload_note(result: SimResult, request_rate: float) -> str | None:
    """A note when the queue grew through a run at a finite rate (``None`` otherwise): the
    requests sent in the last quarter waited (send to first scheduled) more than
    :data:`QUEUE_GROWN_S` and :data:`GROWTH` times the first quarter's mean. The replica then
    ran above what it sustains, and TTFT and E2EL grow with the number of requests sent."""
    if not math.isfinite(request_rate) or len(result.sent_s) < 8:
        return None
    order = np.argsort(result.sent_s, kind="stable")
    wait = (result.first_scheduled_s - result.sent_s)[order]
    q = len(wait) // 4
    first, last = float(wait[:q].mean()), float(wait[-q:].mean())
    if last <= QUEUE_GROWN_S or last <= GROWTH * first:
        return None
    return (
        f"the queue grew through the run: requests sent in its last quarter waited {last:,.3g} s "
        f"on average before they were scheduled, those of the first quarter {first:,.3g} s; "
        f"{request_rate:g} requests/s is more than this replica sustains, so TTFT and E2EL "
        "grow with the number of requests sent (capacity --request-rate finds the rate it "
        "sustains)"
    )


def bench(
    problem: Problem,
    source: RequestSource,
    config: Configuration,
    request_rate: float,
    *,
    max_num_seqs: int | None = None,
    max_concurrency: int | None = None,
    seed: int = 0,
    notes: Sequence[str] = (),
    percentiles: Sequence[float] = PERCENTILES,
) -> BenchResult:
    """One simulated ``vllm bench serve`` run of ``config`` on the problem's replica: the
    ``source``'s requests at ``request_rate`` (requests/s, ``inf``: all at once)."""
    rep = replica(problem, config, max_num_seqs, max_concurrency)
    requests = source.at(request_rate)
    result = run(problem, rep, requests, seed)
    all_notes = list(notes) + list(rep.notes)
    if config.pooled and len(config.drafters) > 1:
        if POOLED_BOUND not in all_notes:
            all_notes.append(POOLED_BOUND)
    overloaded = overload_note(result, request_rate)
    if overloaded:
        all_notes.append(overloaded)
    if config.speculative:
        all_notes.append(
            f"KV slots reserved past the verified tokens for the drafter: "
            f"{rep.policy.lookahead} (as vLLM 0.33 reserves them for its method)"
        )
    return BenchResult(
        problem=problem.name,
        config=rep.config,
        scheduler=rep.scheduler,
        num_prompts=len(requests),
        request_rate=float(request_rate),
        burstiness=source.burstiness,
        result=result,
        metrics=summary(result, percentiles),
        notes=all_notes,
        date=datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        trace=source.trace,
    )


__all__ = [
    "GROWTH",
    "QUEUE_GROWN_S",
    "BenchResult",
    "bench",
    "overload_note",
    "plain_metrics",
]
