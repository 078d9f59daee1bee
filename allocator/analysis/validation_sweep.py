"""A sweep of measured runs replayed as one server (``allocator validate --sweep``,
:func:`allocator.analysis.validation.replay_sweep`): the runs back to back in one
simulation, so that what one run leaves in the prefix cache is there for the next.

**Why it matters.** vLLM's random dataset builds prompt ``i`` of a run from the seed and
``i`` alone when ``--random-range-ratio`` is 0, its default (vLLM 0.10.1.1,
``vllm/benchmarks/datasets.py``, ``RandomDataset.sample``, lines 344-374: ``input_lens``
and ``output_lens`` are drawn from ``np.random.randint(L, L + 1, size=N)``, a range of one
value, which numpy's legacy generator returns without drawing, so ``offsets =
np.random.randint(0, vocab_size, size=N)`` are the first ``N`` draws after
``np.random.seed(seed)``, the same for every ``N``; prompt ``i`` is the tokens
``(offsets[i] + i + arange(input_len)) % vocab_size``, decoded and re-encoded). So
prompt ``i`` of a run with ``N`` requests is prompt ``i`` of a run with ``M`` requests,
``i < min(N, M)``, at one seed and input length; and the client sends the run's first
prompt once, alone, before the run (``vllm/benchmarks/serve.py`` lines 360-398,
``wait_for_endpoint``). On a server with prefix caching on, a sweep's runs hit what the
warm-up request and the earlier runs left cached. At a range ratio above 0 the lengths
are drawn first and the offsets differ between runs of different ``N``: no such sharing,
and this replay does not apply.

**The requests** (:func:`sweep_requests`): run ``r``'s request ``i`` holds the prompt
segment of id ``i`` (:class:`allocator.sim.requests.TokenContent`: equal ids are equal
tokens, a shorter prompt of one id is the first tokens of a longer one) and an output
segment of its own. The prefix relation between prompts of *different* input lengths
holds for the token ids before vLLM's decode and re-encode; the re-encoded prompts can
differ in their last few tokens, which the replay does not model (it shares the shorter
prompt whole). Before each run, with ``warmup``, its request 0 is sent alone; the run
starts after an idle gap (``gap_s``) and every run after another. The gaps are exact
when the server is idle across them (every earlier request finished before the next
arrival: :func:`idle_before`, checked by the caller, which widens the gap otherwise):
then only the cache is carried, and each run's metrics are cut over its own requests,
times from its own start (:func:`cut`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..exceptions import InputError
from ..sim import Requests, SimResult
from ..sim.requests import TokenContent
from .replica import kv_cache_tokens, scheduler_limits

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .measured_run import MeasuredRun
    from .replica import Configuration

#: The first idle gap between one segment (warm-up, run) and the next, s; widened tenfold
#: until the server is idle across every gap.
FIRST_GAP_S = 3600.0


def sweep_requests(
    arrivals: Sequence[np.ndarray],
    prompts: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    *,
    warmup: bool,
    gap_s: float,
) -> tuple[Requests, list[tuple[int, int, float]], list[float]]:
    """The runs as one workload (module docstring): ``arrivals[r]``, ``prompts[r]``,
    ``outputs[r]`` are run ``r``'s arrival times (s from its start) and lengths, each
    ``(N_r,)``. Returns the requests, each run's ``(first, end, start_s)`` (its requests
    are ``first:end``, its start ``start_s`` s from the sweep's start) and every
    segment's start, s (warm-ups included: the times :func:`idle_before` checks)."""
    times: list[np.ndarray] = []
    ins: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    runs: list[tuple[int, int, float]] = []
    segments: list[float] = []
    t, count = 0.0, 0
    for arr, p, o in zip(arrivals, prompts, outputs, strict=True):
        if warmup:
            segments.append(t)
            times.append(np.array([t]))
            ins.append(p[:1])
            outs.append(o[:1])
            count += 1
            t += gap_s
        segments.append(t)
        times.append(t + np.asarray(arr, dtype=np.float64))
        ins.append(p)
        outs.append(o)
        runs.append((count, count + p.size, t))
        count += p.size
        t = float(times[-1][-1]) + gap_s
    prompt = np.concatenate(ins).astype(np.int64)
    output = np.concatenate(outs).astype(np.int64)
    index = np.concatenate([np.arange(p.size) for p in ins])  # prompt i of its run
    n = prompt.size
    ids = np.empty(2 * n, np.int64)
    ids[0::2] = index
    ids[1::2] = n + np.arange(n)  # every output its own, past the prompts' ids
    lengths = np.empty(2 * n, np.int64)
    lengths[0::2], lengths[1::2] = prompt, output
    content = TokenContent(ids, lengths, np.arange(0, 2 * n + 1, 2))
    return Requests(np.concatenate(times), prompt, output, content), runs, segments


def idle_before(result: SimResult, segments: Sequence[float]) -> bool:
    """Whether every request sent before each segment's start finished before it (the
    server idle across every gap)."""
    arrival = result.requests.arrival_s
    for start in segments[1:]:
        earlier = arrival < start
        if earlier.any() and not float(np.max(result.finish_s[earlier])) < start:
            return False
    return True


def cut(result: SimResult, first: int, end: int, start_s: float) -> SimResult:
    """Requests ``first:end`` of ``result`` as a run of their own, times from ``start_s``
    (the run's start): its duration its last chunk from there, its gaps between chunks
    its own. Counts of the whole simulation stay whole (``steps``,
    ``time_in_system_s``, ``decode_steps``, ``prefix_cache``, the peaks)."""
    sel = slice(first, end)
    req = result.requests
    content = req.content
    if content is not None:
        a, b = int(content.starts[first]), int(content.starts[end])
        content = TokenContent(
            content.ids[a:b], content.lengths[a:b], content.starts[first : end + 1] - a
        )
    mine = (result.itl_request >= first) & (result.itl_request < end)
    finish = result.finish_s[sel] - start_s
    return replace(
        result,
        requests=Requests(
            req.arrival_s[sel] - start_s, req.prompt_tokens[sel], req.output_tokens[sel], content
        ),
        sent_s=result.sent_s[sel] - start_s,
        first_scheduled_s=result.first_scheduled_s[sel] - start_s,
        first_token_s=result.first_token_s[sel] - start_s,
        finish_s=finish,
        output_tokens=result.output_tokens[sel],
        chunks=result.chunks[sel],
        preemptions=result.preemptions[sel],
        itl_s=result.itl_s[mine],
        itl_request=result.itl_request[mine] - first,
        duration_s=float(np.max(finish)),
    )


def too_long(
    problem: Problem, run: MeasuredRun, config: Configuration, exc: InputError
) -> InputError:
    """(:func:`allocator.analysis.validation.replay`'s and the sweep's.) A replay refused
    on the KV cache, named by its cause: when the cache holds at least
    one block (:func:`~allocator.analysis.replica.replica_scheduler` refuses less), the
    refusal is the simulator's (``allocator/sim/state.py``, ``check_fit``): a request
    longer than the whole cache, which could never finish. That is the run's request
    (its longest, named by the file's key), not the problem's ``kv_cache_tokens``."""
    if exc.field != "serving.scheduler.kv_cache_tokens":
        return exc
    cache = kv_cache_tokens(problem, config)
    if cache < scheduler_limits(problem).block_size:
        return exc  # less than one block: the problem's cache, whatever the run
    need = run.prompt_tokens + np.maximum(run.output_tokens, 1) - 1
    i = int(np.argmax(need))
    prompt, output = int(run.prompt_tokens[i]), int(run.output_tokens[i])
    key = run.length_keys[0]
    field = f"{run.source}: {key}[{i}]" if key == "input_lens" else f"{run.source}: {key}"
    what = (
        f"request {i}, {prompt:,} prompt and {output:,} output tokens, does"
        if key == "input_lens"
        else f"its requests, {prompt:,} prompt and {output:,} output tokens (the means), do"
    )
    stated = scheduler_limits(problem).kv_cache_tokens is not None
    where = "serving.scheduler.kv_cache_tokens" if stated else "from serving's memory"
    hosted = f", with {', '.join(config.drafters)} hosted" if config.drafters else ""
    return InputError(
        field,
        f"the run's {what} not fit the replica's whole KV cache, {cache:,} tokens "
        f"({where}{hosted}): the run is longer than this replica serves ({exc.message})",
    )


__all__ = ["FIRST_GAP_S", "cut", "idle_before", "sweep_requests", "too_long"]
