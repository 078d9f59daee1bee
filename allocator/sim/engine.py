"""Iteration-level simulation of one vLLM replica serving a stream of requests.

Each engine step is scheduled as vLLM's V1 scheduler does it (vLLM 0.33.0,
``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``, lines 699-1640) and then
played: its wall time comes from the caller's :class:`~allocator.sim.config.StepTime`,
and every decoding sequence emits a number of tokens drawn from the speculation policy's
pmf. The pieces, each beside the vLLM code it follows:

* :mod:`allocator.sim.scheduler`: ``schedule`` (running requests first under the token
  budget, ``allocate_slots``, ``preempt`` from the newest, then waiting requests when
  nothing was preempted) and ``update_from_output`` (tokens emitted, first tokens,
  finishes), every rule with its file and line in vLLM 0.33.0;
* :mod:`allocator.sim.block_pool`: the KV blocks, all but vLLM's null block usable;
  :mod:`allocator.sim.prefix_cache` names them under prefix caching;
* :mod:`allocator.sim.client`: the benchmark client's sends and ``max_concurrency``;
* :mod:`allocator.sim.state`: the state they share (running and waiting requests, the
  pool, the client, the clock, what the run records);
* :mod:`allocator.sim.fast_path`: decode-only stretches played several steps at once,
  with the same result as step by step;
* :mod:`allocator.sim.async_steps`: under ``Scheduler.async_scheduling`` (vLLM's
  ``AsyncScheduler`` and its batch queue of two) each step is scheduled while the step
  before it runs and its output processed a step later (decode-only stretches there too,
  several turns at once, the same result).

Time starts at 0 (the benchmark's start) and advances by each step's ``step_ms``; with
nothing running or waiting it jumps to the next request the client sends. Requests the
client sends during a step are seen at the next ``schedule()`` (under async scheduling that
is the scheduling of the step after the next). Every step's tokens of one request reach
the client as one streamed chunk at the end of the step.

Simplifications, all stated:

* prefix caching only with ``Scheduler.enable_prefix_caching``
  (:mod:`allocator.sim.prefix_cache`; off, every admission computes its prompt from
  scratch), no time on the CPU (without async scheduling a step's scheduling and
  output processing take no time; with it the GPU never waits for them either), no
  watermark (vLLM's default 0),
  ``long_prefill_token_threshold`` 0 (its default), no ``max_model_len`` cap, no extra
  drafting slots in the budget (``max_num_new_slots_for_drafting`` is 0 for EAGLE, MTP and
  n-gram), no pipeline or data parallelism;
* a step's time is asked at one ``k``, the policy's at the number of requests the previous
  step scheduled (vLLM's ``dynamic_sd_lookup``, line 1712), though a request the budget
  left out of the previous step verifies, as in vLLM, the drafts it carries from the step
  it was last scheduled in (:mod:`allocator.sim.scheduler`, "The step's k");
* drafting costs what ``step_ms`` says (no separate drafter); no stop tokens (every
  request runs to its output length, as the benchmark's ``ignore_eos`` makes it); no
  merging of several steps' tokens into one chunk by a slow client; a padded 1-token
  prompt's placeholder drafts are not counted as drafts in ``decode_steps`` (vLLM's
  counters count them, all rejected);
* a request is refused (``ParameterError`` on ``kv_cache_tokens``) when it could not finish
  even alone: prompt + output - 1 tokens plus the drafts at batch size 1 and the lookahead,
  in blocks, more than the usable blocks (vLLM refuses a ``max_model_len`` the cache cannot
  hold at start-up; here each request's own length is checked).

The randomness: every request draws one uniform per decode step up front from one
``numpy.random.Generator`` seeded by ``seed`` (``random(sum(output - 1))``, laid out
request after request); its ``d``-th decode step emits ``searchsorted(cdf, u_d, "right")``
tokens, ``cdf`` the cumulative pmf of the step's policy entry with its last entry set to 1,
at most the tokens it scheduled and its tokens left. So the draws do not depend on how the
steps are grouped.

Memory: per request a few scalars; per output token one uniform (8 bytes) and at most one
ITL gap with its request (12 bytes), allocated up front: about 20 bytes per output token
(44 MB for the 10,000 first requests of the Azure conversation trace, 2.2 M tokens).
"""

from __future__ import annotations

import math

from ..exceptions import ParameterError
from .async_steps import run_async
from .config import Scheduler, StepTime
from .fast_path import STRETCH_CELLS, STRETCH_STEPS, decode_stretch
from .policy import SpecPolicy
from .requests import Requests
from .results import SimResult
from .scheduler import schedule, update_from_output
from .state import State


def simulate(
    requests: Requests,
    policy: SpecPolicy,
    step_ms: StepTime,
    scheduler: Scheduler,
    seed: int = 0,
) -> SimResult:
    """Serve ``requests`` on one replica and return every request's timeline.

    ``policy``: ``k`` and the emitted-tokens pmf by decode batch size; ``step_ms``: wall
    time of a step, ms (see :class:`~allocator.sim.config.StepTime`); ``scheduler``: the
    replica's vLLM settings and the client's ``max_concurrency``; ``seed``: seeds the one
    ``numpy.random.Generator`` every draw comes from (same seed, same result).

    Raises :class:`~allocator.exceptions.ParameterError` on ``kv_cache_tokens`` when some
    request could not finish even alone in the cache (prompt + output + speculative slots),
    and on ``step_ms`` when it returns a negative or non-finite time.
    """
    if not isinstance(requests, Requests):
        raise ParameterError("requests", "must be a Requests")
    if not isinstance(policy, SpecPolicy):
        raise ParameterError("policy", "must be a SpecPolicy")
    if not isinstance(scheduler, Scheduler):
        raise ParameterError("scheduler", "must be a Scheduler")
    if not callable(step_ms):
        raise ParameterError(
            "step_ms", "must be callable as step_ms(decode_seqs, k, context, prefill)"
        )
    engine = _Engine(requests, policy, step_ms, scheduler, seed)
    engine.run()
    return engine.result()


class _Engine:
    """One run: its :class:`~allocator.sim.state.State` and the loop. ``stretches=False``
    turns the decode-only fast path off and plays every step on its own (the reference the
    fast path is tested against: both give identical results)."""

    def __init__(
        self,
        requests: Requests,
        policy: SpecPolicy,
        step_ms: StepTime,
        sched: Scheduler,
        seed: int,
        stretches: bool = True,
    ) -> None:
        self.state = State(requests, policy, sched, seed)
        self.step_ms = step_ms
        self.many = getattr(step_ms, "many", None) if stretches else None
        self.stretches = stretches

    @property
    def step_tokens(self) -> list[int] | None:
        """When set to a list, every step played appends its scheduled tokens."""
        return self.state.step_tokens

    @step_tokens.setter
    def step_tokens(self, value: list[int] | None) -> None:
        self.state.step_tokens = value

    def run(self) -> None:
        """Play until every request has finished: the client's sends, then one step (or a
        decode-only stretch of steps)."""
        state = self.state
        step_ms, many = self.step_ms, self.many
        if state.async_sched:
            run_async(state, step_ms, many, self.stretches)
            return
        client = state.client
        while client.finished < state.N:
            state.take_sends()
            if state.n == 0 and not state.waiting:
                state.t = client.next_send_time()
                if math.isinf(state.t):  # pragma: no cover (every request was sent)
                    raise AssertionError("nothing to run and nothing to send")
                continue
            if not (self.stretches and decode_stretch(state, step_ms, many)):
                update_from_output(state, schedule(state), step_ms)

    def result(self) -> SimResult:
        return self.state.result()


__all__ = [
    "STRETCH_CELLS",
    "STRETCH_STEPS",
    "simulate",
]
