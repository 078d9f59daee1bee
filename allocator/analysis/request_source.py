"""The requests of a simulated run, as ``vllm bench serve``'s client sends them, for
``bench`` and capacity for a request rate (docs/design.md §8.14).

**Requests** (:class:`RequestSource`): ``num_prompts`` of fixed lengths arriving as vLLM's
client sends them (gamma gaps of shape ``burstiness``, rescaled so the last arrives at
``N / rate``: :func:`allocator.sim.arrival_times`), or the first ``num_prompts`` rows of
an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``). A trace's own
rate is its rows over their time span; asked for another rate it is sped up or slowed
down uniformly. One ``seed`` seeds everything: two independent streams are derived from
it, one for the arrivals and one for the tokens per step (:func:`derived_seeds`).

**What they share** (for prefix caching; :mod:`allocator.sim.sessions`): with
``shared_prefix_len`` every prompt starts with the same tokens; with ``turns`` above 1 the
requests are multi-turn sessions (each turn's prompt the previous prompt, its answer and a
new message of ``input_len`` tokens), the first turns arriving as above at ``rate / turns``
sessions/s (so ``rate`` requests/s were every turn sent at once) and each later turn sent
``think_time`` s after the previous one finishes (closed loop: the client waits for the
answer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..exceptions import ParameterError
from ..io.trace import read_trace
from ..sim import Requests, arrival_times
from ..sim.requests import MAX_SPAN_S, TokenContent, check_tokens
from ..sim.sessions import session_starts, sessions, shared_prefix
from ..validate import rate as positive
from ..validate import seed as valid_seed
from ..validate import whole

#: vLLM's default ``--num-prompts``.
DEFAULT_NUM_PROMPTS = 1000
#: Most requests one run simulates: 200,000 conversation requests take about a minute on
#: one core (memory: about 20 bytes per output token, plus the per-request arrays).
MAX_PROMPTS = 200_000


def derived_seeds(seed: int) -> tuple[int, int]:
    """Two independent seeds from ``seed``: the arrivals', the tokens-per-step draws'."""
    seed = valid_seed(seed)
    states = [
        np.random.SeedSequence([int(seed), i]).generate_state(1, np.uint64)[0] for i in (0, 1)
    ]
    return int(states[0] >> np.uint64(1)), int(states[1] >> np.uint64(1))


@dataclass(frozen=True, eq=False)
class RequestSource:
    """The requests of a run, at any rate: their lengths, and either vLLM-style generated
    arrivals (``burstiness``, ``seed``) or a trace's own arrival times (``trace_s``, from
    its first row; its rate is ``N`` over their span)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    burstiness: float = 1.0
    seed: int = 0
    trace_s: np.ndarray | None = None
    trace: str | None = None
    content: TokenContent | None = None
    after: np.ndarray | None = None
    think_s: np.ndarray | None = None
    #: the command-line flags that make what the requests share (for a reproducing command)
    flags: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def native_rate(self) -> float | None:
        """A trace's own rate, requests/s (``inf`` when its rows share one time); ``None``
        for generated arrivals."""
        if self.trace_s is None:
            return None
        span = float(self.trace_s[-1] - self.trace_s[0])
        return math.inf if span <= 0 else len(self) / span

    def at(self, rate: float) -> Requests:
        """The requests arriving at ``rate`` requests/s (``inf``: all at once)."""
        r = positive(rate, "request_rate", inf=True, unit="requests/s")
        if self.after is not None:
            # sessions: their first turns at rate / turns, each later turn at its first's
            first = session_starts(self.after)
            starts = arrival_times(first.size, r * first.size / len(self), self.burstiness,
                                   self.seed)  # fmt: skip
            times = starts[np.searchsorted(first, np.arange(len(self)), side="right") - 1]
        elif self.trace_s is None:
            times = arrival_times(len(self), r, self.burstiness, self.seed)
        elif math.isinf(r):
            times = np.zeros(len(self))
        else:
            native = self.native_rate
            assert native is not None
            if math.isinf(native):
                raise self.constant_trace()
            times = self.trace_s * (native / r)
            if times.size and times[-1] > MAX_SPAN_S:
                raise ParameterError(
                    "request_rate",
                    f"the trace at {r:g} requests/s spans {times[-1]:.3g} s, more than "
                    f"{MAX_SPAN_S:g} s: give a higher rate",
                )
        return Requests(
            times, self.prompt_tokens, self.output_tokens, self.content, self.after, self.think_s
        )

    def constant_trace(self) -> ParameterError:
        """The error of a trace whose rows share one timestamp, asked for a rate."""
        return ParameterError(
            "trace",
            f"{self.trace}: every row has the same timestamp, so the trace has no rate to "
            "scale or speed up (give --request-rate with generated arrivals, or a trace "
            "with times)",
        )

    @property
    def mean_output(self) -> float:
        return float(self.output_tokens.mean())


#: The smallest burstiness (gamma shape) accepted: below it numpy's gamma draws underflow
#: to 0 (measured: none in 2,000,000 draws at 0.02, 3e-5 of them at 0.015, 47% at 0.001).
MIN_BURSTINESS = 0.02


def request_source(
    num_prompts: int | None = None,
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    shared_prefix_len: int = 0,
    turns: int = 1,
    think_time: float = 0.0,
) -> RequestSource:
    """``num_prompts`` requests (default :data:`DEFAULT_NUM_PROMPTS`; with a trace its first
    rows, all of them by default) of ``input_len``/``output_len`` tokens or from ``trace``;
    every prompt starting with the same ``shared_prefix_len`` tokens; in sessions of
    ``turns`` with ``think_time`` s between a turn's finish and the next turn's send (not
    with a trace)."""
    turns = whole(turns, "turns", lo=1)
    if think_time != 0.0 and turns == 1:
        raise ParameterError("think_time", "is the pause between turns: give turns above 1")
    if num_prompts is not None:
        num_prompts = whole(num_prompts, "num_prompts", lo=1, hi=MAX_PROMPTS)
    b = positive(burstiness, "burstiness", inf=True)
    if b < MIN_BURSTINESS:
        raise ParameterError(
            "burstiness",
            f"{burstiness:g} is below {MIN_BURSTINESS:g}: gamma gaps of so small a shape "
            "underflow to 0 (at 0.001 half of them), so requests would arrive in bursts of "
            "simultaneous sends the shape does not describe",
        )
    arrival_seed, _ = derived_seeds(seed)
    if trace is not None:
        if input_len is not None or output_len is not None:
            raise ParameterError(
                "trace", "takes the lengths from its rows: give a trace or input/output lengths"
            )
        limit = num_prompts if num_prompts is not None else MAX_PROMPTS
        reqs = read_trace(trace, num_prompts=limit)
        if num_prompts is None and len(reqs) >= MAX_PROMPTS:
            raise ParameterError(
                "num_prompts", f"the trace has more than {MAX_PROMPTS:,} rows: take fewer"
            )
        if turns > 1:
            raise ParameterError("turns", "makes sessions of input/output lengths, not a trace")
        content = None
        if shared_prefix_len:
            content = shared_prefix(reqs.prompt_tokens, reqs.output_tokens, shared_prefix_len)
        return RequestSource(
            reqs.prompt_tokens,
            reqs.output_tokens,
            b,
            arrival_seed,
            reqs.arrival_s,
            str(trace),
            content,
            flags=_flags(shared_prefix_len, turns, think_time),
        )
    if input_len is None or output_len is None:
        missing = "input_len" if input_len is None else "output_len"
        raise ParameterError(missing, "give the requests: input and output lengths, or a trace")
    check_tokens("input_len", input_len)
    check_tokens("output_len", output_len)
    n = DEFAULT_NUM_PROMPTS if num_prompts is None else int(num_prompts)
    if turns > 1:
        prompt, output, content, after, think = sessions(
            n, turns, input_len, output_len, think_time, shared_prefix_len
        )
        flags = _flags(shared_prefix_len, turns, think_time)
        return RequestSource(
            prompt, output, b, arrival_seed, None, None, content, after, think, flags
        )
    if shared_prefix_len:
        p = np.full(n, int(input_len), dtype=np.int64)
        o = np.full(n, int(output_len), dtype=np.int64)
        content = shared_prefix(p, o, shared_prefix_len)
        flags = _flags(shared_prefix_len, turns, think_time)
        return RequestSource(p, o, b, arrival_seed, None, None, content, flags=flags)
    return RequestSource(
        np.full(n, int(input_len), dtype=np.int64),
        np.full(n, int(output_len), dtype=np.int64),
        b,
        arrival_seed,
    )


def _flags(shared_prefix_len: int, turns: int, think_time: float) -> tuple[str, ...]:
    out: list[str] = []
    if shared_prefix_len:
        out += ["--shared-prefix-len", str(int(shared_prefix_len))]
    if turns > 1:
        out += ["--turns", str(int(turns)), "--think-time", repr(float(think_time))]
    return tuple(out)


def run_rate(
    source: RequestSource, request_rate: float | None, trace_speedup: float | None
) -> float:
    """The rate of a run: ``request_rate``; or a trace's own rate times ``trace_speedup``
    (default 1); or, for generated arrivals, ``inf`` (vLLM's default: all at once)."""
    native = source.native_rate  # None: generated arrivals
    if trace_speedup is not None:
        if native is None:
            raise ParameterError("trace_speedup", "speeds up a trace: give a trace")
        if request_rate is not None:
            raise ParameterError(
                "trace_speedup", "give the rate (request_rate) or a trace speed-up, not both"
            )
        f = positive(trace_speedup, "trace_speedup")
        if math.isinf(native):
            raise source.constant_trace()
        assert source.trace_s is not None
        span = float(source.trace_s[-1] - source.trace_s[0]) / f
        if span > MAX_SPAN_S:
            raise ParameterError(
                "trace_speedup",
                f"{f:g} slows the trace to {span:.3g} s, more than {MAX_SPAN_S:g} s: give a "
                "larger speed-up",
            )
        return native * f
    if request_rate is not None:
        return positive(request_rate, "request_rate", inf=True, unit="requests/s")
    return math.inf if native is None else native


__all__ = [
    "DEFAULT_NUM_PROMPTS",
    "MIN_BURSTINESS",
    "MAX_PROMPTS",
    "RequestSource",
    "derived_seeds",
    "request_source",
    "run_rate",
]
