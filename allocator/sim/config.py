"""Scheduler settings of one replica and the step-time function the simulator is given.

:class:`Scheduler` carries the vLLM settings the simulator plays (vLLM 0.33.0,
``vllm/config/scheduler.py``): ``max_num_seqs`` (requests running at once),
``max_num_batched_tokens`` (the token budget of one step; vLLM's
``max_num_scheduled_tokens`` defaults to it), the KV cache as a number of tokens cut into
blocks of ``block_size`` tokens (``kv_cache_tokens // block_size`` blocks, vLLM's
``num_gpu_blocks``, all but the null block usable), and the benchmark client's
``max_concurrency`` (``vllm bench serve --max-concurrency``: requests in flight at the
client, ``None``: unlimited) and ``async_scheduling`` (vLLM's ``--async-scheduling``:
step ``n + 1`` scheduled before step ``n``'s output is processed,
:mod:`allocator.sim.engine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..exceptions import ParameterError
from ..validate import whole


class StepTime(Protocol):
    """Wall time of one engine step, ms.

    ``decode_seqs``: sequences decoding in the step (past their prefill), each verifying
    ``k`` drafted tokens plus its own (``k = 0``: plain decoding; ``k`` is 0 whenever
    ``decode_seqs`` is 0); ``context_tokens``: the mean number of tokens already in the KV
    cache of those sequences when the step starts (0 without decoding sequences);
    ``prefill_tokens``: prompt tokens prefilled in the step (chunks of prompts, and of
    prompt plus earlier output for a request recomputed after preemption). A step with no
    decoding sequence costs its prefill alone: ``step_ms(0, 0, 0.0, P)``.

    The simulator calls it once per step, so it should be cheap (a lookup in tables
    computed before the run, not a model evaluated per call). Optionally the object may
    also have ``many(decode_seqs, k, context_tokens, prefill_tokens) -> (H,) ms`` taking
    ``(H,)`` arrays (int64, float64, int64) and one ``k``: the simulator then asks for a
    stretch of decode-only steps in one call. It must agree with ``__call__`` element by
    element (the results are then identical either way).
    """

    def __call__(
        self, decode_seqs: int, k: int, context_tokens: float, prefill_tokens: int
    ) -> float: ...


@dataclass(frozen=True)
class Scheduler:
    """One replica's scheduler and its benchmark client.

    ``max_num_seqs``: requests running at once (>= 1); ``max_num_batched_tokens``: tokens
    scheduled per step, prefill chunks and verified tokens together (>= 1);
    ``kv_cache_tokens``: KV-cache capacity in tokens (at least one block);
    ``block_size``: tokens per KV block (vLLM's default 16); ``max_concurrency``: requests
    the client keeps in flight at most (``None``: no limit); ``async_scheduling``: vLLM's
    ``AsyncScheduler`` (``vllm/v1/core/sched/async_scheduler.py``), each step scheduled
    while the one before it runs. vLLM 0.33.0 turns it on by default
    (``VllmConfig``, ``vllm/config/vllm.py`` lines 1685-1719: ``None`` becomes ``True``
    unless an option is incompatible), and so does this class; ``False`` plays vLLM's
    synchronous ``Scheduler`` (``--no-async-scheduling``). ``enable_prefix_caching``:
    vLLM's automatic prefix caching (:mod:`allocator.sim.prefix_cache`; vLLM 0.33.0 turns
    it on by default, ``CacheConfig.enable_prefix_caching``; here off unless asked, the
    problem file's default is on); ``hash_lookahead_tokens``: tokens past a block its hash
    covers (vLLM's ``num_hash_lookahead_tokens``: 1 with an EAGLE, EAGLE-3 or MTP drafter
    and prefix caching, else 0).

    Refused as vLLM refuses it: ``max_num_batched_tokens < max_num_seqs``
    (``SchedulerConfig.verify_max_model_len``, ``vllm/config/scheduler.py`` lines 331-336,
    called from ``__post_init__`` whatever the other settings).
    """

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int
    block_size: int = 16
    max_concurrency: int | None = None
    async_scheduling: bool = True
    enable_prefix_caching: bool = False
    hash_lookahead_tokens: int = 0

    def __post_init__(self) -> None:
        for field in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens", "block_size"):
            whole(getattr(self, field), field, lo=1)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ParameterError(
                "max_num_batched_tokens",
                f"must be >= max_num_seqs ({self.max_num_seqs}), as vLLM requires, got "
                f"{self.max_num_batched_tokens}",
            )
        if not isinstance(self.async_scheduling, bool):
            raise ParameterError(
                "async_scheduling", f"must be True or False, got {self.async_scheduling!r}"
            )
        if not isinstance(self.enable_prefix_caching, bool):
            raise ParameterError(
                "enable_prefix_caching",
                f"must be True or False, got {self.enable_prefix_caching!r}",
            )
        whole(self.hash_lookahead_tokens, "hash_lookahead_tokens", lo=0, hi=self.block_size)
        if self.kv_cache_tokens < self.block_size:
            raise ParameterError(
                "kv_cache_tokens",
                f"must hold at least one block of {self.block_size} tokens, got "
                f"{self.kv_cache_tokens}",
            )
        c = self.max_concurrency
        if c is not None:
            whole(c, "max_concurrency", lo=1)

    @property
    def num_blocks(self) -> int:
        """KV blocks of the cache: ``kv_cache_tokens // block_size`` (vLLM's
        ``num_gpu_blocks``; one of them is the null block, so one fewer can be allocated:
        :mod:`allocator.sim.block_pool`)."""
        return self.kv_cache_tokens // self.block_size


__all__ = [
    "Scheduler",
    "StepTime",
]
