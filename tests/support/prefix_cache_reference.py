"""The prefix cache as it stood before its speed-up (allocator/sim/prefix_cache.py at commit
631c52a, kept verbatim but for this docstring): a hash table entered and evicted block by
block, the free queue an ordered dict. ``tests/unit/sim/test_prefix_cache_own.py`` plays
the simulator with it in place of the current one and requires the same run."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from allocator.sim.requests import TokenContent


class PrefixCache:
    """``num_gpu_blocks`` named blocks of ``block_size`` tokens (block 0 the null block),
    the hash table, and the blocks each request holds.

    ``content``: what the ``N`` requests' tokens are (``None``: each request's own);
    ``lookahead``: tokens past a block its hash covers (0, or 1 with an EAGLE-style
    drafter). ``cached[i]``: request ``i``'s blocks entered in the table (vLLM's
    ``num_cached_block``); ``queries``, ``hits``, ``preempted_queries``,
    ``preempted_hits``: tokens, as vLLM's ``PrefixCacheStats`` counts them.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        lookahead: int,
        content: TokenContent | None,
        n_requests: int,
    ) -> None:
        self.B = block_size
        self.lookahead = lookahead
        self.content = content
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        self.ref = [0] * num_gpu_blocks
        self.hash_of: dict[int, int] = {}
        # hash -> its block, or (several blocks, as vLLM's BlockHashToBlockMap) a dict of
        # them in the order entered
        self.table: dict[int, int | dict[int, None]] = {}
        self.blocks: dict[int, list[int]] = {}
        self.hashes: dict[int, list[int]] = {}
        self.cached = np.zeros(n_requests, dtype=np.int64)
        self.requests = 0
        self.queries = 0
        self.hits = 0
        self.preempted_requests = 0
        self.preempted_queries = 0
        self.preempted_hits = 0

    # ------------------------------------------------------------------ hashes
    @property
    def free_count(self) -> int:
        """Blocks in the free queue, cached or not (vLLM's ``get_num_free_blocks``)."""
        return len(self.queue)

    def hashable(self, known: int) -> int:
        """Full blocks of a request with ``known`` tokens that have a hash."""
        return max(known - self.lookahead, 0) // self.B

    def block_hashes(self, i: int, count: int) -> list[int]:
        """Request ``i``'s first ``count`` block hashes (computed once, kept until it
        finishes)."""
        have = self.hashes.get(i)
        if have is None:
            have = self.hashes[i] = []
        if len(have) >= count:
            return have
        if self.content is None:
            # every request's tokens its own: block j of request i is named (i, j) alone,
            # as one int (no content, so no hash of a shared prefix to meet)
            base = i << 32
            have.extend(range(base + len(have), base + count))
            return have
        B, la = self.B, self.lookahead
        ids, lengths = self.content.segments(i)
        ends = np.cumsum(lengths).tolist()
        idl = ids.tolist()
        starts = [e - n for e, n in zip(ends, lengths.tolist(), strict=True)]
        prev = have[-1] if have else 0
        seg = 0
        for j in range(len(have), count):
            a, b = j * B, (j + 1) * B + la
            while ends[seg] <= a:
                seg += 1
            pieces = []
            s = seg
            while s < len(ends) and starts[s] < b:
                lo = max(a, starts[s]) - starts[s]
                hi = min(b, ends[s]) - starts[s]
                pieces.append((idl[s], lo, hi))
                s += 1
            prev = hash((prev, tuple(pieces)))
            have.append(prev)
        return have

    # ------------------------------------------------------------------ lookups
    def lookup(self, i: int, known: int) -> list[int]:
        """The blocks request ``i`` (``known`` tokens, none computed) finds cached: the
        longest run from its first block, at most ``known - 1`` tokens."""
        n = min((known - 1) // self.B, self.hashable(known))
        if n <= 0:
            return []
        hashes = self.block_hashes(i, n)
        table = self.table
        hit: list[int] = []
        for j in range(n):
            found = table.get(hashes[j])
            if found is None:
                break
            hit.append(found if isinstance(found, int) else next(iter(found)))
        return hit

    def evictable(self, blocks: list[int]) -> int:
        """Of ``blocks``, those in the free queue (no reference)."""
        ref = self.ref
        return sum(1 for b in blocks if ref[b] == 0)

    def record(self, tokens: int, hit_tokens: int, preempted: bool) -> None:
        """An admission's lookup, as ``PrefixCacheStats.record`` counts it."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += tokens
            self.preempted_hits += hit_tokens
        else:
            self.requests += 1
            self.queries += tokens
            self.hits += hit_tokens

    # ------------------------------------------------------------------ blocks
    def pop(self, count: int) -> list[int]:
        """``count`` blocks from the free queue's front, each losing a cached hash."""
        popitem, unhash, table, ref = self.queue.popitem, self.hash_of.pop, self.table, self.ref
        out = []
        for _ in range(count):
            b = popitem(False)[0]
            h = unhash(b, None)
            if h is not None:
                entry = table[h]
                if isinstance(entry, int):
                    del table[h]
                else:
                    del entry[b]
                    if len(entry) == 1:
                        table[h] = next(iter(entry))
            ref[b] = 1
            out.append(b)
        return out

    def admit(self, i: int, hit: list[int], new: int) -> None:
        """Request ``i`` takes its ``hit`` blocks (one more reference each, out of the free
        queue) and ``new`` fresh ones."""
        ref, queue = self.ref, self.queue
        for b in hit:
            if ref[b] == 0:
                del queue[b]
            ref[b] += 1
        self.blocks[i] = hit + self.pop(new)
        self.cached[i] = len(hit)

    def grow(self, i: int, new: int) -> None:
        """Request ``i`` takes ``new`` fresh blocks."""
        self.blocks[i].extend(self.pop(new))

    def cache(self, i: int, full: int) -> None:
        """Enter request ``i``'s blocks ``[cached[i], full)`` in the hash table."""
        start = int(self.cached[i])
        if full <= start:
            return
        hashes = self.block_hashes(i, full)
        blocks = self.blocks[i]
        hash_of, table = self.hash_of, self.table
        for j in range(start, full):
            b = blocks[j]
            h = hashes[j]
            hash_of[b] = h
            entry = table.get(h)
            if entry is None:
                table[h] = b
            elif isinstance(entry, int):
                table[h] = {entry: None, b: None}
            else:
                entry[b] = None
        self.cached[i] = full

    def free(self, i: int) -> int:
        """Request ``i`` lets go of its blocks, tail first; returns how many went back to
        the free queue (uncached ones to its front, cached ones to its back)."""
        blocks = self.blocks.pop(i, [])
        self.cached[i] = 0
        ref, hash_of, queue = self.ref, self.hash_of, self.queue
        first: list[int] = []
        last: list[int] = []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                (last if b in hash_of else first).append(b)
        for b in reversed(first):
            queue[b] = None
            queue.move_to_end(b, last=False)
        for b in last:
            queue[b] = None
        return len(first) + len(last)

    def forget(self, i: int) -> None:
        """Request ``i`` finished: its hashes are no longer needed."""
        self.hashes.pop(i, None)

    @property
    def hit_rate(self) -> float:
        """Hit tokens over queried tokens of first admissions (vLLM's
        ``prefix_cache_hits / prefix_cache_queries``; 0 with no query, as vLLM's
        ``CachingMetrics.hit_rate``)."""
        return self.hits / self.queries if self.queries else 0.0


__all__ = ["PrefixCache"]
