"""The KV-cache block pool of one replica: how many blocks are free, as vLLM counts them.

vLLM 0.33.0, ``vllm/v1/core/block_pool.py``, ``BlockPool.__init__`` (line 191): of the
pool's ``num_gpu_blocks`` blocks the first is taken out of the free queue at start-up as
the *null block* (a placeholder, block id 0) and is never handed to a request, so at most
``num_gpu_blocks - 1`` blocks are ever allocated; ``get_usage`` (lines 921-931) divides the
blocks in use by ``num_gpu_blocks - 1``. Here ``num_gpu_blocks`` is
:attr:`~allocator.sim.config.Scheduler.num_blocks` (``kv_cache_tokens // block_size``) and
:attr:`BlockPool.usable` is one less. Counting the null block changed the simulator's
outputs where the cache binds: one block fewer than before to admit and grow requests
(admission and preemption can come a step sooner), and ``kv_cache_peak_fraction`` over
``num_blocks - 1``.

Here blocks are counted, not identified: without prefix caching a block is either free or
held by one running request (vLLM's ``get_new_blocks`` and ``free_blocks``, lines 706 and
816). Under prefix caching :class:`~allocator.sim.prefix_cache.PrefixCache` names them
and ``used`` is kept as its count of blocks with a reference (a block shared by several
requests counted once; a cached free block is free, as ``get_num_free_blocks`` counts it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BlockPool:
    """``num_gpu_blocks`` blocks of ``block_size`` tokens, the null block among them.

    ``used``: blocks held by running requests now; ``peak``: the most held at once, as
    :attr:`peak_fraction` of the :attr:`usable` blocks (vLLM's ``get_usage`` at its peak).
    """

    num_gpu_blocks: int
    block_size: int
    used: int = 0
    peak: int = 0

    @property
    def usable(self) -> int:
        """Blocks a request can be given: all but the null block."""
        return self.num_gpu_blocks - 1

    @property
    def free(self) -> int:
        """Free blocks (vLLM's ``get_num_free_blocks``)."""
        return self.usable - self.used

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` KV slots: ``⌈tokens / block_size⌉``."""
        return -(-tokens // self.block_size)

    def note_peak(self) -> None:
        """Record ``used`` if it is the most yet."""
        if self.used > self.peak:
            self.peak = self.used

    @property
    def peak_fraction(self) -> float:
        """The most blocks held at once over the usable blocks (0 with none usable)."""
        return self.peak / self.usable if self.usable > 0 else 0.0


__all__ = ["BlockPool"]
