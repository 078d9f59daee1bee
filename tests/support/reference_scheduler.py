"""A plain reference for the simulated replica, written from vLLM 0.33.0's source.

One :class:`Request` object per request, a ``waiting`` deque and a ``running`` list, a
:class:`BlockPool` that counts free blocks; every step is :meth:`Replica.schedule` (the
order of ``Scheduler.schedule()`` in ``vllm/v1/core/sched/scheduler.py``) followed by
:meth:`Replica.update_from_output` (``Scheduler.update_from_output``), one request at a
time, no vectorisation and no code shared with ``allocator/sim``. The differential test
(``tests/differential/test_scheduler_reference.py``) holds the simulator to it.

The rules, each from the vLLM 0.33.0 file named:

* ``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``: the pool of ``num_gpu_blocks``
  blocks gives its first block up as the null block (``self.null_block =
  self.free_block_queue.popleft()``), so ``num_gpu_blocks - 1`` blocks can be allocated;
  ``get_usage`` divides by ``num_gpu_blocks - 1``.
* ``scheduler.py``, ``schedule``: running requests first, in order, while the token
  budget is positive; ``num_new_tokens = num_tokens_with_spec - num_computed_tokens`` cut at
  the budget; ``allocate_slots(request, num_new_tokens, num_lookahead_tokens)``, and when
  it fails ``self.running.pop()`` is preempted and the allocation retried, until it fits or
  the request preempted itself, which ends the running loop.
* ``kv_cache_manager.py``, ``allocate_slots``: blocks for ``num_computed_tokens +
  num_new_tokens + num_lookahead_tokens`` slots, less the blocks held (never negative),
  refused when more than the free blocks; at admission also refused when the blocks of
  the whole ``num_tokens`` are not free (``full_sequence_must_fit``,
  ``scheduler_reserve_full_isl`` True by default).
* ``_preempt_request``: blocks freed, ``num_computed_tokens = 0``, output kept, back to
  the front of the waiting queue.
* waiting requests only when nothing was preempted, while the budget is positive and
  fewer than ``max_num_seqs`` run; ``num_new_tokens = num_tokens`` (prompt plus output so
  far) cut at the budget; a failed allocation stops admission. A new request with one
  token to compute, when ``num_speculative_tokens > 0`` without a dynamic schedule, running
  requests were scheduled in the step and none of them was a prefill chunk, is padded to
  ``1 + num_speculative_tokens`` tokens (placeholder drafts, all rejected), or not
  admitted when the budget left is smaller.
* ``update_from_output``: a decoding request's drafts beyond the accepted ones are
  rejected, ``num_computed_tokens`` rolled back by them; ``check_stop`` trims the tokens at
  the output length (``max_tokens``). A prefill chunk that reaches ``num_tokens`` samples
  one token.

The modelling choices the simulator states, taken here as they are stated there: no
prefix caching, watermark or ``max_model_len``; a decoding request verifies the drafts
it carries, the ``k`` the policy gives at the number of requests scheduled in the step it
was last scheduled in (usually the previous step), with that entry's pmf (a single range: a
static ``k``; several: a dynamic schedule, vLLM's
``dynamic_sd_lookup[len(num_scheduled_tokens)]``, ``scheduler.py`` line 1712, the drafts
set by ``update_draft_token_ids`` or the async placeholders); the step time is asked at the
``k`` of the previous step's count;
request ``i``'s ``d``-th decode step emits ``bisect_right(cdf, u)`` tokens, ``cdf`` the
running sum of the pmf with its last entry set to 1 and ``u`` the ``d``-th of request
``i``'s ``output - 1`` uniforms from ``numpy.random.default_rng(seed).random``, laid out
request after request; a step costs ``step_ms(decoding requests scheduled, k, their mean
computed tokens, prompt tokens prefilled) / 1000`` s; the client sends request ``i`` at
its arrival, or once a slot of its ``max_concurrency`` frees (the first free slot, first
come first served), and the replica sees it at the next step.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Request:
    """One request as vLLM's ``Request`` carries it (``vllm/v1/request.py``)."""

    request_id: int
    arrival: float
    num_prompt_tokens: int
    max_tokens: int
    first_uniform: int  # index of its first decode step's uniform
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    num_blocks: int = 0
    is_prefill_chunk: bool = False
    decoding: bool = False  # sampled in its last step (vLLM proposes drafts after it)
    entry: int = 0  # the policy entry of the drafts it carries (spec_token_ids' count)
    num_preemptions: int = 0
    num_decode_steps: int = 0
    num_output_placeholders: int = 0  # async: tokens a step in flight will sample
    num_in_flight_tokens: int = 0  # async: tokens of steps scheduled, not yet processed
    num_stale_output_tokens: int = 0  # async: of those, scheduled before a preemption
    sent: float = float("nan")
    first_scheduled: float = float("nan")
    first_token: float = float("nan")
    finish: float = float("nan")

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens


@dataclass
class BlockPool:
    """Free-block count of ``num_gpu_blocks`` blocks, one of them the null block."""

    num_gpu_blocks: int
    free: int = 0
    peak_used: int = 0

    def __post_init__(self) -> None:
        self.free = self.num_gpu_blocks - 1  # the null block is never handed out

    @property
    def usable(self) -> int:
        return self.num_gpu_blocks - 1


@dataclass
class Scheduled:
    """What one ``schedule()`` chose: tokens per request, in scheduling order."""

    tokens: dict[int, int] = field(default_factory=dict)
    k: int = 0
    entry: int = 0
    padded: set[int] = field(default_factory=set)
    decoders: set[int] = field(default_factory=set)  # running requests decoding
    entries: dict[int, int] = field(default_factory=dict)  # the drafts each decoder carried
    # async scheduling: the requests that sample in the step, with their drafts scheduled
    samples: dict[int, int] = field(default_factory=dict)
    end: float = 0.0  # async: when the step ends


class Replica:
    """The reference replica. ``step_tokens`` collects each step's scheduled tokens;
    ``num_padded`` counts the 1-token prompts admitted padded."""

    def __init__(
        self,
        arrival_s: Sequence[float],
        prompt_tokens: Sequence[int],
        output_tokens: Sequence[int],
        *,
        starts: Sequence[int],
        ks: Sequence[int],
        pmfs: Sequence[np.ndarray],
        lookahead: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        num_gpu_blocks: int,
        block_size: int,
        max_concurrency: int | None,
        step_ms: Callable[[int, int, float, int], float],
        seed: int,
    ) -> None:
        offsets = [0, *itertools.accumulate(int(o) - 1 for o in output_tokens)]
        self.requests = [
            Request(i, float(a), int(p), int(o), offsets[i])
            for i, (a, p, o) in enumerate(zip(arrival_s, prompt_tokens, output_tokens, strict=True))
        ]
        self.uniforms = np.random.default_rng(seed).random(offsets[-1]).tolist()
        self.starts = list(starts)
        self.ks = list(ks)
        self.cdfs = []
        for p in pmfs:
            cdf = list(itertools.accumulate(float(x) for x in p))
            cdf[-1] = 1.0
            self.cdfs.append(cdf)
        self.num_spec_tokens = max(self.ks)
        self.dynamic = len(self.ks) > 1
        self.lookahead = lookahead if self.num_spec_tokens > 0 else 0
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.pool = BlockPool(num_gpu_blocks)
        self.block_size = block_size
        self.max_concurrency = max_concurrency
        self.step_ms = step_ms
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.t = 0.0
        self.step_tokens: list[int] = []
        self.num_padded = 0  # new requests padded to 1 + num_speculative_tokens
        self.prev_count = 0  # requests scheduled in the last step
        # the client: requests not yet sent, and the times its slots free up
        self.unsent: deque[Request] = deque(self.requests)
        free_slots = len(self.requests) if max_concurrency is None else max_concurrency
        self.slots: deque[float] = deque([0.0] * free_slots)
        self.num_finished = 0

    # ------------------------------------------------------------------ blocks
    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate_slots(
        self, request: Request, num_new_tokens: int, full_sequence_must_fit: bool = False
    ) -> bool:
        if full_sequence_must_fit:
            full = max(self.blocks_for(request.num_tokens) - request.num_blocks, 0)
            if full > self.pool.free:
                return False
        slots = request.num_computed_tokens + num_new_tokens + self.lookahead
        new = max(self.blocks_for(slots) - request.num_blocks, 0)
        if new > self.pool.free:
            return False
        self.pool.free -= new
        request.num_blocks += new
        return True

    def free_blocks(self, request: Request) -> None:
        self.pool.free += request.num_blocks
        request.num_blocks = 0

    def preempt(self, request: Request) -> None:
        self.free_blocks(request)
        request.num_computed_tokens = 0
        request.decoding = False  # its drafts are dropped (spec_token_ids = [])
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    # ------------------------------------------------------------------ schedule
    def entry_at(self, batch_size: int) -> int:
        return bisect.bisect_right(self.starts, batch_size) - 1

    def schedule(self) -> Scheduled:
        out = Scheduled()
        # the drafts were proposed after the previous step: num_spec_tokens_to_schedule =
        # dynamic_sd_lookup[len(num_scheduled_tokens)] of that step (scheduler.py 1710)
        if any(r.decoding for r in self.running):
            out.entry = self.entry_at(self.prev_count)
            out.k = self.ks[out.entry]
        token_budget = self.budget
        preempted = False
        prefill_scheduled = False
        index = 0
        while index < len(self.running) and token_budget > 0:
            request = self.running[index]
            if (
                request.num_output_placeholders > 0
                and request.num_computed_tokens + 2 - request.num_output_placeholders
                >= request.num_prompt_tokens + request.max_tokens
            ):
                index += 1  # async: the step in flight surely reaches max_tokens
                continue
            # its drafts: those proposed after the step it was last scheduled in
            # (spec_token_ids, scheduler.py lines 1010-1025 and 2862-2881)
            spec = self.ks[request.entry] if request.decoding else 0
            if request.decoding:
                out.entries[request.request_id] = request.entry
            num_new = (
                request.num_tokens
                + spec
                + request.num_output_placeholders
                - request.num_computed_tokens
            )
            num_new = min(num_new, token_budget)
            scheduled = True
            while not self.allocate_slots(request, num_new):
                victim = self.running.pop()
                self.preempt(victim)
                preempted = True
                if victim is request:
                    scheduled = False
                    break
            if not scheduled:
                break
            out.tokens[request.request_id] = num_new
            prefill_scheduled |= request.is_prefill_chunk
            token_budget -= num_new
            index += 1
        scheduled_running_reqs = list(out.tokens)
        out.decoders = {i for i in out.tokens if self.requests[i].decoding}
        if not preempted:
            while token_budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
                request = self.waiting[0]
                num_new = request.num_tokens  # nothing computed (no prefix caching)
                pad = (
                    self.num_spec_tokens > 0
                    and not self.dynamic
                    and num_new == 1
                    and not prefill_scheduled
                    and bool(scheduled_running_reqs)
                )
                if pad:
                    num_new = 1 + self.num_spec_tokens
                    if num_new > token_budget:
                        break
                num_new = min(num_new, token_budget)
                if not self.allocate_slots(request, num_new, full_sequence_must_fit=True):
                    break
                self.waiting.popleft()
                self.running.append(request)
                if request.first_scheduled != request.first_scheduled:  # NaN: first time
                    request.first_scheduled = self.t
                out.tokens[request.request_id] = num_new
                if pad:
                    out.padded.add(request.request_id)
                    self.num_padded += 1
                token_budget -= num_new
        used = self.pool.usable - self.pool.free
        self.pool.peak_used = max(self.pool.peak_used, used)
        return out

    # ------------------------------------------------------------------ output
    def update_from_output(self, out: Scheduled) -> None:
        reqs = self.requests
        decoders = [reqs[i] for i in out.tokens if reqs[i].decoding]
        prefill = sum(
            1 if i in out.padded else n for i, n in out.tokens.items() if not reqs[i].decoding
        )
        if decoders:
            ctx = sum(r.num_computed_tokens for r in decoders) / len(decoders)
            ms = self.step_ms(len(decoders), out.k, ctx, prefill)
        else:
            ms = self.step_ms(0, 0, 0.0, prefill)
        self.t = self.t + float(ms) / 1000.0
        self.step_tokens.append(sum(out.tokens.values()))
        self.prev_count = len(out.tokens)
        finished = []
        for i, n in out.tokens.items():
            r = reqs[i]
            if r.decoding:
                u = self.uniforms[r.first_uniform + r.num_decode_steps]
                r.num_decode_steps += 1
                sampled = min(bisect.bisect_right(self.cdfs[out.entries[i]], u), n)
                emitted = min(sampled, r.max_tokens - r.num_output_tokens)  # check_stop
                # computed + n, less the rejected drafts, less the tokens trimmed at the stop
                r.num_computed_tokens += emitted
                r.num_output_tokens += emitted
            else:
                if i in out.padded:
                    n = 1  # the placeholder drafts are all rejected
                r.num_computed_tokens += n
                r.is_prefill_chunk = r.num_computed_tokens < r.num_tokens
                if r.is_prefill_chunk:
                    continue
                if r.num_output_tokens == 0:
                    r.first_token = self.t
                r.num_output_tokens += 1
                r.decoding = True
            # update_draft_token_ids: drafts of this step's num_spec_tokens_to_schedule
            r.entry = self.entry_at(len(out.tokens))
            if r.num_output_tokens >= r.max_tokens:
                finished.append(r)
        for r in finished:
            r.finish = self.t
            self.running.remove(r)
            self.free_blocks(r)
            self.slots.append(self.t)
            self.num_finished += 1

    # ------------------------------------------------------------------ client
    def next_send(self) -> float:
        if not self.unsent or not self.slots:
            return float("inf")
        return max(self.unsent[0].arrival, self.slots[0])

    def take_sends(self) -> None:
        while self.next_send() <= self.t:
            r = self.unsent.popleft()
            r.sent = max(r.arrival, self.slots.popleft())
            self.waiting.append(r)

    def run(self) -> Replica:
        while self.num_finished < len(self.requests):
            self.take_sends()
            if not self.running and not self.waiting:
                self.t = self.next_send()
                continue
            out = self.schedule()
            if out.tokens:
                self.update_from_output(out)
        return self


class AsyncReplica(Replica):
    """The reference replica under async scheduling (vLLM 0.33.0's ``AsyncScheduler``,
    ``vllm/v1/core/sched/async_scheduler.py``, run by ``EngineCore.step_with_batch_queue``,
    ``vllm/v1/engine/core.py``, with a batch queue of two: ``VllmConfig.
    max_concurrent_batches``). What differs from :class:`Replica`, from those sources:

    * ``_update_after_schedule`` (``scheduler.py``): right after scheduling, each request's
      ``num_computed_tokens`` grows by its scheduled tokens, ``is_prefill_chunk`` is decided,
      and ``AsyncScheduler._update_after_schedule`` adds ``1 + len(scheduled drafts)``
      output placeholders to each request that is not a prefill chunk;
    * ``update_from_output`` comes a step later: a request no longer known (finished) is
      skipped; the rejected drafts come off ``num_computed_tokens`` and the placeholders;
      ``_update_request_with_output`` trims at ``max_tokens`` and takes the generated tokens
      off the placeholders; output scheduled before a preemption (stale) is appended and may
      finish the request in the waiting queue, its rollbacks not applied;
    * ``_preempt_request``: ``num_stale_output_tokens = num_in_flight_tokens``,
      ``num_output_placeholders = 0``;
    * the loop: schedule; put the step in the queue; if the queue held nothing, schedule
      again at once; otherwise wait for the oldest step, process its output.

    A step's time is ``step_ms`` at the scheduler's view when it is scheduled, and it starts
    when the step before it ends (or when scheduled, if the engine was idle).
    """

    num_dropped = 0  # requests' extra steps whose tokens were dropped (finished before)
    num_stale = 0  # outputs delivered to a request preempted while they were in flight

    def preempt(self, request: Request) -> None:
        super().preempt(request)
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0

    def schedule(self) -> Scheduled:
        out = super().schedule()
        reqs = self.requests
        # the step's time, from the scheduler's view now
        decoders = [reqs[i] for i in out.decoders]
        prefill = sum(
            1 if i in out.padded else n for i, n in out.tokens.items() if i not in out.decoders
        )
        if decoders:
            ctx = sum(r.num_computed_tokens for r in decoders) / len(decoders)
            ms = self.step_ms(len(decoders), out.k, ctx, prefill)
        else:
            ms = self.step_ms(0, 0, 0.0, prefill)
        out.end = float(ms) / 1000.0  # (a duration until the step is placed)
        # _update_after_schedule, Scheduler's then AsyncScheduler's
        for i, n in out.tokens.items():
            r = reqs[i]
            r.num_computed_tokens += n
            r.num_in_flight_tokens += n
            r.is_prefill_chunk = r.num_computed_tokens < r.num_tokens + r.num_output_placeholders
            if r.is_prefill_chunk:
                continue
            if i in out.padded:
                drafts = self.num_spec_tokens
            elif i in out.decoders:
                drafts = n - 1
            else:
                drafts = 0
            r.num_output_placeholders += 1 + drafts
            r.decoding = True
            r.entry = self.entry_at(len(out.tokens))  # placeholders of this step's count
            out.samples[i] = drafts
        if out.tokens:
            self.step_tokens.append(sum(out.tokens.values()))
            self.prev_count = len(out.tokens)
        return out

    def update_from_output(self, out: Scheduled) -> None:
        reqs = self.requests
        for i, n in out.tokens.items():
            r = reqs[i]
            if r.finish == r.finish:  # finished: no longer in self.requests
                self.num_dropped += 1
                continue
            r.num_in_flight_tokens -= n
            stale = r.num_stale_output_tokens > 0
            if stale:
                r.num_stale_output_tokens -= n
                self.num_stale += i in out.samples
            if i not in out.samples:
                continue  # a prefill chunk: nothing sampled
            drafts = out.samples[i]
            if i in out.decoders:
                u = self.uniforms[r.first_uniform + r.num_decode_steps]
                r.num_decode_steps += 1
                generated = min(bisect.bisect_right(self.cdfs[out.entries[i]], u), n)
            else:
                generated = 1
            num_rejected = drafts - (generated - 1)
            if drafts and not stale:
                if r.num_computed_tokens > 0:
                    r.num_computed_tokens -= num_rejected
                if r.num_output_placeholders > 0:
                    r.num_output_placeholders -= num_rejected
            emitted = min(generated, r.max_tokens - r.num_output_tokens)
            stopped = emitted == r.max_tokens - r.num_output_tokens
            if stopped and not stale:
                r.num_computed_tokens -= generated - emitted
            if not stale and r.num_output_placeholders > 0:
                r.num_output_placeholders -= generated
            if r.num_output_tokens == 0:
                r.first_token = self.t
            r.num_output_tokens += emitted
            if stopped:
                r.finish = self.t
                if r in self.running:
                    self.running.remove(r)
                else:
                    self.waiting.remove(r)
                self.free_blocks(r)
                self.slots.append(self.t)
                self.num_finished += 1

    def run(self) -> Replica:
        queue: deque[Scheduled] = deque()
        gpu_free = 0.0
        while self.num_finished < len(self.requests):
            self.take_sends()
            if not self.running and not self.waiting and not queue:
                self.t = self.next_send()
                continue
            if self.running or self.waiting:
                out = self.schedule()
                if out.tokens:
                    out.end += max(self.t, gpu_free)
                    gpu_free = out.end
                queue.appendleft(out)
                if len(queue) < 2:
                    continue
            out = queue.pop()
            if out.tokens:
                self.t = out.end
                self.update_from_output(out)
        return self


__all__ = ["AsyncReplica", "BlockPool", "Replica", "Request", "Scheduled"]
