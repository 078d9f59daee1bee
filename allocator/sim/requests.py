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

**What requests share** (for prefix caching, :mod:`allocator.sim.prefix_cache`):
``Requests.content``, a :class:`TokenContent`, describes each request's whole token
sequence (prompt, then output) as segments ``(segment id, length)``: a segment id names one
token string and a segment of length ``L`` is its first ``L`` tokens, so two requests hold
equal tokens at a position exactly when the segments there have one id and one offset.
Without it every request's tokens are its own (nothing is shared between requests; a
request preempted can still find its own blocks again).

**Sessions** (multi-turn, :mod:`allocator.sim.sessions`): ``Requests.after[i]`` is the
request whose finish releases request ``i`` (``-1``: none) and ``think_s[i]`` the seconds
the client waits after that finish before sending it (its ``arrival_s`` is then a lower
bound: the send is the later of the two).

**Keys** (for the routers of a fleet, :mod:`allocator.sim.routers`): ``Requests.prefix_group``
names each request's prefix group (requests of one group start with the same tokens, the
longest prefix the workload shares) and ``Requests.session`` its session; each ``(N,)``
int64 ``>= 0`` or ``None`` when the workload defines none (:meth:`Requests.keys`).
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
class TokenContent:
    """Every request's token sequence (prompt then output) as segments, CSR-style.

    ``ids``: ``(S,)`` int64 segment ids, ``>= 0``; ``lengths``: ``(S,)`` int64 tokens of
    each, ``>= 1``; ``starts``: ``(N + 1,)`` int64, request ``i``'s segments are
    ``ids[starts[i]:starts[i + 1]]``, non-decreasing from 0 to ``S``. Request ``i``'s
    lengths must sum to its prompt plus output tokens (checked by :class:`Requests`).
    Memory: 16 bytes per segment.
    """

    ids: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids, dtype=np.int64)
        lengths = np.asarray(self.lengths, dtype=np.int64)
        starts = np.asarray(self.starts, dtype=np.int64)
        if ids.ndim != 1 or ids.shape != lengths.shape:
            raise ParameterError("content", "ids and lengths must be 1-D of one length")
        if starts.ndim != 1 or starts.size < 2 or starts[0] != 0 or starts[-1] != ids.size:
            raise ParameterError("content", "starts must run from 0 to the number of segments")
        if np.any(np.diff(starts) < 1):
            raise ParameterError("content", "every request needs at least one segment")
        if ids.size and ids.min() < 0:
            raise ParameterError("content", "segment ids must be >= 0")
        if lengths.size and lengths.min() < 1:
            raise ParameterError("content", "segment lengths must be >= 1")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "starts", starts)

    def __len__(self) -> int:
        return int(self.starts.size - 1)

    def totals(self) -> np.ndarray:
        """Tokens per request, ``(N,)``: the sum of its segments' lengths."""
        cum = np.concatenate(([0], np.cumsum(self.lengths)))
        return cum[self.starts[1:]] - cum[self.starts[:-1]]

    def head(self, n: int) -> TokenContent:
        """The first ``n`` requests' segments."""
        end = int(self.starts[n])
        return TokenContent(self.ids[:end], self.lengths[:end], self.starts[: n + 1])

    def segments(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Request ``i``'s segment ids and lengths."""
        a, b = int(self.starts[i]), int(self.starts[i + 1])
        return self.ids[a:b], self.lengths[a:b]


@dataclass(frozen=True)
class Requests:
    """``N`` requests as arrays.

    ``arrival_s``: ``(N,)`` float64, seconds from the start of the benchmark,
    non-decreasing, finite, ``>= 0``; ``prompt_tokens``, ``output_tokens``: ``(N,)`` int64,
    each ``>= 1`` (the output counts every generated token, the first included).

    Optional: ``content`` (:class:`TokenContent`, what the requests' tokens share; ``None``:
    nothing shared), ``after`` ``(N,)`` int64 (the earlier request whose finish releases
    request ``i``, ``-1`` for none) with ``think_s`` ``(N,)`` float64 (s from that finish to
    the send, ``>= 0``); ``after`` and ``think_s`` come together or not at all;
    ``prefix_group`` and ``session`` ``(N,)`` int64 ``>= 0`` (each request's prefix group
    and session, the keys the affinity routers route on; ``None``: the workload defines
    none).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    content: TokenContent | None = None
    after: np.ndarray | None = None
    think_s: np.ndarray | None = None
    prefix_group: np.ndarray | None = None
    session: np.ndarray | None = None

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
        if self.content is not None:
            if not isinstance(self.content, TokenContent):
                raise ParameterError("content", "must be a TokenContent")
            if len(self.content) != arrival.size:
                raise ParameterError(
                    "content", f"describes {len(self.content)} requests, not {arrival.size}"
                )
            bad = np.flatnonzero(self.content.totals() != prompt + output)
            if bad.size:
                i = int(bad[0])
                raise ParameterError(
                    "content",
                    f"request {i}'s segments hold {int(self.content.totals()[i])} tokens, "
                    f"not its prompt + output {int(prompt[i] + output[i])}",
                )
        if (self.after is None) != (self.think_s is None):
            raise ParameterError("after", "after and think_s come together")
        if self.after is not None:
            after = np.asarray(self.after, dtype=np.int64)
            think = np.asarray(self.think_s, dtype=np.float64)
            if after.shape != arrival.shape or think.shape != arrival.shape:
                raise ParameterError("after", "after and think_s must be (N,) like arrival_s")
            if np.any((after < -1) | (after >= np.arange(arrival.size))):
                raise ParameterError("after", "must name an earlier request, or -1")
            if not np.all(np.isfinite(think)) or (think.size and think.min() < 0):
                raise ParameterError("think_s", "must be finite and >= 0")
            object.__setattr__(self, "after", after)
            object.__setattr__(self, "think_s", think)
        for name in KEY_KINDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_keys(value, name, arrival.size))

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def keys(self, kind: str) -> np.ndarray | None:
        """The requests' keys of ``kind`` (one of :data:`KEY_KINDS`): ``(N,)`` int64, or
        ``None`` when the workload defines none."""
        if kind not in KEY_KINDS:
            raise ParameterError("kind", f"one of {', '.join(KEY_KINDS)}, got {kind!r}")
        value: np.ndarray | None = getattr(self, kind)
        return value

    def head(self, n: int) -> Requests:
        """The first ``n`` requests."""
        if n < 1:
            raise ParameterError("num_prompts", "must be >= 1")
        content = None if self.content is None else self.content.head(min(n, len(self)))
        after = None if self.after is None else self.after[:n]
        think = None if self.think_s is None else self.think_s[:n]
        group = None if self.prefix_group is None else self.prefix_group[:n]
        session = None if self.session is None else self.session[:n]
        return Requests(
            self.arrival_s[:n],
            self.prompt_tokens[:n],
            self.output_tokens[:n],
            content,
            after,
            think,
            group,
            session,
        )


#: The keys requests may carry (:meth:`Requests.keys`): a prefix group, a session.
KEY_KINDS = ("prefix_group", "session")


def _as_keys(values: object, field: str, n: int) -> np.ndarray:
    """``values`` as ``(n,)`` int64 keys ``>= 0``; ``ParameterError`` on ``field``."""
    arr = np.asarray(values)
    if arr.shape != (n,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ParameterError(field, f"must be {n} integers, one a request")
    out = arr.astype(np.int64)
    if out.size and out.min() < 0:
        raise ParameterError(field, f"must be >= 0 (request {int(np.argmax(out < 0))})")
    return out


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
    "KEY_KINDS",
    "MAX_SPAN_S",
    "MAX_TOKENS",
    "check_tokens",
    "Requests",
    "TokenContent",
    "arrival_times",
    "fixed_requests",
]
