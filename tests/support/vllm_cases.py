"""What the differential tests against vLLM's scheduler share (``tests/differential/
test_vllm_scheduler.py``, ``test_vllm_prefix_cache.py``): the case count, a step time of
one second per step, the KV blocks and token budget of a random case, the two sides'
settings from one case, the accepted drafts both draw, and the per-step and per-request
rows compared.

A case is a dict: ``seed``, ``arrival`` (steps), ``prompt`` and ``output`` (tokens, ``(n,)``
int64), ``block_size``, ``blocks`` (KV blocks, vLLM's null block among them), ``budget``
(``max_num_batched_tokens``), ``seqs`` (``max_num_seqs``), ``k``, ``lookahead`` and
``async_scheduling``, with each module's own keys beside them. Importing this module
imports no vLLM (:mod:`tests.support.vllm_driver` imports it when a scheduler is made)."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from allocator.sim import Scheduler, decode_uniforms
from tests.support.vllm_driver import Limits

#: The environment variable that sets how many random cases each mode compares.
CASES_VARIABLE = "ALLOCATOR_VLLM_CASES"


def case_count(default: int) -> int:
    """Random cases compared per mode: :data:`CASES_VARIABLE`, else ``default``."""
    return int(os.environ.get(CASES_VARIABLE, str(default)))


class UnitStep:
    """One second per step, whatever the step; records what each step was asked:
    ``(decoding sequences, their computed tokens summed, prefill tokens)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, decode_seqs: int, k: int, context_tokens: float, prefill: int) -> float:
        self.calls.append((int(decode_seqs), int(round(context_tokens * decode_seqs)), prefill))
        return 1000.0


def fitting_blocks(
    prompt: np.ndarray, output: np.ndarray, k_first: int, k: int, lookahead: int, bs: int
) -> int:
    """The fewest KV blocks (of ``bs`` tokens) that let every request finish alone, vLLM's
    null block included: a request's largest footprint (``prompt + output - 1 + k_first``
    drafts at batch size 1, or its prompt when it has one output token, plus the
    lookahead) and a one-token prompt padded to ``1 + k`` (the simulator refuses a case
    where one does not fit)."""
    need = -(-(np.where(output > 1, prompt + output - 1 + k_first, prompt) + lookahead) // bs)
    pad = -(-(1 + k + lookahead) // bs)
    return int(max(need.max(), pad) + 1)


def token_budget(rng: np.random.Generator, k: int, seqs: int, bs: int) -> int:
    """A random ``max_num_batched_tokens`` small enough to cut prefills into chunks and
    decodes out of a step, never below ``max_num_seqs`` (vLLM refuses it,
    ``vllm/config/scheduler.py``) nor below one request's ``1 + k``."""
    return int(rng.integers(max(k + 1, seqs), k + 1 + 4 * bs + 8))


def sim_scheduler(c: dict, **options) -> Scheduler:
    """The simulator's scheduler for case ``c`` (``options``: e.g. prefix caching)."""
    return Scheduler(
        c["seqs"],
        c["budget"],
        c["blocks"] * c["block_size"],
        c["block_size"],
        async_scheduling=c["async_scheduling"],
        **options,
    )


def vllm_limits(c: dict, **options) -> Limits:
    """vLLM's settings for case ``c``, the same number of KV blocks as the simulator's
    (``num_gpu_blocks``, the null block among them, as ``Scheduler.num_blocks``)."""
    return Limits(
        max_num_seqs=c["seqs"],
        max_num_batched_tokens=c["budget"],
        block_size=c["block_size"],
        num_gpu_blocks=c["blocks"],
        k=c["k"],
        lookahead_tokens=c["lookahead"],
        async_scheduling=c["async_scheduling"],
        **options,
    )


def accepted(
    output: np.ndarray, seed: int, pmf_of: Callable[[int], np.ndarray]
) -> Callable[[int, int, int], int]:
    """``draw(i, d, k)``: drafts accepted in request ``i``'s ``d``-th decode step carrying
    ``k`` drafts, the simulator's uniform for that step
    (:func:`allocator.sim.decode_uniforms` of ``output`` and ``seed``) through the CDF of
    ``pmf_of(k)``; 0 for a step past the request's output (its tokens are dropped)."""
    u = decode_uniforms(output, seed)
    cdfs: dict[int, np.ndarray] = {}

    def draw(i: int, d: int, k: int) -> int:
        if d >= u[i].size:
            return 0
        if k not in cdfs:
            cdf = np.cumsum(pmf_of(k))
            cdf[-1] = 1.0
            cdfs[k] = cdf
        return int(np.searchsorted(cdfs[k], u[i][d], side="right")) - 1

    return draw


def step_rows(trace) -> list[tuple[int, int, int]]:
    """vLLM's steps as the simulator's step-time calls: ``(decoding requests, their
    computed tokens summed, prompt tokens scheduled)``."""
    return [(len(s.decoding), s.decode_context, s.prefill_tokens) for s in trace.steps]


def request_rows_sim(res) -> list[tuple]:
    """Per request of a simulated run (one second per step): the step of its first
    schedule, of its first token and of its finish, chunks, tokens, preemptions."""

    def step(x):
        return int(round(x))

    return [
        (
            step(res.first_scheduled_s[i]),
            step(res.first_token_s[i]) - 1,
            step(res.finish_s[i]) - 1,
            int(res.chunks[i]),
            int(res.output_tokens[i]),
            int(res.preemptions[i]),
        )
        for i in range(len(res.requests))
    ]


def request_rows_vllm(trace) -> list[tuple]:
    """:func:`request_rows_sim`'s rows from the driver's trace."""
    return [
        (
            trace.first_scheduled[i],
            trace.first_token[i],
            trace.finish[i],
            len(trace.chunks[i]),
            trace.tokens[i],
            trace.preemptions[i],
        )
        for i in range(len(trace.first_token))
    ]


def first_difference(a: list, b: list) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is the
    other's start)."""
    return next(
        (j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


__all__ = [
    "CASES_VARIABLE",
    "UnitStep",
    "accepted",
    "case_count",
    "first_difference",
    "fitting_blocks",
    "request_rows_sim",
    "request_rows_vllm",
    "sim_scheduler",
    "step_rows",
    "token_budget",
    "vllm_limits",
]
