"""``allocator bench``: a simulated ``vllm bench serve`` of one replica, from a problem file.

The replica, its configuration, step times and requests come from the problem
(:mod:`allocator.analysis.replica`); this module runs it once and reads the run as
``vllm bench serve`` reads a real one.

The result (:class:`BenchResult`) is ``vllm bench serve --save-result``'s document for the
run (:func:`allocator.sim.summary`: vLLM's keys and formulas, with ``--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99``) headed by vLLM's own ``date``,
``label``, ``num_prompts``, ``request_rate``, ``burstiness`` and ``max_concurrency``, and the
notes. The same seed gives the same document but for ``date``.

**A fleet** (``replicas > 1``): ``replicas`` identical replicas behind a router
(:mod:`allocator.sim.fleet`, :mod:`allocator.sim.routers`), the requests sent as ``vllm bench
serve`` against the router would send them. The document's metrics are then the fleet's
(every request, the same keys and formulas), with ``router`` and ``replicas``: one entry per
replica, its index, ``num_prompts`` (the requests it received) and its own metrics under
the same keys. One replica is the single run, the document unchanged.

**Disaggregated** (:mod:`allocator.analysis.disagg_bench`): :class:`BenchResult` carries
``disagg``, the document's ``disaggregated`` (each part of TTFT, the link, each pool's
metrics), beside the whole run as the client sees it.
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
from ..exceptions import InputError, NotModelledError, ParameterError
from ..sim import PERCENTILES, Requests, Scheduler, SimResult, summary
from ..sim.disagg import DisaggResult
from ..sim.fleet import FleetResult, check_replicas, simulate_fleet
from ..sim.results import max_output_tokens_per_s, spec_decode_counts
from ..sim.routers import ROUTERS, get_router
from .limits import acceptance_notes, lengths_note, provenance_notes
from .replica import Configuration, Replica, check_prefill, replica, run
from .request_source import (
    check_router_keys,
    derived_seeds,
    stage_metrics,
)

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .capacity.slo import SLO
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
    model_id: str = ""
    #: Staged loads: each stage's metrics (:func:`~.request_source.stage_metrics`).
    stages: list[dict] = field(default_factory=list)
    fleet: FleetResult | None = None
    #: Prefill/decode disaggregation (:mod:`allocator.analysis.disagg_bench`): ``disaggregated``
    #: of the document, and the run it reads.
    disagg: dict | None = None
    disagg_run: DisaggResult | None = None

    def label(self) -> str:
        """vLLM's ``label`` of the run: the configuration and ``max_num_seqs`` (and, for a
        fleet, its replicas and router)."""
        text = f"{self.config.label()}; max_num_seqs {self.scheduler.max_num_seqs}"
        if self.fleet is not None:
            text += f"; {len(self.fleet.replicas)} replicas behind {self.fleet.router}"
        if self.disagg is not None:
            text += disagg_label(self.disagg)
        return text

    def to_dict(self, slos: Sequence[SLO] = ()) -> dict:
        """``bench --json``: every key ``vllm bench serve --save-result`` writes without
        ``--save-detailed`` (vLLM 0.33.0, vllm/benchmarks/serve.py: the header of
        ``main_async``, lines 2306-2330, merged with ``benchmark()``'s ``result``, lines
        1318-1341, 1376-1387 and the statistics of ``process_one_metric``, lines
        1426-1432), computed as vLLM computes them, then the simulator's own keys,
        ``async_scheduling`` (the scheduler that ran: vLLM's ``AsyncScheduler`` or the
        synchronous one) and ``notes``. ``request_goodput`` (requests meeting every
        ``ttft``, ``tpot`` and ``e2el`` ceiling of ``slos``, per second, as vLLM's
        ``--goodput`` counts them) is ``null`` without one, as vLLM writes it without
        ``--goodput``; the ``spec_decode_*`` keys only when a step drafted, as vLLM writes
        them only when the server drafted."""

        rate: float | str = "inf" if math.isinf(self.request_rate) else float(self.request_rate)
        burst: float | str = "inf" if math.isinf(self.burstiness) else float(self.burstiness)
        r = self.result
        done = np.isfinite(r.finish_s)
        doc: dict = {
            "date": self.date,
            "endpoint_type": BACKEND,
            "backend": BACKEND,
            "label": self.label(),
            "model_id": self.model_id,
            "tokenizer_id": self.model_id,
            "num_prompts": int(self.num_prompts),
            "request_rate": rate,
            "burstiness": burst,
            "max_concurrency": self.scheduler.max_concurrency,
        }
        metrics = plain_metrics(self.metrics)
        spec = spec_decode_counts(r)
        if not spec:
            metrics.pop("spec_decode_acceptance_length", None)
        doc.update(metrics)
        doc["failed"] = int(np.count_nonzero(~done))
        doc["request_goodput"] = self.goodput(slos)
        doc["latencies"] = [float(x) for x in r.e2el_s[done]]
        doc["queue_times"] = [float(x) for x in (r.sent_s - r.requests.arrival_s)[done]]
        doc["max_output_tokens_per_s"] = max_output_tokens_per_s(r)
        doc["rtfx"] = 0.0
        doc.update(spec)
        if self.stages:
            doc["stages"] = [plain_metrics(s) for s in self.stages]
        if self.fleet is not None:
            doc["router"] = self.fleet.router
            doc["replicas"] = replica_documents(self.fleet)
        if self.disagg is not None:
            doc["disaggregated"] = self.disagg
        doc["async_scheduling"] = self.scheduler.async_scheduling
        doc["notes"] = list(self.notes) + goodput_notes(slos)
        return doc

    def goodput(self, slos: Sequence[SLO]) -> float | None:
        """vLLM's ``request_goodput`` for the ceilings of ``slos`` on ``ttft``, ``tpot`` and
        ``e2el`` (serve.py lines 667-692: a request is good when each of its values is at
        most each ceiling, its TPOT taken as 0 with one output token), per second of the
        run; ``None`` with none of them."""
        ceilings = [s for s in slos if s.latency in GOODPUT_LATENCIES]
        if not ceilings:
            return None
        r = self.result
        good = np.isfinite(r.finish_s)
        many = r.output_tokens > 1
        tpot = np.zeros(r.output_tokens.size)
        tpot[many] = r.tpot_s
        values = {"ttft": r.ttft_s, "tpot": tpot, "e2el": r.e2el_s}
        for s in ceilings:
            good &= values[s.latency] <= s.ceiling_ms / 1000.0
        duration = float(r.duration_s)
        return int(good.sum()) / duration if duration > 0 else None

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


#: vLLM's ``--backend`` default (serve.py line 1650), written as ``backend`` and
#: ``endpoint_type``: the client protocol a simulated run stands for.
BACKEND = "openai"
#: The latencies vLLM's ``--goodput`` takes (``check_goodput_args``, serve.py line 1517).
GOODPUT_LATENCIES = ("ttft", "tpot", "e2el")


def goodput_notes(slos: Sequence[SLO]) -> list[str]:
    """What ``request_goodput`` counted, or why it is ``null``."""
    if not slos:
        return []
    used = [s for s in slos if s.latency in GOODPUT_LATENCIES]
    left = [s.key for s in slos if s.latency not in GOODPUT_LATENCIES]
    out = []
    if used:
        out.append(
            "request_goodput: requests with "
            + ", ".join(f"{s.latency} <= {s.ceiling_ms:g} ms" for s in used)
            + " per second, as vllm bench serve --goodput counts them (each request against "
            "the ceiling, whatever percentile the SLO names)"
        )
    if left:
        out.append(
            f"request_goodput leaves out {', '.join(left)}: vLLM's goodput takes ttft, tpot "
            "and e2el only"
        )
    return out


def _cell(x) -> object:
    v = x.item() if hasattr(x, "item") else x
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return v


def plain_metrics(metrics: dict) -> dict:
    """Metrics as JSON values: ints, floats, ``None`` for NaN or an infinity (undefined:
    no JSON number stands for it)."""
    out = {}
    for key, v in metrics.items():
        if isinstance(v, float | np.floating):
            value = float(v)
            out[key] = value if math.isfinite(value) else None
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


def disagg_label(doc: dict) -> str:
    """The label's tail for a disaggregated run: both pools and the link."""
    pools = doc["pools"]
    return (
        f" (decode); {doc['prefill_replicas']} prefill (max_num_seqs "
        f"{pools['prefill']['max_num_seqs']}) + {doc['decode_replicas']} decode replicas "
        f"behind {doc['router']}, KV over {doc['kv_link']['name']}"
    )


def replica_documents(fleet: FleetResult) -> list[dict]:
    """One entry per replica of a fleet: ``replica`` (its index), ``num_prompts`` (the
    requests it received) and its run's metrics under the keys of the fleet's
    (:func:`allocator.sim.summary`, the ``spec_decode_*`` counts when it drafted,
    ``max_output_tokens_per_s``); a replica that received nothing has only the first two
    and ``completed`` 0."""
    out: list[dict] = []
    for r, part in enumerate(fleet.replicas):
        entry: dict = {"replica": r}
        if part is None:
            entry.update(num_prompts=0, completed=0)
            out.append(entry)
            continue
        entry["num_prompts"] = len(part.requests)
        metrics = plain_metrics(summary(part))
        spec = spec_decode_counts(part)
        if not spec:
            metrics.pop("spec_decode_acceptance_length", None)
        entry.update(metrics)
        entry["max_output_tokens_per_s"] = max_output_tokens_per_s(part)
        entry.update(spec)
        out.append(entry)
    return out


def run_fleet(
    problem: Problem, rep: Replica, requests: Requests, seed: int, replicas: int, router: str
) -> FleetResult:
    """:func:`~allocator.analysis.replica.run` for a fleet of ``replicas`` replicas of
    ``rep`` behind ``router``: the same refusals, the same seed stream; an affinity router
    routes on the requests' keys (refused, naming what gives them, when they carry none)."""
    check_prefill(problem, rep, requests)
    check_router_keys(router, requests)
    _, sim_seed = derived_seeds(seed)
    key = ROUTERS[router].key
    keys = requests.keys(key) if key else None
    try:
        return simulate_fleet(
            requests, rep.policy, rep.step, rep.scheduler, replicas, router, sim_seed, keys
        )
    except ParameterError as exc:
        if exc.field == "kv_cache_tokens":
            raise InputError("serving.scheduler.kv_cache_tokens", exc.message) from None
        if exc.field == "step_ms":
            raise NotModelledError("serving", f"no step time: {exc.message}") from None
        raise


def fleet_note(replicas: int, router: str) -> str:
    """What a fleet's numbers are."""
    return (
        f"{replicas} replicas behind {router} ({ROUTERS[router].summary}); the metrics are "
        "the fleet's, every request; replicas: each one's own. The router sees requests in "
        "flight as it counts them and KV-cache usage as of each replica's last completed "
        "step"
    )


def fleet_settings(replicas: int, router: str | None) -> tuple[int, str | None]:
    """``replicas`` checked, and the router (``round-robin`` by default past one replica;
    checked by name even for one)."""
    n = check_replicas(replicas)
    if router is not None:
        get_router(router)
    if n > 1 and router is None:
        router = "round-robin"
    return n, router


def model_id(problem: Problem) -> str:
    """``model_id`` of the run: the problem's name (a problem file names no served model;
    ``calibrate`` groups runs by it, so one problem's runs stay together)."""
    return problem.name


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
    replicas: int = 1,
    router: str | None = None,
) -> BenchResult:
    """One simulated ``vllm bench serve`` run of ``config`` on the problem's replica: the
    ``source``'s requests at ``request_rate`` (requests/s, ``inf``: all at once); with
    ``replicas > 1``, against a fleet of that many behind ``router`` (default
    ``round-robin``; module docstring)."""
    count, router = fleet_settings(replicas, router)
    if count > 1 and max_concurrency is not None:
        raise ParameterError(
            "max_concurrency",
            "is not modelled with more than one replica (one client's limit spans the fleet)",
        )
    rep = replica(problem, config, max_num_seqs, max_concurrency)
    requests = source.at(request_rate)
    fleet = None
    all_notes = list(notes)
    if count > 1:
        assert router is not None
        fleet = run_fleet(problem, rep, requests, seed, count, router)
        result = fleet.fleet
        all_notes.append(fleet_note(count, router))
    else:
        result = run(problem, rep, requests, seed)
    all_notes += list(rep.notes) + provenance_notes(problem)
    all_notes += acceptance_notes(problem, rep.config.members, rep.config.max_k)
    all_notes += lengths_note(
        source.fixed_lengths, int(source.prompt_tokens[0]), int(source.output_tokens[0])
    )
    if config.pooled and len(config.drafters) > 1:
        if POOLED_BOUND not in all_notes:
            all_notes.append(POOLED_BOUND)
    if not np.any(result.output_tokens > 1):
        all_notes.append(
            "TPOT and ITL are undefined: every request has one output token, so none has a "
            "time per output token after the first or a gap between chunks (null in the "
            "JSON, n/a in the table; vLLM writes 0)"
        )
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
        model_id=model_id(problem),
        fleet=fleet,
        stages=stage_metrics(source, result, percentiles),
    )


__all__ = [
    "BACKEND",
    "GOODPUT_LATENCIES",
    "GROWTH",
    "QUEUE_GROWN_S",
    "BenchResult",
    "bench",
    "disagg_label",
    "fleet_note",
    "fleet_settings",
    "goodput_notes",
    "model_id",
    "overload_note",
    "plain_metrics",
    "replica_documents",
    "run_fleet",
]
