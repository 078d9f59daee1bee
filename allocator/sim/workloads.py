"""Workloads as benchmarks generate them: request lengths and arrival times (numpy only).

**vLLM's random dataset** (:func:`random_lengths`; ``vllm bench serve --dataset-name
random``, vLLM 0.33.0). ``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params``
(lines 39-101) takes ``input_range_ratio`` and ``output_range_ratio`` in ``[0, 1)``
(lines 64-67; one ``--random-range-ratio`` number is both, a JSON dict ``{"input": a,
"output": b}`` each, ``_resolve_range_ratios`` lines 19-36), subtracts the tokenizer's
special tokens from the input length (line 69: ``real = max(0, input_len -
num_special)``), and draws each request's lengths uniformly among the integers

- input: ``floor(real * (1 - r_in)) .. ceil(real * (1 + r_in))`` (lines 70-71),
- output: ``max(1, floor(output_len * (1 - r_out))) .. max(1, ceil(output_len * (1 +
  r_out)))`` (lines 72-77),

both ends included, as ``rng.integers(low, high + 1, size=N)``, all inputs first, then all
outputs (lines 96-97), from ``RandomDataset``'s own ``np.random.default_rng(seed)``
(``vllm/benchmarks/datasets/datasets.py`` line 579, seeded by ``--seed``). The prompt is
``--random-prefix-len`` tokens of one fixed random prefix, shared by every request, then
the drawn input length (datasets.py line 753); vLLM refuses a draw whose shortest prompt
(prefix + low input) is below one token (lines 597-615). The simulator has no tokenizer:
``num_special`` is 0 unless given (the server then adds none), and a prompt is exactly
prefix + drawn input tokens (vLLM re-encodes the text and may land a few tokens off,
``gen_prompt_decode_to_target_len``). With the same seed and ``num_special`` the lengths
are vLLM's own, draw for draw (``tests/unit/sim/test_workloads.py`` runs vLLM's
``RandomDataset`` where it is installed).

**Lengths from a trace** (:func:`lengths_from`): ``N`` rows drawn uniformly with
replacement from a trace's rows, each request taking one row's prompt and output lengths
together (their correlation kept), from a seeded generator. A file is read a chunk at a
time (:func:`lengths_from_chunks`), its rows kept up to :data:`KEEP_ROWS`; a longer one
is read twice, to count its ``R`` rows and then to pick the drawn ones, in memory for
``N`` requests and one chunk whatever ``R``: the same ``N`` draws as :func:`lengths_from`
over all ``R`` rows either way.

**Staged loads** (:func:`staged_arrivals`; inference-perf's ``load.stages``, each a
``rate`` and a ``duration``): stage ``j`` runs from the end of the stages before it for
``seconds_j``, its requests arriving as a renewal process of gamma gaps of shape
``burstiness`` and mean ``1 / rate_j`` (shape 1: a Poisson process, so its count is
Poisson with mean ``rate_j * seconds_j``) started at the stage's start and cut at its end;
the requests are numbered across stages in arrival order. inference-perf instead sends
exactly ``int(rate * duration)`` requests per stage at Poisson times
(``inference_perf/loadgen/load_generator.py``, ``LoadGenerator.run_stage``:
``num_requests = int(rate * duration)``; ``PoissonLoadTimer`` in ``load_timer.py``: a
Poisson count for each second, spread over it; kubernetes-sigs/inference-perf at commits
``0167ee66`` and ``0949afc8``), letting a stage run past its duration when late; the
expected counts agree, the spread of the count does not. vLLM's rescaling of the last
arrival to ``N / rate`` (:func:`allocator.sim.arrival_times`) is not applied: a stage is a
time window, not a count.

**Constant-rate stages** (``burstiness`` ``inf``) send inference-perf's count,
``int(rate * seconds)`` (the float product truncated, as ``run_stage`` computes it), at
``1 / rate``, ``2 / rate``, ... into the stage: the last at the stage's end when
``rate * seconds`` is whole (``2:5`` sends 10 requests, at 0.5, 1.0, ..., 5.0 s), so a
stage's window is ``(start, end]`` here, not ``[start, end)``. inference-perf's own
``ConstantLoadTimer`` spreads the same count at exponential gaps scaled to sum to the
duration (its last request also at the stage's end); the gaps here are even.

Every run to its output length: the simulator has no stop token, as ``vllm bench serve
--ignore-eos`` (which vLLM 0.33.0 turns on for the random dataset,
``vllm/benchmarks/serve.py`` lines 2181-2187).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..exceptions import ParameterError
from ..validate import finite, whole
from ..validate import rate as positive
from ..validate import seed as valid_seed
from .requests import MAX_SPAN_S, MAX_TOKENS

#: vLLM 0.33.0's random dataset defaults (``RandomDataset.DEFAULT_INPUT_LEN``,
#: ``DEFAULT_OUTPUT_LEN``, datasets.py lines 570-571; ``--random-input-len`` and
#: ``--random-output-len`` default to the same, lines 1888-1898).
RANDOM_INPUT_LEN = 1024
RANDOM_OUTPUT_LEN = 128

#: Most stages one staged load takes. Each stage's requests are summarised on their own
#: after the run, a pass over the whole run's inter-token gaps per stage, so a run of tens
#: of thousands of one-second stages (a 120 KB ``--stages``) took minutes where one stage
#: of the same span took seconds; inference-perf's load sweeps use a few to a few dozen.
MAX_STAGES = 1_000
#: Most requests one call draws (lengths or arrivals): two ``int64`` arrays of this many
#: take 160 MB; the simulator runs far fewer (``allocator.analysis.request_source``).
MAX_DRAWS = 10_000_000
#: Most rows :func:`lengths_from_chunks` keeps from its first read (two float64 arrays of
#: this many take 64 MB); a longer file is read again for the rows drawn.
KEEP_ROWS = 1 << 22
#: Most gaps drawn at a time for one stage (8 MB): a tiny gamma shape asks for many more.
_CHUNK = 1 << 20
#: Characters of a stage that does not parse quoted in the error (one line, however long).
_SHOWN = 40


def range_ratios(value: object, field: str = "random_range_ratio") -> tuple[float, float]:
    """``(input, output)`` range ratios from one number (both), a mapping with ``input``
    and ``output`` keys, or the text of either (``"0.3"``, ``'{"input": 0.3, "output":
    0.5}'``, as vLLM's ``--random-range-ratio`` reads it); each in ``[0, 1)``."""
    raw: object = value
    if isinstance(value, str):
        try:
            raw = float(value)
        except ValueError:
            try:
                raw = json.loads(value)
            except (ValueError, RecursionError):  # RecursionError: "[[[...]]]" nested deep
                raise ParameterError(
                    field, 'must be a number in [0, 1) or {"input": A, "output": B}'
                ) from None
    if isinstance(raw, Mapping):
        if set(raw) != {"input", "output"}:
            keys = sorted(map(str, raw))
            shown = ", ".join(repr(k[:_SHOWN]) for k in keys[:4])
            more = f" and {len(keys) - 4:,} more" if len(keys) > 4 else ""
            raise ParameterError(
                field, f"a mapping takes the keys input and output, got [{shown}]{more}"
            )
        pair = (raw["input"], raw["output"])
    else:
        pair = (raw, raw)
    out = []
    for v in pair:
        r = finite(v, field, lo=0.0)
        if r >= 1.0:
            raise ParameterError(field, f"must be in [0, 1) as vLLM takes it, got {v!r}")
        out.append(r)
    return out[0], out[1]


def random_bounds(
    input_len: int,
    output_len: int,
    ratios: tuple[float, float] = (0.0, 0.0),
    *,
    prefix_len: int = 0,
    num_special: int = 0,
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The integer ranges ``((in_low, in_high), (out_low, out_high))`` (both ends
    included; the input's without the prefix) vLLM's random dataset draws from (module
    docstring). :class:`ParameterError` naming ``random_input_len`` when the shortest
    prompt would be below one token, or the longest past the simulator's token limit."""
    n_in = whole(input_len, "random_input_len", lo=0, hi=MAX_TOKENS)
    n_out = whole(output_len, "random_output_len", lo=0, hi=MAX_TOKENS)
    pre = whole(prefix_len, "random_prefix_len", lo=0, hi=MAX_TOKENS)
    special = whole(num_special, "num_special", lo=0)
    r_in, r_out = ratios
    real = max(0, n_in - special)
    lo_in = math.floor(real * (1 - r_in))
    hi_in = math.ceil(real * (1 + r_in))
    lo_out = max(math.floor(n_out * (1 - r_out)), 1)
    hi_out = max(math.ceil(n_out * (1 + r_out)), 1)
    if pre + lo_in < 1:
        raise ParameterError(
            "random_input_len",
            f"{n_in} at range ratio {r_in:g} gives prompts as short as {pre + lo_in} tokens "
            "(prefix + sampled): give a longer input or a smaller ratio, as vLLM asks",
        )
    if pre + hi_in > MAX_TOKENS or hi_out > MAX_TOKENS:
        name = "random_input_len" if pre + hi_in > MAX_TOKENS else "random_output_len"
        raise ParameterError(name, f"the longest draw passes {MAX_TOKENS:,} tokens")
    return (lo_in, hi_in), (lo_out, hi_out)


def random_lengths(
    num_prompts: int,
    input_len: int,
    output_len: int,
    ratios: tuple[float, float] = (0.0, 0.0),
    *,
    prefix_len: int = 0,
    num_special: int = 0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths (tokens; two ``(num_prompts,)`` int64 arrays) as vLLM
    0.33.0's random dataset draws them with ``--seed seed`` (module docstring): prompts
    are ``prefix_len`` plus the drawn input."""
    n = whole(num_prompts, "num_prompts", lo=1, hi=MAX_DRAWS)
    (lo_in, hi_in), (lo_out, hi_out) = random_bounds(
        input_len, output_len, ratios, prefix_len=prefix_len, num_special=num_special
    )
    rng = np.random.default_rng(valid_seed(seed))
    inputs = rng.integers(lo_in, hi_in + 1, size=n)
    outputs = rng.integers(lo_out, hi_out + 1, size=n)
    return (inputs + int(prefix_len)).astype(np.int64), outputs.astype(np.int64)


def lengths_from(
    prompt_tokens: np.ndarray, output_tokens: np.ndarray, num_prompts: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``num_prompts`` (prompt, output) length pairs drawn uniformly with replacement from
    the rows of ``prompt_tokens`` and ``output_tokens`` (``(R,)`` each, one row a
    request), a row's two lengths kept together; two ``(num_prompts,)`` int64 arrays.
    Every length a whole number of tokens in ``1..MAX_TOKENS``."""
    n = whole(num_prompts, "num_prompts", lo=1, hi=MAX_DRAWS)
    rng = np.random.default_rng(valid_seed(seed))
    prompts, outputs = _check_lengths(prompt_tokens, output_tokens)
    rows = rng.integers(0, prompts.size, size=n)
    return prompts[rows].astype(np.int64), outputs[rows].astype(np.int64)


def lengths_from_chunks(
    chunks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
    num_prompts: int,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lengths_from` over rows read a chunk at a time: ``chunks()`` yields the
    rows' ``(prompt, output)`` lengths (two ``(m,)`` arrays per chunk, tokens) in the same
    order each time it is called. Up to :data:`KEEP_ROWS` rows are kept from the first
    call and drawn from; past them it is called again to pick the drawn rows (module
    docstring). The same ``(num_prompts,)`` int64 arrays as :func:`lengths_from` on all
    the rows at once with the same ``seed``, either way."""
    n = whole(num_prompts, "num_prompts", lo=1, hi=MAX_DRAWS)
    rng = np.random.default_rng(valid_seed(seed))
    total = 0
    kept: list[tuple[np.ndarray, np.ndarray]] | None = []
    for prompts, outputs in chunks():
        p, o = _check_lengths(prompts, outputs)
        total += int(p.size)
        if kept is not None and total <= KEEP_ROWS:
            kept.append((p, o))
        else:
            kept = None
    if total == 0:
        raise ParameterError("lengths_from", "needs one or more rows of prompt and output lengths")
    rows = rng.integers(0, total, size=n)
    if kept is not None:
        p, o = (np.concatenate(a) for a in zip(*kept, strict=True))
        return p[rows].astype(np.int64), o[rows].astype(np.int64)
    order = np.argsort(rows, kind="stable")
    wanted = rows[order]
    out_p = np.empty(n, np.int64)
    out_o = np.empty(n, np.int64)
    start = 0
    for prompts, outputs in chunks():
        p, o = _check_lengths(prompts, outputs)
        lo, hi = np.searchsorted(wanted, [start, start + p.size])
        picked = order[lo:hi]
        out_p[picked] = p[wanted[lo:hi] - start]
        out_o[picked] = o[wanted[lo:hi] - start]
        start += p.size
    if start != total:
        raise ParameterError("lengths_from", f"changed while read: {total:,} rows, then {start:,}")
    return out_p, out_o


def _check_lengths(prompt_tokens: object, output_tokens: object) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's rows as float arrays, refused (naming ``lengths_from``) unless both are
    ``(R,)`` with ``R >= 1`` and every length a whole number of tokens in ``1..MAX_TOKENS``."""
    try:
        given = np.asarray(prompt_tokens), np.asarray(output_tokens)
        prompts, outputs = (np.asarray(a, dtype=np.float64) for a in given)
    except (TypeError, ValueError):
        raise ParameterError("lengths_from", "lengths must be numbers of tokens") from None
    if prompts.ndim != 1 or prompts.shape != outputs.shape or prompts.size == 0:
        raise ParameterError("lengths_from", "needs one or more rows of prompt and output lengths")
    for a in (prompts, outputs):
        if not (np.all(a == np.round(a)) and a.min() >= 1 and a.max() <= MAX_TOKENS):
            raise ParameterError(
                "lengths_from", f"lengths must be whole numbers of tokens in 1..{MAX_TOKENS:,}"
            )
    return prompts, outputs


def parse_stages(text: str | Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Load stages ``((rate, seconds), ...)`` from ``"RATE:SECONDS,..."`` text or pairs:
    at most :data:`MAX_STAGES` of them, each rate a finite number of requests/s > 0, each
    duration a finite number of seconds > 0, their sum at most
    :data:`~allocator.sim.requests.MAX_SPAN_S`.
    :class:`ParameterError` on ``stages`` naming the stage otherwise."""
    if isinstance(text, str):
        items = [s.strip() for s in text.split(",", MAX_STAGES)]
        if len(items) > MAX_STAGES:
            raise ParameterError(
                "stages", f"more than {MAX_STAGES:,} stages: give fewer, longer stages"
            )
        pairs: list[tuple[object, object]] = []
        for i, item in enumerate(items, 1):
            rate_text, sep, secs_text = item.partition(":")
            try:
                if not sep:
                    raise ValueError
                pairs.append((float(rate_text), float(secs_text)))
            except ValueError:
                shown = item if len(item) <= _SHOWN else item[:_SHOWN] + "…"
                raise ParameterError(
                    "stages", f"stage {i}: expected RATE:SECONDS, got {shown!r}"
                ) from None
    else:
        try:
            pairs = [tuple(p) for p in itertools.islice(text, MAX_STAGES + 1)]  # type: ignore[misc]
        except TypeError:
            raise ParameterError(
                "stages", 'expected "RATE:SECONDS,..." text or (rate, seconds) pairs'
            ) from None
    if len(pairs) > MAX_STAGES:
        raise ParameterError(
            "stages", f"more than {MAX_STAGES:,} stages: give fewer, longer stages"
        )
    if not pairs:
        raise ParameterError("stages", "give one or more stages RATE:SECONDS")
    stages = []
    for i, pair in enumerate(pairs, 1):
        if len(pair) != 2:
            raise ParameterError("stages", f"stage {i}: expected (rate, seconds)")
        r = positive(pair[0], f"stages: stage {i} rate", unit="requests/s")
        s = positive(pair[1], f"stages: stage {i} seconds", unit="s")
        stages.append((r, s))
    span = sum(s for _, s in stages)
    if span > MAX_SPAN_S:
        raise ParameterError("stages", f"last {span:.3g} s in all, more than {MAX_SPAN_S:g} s")
    return tuple(stages)


def staged_arrivals(
    stages: Sequence[tuple[float, float]],
    burstiness: float = 1.0,
    seed: int = 0,
    max_requests: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times (s from the start of the first stage, non-decreasing) and each
    request's stage (0-based): two ``(N,)`` arrays, ``N`` drawn (module docstring).
    ``burstiness``: the gamma shape (1: Poisson; ``inf``: ``int(rate * seconds)`` requests
    at constant gaps of ``1 / rate``, the first at ``1 / rate`` into the stage, as many as
    inference-perf sends). ``max_requests`` (at most, and by default,
    :data:`MAX_DRAWS`): refuse (naming ``stages``) stages expecting more requests than
    this, or drawing more."""
    plan = parse_stages(stages)
    shape = positive(burstiness, "burstiness", inf=True)
    seed = valid_seed(seed)
    max_requests = MAX_DRAWS if max_requests is None else min(int(max_requests), MAX_DRAWS)
    expected = sum(r * s for r, s in plan)
    if expected > max_requests:
        raise ParameterError(
            "stages",
            f"expect {expected:,.0f} requests in all, more than {max_requests:,}: give "
            "lower rates or shorter stages",
        )
    rng = np.random.default_rng(seed)
    times: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    start = 0.0
    for j, (r, secs) in enumerate(plan):
        if math.isinf(shape):
            # inference-perf's count (module docstring); the last may sit at `secs`
            t = np.minimum(np.arange(1, int(r * secs) + 1) / r, secs)
        else:
            # enough gaps to pass the stage's end almost surely; more drawn when not
            mean = r * secs
            chunk = int(min(mean + 10.0 * math.sqrt(mean / min(shape, 1.0)) + 16, _CHUNK))
            acc: list[np.ndarray] = []
            end = 0.0
            drawn = sum(x.size for x in times)
            while end < secs:
                if drawn > max_requests:  # every time drawn so far lies before `end`
                    raise ParameterError("stages", f"drew more than {max_requests:,} requests")
                gaps = rng.gamma(shape=shape, scale=1.0 / (r * shape), size=chunk)
                part = end + np.cumsum(gaps)
                acc.append(part)
                end = float(part[-1])
                drawn += int(np.count_nonzero(part < secs))
            t = np.concatenate(acc)
            t = t[t < secs]
        times.append(start + t)
        labels.append(np.full(t.size, j, dtype=np.int64))
        start += secs
    all_t = np.concatenate(times)
    if all_t.size > max_requests:
        raise ParameterError("stages", f"drew {all_t.size:,} requests, more than {max_requests:,}")
    if all_t.size == 0:
        raise ParameterError(
            "stages", "no request arrived in any stage: give higher rates or longer stages"
        )
    return all_t, np.concatenate(labels)


__all__ = [
    "KEEP_ROWS",
    "MAX_DRAWS",
    "MAX_STAGES",
    "RANDOM_INPUT_LEN",
    "RANDOM_OUTPUT_LEN",
    "lengths_from",
    "lengths_from_chunks",
    "parse_stages",
    "random_bounds",
    "random_lengths",
    "range_ratios",
    "staged_arrivals",
]
