"""Drive vLLM's own V1 scheduler step by step with mock model outputs.

The scheduler is built as vLLM's unit tests build it (``tests/v1/core/utils.py``,
``create_scheduler``): a ``VllmConfig`` from ``SchedulerConfig``, ``CacheConfig`` and a
``ModelConfig`` read from a tiny ``config.json`` written to a temporary folder (nothing is
downloaded), a ``KVCacheConfig`` of one full-attention group with ``num_gpu_blocks``
blocks, and n-gram speculation for ``k > 0`` (vLLM's tests use the same; its
``num_lookahead_tokens`` is 0, ``lookahead_tokens`` overrides it to play an EAGLE-like
drafter without its weights). No model runs: each step's ``ModelRunnerOutput`` is made up
from the schedule and the accepted-token counts given, and the drafts are ``k`` dummy
tokens for every request that is past its prefill, as ``EngineCore.step`` and
``post_step`` hand them to the scheduler (``vllm/v1/engine/core.py``).

Time is counted in steps: every step that schedules a token takes one unit, and a step's
index is its start. Requests join the waiting queue once the clock has reached their
arrival step, before the next ``schedule()``; with nothing running, waiting or in flight
the clock jumps to the next arrival. A ``schedule()`` that schedules no token (the only
running request preempted itself, or under async scheduling everything is in flight) is
processed but takes no time and no step: it runs no model.

Synchronous scheduling (``Scheduler``, ``EngineCore.step``): ``schedule()`` at the step's
start, then ``update_from_output()`` and ``update_draft_token_ids()`` at its end.
Asynchronous scheduling (``AsyncScheduler``, ``EngineCore.step_with_batch_queue`` with a
batch queue of two, ``vllm/v1/engine/core.py`` lines 708-817): with nothing in flight a
step is scheduled and the next one at once; otherwise a step is scheduled while the one
before it runs, then the engine waits for the running step's end, processes its output
and the step just scheduled starts. A schedule of no token lets the engine process the
step in flight and schedule the next with nothing in flight. The drafts are the
scheduler's own placeholders (no structured output: ``update_draft_token_ids_in_output``
is not called).

Needs vLLM and torch; import it only where vLLM is installed (the ``vllm`` extra).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# vLLM reads these when first imported: a CPU platform, and no hub look-ups
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Token id every prompt, sampled token and draft carries (content is irrelevant here).
TOKEN = 7


@dataclass(frozen=True)
class Workload:
    """``N`` requests: arrival step, prompt tokens and output tokens (``max_tokens``),
    each a sequence of length ``N``, arrivals non-decreasing. ``tokens`` (optional): each
    request's token ids, prompt then output (``prompt + output`` of them): the prompt it is
    given and the tokens the mock model samples for it, so that requests share what their
    ids share (prefix caching); without it every prompt is its own."""

    arrival_step: Sequence[int]
    prompt_tokens: Sequence[int]
    output_tokens: Sequence[int]
    tokens: Sequence[Sequence[int]] | None = None

    def __len__(self) -> int:
        return len(self.arrival_step)


@dataclass(frozen=True)
class Limits:
    """The scheduler's settings. ``num_gpu_blocks`` is vLLM's: one block is its null block,
    so ``num_gpu_blocks - 1`` hold KV (``vllm/v1/core/block_pool.py``). ``k``: drafts per
    decoding request and step (0: speculation off); ``lookahead_tokens``: ``None`` keeps
    vLLM's value for n-gram drafting (0), an integer overrides
    ``Scheduler.num_lookahead_tokens``; ``k_schedule``: vLLM's
    ``num_speculative_tokens_per_batch_size``, inclusive ``(start, end, k)`` ranges of
    scheduled requests (``None``: ``k`` at every batch size). Any schedule turns off the
    padding of one-token admissions to ``1 + k`` (``Scheduler.schedule``, only when
    ``dynamic_sd_lookup is None``). ``async_scheduling``: ``AsyncScheduler`` (with
    ``k > 0`` too: :func:`make_scheduler`)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_gpu_blocks: int
    k: int = 0
    lookahead_tokens: int | None = None
    prefix_caching: bool = False
    async_scheduling: bool = False
    max_model_len: int = 1 << 15
    k_schedule: tuple[tuple[int, int, int], ...] | None = None
    log_stats: bool = False


@dataclass
class Step:
    """One played step: its index (its start on the clock), the tokens scheduled per
    request (``{request: n}``), the requests scheduled as decoding (past their prefill)
    with the drafts each verified, the prompt (prefill or recomputation) tokens
    scheduled, the decoding requests' computed tokens summed before the step, the
    requests preempted in it, and the requests whose last prompt token vLLM padded with
    placeholder drafts to ``1 + k`` tokens (``Scheduler.schedule``, "Pad new decode
    requests to uniform spec decoding size"); ``pad_blocked``: admission stopped at a
    request that would have been padded so but for the budget left ("Prefer to not
    schedule than schedule un-padded"); ``stale``: the decoding requests scheduled or
    preempted in the step that carried into it a number of drafts other than the
    previous schedule's ``num_spec_tokens_to_schedule`` (``{request: drafts carried}``):
    left out of the previous step, they keep the drafts of the step they were last
    scheduled in (``Scheduler.schedule`` lines 1010-1025 take ``request.spec_token_ids``,
    set only for the requests of a step: ``update_draft_token_ids``, lines 2862-2881,
    and ``AsyncScheduler._update_after_schedule``)."""

    index: int
    scheduled: dict[int, int]
    decoding: dict[int, int]
    prefill_tokens: int
    decode_context: int
    preempted: list[int]
    padded: list[int] = field(default_factory=list)
    pad_blocked: bool = False
    stale: dict[int, int] = field(default_factory=dict)


@dataclass
class Trace:
    """What the scheduler did: ``steps`` (played steps in scheduling order) and per
    request the clock's time at the ``schedule()`` that first scheduled it (the step's
    start; under async scheduling the start of the step then running, or the step's own
    start when nothing was in flight), the step of its first token, the step of its last
    (finish), the steps in which it received tokens (``chunks``), tokens received and
    preemptions; ``empty``: the schedules of no token (their :class:`Step`, the
    preemptions and stale drafts in them recorded like a played step's);
    ``prefix_cache``: with ``Limits.log_stats``, vLLM's ``PrefixCacheStats`` summed over
    the run, ``[queries, hits, preempted_queries, preempted_hits]``."""

    steps: list[Step] = field(default_factory=list)
    first_scheduled: list[int | None] = field(default_factory=list)
    first_token: list[int | None] = field(default_factory=list)
    finish: list[int | None] = field(default_factory=list)
    chunks: list[list[int]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    empty: list[Step] = field(default_factory=list)
    prefix_cache: list[int] = field(default_factory=lambda: [0, 0, 0, 0])


_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 1024,
    "max_position_embeddings": 1 << 16,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}

_MODEL_DIR: str | None = None


def model_dir() -> str:
    """A folder holding a tiny Llama ``config.json`` (made once per process)."""
    global _MODEL_DIR
    if _MODEL_DIR is None:
        path = tempfile.mkdtemp(prefix="tiny-llama-")
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(_MODEL_CONFIG, f)
        _MODEL_DIR = path
    return _MODEL_DIR


def make_scheduler(limits: Limits):
    """vLLM's ``Scheduler`` (or ``AsyncScheduler``) for ``limits``, built as
    ``create_scheduler`` in vLLM's ``tests/v1/core/utils.py`` builds it.

    Asynchronous scheduling with ``k > 0``: ``VllmConfig`` refuses it with n-gram
    drafting ("Async scheduling is not supported by the V1 model runner with
    ngram-based speculative decoding", ``vllm/config/vllm.py`` lines 1655-1680), and the
    drafters it accepts (EAGLE, MTP, draft models) need their weights. So the config is
    validated with synchronous scheduling and n-gram drafting, then its
    ``scheduler_config.async_scheduling`` is set and an ``AsyncScheduler`` built on it:
    the scheduler then plays an EAGLE-like drafter (``lookahead_tokens`` set to ``k``)
    whose drafts are the scheduler's own placeholders, as ``step_with_batch_queue``
    leaves them without structured output. What else n-gram changes in the scheduler
    (``use_eagle``: the prefix-cache block drop) does not act without prefix caching.
    """
    import torch
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model_config = ModelConfig(
        model=model_dir(),
        dtype="float32",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=limits.max_model_len,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        max_model_len=limits.max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=limits.async_scheduling and not limits.k,
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(
        block_size=limits.block_size,
        cache_dtype="auto",
        enable_prefix_caching=limits.prefix_caching,
    )
    speculative_config = (
        SpeculativeConfig(
            model="ngram",
            num_speculative_tokens=limits.k,
            num_speculative_tokens_per_batch_size=(
                [list(r) for r in limits.k_schedule] if limits.k_schedule else None
            ),
        )
        if limits.k
        else None
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        speculative_config=speculative_config,
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=limits.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=limits.block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            )
        ],
    )
    cache_config.num_gpu_blocks = limits.num_gpu_blocks
    if limits.async_scheduling:
        vllm_config.scheduler_config.async_scheduling = True  # (after validation: see docstring)
    cls = AsyncScheduler if limits.async_scheduling else Scheduler
    scheduler = cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=limits.block_size,
        log_stats=limits.log_stats,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
    if limits.lookahead_tokens is not None:
        scheduler.num_lookahead_tokens = limits.lookahead_tokens
    return scheduler


def _make_request(
    i: int,
    prompt: int,
    output: int,
    block_size: int,
    arrival: float,
    tokens: Sequence[int] | None = None,
):
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    global _HASH_READY
    if not _HASH_READY:
        init_none_hash(sha256)
        _HASH_READY = True
    params = SamplingParams(max_tokens=int(output), ignore_eos=True)
    # distinct prompts: no request shares a prefix block with another (unless ``tokens``)
    return Request(
        request_id=str(i),
        prompt_token_ids=(
            [i % 1000 + 1] * int(prompt) if tokens is None else list(tokens[: int(prompt)])
        ),
        sampling_params=params,
        pooling_params=None,
        arrival_time=arrival,
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


_HASH_READY = False


def run(
    workload: Workload,
    limits: Limits,
    accepted: Sequence[Sequence[int]] | Callable[[int, int, int], int] | None = None,
    max_steps: int = 1_000_000,
) -> Trace:
    """Play ``workload`` on vLLM's scheduler and return its :class:`Trace`.

    ``accepted[i][d]``: drafts accepted in request ``i``'s ``d``-th decode step (steps it
    was scheduled past its prefill, counted over its whole life, recomputations included);
    or a callable ``accepted(i, d, k)``, ``k`` the drafts the request carried into the
    step (``len(spec_token_ids)`` before ``schedule()``, which a budget may cut); the
    step emits ``min(accepted, drafts scheduled) + 1`` tokens, and vLLM's own
    ``check_stop`` cuts them at ``max_tokens``. ``None``: every draft rejected.
    """
    arrival = [int(a) for a in workload.arrival_step]
    if any(b < a for a, b in zip(arrival, arrival[1:], strict=False)):
        raise ValueError("arrival steps must be non-decreasing")
    play = _Play(workload, limits, accepted)
    if limits.async_scheduling:
        play.run_async(max_steps)
    else:
        play.run_sync(max_steps)
    return play.trace


class _Play:
    """One run: the scheduler, the clock (in steps) and what is recorded."""

    def __init__(self, workload: Workload, limits: Limits, accepted) -> None:
        n = len(workload)
        self.workload = workload
        self.limits = limits
        self.accepted = accepted
        self.n = n
        self.arrival = [int(a) for a in workload.arrival_step]
        self.sched = make_scheduler(limits)
        self.trace = Trace(
            first_scheduled=[None] * n,
            first_token=[None] * n,
            finish=[None] * n,
            chunks=[[] for _ in range(n)],
            tokens=[0] * n,
            preemptions=[0] * n,
        )
        self.decode_count = [0] * n
        self.decoding: set[int] = set()  # requests past their prefill (since admission)
        self.nxt = 0
        self.done = 0
        self.t = 0  # the clock, in steps
        self.k_prev = self.sched.num_spec_tokens  # the last schedule's drafts per request

    def add_arrivals(self) -> None:
        """Requests whose arrival step has come join the waiting queue."""
        w = self.workload
        while self.nxt < self.n and self.arrival[self.nxt] <= self.t:
            i = self.nxt
            self.sched.add_request(
                _make_request(
                    i,
                    w.prompt_tokens[i],
                    w.output_tokens[i],
                    self.limits.block_size,
                    float(self.arrival[i]),
                    None if w.tokens is None else w.tokens[i],
                )
            )
            self.nxt += 1

    def schedule(self, start: int):
        """``schedule()`` at the clock's time for a step starting at ``start``: the output,
        its :class:`Step` and the tokens each request emits in it."""
        sched, trace = self.sched, self.trace
        before = {}
        running_before = {int(r.request_id) for r in sched.running}
        decoding_before = self.decoding & running_before
        for rid, req in sched.requests.items():
            before[int(rid)] = (
                req.num_computed_tokens,
                req.num_tokens,
                req.num_preemptions,
                len(req.spec_token_ids),
            )
        out = sched.schedule()
        if self.limits.log_stats:  # (recorded at admission; taken here, so reset here)
            st = sched.kv_cache_manager.make_prefix_cache_stats()
            if st is not None:
                got = (st.queries, st.hits, st.preempted_queries, st.preempted_hits)
                for j, v in enumerate(got):
                    trace.prefix_cache[j] += v
        preempted = []
        for rid, req in sched.requests.items():
            i = int(rid)
            if i in before and req.num_preemptions > before[i][2]:
                preempted.append(i)
                trace.preemptions[i] += req.num_preemptions - before[i][2]
                self.decoding.discard(i)
        record = Step(start, {}, {}, 0, 0, sorted(preempted))
        emit: dict[int, int] = {}
        for rid, s in out.num_scheduled_tokens.items():
            i = int(rid)
            record.scheduled[i] = s
            if trace.first_scheduled[i] is None:
                trace.first_scheduled[i] = self.t
            # computed tokens at the step's start (``schedule()`` has already added the
            # scheduled tokens; under async scheduling the tokens in flight count)
            computed = sched.requests[rid].num_computed_tokens - s
            tokens = before[i][1]
            if i in self.decoding:
                drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
                record.decoding[i] = drafts
                record.decode_context += computed
                d = self.decode_count[i]
                self.decode_count[i] += 1
                acc = self.accepted
                if callable(acc):  # by the drafts it carried, before a budget cut
                    acc = acc(i, d, before[i][3])
                elif acc is not None:
                    acc = acc[i][d]
                emit[i] = min(acc or 0, drafts) + 1
            else:
                left = tokens - computed
                if s > left:  # padded: the prompt's last token and placeholder drafts
                    record.padded.append(i)
                record.prefill_tokens += min(s, left)
                if computed + s >= tokens:  # the prefill (or recomputation) completes
                    emit[i] = 1
                    self.decoding.add(i)
        for i in sorted(set(record.scheduled) | set(preempted)):
            if i in decoding_before and before[i][3] != self.k_prev:
                record.stale[i] = before[i][3]
        record.pad_blocked = _pad_blocked(sched, self.limits, out, record, running_before)
        if out.total_num_scheduled_tokens == 0:
            trace.empty.append(record)
        else:
            trace.steps.append(record)
            self.k_prev = out.num_spec_tokens_to_schedule
        return out, record, emit

    def process(self, out, record: Step, emit: dict[int, int]) -> None:
        """``update_from_output`` with a mock model output emitting ``emit``; the tokens are
        recorded in the step that made them (``record.index``)."""
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

        sched, trace = self.sched, self.trace
        ids = list(out.num_scheduled_tokens)
        sampled = [self.sampled(r, emit.get(int(r), 0)) for r in ids]
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: j for j, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        results = sched.update_from_output(out, mro)
        for eco in results.values():
            for o in eco.outputs:
                i = int(o.request_id)
                if o.new_token_ids:
                    if trace.first_token[i] is None:
                        trace.first_token[i] = record.index
                    trace.chunks[i].append(record.index)
                    trace.tokens[i] += len(o.new_token_ids)
                if o.finish_reason is not None:
                    trace.finish[i] = record.index
                    self.decoding.discard(i)
                    self.done += 1
        if not self.limits.async_scheduling and self.limits.k:
            # ``post_step``: the drafter proposes the step's ``num_spec_tokens_to_schedule``
            # drafts for every request it sampled for (``vllm/v1/engine/core.py``)
            live = [r for r in ids if int(r) in self.decoding and r in sched.requests]
            k = out.num_spec_tokens_to_schedule
            if live:
                sched.update_draft_token_ids(
                    DraftTokenIds(req_ids=live, draft_token_ids=[[TOKEN] * k for _ in live])
                )

    def sampled(self, rid: str, count: int) -> list[int]:
        """The ``count`` token ids the mock model samples for request ``rid``: its next
        tokens of ``Workload.tokens`` (past its end, or without it, :data:`TOKEN`)."""
        tokens = self.workload.tokens
        req = self.sched.requests.get(rid)
        if tokens is None or req is None or not count:
            return [TOKEN] * count
        row = tokens[int(rid)]
        at = req.num_prompt_tokens + len(req.output_token_ids)
        got = list(row[at : at + count])
        return got + [TOKEN] * (count - len(got))

    def run_sync(self, max_steps: int) -> None:
        """``EngineCore.step``: schedule, play, process; one step at a time."""
        for _ in range(max_steps):
            if self.done >= self.n:
                return
            self.add_arrivals()
            if not self.sched.has_requests():
                self.t = self.arrival[self.nxt]  # idle: the clock jumps to the next arrival
                continue
            out, record, emit = self.schedule(self.t)
            self.process(out, record, emit)
            if out.total_num_scheduled_tokens:
                self.t += 1
        raise RuntimeError(f"no end after {max_steps} schedules")

    def run_async(self, max_steps: int) -> None:
        """``EngineCore.step_with_batch_queue`` with a queue of two: a step is scheduled
        and, with nothing in flight, the next is scheduled at once; otherwise the engine
        waits for the step in flight (its end is the clock's time), processes it, and
        the step just scheduled starts. A schedule of no token resynchronises: the step
        in flight is processed and the next is scheduled with nothing in flight."""
        flight = None  # (output, record, emit) of the step running now
        for _ in range(max_steps):
            if self.done >= self.n:
                while flight is not None:  # (an extra step still in flight)
                    self.process(*flight)
                    flight = None
                return
            self.add_arrivals()
            if flight is None and not self.sched.has_requests():
                self.t = self.arrival[self.nxt]
                continue
            nxt = None
            empty = None
            if self.sched.has_requests():
                start = self.t if flight is None else flight[1].index + 1
                out, record, emit = self.schedule(start)
                if out.total_num_scheduled_tokens:
                    nxt = (out, record, emit)
                else:
                    empty = (out, record, emit)
            if flight is None:
                if empty is not None:  # (finished requests reported; the clock jumps next)
                    self.process(*empty)
                flight = nxt
                continue
            self.process(*flight)
            self.t = flight[1].index + 1
            if empty is not None:
                self.process(*empty)
            flight = nxt
        raise RuntimeError(f"no end after {max_steps} schedules")


def _pad_blocked(sched, limits: Limits, out, record: Step, running_before: set[int]) -> bool:
    """Whether admission stopped at the head of the waiting queue only because vLLM pads a
    request with one token left to ``1 + k`` tokens (``Scheduler.schedule``: "Pad new
    decode requests to uniform spec decoding size"): the padding applies, and one unpadded
    token with its lookahead would have fitted the budget and the free blocks."""
    if not limits.k or limits.k_schedule or record.preempted or not len(sched.waiting):
        return False
    if len(sched.running) >= limits.max_num_seqs:
        return False
    head = sched.waiting.peek_request()
    if head.num_tokens - head.num_computed_tokens != 1:
        return False
    running_scheduled = [i for i in record.scheduled if i in running_before]
    if not (running_scheduled or head.num_computed_tokens > 0):
        return False
    if any(i not in record.decoding for i in running_scheduled):
        return False  # a running prefill chunk this step: no padding
    if limits.max_num_batched_tokens - out.total_num_scheduled_tokens < 1:
        return False
    bs = limits.block_size
    free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    need = -(-(head.num_computed_tokens + 1 + sched.num_lookahead_tokens) // bs)
    return max(need, -(-head.num_tokens // bs)) <= free
