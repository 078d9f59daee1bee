"""A simulated run's per-request timelines, and its metrics as ``vllm bench serve`` writes them.

:func:`summary` returns the aggregate under the keys of ``vllm bench serve --save-result``
(vLLM 0.33.0, ``vllm/benchmarks/serve.py``), computed as vLLM computes them:

* ``ttft``: first streamed chunk minus the send; ``e2el``: last chunk minus the send
  (``vllm/benchmarks/lib/endpoint_request_func.py`` lines 249-307); ``tpot``: ``(e2el -
  ttft) / (output tokens - 1)`` over requests with more than one output token
  (``calculate_metrics``, serve.py line 657); ``itl``: the gaps between consecutive chunks
  of a request, pooled over all requests (line 661). One chunk per step, so a step that
  emits several tokens shows as one gap.
* ``mean``, ``median``, ``std`` (``np.std``, population: ``ddof = 0``, line 784) and
  percentiles by ``np.percentile`` (linear interpolation). Percentile keys are named as
  ``process_one_metric`` names them (line 1430): ``p99`` for 99, ``p99.9`` for 99.9.
  Unlike vLLM, a latency with no sample (TPOT and ITL when every output is one token) is
  NaN, undefined, not vLLM's 0.
  vLLM writes ``p99`` only by default (``--metric-percentiles 99``) and no ``e2el``
  statistics unless asked (``--percentile-metrics``); :func:`summary` writes what
  ``--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99`` writes.
* ``duration``: from the benchmark's start (time 0) to the last chunk (line 1123);
  ``request_throughput = completed / duration``, ``output_throughput = output tokens /
  duration``, ``total_token_throughput = (prompt + output tokens) / duration``.
* ``max_concurrent_requests``: vLLM's count (lines 703-753): one-second buckets from the
  first send, each request counted in every bucket from its send's to its last chunk's;
  the largest bucket. It counts requests in flight at the client, those queued in the
  server included, and can exceed the largest number in flight at one instant.

``total_input_tokens`` and ``total_output_tokens`` are vLLM's too.
``spec_decode_acceptance_length`` is vLLM's key (written when the server exports its
speculative-decoding counters: ``1 + accepted / drafts``, lines 1161-1163, 1378); here it is the
tokens emitted per decode step of a sequence, bonus token included, over the decode steps
that verified drafts (vLLM counts a step without drafts as no draft); a step cut at the
output length counts what it emitted, where vLLM counts what was accepted before the cut;
1 when no step speculated. The simulator's own keys: ``mean_queue_ms`` (send to first
scheduled, mean), ``preemptions``, ``max_running_seqs`` (the most requests running at
once), ``mean_concurrency`` (time-average of the requests in the server, waiting or
running, over ``duration``: Little's law reads ``mean_concurrency = request_throughput x
mean_e2el_ms / 1000``) and ``kv_cache_peak_fraction`` (the most KV blocks allocated at
once over the cache's blocks) and ``prefix_cache_hit_rate`` (vLLM's metric: prefix-cache
hit tokens over queried tokens, ``vllm:prefix_cache_hits / vllm:prefix_cache_queries``,
counted at each request's first admission; 0 without prefix caching).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..exceptions import ParameterError
from .config import Scheduler
from .policy import SpecPolicy
from .requests import Requests

#: Percentiles :func:`summary` writes by default.
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
#: The latency metrics, in the order vLLM writes them.
LATENCIES = ("ttft", "tpot", "itl", "e2el")
_KEY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")


@dataclass(frozen=True)
class SimResult:
    """Every request's timeline in one simulated run (times in s from the benchmark's start).

    Per request, ``(N,)``: ``sent_s`` (the client sends it: its arrival, later under
    ``max_concurrency``), ``first_scheduled_s``, ``first_token_s``, ``finish_s`` (its last
    chunk), ``output_tokens``, ``chunks`` (streamed chunks: steps that emitted a token),
    ``preemptions``. ``itl_s`` ``(G,)``: every gap between consecutive chunks of one
    request, s, in the order the gaps closed; ``itl_request`` ``(G,)``: the request of each.
    ``decode_steps`` ``(K + 1, K + 2)``: decode steps of one sequence by drafts verified
    (row, ``K`` the policy's largest ``k``) and tokens emitted (column);
    ``uncut_decode_steps``: the same over the steps in which the sequence had at least
    ``drafts + 1`` tokens left (its emitted tokens are then the pmf's draw, uncut).
    ``duration_s``: the last chunk's time; ``steps``: engine steps played;
    ``time_in_system_s``: the integral over time of the requests in the server (waiting or
    running), request-seconds, accumulated step by step; ``max_running_seqs``;
    ``kv_cache_peak_fraction``; ``prefix_cache``: tokens ``(queries, hits,
    preempted_queries, preempted_hits)`` as vLLM's ``PrefixCacheStats`` counts them
    (:mod:`allocator.sim.prefix_cache`; zeros without prefix caching).
    """

    requests: Requests
    sent_s: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray
    chunks: np.ndarray
    preemptions: np.ndarray
    itl_s: np.ndarray
    itl_request: np.ndarray
    decode_steps: np.ndarray
    uncut_decode_steps: np.ndarray
    duration_s: float
    steps: int
    time_in_system_s: float
    max_running_seqs: int
    kv_cache_peak_fraction: float
    scheduler: Scheduler
    policy: SpecPolicy
    seed: int
    prefix_cache: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def prefix_cache_hit_rate(self) -> float:
        """vLLM's prefix cache hit rate: hit tokens over queried tokens at first admissions
        (preempted requests admitted again are left out, as ``CachingMetrics`` leaves them
        out); 0 with no query."""
        queries, hits = self.prefix_cache[0], self.prefix_cache[1]
        return hits / queries if queries else 0.0

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token per request, s: first chunk minus send."""
        return self.first_token_s - self.sent_s

    @property
    def e2el_s(self) -> np.ndarray:
        """End-to-end latency per request, s: last chunk minus send."""
        return self.finish_s - self.sent_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first, s, for requests with more than one output
        token (``(e2el - ttft) / (output_tokens - 1)``; others left out, as vLLM does)."""
        many = self.output_tokens > 1
        return (self.e2el_s - self.ttft_s)[many] / (self.output_tokens[many] - 1)

    @property
    def queue_s(self) -> np.ndarray:
        """Send to first scheduled per request, s."""
        return self.first_scheduled_s - self.sent_s

    def columns(self) -> dict[str, np.ndarray]:
        """Per-request columns, each ``(N,)``, for a per-request table: times in s from the
        start, latencies in ms (``tpot_ms`` NaN for a one-token output)."""
        many = self.output_tokens > 1
        tpot = np.full(self.output_tokens.size, np.nan)
        tpot[many] = self.tpot_s * 1000
        return {
            "arrival_s": self.requests.arrival_s,
            "sent_s": self.sent_s,
            "first_scheduled_s": self.first_scheduled_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "prompt_tokens": self.requests.prompt_tokens,
            "output_tokens": self.output_tokens,
            "queue_ms": self.queue_s * 1000,
            "ttft_ms": self.ttft_s * 1000,
            "tpot_ms": tpot,
            "e2el_ms": self.e2el_s * 1000,
            "chunks": self.chunks,
            "preemptions": self.preemptions,
        }

    def values_s(self, name: str) -> np.ndarray:
        """The samples of latency ``name`` (``ttft``, ``tpot``, ``itl``, ``e2el``), s."""
        if name == "ttft":
            return self.ttft_s
        if name == "tpot":
            return self.tpot_s
        if name == "itl":
            return self.itl_s
        if name == "e2el":
            return self.e2el_s
        raise ParameterError("key", f"unknown latency {name!r} (one of {', '.join(LATENCIES)})")


def percentile_word(p: float) -> str:
    """vLLM's name of percentile ``p`` in a key: ``99`` for 99.0, ``99.9`` for 99.9."""
    return str(int(p)) if int(p) == p else str(p)


def _stats_ms(values: np.ndarray, percentiles: Sequence[float]) -> dict[str, float]:
    if not values.size:  # undefined (every output one token: no TPOT, no gap): NaN
        keys = ["mean", "median", "std", *(f"p{percentile_word(float(p))}" for p in percentiles)]
        return dict.fromkeys(keys, math.nan)
    v = values
    out = {
        "mean": float(np.mean(v)) * 1000,
        "median": float(np.median(v)) * 1000,
        "std": float(np.std(v)) * 1000,
    }
    if percentiles:
        for p, x in zip(percentiles, np.percentile(v, list(percentiles)), strict=True):
            out[f"p{percentile_word(float(p))}"] = float(x) * 1000
    return out


def max_concurrent_requests(result: SimResult) -> int:
    """vLLM's ``max_concurrent_requests``: the largest one-second bucket (counted from the
    first send) of requests in flight at any moment of that second."""
    start = result.sent_s
    end = result.finish_s
    t0 = float(start.min())
    first = (start - t0).astype(np.int64)
    last = (end - t0).astype(np.int64)
    # request i is in buckets first_i..last_i: a sweep over the bucket indices where a
    # count changes (memory by requests, not by seconds of the run)
    edges = np.concatenate([first, last + 1])
    steps = np.concatenate([np.ones(first.size, np.int64), -np.ones(last.size, np.int64)])
    order = np.argsort(edges, kind="stable")
    edges, steps = edges[order], steps[order]
    # the count in a bucket is the sum of every change at or before it: take it after the
    # last change at each index
    running = np.cumsum(steps)
    at_end = np.r_[edges[1:] != edges[:-1], True]
    return int(running[at_end].max())


def acceptance_length(result: SimResult) -> float:
    """Tokens emitted per decode step of a sequence over the steps that verified drafts
    (bonus token included, cut steps counting what they emitted); 1.0 with none."""
    spec = result.decode_steps[1:]
    steps = int(spec.sum())
    if steps == 0:
        return 1.0
    return float((spec * np.arange(spec.shape[1])).sum() / steps)


def spec_decode_counts(result: SimResult) -> dict[str, float | int | list[float]]:
    """The speculative-decoding keys of ``vllm bench serve --save-result`` (vLLM 0.33.0,
    serve.py lines 1164-1170 and 1376-1387: the differences of the server's
    ``vllm:spec_decode_*`` counters over the run), counted over the decode steps that
    verified drafts: ``num_drafts`` the steps, ``draft_tokens`` the drafts verified,
    ``accepted_tokens`` the tokens emitted less the bonus token (a step cut at the output
    length counts what it emitted), ``acceptance_rate`` ``100 · accepted / drafted``,
    ``acceptance_length`` ``1 + accepted / num_drafts``, ``per_position_acceptance_rates``
    the drafts accepted at each position over ``num_drafts``. Empty when no step drafted:
    vLLM then writes none of them."""
    spec = result.decode_steps[1:]
    drafts = int(spec.sum())
    if drafts == 0:
        return {}
    k = np.arange(1, spec.shape[0] + 1)[:, None]
    accepted_each = np.clip(np.arange(spec.shape[1])[None, :] - 1, 0, None)
    drafted = int((spec * k).sum())
    accepted = int((spec * accepted_each).sum())
    positions = int(k.max())
    per_position = [
        float((spec * (accepted_each >= p)).sum()) / drafts for p in range(1, positions + 1)
    ]
    return {
        "spec_decode_acceptance_rate": 100.0 * accepted / drafted if drafted else 0.0,
        "spec_decode_acceptance_length": 1.0 + accepted / drafts,
        "spec_decode_num_drafts": drafts,
        "spec_decode_draft_tokens": drafted,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_per_position_acceptance_rates": per_position,
    }


def chunk_times_s(result: SimResult) -> np.ndarray:
    """The time of every streamed chunk, s: each request's first token, then each of its
    inter-chunk gaps added in turn (as vLLM rebuilds them, serve.py lines 726-733)."""
    order = np.argsort(result.itl_request, kind="stable")
    req = result.itl_request[order]
    gaps = result.itl_s[order]
    csum = np.cumsum(gaps)
    starts = np.r_[0, np.flatnonzero(req[1:] != req[:-1]) + 1] if req.size else np.zeros(0, int)
    before = np.zeros(req.size)
    if req.size:
        offsets = np.r_[0.0, csum][starts]
        before = offsets[np.searchsorted(starts, np.arange(req.size), side="right") - 1]
    later = result.first_token_s[req.astype(np.int64)] + csum - before
    done = np.isfinite(result.first_token_s)
    return np.concatenate([result.first_token_s[done], later])


def max_output_tokens_per_s(result: SimResult) -> float:
    """vLLM's ``max_output_tokens_per_s`` (serve.py lines 700-752): chunks counted in
    one-second buckets from the first send, the largest bucket (one per chunk, as vLLM
    counts them without a tokenizer's recount)."""
    times = chunk_times_s(result)
    if times.size == 0:
        return 0.0
    t0 = float(result.sent_s.min())
    return float(np.bincount(np.floor(times - t0).astype(np.int64).clip(0)).max())


def summary(
    result: SimResult, percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | int]:
    """The run's aggregate metrics under ``vllm bench serve --save-result``'s keys (see the
    module docstring), then the simulator's own. Latencies in ms, throughputs per second,
    ``duration`` in s; ``percentiles`` in (0, 100).

    With ``max_concurrency`` set, also the client-side queue (arrival to send) as vLLM
    writes it then when ``--percentile-metrics`` names them (serve.py lines 1361-1368,
    1439-1452): ``{mean,median,std,pN}_client_queue_time_ms`` and, unless every request
    arrived at 0 (``--request-rate inf``), ``{...}_e2el_including_client_queue_ms``."""
    for p in percentiles:
        if not 0 < float(p) < 100:
            raise ParameterError("percentiles", f"must lie in (0, 100), got {p}")
    req = result.requests
    completed = int(np.count_nonzero(np.isfinite(result.finish_s)))
    duration = result.duration_s
    out_tokens = int(result.output_tokens.sum())
    in_tokens = int(req.prompt_tokens.sum())
    doc: dict[str, float | int] = {
        "completed": completed,
        "duration": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": completed / duration if duration > 0 else math.inf,
        "output_throughput": out_tokens / duration if duration > 0 else math.inf,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration > 0 else math.inf,
    }
    for name in LATENCIES:
        stats = _stats_ms(result.values_s(name), percentiles)
        for stat, value in stats.items():
            doc[f"{stat}_{name}_ms"] = value
    if result.scheduler.max_concurrency is not None:
        client = result.sent_s - req.arrival_s
        extra = [("client_queue_time", client)]
        if np.any(req.arrival_s > 0):
            extra.append(("e2el_including_client_queue", result.e2el_s + client))
        for name, values in extra:
            for stat, value in _stats_ms(values, percentiles).items():
                doc[f"{stat}_{name}_ms"] = value
    doc["spec_decode_acceptance_length"] = acceptance_length(result)
    doc["mean_queue_ms"] = float(np.mean(result.queue_s)) * 1000
    doc["preemptions"] = int(result.preemptions.sum())
    doc["max_concurrent_requests"] = max_concurrent_requests(result)
    doc["max_running_seqs"] = result.max_running_seqs
    doc["mean_concurrency"] = result.time_in_system_s / duration if duration > 0 else 0.0
    doc["kv_cache_peak_fraction"] = result.kv_cache_peak_fraction
    doc["prefix_cache_hit_rate"] = result.prefix_cache_hit_rate
    return doc


def metric(result: SimResult, key: str) -> float:
    """One metric by its key: ``mean``, ``median``, ``std`` or ``pN`` (any ``N`` in (0,
    100), e.g. ``p99.9``) of ``ttft``, ``tpot``, ``itl`` or ``e2el``, in ms
    (``p99.9_ttft_ms``, ``median_e2el_ms``, ``mean_tpot_ms``), or any other key of
    :func:`summary`. Unknown keys raise :class:`~allocator.exceptions.ParameterError` on
    ``key``."""
    if not isinstance(key, str):
        raise ParameterError("key", f"must be a string, got {key!r}")
    found = _KEY.match(key)
    if found:
        stat, pct, name = found.group(1), found.group(2), found.group(3)
        v = result.values_s(name)
        if not v.size:  # undefined: no request has a second token
            return math.nan
        if pct is not None:
            p = float(pct)
            if not 0 < p < 100:
                raise ParameterError("key", f"{key!r}: the percentile must lie in (0, 100)")
            return float(np.percentile(v, p)) * 1000
        if stat == "mean":
            return float(np.mean(v)) * 1000
        if stat == "median":
            return float(np.median(v)) * 1000
        return float(np.std(v)) * 1000
    if key in _SCALAR_KEYS:
        return float(summary(result, ())[key])
    raise ParameterError(
        "key",
        f"unknown metric {key!r}: expected mean|median|std|pN _ ttft|tpot|itl|e2el _ms "
        f"(e.g. p99_ttft_ms, p99.9_itl_ms) or one of {', '.join(_SCALAR_KEYS)}",
    )


_SCALAR_KEYS = (
    "completed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "spec_decode_acceptance_length",
    "mean_queue_ms",
    "preemptions",
    "max_concurrent_requests",
    "max_running_seqs",
    "mean_concurrency",
    "kv_cache_peak_fraction",
    "prefix_cache_hit_rate",
)

__all__ = [
    "LATENCIES",
    "PERCENTILES",
    "SimResult",
    "acceptance_length",
    "chunk_times_s",
    "max_concurrent_requests",
    "max_output_tokens_per_s",
    "metric",
    "percentile_word",
    "spec_decode_counts",
    "summary",
]
