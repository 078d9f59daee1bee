"""Requests as struct-of-arrays and their arrival times.

A workload is :class:`Requests`: for ``N`` requests, arrival time (s, from the start of the
benchmark), prompt tokens and output tokens, each an ``(N,)`` array, arrivals non-decreasing.

Arrivals follow vLLM's benchmark client (vLLM 0.33.0, ``vllm/benchmarks/serve.py``,
``get_request``, lines 431-545):

* ``request_rate = inf``: every request at time 0;
* ``burstiness = inf``: constant gaps of ``1 / request_rate``;
* otherwise gaps drawn from a gamma distribution with shape ``burstiness`` and scale
  ``1 / (request_rate · burstiness)`` (mean ``1 / request_rate``, coefficient of variation
  ``1 / sqrt(burstiness)``; ``burstiness = 1`` is a Poisson process), summed from the
  start, then rescaled so that the last arrival is exactly at ``N / request_rate``
  (serve.py lines 514-527: vLLM does this to steady throughput across seeds). The first
  request arrives after its own gap, not at 0.

vLLM draws from the global ``np.random`` state; here every draw comes from a
``numpy.random.Generator`` seeded by the caller, so the same seed gives the same
arrivals (not the same numbers as vLLM's for that seed).

The Azure LLM inference trace is read by :func:`allocator.io.trace.read_trace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..exceptions import ParameterError
from ..validate import rate as positive
from ..validate import whole

#: Most prompt or output tokens one request may have (the longest contexts served are a few
#: million tokens; past this the KV-block counts of a run would overflow).
MAX_TOKENS = 10_000_000
#: Longest a run's arrivals may span, s (about three years: past it a run's per-second
#: counts and times lose their meaning).
MAX_SPAN_S = 1e8


@dataclass(frozen=True)
class Requests:
    """``N`` requests as arrays.

    ``arrival_s``: ``(N,)`` float64, seconds from the start of the benchmark,
    non-decreasing, finite, ``>= 0``; ``prompt_tokens``, ``output_tokens``: ``(N,)`` int64,
    each ``>= 1`` (the output counts every generated token, the first included).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        arrival = np.asarray(self.arrival_s, dtype=np.float64)
        prompt = _as_counts(self.prompt_tokens, "prompt_tokens")
        output = _as_counts(self.output_tokens, "output_tokens")
        if arrival.ndim != 1 or arrival.shape != prompt.shape or arrival.shape != output.shape:
            raise ParameterError(
                "arrival_s",
                f"arrival_s, prompt_tokens and output_tokens must be 1-D of one length, got "
                f"{arrival.shape}, {prompt.shape} and {output.shape}",
            )
        if arrival.size == 0:
            raise ParameterError("arrival_s", "needs at least one request")
        if not np.all(np.isfinite(arrival)) or arrival.min() < 0:
            raise ParameterError("arrival_s", "must be finite and >= 0")
        if np.any(np.diff(arrival) < 0):
            i = int(np.argmax(np.diff(arrival) < 0)) + 1
            raise ParameterError(
                "arrival_s", f"must be non-decreasing (request {i} arrives earlier)"
            )
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def head(self, n: int) -> Requests:
        """The first ``n`` requests."""
        if n < 1:
            raise ParameterError("num_prompts", "must be >= 1")
        return Requests(self.arrival_s[:n], self.prompt_tokens[:n], self.output_tokens[:n])


def _as_counts(values: object, field: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_float = np.asarray(arr, dtype=np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            raise ParameterError(field, "must be whole numbers of tokens")
    out = np.asarray(arr, dtype=np.int64)
    if out.size and out.min() < 1:
        i = int(np.argmax(out < 1))
        raise ParameterError(field, f"must be >= 1 (request {i} has {int(out[i])})")
    return out


def arrival_times(
    num_prompts: int, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Arrival times (s) of ``num_prompts`` requests as vLLM's benchmark client sends them:
    ``(num_prompts,)`` float64, non-decreasing, from the start of the benchmark.

    ``request_rate``: requests/s (``inf``: all at 0); ``burstiness``: the gamma shape (1:
    Poisson; ``inf``: constant gaps). Gaps are rescaled so the last arrival is at
    ``num_prompts / request_rate``, as vLLM does.
    """
    n = whole(num_prompts, "num_prompts", lo=1)
    rate = positive(request_rate, "request_rate", inf=True, unit="requests/s")
    shape = positive(burstiness, "burstiness", inf=True)
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(shape):
        gaps = np.full(n, 1.0 / rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n)
    if n / rate > MAX_SPAN_S:
        raise ParameterError(
            "request_rate",
            f"{request_rate:g} requests/s spreads {n:,} requests over {n / rate:.3g} s, more "
            f"than {MAX_SPAN_S:g} s: give a higher rate",
        )
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times *= (n / rate) / times[-1]
    return times


def check_tokens(field: str, value: object) -> int:
    """One request's prompt or output length: an integer in ``1..MAX_TOKENS``;
    :class:`ParameterError` on ``field`` otherwise."""
    return whole(value, field, lo=1, hi=MAX_TOKENS)


def fixed_requests(
    num_prompts: int,
    input_len: int,
    output_len: int,
    request_rate: float,
    burstiness: float = 1.0,
    seed: int = 0,
) -> Requests:
    """``num_prompts`` requests of ``input_len`` prompt and ``output_len`` output tokens,
    arriving as :func:`arrival_times` draws them."""
    check_tokens("input_len", input_len)
    check_tokens("output_len", output_len)
    times = arrival_times(num_prompts, request_rate, burstiness, seed)
    n = times.size
    return Requests(
        times, np.full(n, int(input_len), dtype=np.int64), np.full(n, int(output_len), np.int64)
    )


__all__ = [
    "MAX_SPAN_S",
    "MAX_TOKENS",
    "check_tokens",
    "Requests",
    "arrival_times",
    "fixed_requests",
]
