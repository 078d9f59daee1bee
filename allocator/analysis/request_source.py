"""The requests of a simulated run, as ``vllm bench serve``'s client sends them, for
``bench`` and capacity for a request rate (docs/design.md §8.14).

**Requests** (:class:`RequestSource`): ``num_prompts`` of fixed lengths arriving as vLLM's
client sends them (gamma gaps of shape ``burstiness``, rescaled so the last arrives at
``N / rate``: :func:`allocator.sim.arrival_times`), or the first ``num_prompts`` rows of
an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``). A trace's own
rate is its rows over their time span; asked for another rate it is sped up or slowed
down uniformly. One ``seed`` seeds everything: two independent streams are derived from
it, one for the arrivals and one for the tokens per step (:func:`derived_seeds`).

**Workloads as benchmarks generate them** (:mod:`allocator.sim.workloads`): vLLM's random
dataset (``random_input_len``, ``random_output_len``, ``random_range_ratio``: lengths
uniform around the means, drawn from ``seed`` itself as ``vllm bench serve --seed`` draws
them); lengths drawn with replacement from a trace's rows (``lengths_from``) at generated
arrivals; and staged loads (``stages``: ``(rate, seconds)`` windows of Poisson or gamma
arrivals, whose draws set the number of requests). The lengths are one of: fixed
(``input_len`` and ``output_len``, the random dataset at range ratio 0 but refused beside
its options), random, from a trace's rows, or a trace replayed (``trace``); the arrivals
are generated at one rate, staged, or the trace's own. Every request runs to its output
length (vLLM's ``--ignore-eos``).

**What they share** (for prefix caching; :mod:`allocator.sim.sessions`): with
``shared_prefix_len`` every prompt starts with the same tokens; with ``turns`` above 1 the
requests are multi-turn sessions (each turn's prompt the previous prompt, its answer and a
new message of ``input_len`` tokens), the first turns arriving as above at ``rate / turns``
sessions/s (so ``rate`` requests/s were every turn sent at once) and each later turn sent
``think_time`` s after the previous one finishes (closed loop: the client waits for the
answer); a trace may name each row's prefix or session (its ``prefix_id`` and
``prefix_tokens``, or ``session_id`` columns: :func:`allocator.io.trace.read_trace`).

**Keys** (the affinity routers' of a fleet, :mod:`allocator.sim.routers`): a shared prefix
puts every request in prefix group 0 (one group); sessions, from ``turns`` or a trace's
``session_id``, give each request its session and, as its prefix group, the session too
(a session's first turn is its own content, which every later turn starts with); a trace's
``prefix_id`` gives the groups. Without any of them requests carry no keys, and
:func:`check_router_keys` refuses the affinity routers naming what to add.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..exceptions import ParameterError
from ..io.trace import read_length_chunks, read_trace
from ..sim import PERCENTILES, Requests, SimResult, arrival_times, summary, workloads
from ..sim.requests import MAX_SPAN_S, TokenContent, check_tokens
from ..sim.routers import ROUTERS
from ..sim.sessions import session_ids, session_starts, sessions, shared_prefix
from ..validate import rate as positive
from ..validate import seed as valid_seed
from ..validate import whole

#: vLLM's default ``--num-prompts``.
DEFAULT_NUM_PROMPTS = 1000
#: Most requests one run simulates: 200,000 conversation requests take about a minute on
#: one core (memory: about 20 bytes per output token, plus the per-request arrays).
MAX_PROMPTS = 200_000


def lengths_seed(seed: int) -> int:
    """A third stream from ``seed``, independent of :func:`derived_seeds`' two: the rows
    drawn by ``lengths_from``."""
    state = np.random.SeedSequence([int(valid_seed(seed)), 2]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


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
    #: Staged loads: the ``(rate, seconds)`` stages, the arrival times drawn for them (s,
    #: ``(N,)``) and each request's stage (``(N,)``, 0-based); ``at`` returns these times.
    stages: tuple[tuple[float, float], ...] | None = None
    stage_s: np.ndarray | None = None
    stage_of: np.ndarray | None = None
    #: The command-line words giving the lengths when they are neither fixed nor a trace
    #: replayed (``("--random-input-len", "1024", ...)``, ``("--lengths-from", PATH)``), for
    #: a command that reproduces the run; ``()`` otherwise.
    lengths: tuple[str, ...] = ()
    #: Each request's prefix group and session (``(N,)`` int64, module docstring), or
    #: ``None`` where the workload defines none.
    prefix_group: np.ndarray | None = None
    session: np.ndarray | None = None

    @property
    def fixed_lengths(self) -> bool:
        """Every request has the same prompt and output lengths, as given (no trace, no
        drawn lengths)."""
        return self.trace is None and not self.lengths

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
        if self.stage_s is not None:
            if r != self.mean_rate:
                raise ParameterError(
                    "request_rate", "the stages set the arrivals (stages): give one or the other"
                )
            times = self.stage_s
        elif self.after is not None:
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
            times,
            self.prompt_tokens,
            self.output_tokens,
            self.content,
            self.after,
            self.think_s,
            self.prefix_group,
            self.session,
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
    def mean_rate(self) -> float | None:
        """Staged loads: the requests drawn over the stages' whole time, requests/s;
        ``None`` otherwise."""
        if self.stages is None:
            return None
        return len(self) / sum(s for _, s in self.stages)

    @property
    def mean_output(self) -> float:
        return float(self.output_tokens.mean())


#: The smallest burstiness (gamma shape) accepted: below it numpy's gamma draws underflow
#: to 0 (measured: none in 2,000,000 draws at 0.02, 3e-5 of them at 0.015, 47% at 0.001).
MIN_BURSTINESS = 0.02


#: The ways of giving a run's lengths, by the parameters of each: at most one is taken.
LENGTH_SOURCES = (
    ("a trace replayed", ("trace",)),
    ("lengths from a trace's rows", ("lengths_from",)),
    ("the random dataset", ("random_input_len", "random_output_len", "random_range_ratio")),
    ("fixed lengths", ("input_len", "output_len")),
)


def _one_length_source(given: dict[str, object]) -> str | None:
    """The one way of giving lengths used (a :data:`LENGTH_SOURCES` name), ``None`` for
    none; :class:`ParameterError` naming a parameter of each when two are mixed."""
    used = [
        (kind, next(n for n in names if given[n] is not None))
        for kind, names in LENGTH_SOURCES
        if any(given[n] is not None for n in names)
    ]
    if len(used) > 1:
        (kind_a, a), (kind_b, b) = used[:2]
        raise ParameterError(
            a, f"gives {kind_a}, not to be mixed with {kind_b} ({b}): give one of them"
        )
    return used[0][0] if used else None


def request_source(
    num_prompts: int | None = None,
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | str | Mapping[str, float] | None = None,
    lengths_from: str | Path | None = None,
    stages: str | Sequence[tuple[float, float]] | None = None,
    shared_prefix_len: int = 0,
    turns: int = 1,
    think_time: float = 0.0,
) -> RequestSource:
    """The requests of a run (module docstring).

    Lengths, one of: ``input_len``/``output_len`` tokens each; vLLM's random dataset
    (``random_input_len``, default 1024, ``random_output_len``, default 128, and
    ``random_range_ratio``, default 0: :func:`allocator.sim.workloads.random_lengths`,
    seeded by ``seed`` itself as vLLM's ``--seed``); ``lengths_from``, a trace whose rows
    are drawn with replacement; or ``trace``, replayed with its times. ``num_prompts``
    requests (default :data:`DEFAULT_NUM_PROMPTS`; with a trace its first rows, all of them
    by default), or, with ``stages`` (``"RATE:SECONDS,..."`` or ``(rate, seconds)``
    pairs), as many as arrive in them (``num_prompts`` refused). What they share: every
    prompt starting with the same ``shared_prefix_len`` tokens; sessions of ``turns`` (fixed
    lengths only) with ``think_time`` s between a turn's finish and the next turn's send."""
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
    kind = _one_length_source(
        {
            "input_len": input_len,
            "output_len": output_len,
            "random_input_len": random_input_len,
            "random_output_len": random_output_len,
            "random_range_ratio": random_range_ratio,
            "lengths_from": lengths_from,
            "trace": trace,
        }
    )
    if kind == "a trace replayed":
        assert trace is not None
        if stages is not None:
            raise ParameterError(
                "stages", "generate the arrivals, and a trace (trace) brings its own: give one"
            )
        limit = num_prompts if num_prompts is not None else MAX_PROMPTS
        reqs = read_trace(trace, num_prompts=limit)
        if num_prompts is None and len(reqs) >= MAX_PROMPTS:
            raise ParameterError(
                "num_prompts", f"the trace has more than {MAX_PROMPTS:,} rows: take fewer"
            )
        if turns > 1:
            raise ParameterError("turns", "makes sessions of input/output lengths, not a trace")
        content, group = reqs.content, reqs.prefix_group
        if shared_prefix_len:
            if content is not None:
                raise ParameterError(
                    "shared_prefix_len",
                    f"{trace} names each row's prefix or session in its own columns: give "
                    "one or the other",
                )
            content = shared_prefix(reqs.prompt_tokens, reqs.output_tokens, shared_prefix_len)
            group = np.zeros(len(reqs), dtype=np.int64)
        return RequestSource(
            reqs.prompt_tokens,
            reqs.output_tokens,
            b,
            arrival_seed,
            reqs.arrival_s,
            str(trace),
            content,
            flags=_flags(shared_prefix_len, turns, think_time),
            prefix_group=group,
            session=reqs.session,
        )
    stage_plan = None
    stage_s = stage_of = None
    if stages is not None:
        if num_prompts is not None:
            raise ParameterError(
                "num_prompts", "the stages (stages) set the number of requests: give one"
            )
        stage_plan = workloads.parse_stages(stages)
        stage_s, stage_of = workloads.staged_arrivals(stage_plan, b, arrival_seed, MAX_PROMPTS)
        n = int(stage_s.size)
    else:
        n = DEFAULT_NUM_PROMPTS if num_prompts is None else int(num_prompts)
    if kind == "the random dataset":
        ratios = (0.0, 0.0)
        if random_range_ratio is not None:
            ratios = workloads.range_ratios(random_range_ratio)
        n_in = workloads.RANDOM_INPUT_LEN if random_input_len is None else random_input_len
        n_out = workloads.RANDOM_OUTPUT_LEN if random_output_len is None else random_output_len
        prompts, outputs = workloads.random_lengths(n, n_in, n_out, ratios, seed=valid_seed(seed))
        ratio_text = (
            repr(ratios[0])
            if ratios[0] == ratios[1]
            else json.dumps({"input": ratios[0], "output": ratios[1]})
        )
        words: tuple[str, ...] = (
            "--random-input-len", str(n_in), "--random-output-len", str(n_out),
            "--random-range-ratio", ratio_text,
        )  # fmt: skip
    elif kind == "lengths from a trace's rows":
        assert lengths_from is not None
        path = lengths_from  # every row, no timestamp needed: sim/workloads.py, io/trace.py
        prompts, outputs = workloads.lengths_from_chunks(
            lambda: read_length_chunks(path, field="lengths_from"), n, lengths_seed(seed)
        )
        words = ("--lengths-from", str(lengths_from))
    else:
        if input_len is None or output_len is None:
            missing = "input_len" if input_len is None else "output_len"
            raise ParameterError(
                missing,
                "give the requests: input and output lengths, the random dataset's "
                "(random_input_len), lengths from a trace's rows (lengths_from) or a trace "
                "(trace)",
            )
        check_tokens("input_len", input_len)
        check_tokens("output_len", output_len)
        prompts = np.full(n, int(input_len), dtype=np.int64)
        outputs = np.full(n, int(output_len), dtype=np.int64)
        words = ()
    flags = _flags(shared_prefix_len, turns, think_time)
    if turns > 1:
        if kind != "fixed lengths" or stage_plan is not None:
            raise ParameterError(
                "turns",
                "makes sessions of fixed input and output lengths (input_len, output_len) "
                "at one rate: not with " + ("stages" if stage_plan is not None else str(kind)),
            )
        assert input_len is not None and output_len is not None
        prompt, output, content, after, think = sessions(
            n, turns, input_len, output_len, think_time, shared_prefix_len
        )
        session = session_ids(after)
        return RequestSource(
            prompt, output, b, arrival_seed, None, None, content, after, think, flags,
            prefix_group=session, session=session,
        )  # fmt: skip
    content = group = None
    if shared_prefix_len:
        content = shared_prefix(prompts, outputs, shared_prefix_len)
        group = np.zeros(n, dtype=np.int64)
    return RequestSource(
        prompts,
        outputs,
        b,
        arrival_seed,
        content=content,
        flags=flags,
        stages=stage_plan,
        stage_s=stage_s,
        stage_of=stage_of,
        lengths=words,
        prefix_group=group,
    )


#: What gives requests each kind of key, for :func:`check_router_keys`' message (the
#: parameters in parentheses, which the command line names as its flags).
KEY_SOURCES = {
    "prefix_group": "a shared prefix (shared_prefix_len), sessions (turns), or a trace "
    "(trace) with a prefix_id or session_id column",
    "session": "sessions (turns), or a trace (trace) with a session_id column",
}


def check_router_keys(router: str | None, requests: Requests | RequestSource) -> None:
    """Refuse (``ParameterError`` on ``router``) a router that routes on a key the requests
    do not carry, naming what gives them one; any other router passes."""
    cls = ROUTERS.get(router) if router is not None else None
    if cls is None or not cls.key:
        return
    keys = getattr(requests, cls.key)
    if keys is None:
        raise ParameterError(
            "router",
            f"{router} needs {cls.keyed}; these requests carry none: give {KEY_SOURCES[cls.key]}",
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
    (default 1); or, for generated arrivals, ``inf`` (vLLM's default: all at once); for
    staged loads, the requests drawn over the stages' time (neither parameter taken)."""
    staged = source.mean_rate
    if staged is not None:
        for name, value in (("request_rate", request_rate), ("trace_speedup", trace_speedup)):
            if value is not None:
                raise ParameterError(name, "the stages (stages) set the arrivals: give one")
        return staged
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


def workload_notes(source: RequestSource) -> list[str]:
    """Notes on lengths drawn and staged arrivals (none for fixed lengths or a trace)."""
    notes = []
    if source.lengths:
        what = " ".join(source.lengths)
        p, o = source.prompt_tokens, source.output_tokens
        notes.append(
            f"lengths drawn ({what}, seeded): prompts {int(p.min()):,} to {int(p.max()):,} "
            f"tokens (mean {p.mean():,.1f}), outputs {int(o.min()):,} to {int(o.max()):,} "
            f"(mean {source.mean_output:,.1f}); every request runs to its output length, as "
            "vllm bench serve --ignore-eos"
        )
    if source.stages is not None:
        counts = np.bincount(np.asarray(source.stage_of), minlength=len(source.stages))
        if len(source.stages) <= 10:
            plan = ", ".join(
                f"{r:g} req/s for {s:g} s: {int(c):,}"
                for (r, s), c in zip(source.stages, counts, strict=True)
            )
        else:  # one line, however many stages
            rates = [r for r, _ in source.stages]
            plan = (
                f"{len(source.stages):,} stages at {min(rates):g} to {max(rates):g} req/s over "
                f"{sum(s for _, s in source.stages):g} s"
            )
        notes.append(
            f"staged load, {len(source):,} requests drawn ({plan}); request_rate is their "
            "mean over the stages' time, and each stage's own metrics are under stages in the JSON"
        )
    return notes


#: A stage's own metrics (:func:`stage_metrics`): these keys of
#: :func:`allocator.sim.summary`, and every latency statistic (``mean_ttft_ms``...).
STAGE_KEYS = ("completed", "total_input_tokens", "total_output_tokens", "mean_queue_ms")
_LATENCY_KEY = re.compile(r"^(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$")


def stage_metrics(
    source: RequestSource, result: SimResult, percentiles: Sequence[float] = PERCENTILES
) -> list[dict[str, float | int]]:
    """Per stage of a staged load (``[]`` otherwise), the metrics of the requests that
    arrived in it, under ``vllm bench serve``'s keys (:data:`STAGE_KEYS` and the latency
    statistics, computed by :func:`allocator.sim.summary` on those requests alone; ITL
    over the gaps of their chunks), headed by ``stage`` (1-based), ``request_rate``,
    ``seconds``, ``start_s`` and ``num_prompts`` (arrivals in it). Throughputs and
    durations stay whole-run: a stage's requests finish after it ends."""
    if source.stages is None or source.stage_of is None:
        return []
    req = result.requests
    out: list[dict[str, float | int]] = []
    start = 0.0
    gap_stage = np.asarray(source.stage_of)[result.itl_request]  # each ITL gap's stage, once
    for j, (r, secs) in enumerate(source.stages):
        idx = np.flatnonzero(source.stage_of == j)
        entry: dict[str, float | int] = {
            "stage": j + 1,
            "request_rate": r,
            "seconds": secs,
            "start_s": start,
            "num_prompts": int(idx.size),
        }
        start += secs
        if idx.size:
            gaps = gap_stage == j
            sub = replace(
                result,
                requests=Requests(
                    req.arrival_s[idx], req.prompt_tokens[idx], req.output_tokens[idx]
                ),
                sent_s=result.sent_s[idx],
                first_scheduled_s=result.first_scheduled_s[idx],
                first_token_s=result.first_token_s[idx],
                finish_s=result.finish_s[idx],
                output_tokens=result.output_tokens[idx],
                chunks=result.chunks[idx],
                preemptions=result.preemptions[idx],
                itl_s=result.itl_s[gaps],
                itl_request=result.itl_request[gaps],
            )
            metrics = summary(sub, percentiles)
            entry.update(
                {k: v for k, v in metrics.items() if k in STAGE_KEYS or _LATENCY_KEY.match(k)}
            )
        out.append(entry)
    return out


__all__ = [
    "DEFAULT_NUM_PROMPTS",
    "MIN_BURSTINESS",
    "MAX_PROMPTS",
    "KEY_SOURCES",
    "RequestSource",
    "STAGE_KEYS",
    "check_router_keys",
    "LENGTH_SOURCES",
    "derived_seeds",
    "lengths_seed",
    "request_source",
    "run_rate",
    "stage_metrics",
    "workload_notes",
]
