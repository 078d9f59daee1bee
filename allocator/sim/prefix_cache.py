"""Automatic prefix caching as vLLM 0.33.0 plays it: KV blocks with identities, hashes and
reference counts, a free queue in LRU order, hits at admission.

With ``Scheduler.enable_prefix_caching`` the simulator's KV blocks are no longer only
counted (:mod:`allocator.sim.block_pool`) but named, as vLLM's ``BlockPool`` names them
(``vllm/v1/core/block_pool.py``, ``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/core/single_type_kv_cache_manager.py``, ``vllm/v1/core/kv_cache_manager.py``):

* **The free queue** (``FreeKVCacheBlockQueue``, ``kv_cache_utils.py``): blocks ``1 ..
  num_gpu_blocks - 1`` in id order at start (block 0 is the null block). New blocks are
  taken from its front (``get_new_blocks``, ``block_pool.py`` lines 706-740); a block taken
  that still holds a cached hash loses it then (``_maybe_evict_cached_block``, line 769):
  the least recently freed cached block is evicted first. Counting free blocks
  (``get_num_free_blocks``) counts the cached free ones too.
* **Freeing** (``SingleTypeKVCacheManager.free``, ``single_type_kv_cache_manager.py`` line
  599, and ``BlockPool.free_blocks``, lines 816-846): a request's blocks in reverse order
  (its tail first), each losing one reference; those left without one go back to the
  queue, the uncached ones to its *front* (``prepend_n``: reused first) and the cached ones
  to its *back* (``append_n``: evicted last), each group in that reverse order.
* **Hashes** (``get_request_block_hasher``, ``kv_cache_utils.py`` lines 953-1036): one per
  full block of a request's tokens (prompt and output), chained from the first block, so
  block ``j``'s hash names the tokens ``[0, (j + 1) · block_size)``. With an EAGLE-style
  drafter (EAGLE, EAGLE-3, MTP) vLLM 0.33.0 hashes *lookahead* tokens too
  (``VllmConfig.num_hash_lookahead_tokens``, ``vllm/config/vllm.py`` lines 678-692: the
  drafter's ``num_prefill_lookahead_tokens``, 1 for the EAGLE family, lines 655-675): block
  ``j``'s hash then covers ``[0, (j + 1) · block_size + h)`` and exists once those tokens
  do; ``h`` is :attr:`PrefixCache.lookahead` (``Scheduler.hash_lookahead_tokens``). That
  replaces the older rule of dropping the last matched block (``use_eagle_block_drop`` is
  turned off when lookahead hashes are on, ``vllm/v1/core/sched/scheduler.py`` lines
  342-345). Here a hash is Python's hash of the previous block's hash and the block's
  token pieces ``(segment id, first offset, end offset)`` (:class:`~allocator.sim.requests.
  TokenContent`); equal pieces from the start give equal hashes.
* **Caching a request's blocks** (``KVCacheManager.allocate_slots``, ``kv_cache_manager.py``
  lines 596-602, and ``cache_blocks``, ``single_type_kv_cache_manager.py`` lines 477-505):
  whenever blocks are allocated to a request, its full blocks up to ``min(computed +
  scheduled, num_tokens)`` tokens that have a hash are entered in the hash table, at
  scheduling time, before the step computes them (so a request admitted later in the same
  step already hits them). Blocks of generated tokens are cached as they fill. A hash
  may name several blocks (two requests computing one prefix at once); a lookup takes the
  first entered (``BlockHashToBlockMap.get_one_block``, ``block_pool.py`` lines 63-72).
* **The hit** (``KVCacheManager.get_computed_blocks``, ``kv_cache_manager.py`` lines
  266-327, ``FullAttentionManager.find_longest_cache_hit``, ``single_type_kv_cache_manager.py``
  lines 743-836): for a request with no computed tokens (a new one, or one preempted), the
  longest run of cached blocks from the first, at most ``num_tokens - 1`` tokens (the last
  token is always computed, to sample from it; so a prompt that hits in full recomputes
  its last block). The hit blocks get one more reference (``touch``, lines 792-814: a free
  one leaves the queue), and admitting the request needs the free blocks for the rest of
  its tokens plus the hit blocks taken off the free queue
  (``get_num_blocks_to_allocate``, lines 176-265: ``num_evictable_blocks``).
* **Counting** (``PrefixCacheStats.record``, ``vllm/v1/metrics/stats.py`` lines 138-170,
  called at admission, ``scheduler.py`` lines 1508-1512, through
  ``record_prefix_cache_stats``, ``kv_cache_manager.py`` lines 255-264): a request admitted
  for the first time adds its ``num_tokens`` to the queries and its hit tokens to the hits;
  a request admitted again after a preemption adds them to ``preempted_queries`` and
  ``preempted_hits`` instead, which the hit rate vLLM logs (``CachingMetrics``) leaves out.
  A lookup that does not end in an admission counts nothing.

**Two implementations, one behaviour.** :class:`PrefixCache` keeps vLLM's structures (a
hash table from block hash to block, the free queue an ordered dict), entering a request's
new hashes and evicting popped blocks' hashes in bulk where no two share a hash. Without
``content`` every request's tokens are its own, so no request can hit another's blocks,
and ``PrefixCache(...)`` is an :class:`OwnTokensCache`: no hash table (each block's name
in a list, each request's named blocks checked when it looks them up again after a
preemption), the free queue a deque. ``tests/unit/sim/test_prefix_cache_own.py`` holds the
two step for step (times, preemptions, counts, the free queue's order) on random workloads.

Memory: per block an int (its references) and, while cached, a dict entry (a list slot
without content); per request in the system its block ids and, up to its known tokens,
its block hashes and segments (dropped when it finishes).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator

import numpy as np

from .requests import TokenContent


class PrefixCache:
    """``num_gpu_blocks`` named blocks of ``block_size`` tokens (block 0 the null block),
    the hash table, and the blocks each request holds.

    ``content``: what the ``N`` requests' tokens are (``None``: each request's own);
    ``lookahead``: tokens past a block its hash covers (0, or 1 with an EAGLE-style
    drafter). ``cached[i]``: request ``i``'s blocks entered in the table (vLLM's
    ``num_cached_block``); ``queries``, ``hits``, ``preempted_queries``,
    ``preempted_hits``: tokens, as vLLM's ``PrefixCacheStats`` counts them.
    """

    #: Table entries past twice the live ones and the block count before a pruning.
    PRUNE_SLACK = 1024

    def __new__(cls, *args: object, **kwargs: object) -> PrefixCache:
        """A :class:`PrefixCache`, or with no ``content`` (every request's tokens its own)
        the :class:`OwnTokensCache` that plays the same rules without a hash table."""
        content = kwargs["content"] if "content" in kwargs else args[3] if len(args) > 3 else None
        if cls is PrefixCache and content is None:
            cls = OwnTokensCache
        return super().__new__(cls)

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
        self.queue: OrderedDict[int, None] = self.new_queue(num_gpu_blocks)
        self.ref = [0] * num_gpu_blocks
        #: each block's hash while it is cached (``None``: not cached)
        self.hash_at: list[int | None] = [None] * num_gpu_blocks
        # hash -> the block entered under it, or (several, as vLLM's BlockHashToBlockMap) a
        # list of them in the order entered; an entry whose block no longer holds the hash
        # (evicted) is stale: lookups skip it, and the table is pruned of them now and then
        self.table: dict[int, int | list[int]] = {}
        self.prune_at = 2 * num_gpu_blocks + self.PRUNE_SLACK
        self.blocks: dict[int, list[int]] = {}
        self.hashes: dict[int, list[int]] = {}
        #: a request's segments as lists (ids, starts, ends), kept while it has hashes
        self.segs: dict[int, tuple[list[int], list[int], list[int]]] = {}
        self.cached = np.zeros(n_requests, dtype=np.int64)
        self.requests = 0
        self.queries = 0
        self.hits = 0
        self.preempted_requests = 0
        self.preempted_queries = 0
        self.preempted_hits = 0

    def new_queue(self, num_gpu_blocks: int) -> OrderedDict[int, None]:
        """The free queue at start: blocks ``1 .. num_gpu_blocks - 1`` in id order."""
        return OrderedDict.fromkeys(range(1, num_gpu_blocks))

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
        segs = self.segs.get(i)
        if segs is None:
            ids, lengths = self.content.segments(i)
            ends = np.cumsum(lengths).tolist()
            segs = self.segs[i] = (ids.tolist(), [e - n for e, n in zip(ends, lengths.tolist(),
                                   strict=True)], ends)  # fmt: skip
        idl, starts, ends = segs
        B, la = self.B, self.lookahead
        last = len(ends)
        prev = have[-1] if have else 0
        seg = 0
        for j in range(len(have), count):
            a, b = j * B, (j + 1) * B + la
            while ends[seg] <= a:
                seg += 1
            st = starts[seg]
            if ends[seg] >= b:  # the block (and its lookahead) within one segment
                prev = hash((prev, ((idl[seg], a - st, b - st),)))
            else:
                pieces = [(idl[seg], a - st, ends[seg] - st)]
                s = seg + 1
                while s < last and starts[s] < b:
                    pieces.append((idl[s], 0, min(b, ends[s]) - starts[s]))
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
        table, at = self.table, self.hash_at
        hit: list[int] = []
        for j in range(n):
            h = hashes[j]
            found = table.get(h)
            if found is None:
                break
            if found.__class__ is int:
                if at[found] != h:
                    break
                hit.append(found)
            else:
                b = next((x for x in found if at[x] == h), None)  # type: ignore[union-attr]
                if b is None:
                    break
                hit.append(b)
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
        """``count`` blocks from the free queue's front, each losing a cached hash (its
        table entry left stale)."""
        if count <= 0:
            return []
        popitem, ref, at = self.queue.popitem, self.ref, self.hash_at
        out = [popitem(False)[0] for _ in range(count)]
        for b in out:
            ref[b] = 1
            at[b] = None
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
        hs = self.block_hashes(i, full)[start:full]
        bs = self.blocks[i][start:full]
        table, at = self.table, self.hash_at
        for b, h in zip(bs, hs, strict=True):
            at[b] = h
        if table.keys().isdisjoint(hs) and len(set(hs)) == len(hs):
            table.update(zip(hs, bs, strict=True))  # every hash new: one entry each
        else:
            for b, h in zip(bs, hs, strict=True):
                entry = table.get(h)
                if entry is None:
                    table[h] = b
                    continue
                held = [x for x in ((entry,) if entry.__class__ is int else entry)  # type: ignore[union-attr]
                        if x != b and at[x] == h]  # fmt: skip
                table[h] = held + [b] if held else b
        if len(table) > self.prune_at:
            self.prune()
        self.cached[i] = full

    def free(self, i: int) -> int:
        """Request ``i`` lets go of its blocks, tail first; returns how many went back to
        the free queue (uncached ones to its front, cached ones to its back)."""
        blocks = self.blocks.pop(i, [])
        self.cached[i] = 0
        if not blocks:
            return 0
        ref, at, queue = self.ref, self.hash_at, self.queue
        for b in blocks:
            ref[b] -= 1
        rev = blocks[::-1]
        gone = [b for b in rev if ref[b] == 0]
        first = [b for b in gone if at[b] is None]
        if len(first) < len(gone):
            last = [b for b in gone if at[b] is not None] if first else gone
            queue.update(dict.fromkeys(last))  # to the back, tail first
        to_front = queue.move_to_end
        for b in reversed(first):  # to the front: the tail ends up first
            queue[b] = None
            to_front(b, last=False)
        return len(gone)

    def prune(self) -> None:
        """Drop the table's stale entries (each list keeps its order); the next pruning
        when the table has grown by as many entries again as it keeps."""
        at = self.hash_at
        kept: dict[int, int | list[int]] = {}
        for h, entry in self.table.items():
            if entry.__class__ is int:
                if at[entry] == h:
                    kept[h] = entry
            else:
                live = [x for x in entry if at[x] == h]  # type: ignore[union-attr]
                if live:
                    kept[h] = live if len(live) > 1 else live[0]
        self.table = kept
        self.prune_at = 2 * len(kept) + len(at) + self.PRUNE_SLACK

    def forget(self, i: int) -> None:
        """Request ``i`` finished: its hashes are no longer needed."""
        self.hashes.pop(i, None)
        self.segs.pop(i, None)

    @property
    def hit_rate(self) -> float:
        """Hit tokens over queried tokens of first admissions (vLLM's
        ``prefix_cache_hits / prefix_cache_queries``; 0 with no query, as vLLM's
        ``CachingMetrics.hit_rate``)."""
        return self.hits / self.queries if self.queries else 0.0


class _FreeQueue:
    """The free queue of :class:`OwnTokensCache`: vLLM's ``FreeKVCacheBlockQueue`` order
    (front to back) in a deque, whose bulk appends run in C. A block taken out of the
    middle (a hit touched) is not searched for: its *generation* goes up, and the entry
    left behind (block id plus generation times the block count) is skipped when met.
    ``len`` counts the live entries; iterating gives them front to back."""

    __slots__ = ("bumped", "dq", "gen", "live", "nb")

    def __init__(self, num_gpu_blocks: int) -> None:
        self.nb = num_gpu_blocks
        self.dq = deque(range(1, num_gpu_blocks))
        self.gen = [0] * num_gpu_blocks
        self.bumped = False  # some block's generation is above 0: entries need encoding
        self.live = max(num_gpu_blocks - 1, 0)

    def __len__(self) -> int:
        return self.live

    def __iter__(self) -> Iterator[int]:
        nb, gen = self.nb, self.gen
        for x in self.dq:
            g, b = divmod(x, nb)
            if gen[b] == g:
                yield b

    def take(self, count: int) -> list[int]:
        """``count`` live blocks from the front."""
        popleft = self.dq.popleft
        self.live -= count
        if not self.bumped:
            return [popleft() for _ in range(count)]
        nb, gen = self.nb, self.gen
        out: list[int] = []
        while len(out) < count:
            g, b = divmod(popleft(), nb)
            if gen[b] == g:
                out.append(b)
        return out

    def entries(self, blocks: list[int]) -> list[int]:
        if not self.bumped:
            return blocks
        nb, gen = self.nb, self.gen
        return [b + gen[b] * nb for b in blocks]

    def to_back(self, blocks: list[int]) -> None:
        """``blocks`` to the back, in their order."""
        self.dq.extend(self.entries(blocks))
        self.live += len(blocks)

    def to_front(self, blocks: list[int]) -> None:
        """``blocks`` to the front, ``blocks[0]`` first."""
        self.dq.extendleft(reversed(self.entries(blocks)))
        self.live += len(blocks)

    def remove(self, b: int) -> None:
        """Block ``b`` (in the queue) out of it."""
        self.gen[b] += 1
        self.bumped = True
        self.live -= 1


class OwnTokensCache(PrefixCache):
    """:class:`PrefixCache` for requests whose tokens are each their own (no ``content``):
    the same blocks, free queue, references, hits and counts, step for step, kept without
    the hash table.

    Block ``j`` of request ``i`` is named ``(i << 32) + j`` (:meth:`block_hashes`), a name no
    other request has, so only request ``i`` (preempted, admitted again) can look it up.
    So each block carries its name in a list (``tag[b]``, ``-1``: none; a block taken from
    the free queue loses it, as a cached block is evicted), and each request the blocks
    that were given its names (``home[i][j]``: a block, or several in the order entered
    when a name was entered again while an earlier block still held it, as vLLM's
    ``BlockHashToBlockMap`` keeps them), checked against ``tag`` when looked up (entries
    whose block lost the name are stale and skipped). A request's references are 0 or 1
    (no other request can hit its blocks), and at its free its blocks ``[0, cached[i])`` are
    the cached ones. What this saves: two hash-table entries per block, made when it is
    cached and removed when it is evicted (dictionaries of every cached block's name),
    replaced by list writes."""

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        lookahead: int,
        content: TokenContent | None,
        n_requests: int,
    ) -> None:
        super().__init__(num_gpu_blocks, block_size, lookahead, content, n_requests)
        self.tag = [-1] * num_gpu_blocks
        self.home: dict[int, list[int | list[int]]] = {}

    def lookup(self, i: int, known: int) -> list[int]:
        n = min((known - 1) // self.B, self.hashable(known))
        home = self.home.get(i)
        if n <= 0 or not home:
            return []
        tag, base = self.tag, i << 32
        hit: list[int] = []
        for j, entry in enumerate(home[:n]):
            if entry.__class__ is int:
                if tag[entry] != base + j:
                    break
                hit.append(entry)
            else:
                found = next((b for b in entry if tag[b] == base + j), None)  # type: ignore[union-attr]
                if found is None:
                    break
                hit.append(found)
        return hit

    def new_queue(self, num_gpu_blocks: int) -> _FreeQueue:  # type: ignore[override]
        self.free_queue = _FreeQueue(num_gpu_blocks)
        return self.free_queue

    def pop(self, count: int) -> list[int]:
        if count <= 0:
            return []
        out = self.free_queue.take(count)
        ref, tag = self.ref, self.tag
        for b in out:
            ref[b] = 1
            tag[b] = -1
        return out

    def admit(self, i: int, hit: list[int], new: int) -> None:
        ref = self.ref
        for b in hit:  # (references are 0 or 1 here: a hit block was free)
            if ref[b] == 0:
                self.free_queue.remove(b)
            ref[b] += 1
        self.blocks[i] = hit + self.pop(new)
        self.cached[i] = len(hit)

    def cache(self, i: int, full: int) -> None:
        start = int(self.cached[i])
        if full <= start:
            return
        bs = self.blocks[i][start:full]
        tag = self.tag
        name = (i << 32) + start
        for b in bs:
            tag[b] = name
            name += 1
        home = self.home.get(i)
        if home is None:
            home = self.home[i] = []
        if len(home) == start:  # names not entered before: one block each
            home.extend(bs)
        else:
            base = i << 32
            for j, b in enumerate(bs, start):
                if j >= len(home):
                    home.append(b)
                    continue
                entry = home[j]
                held = [x for x in ([entry] if entry.__class__ is int else entry)  # type: ignore[union-attr]
                        if x != b and tag[x] == base + j]  # fmt: skip
                home[j] = held + [b] if held else b
        self.cached[i] = full

    def free(self, i: int) -> int:
        blocks = self.blocks.pop(i, [])
        c = int(self.cached[i])
        self.cached[i] = 0
        if not blocks:
            return 0
        ref = self.ref
        for b in blocks:
            ref[b] = 0
        if c:
            self.free_queue.to_back(blocks[c - 1 :: -1])  # cached: to the back, tail first
        if c < len(blocks):
            self.free_queue.to_front(blocks[c:][::-1])  # uncached: to the front, tail first
        return len(blocks)

    def forget(self, i: int) -> None:
        self.hashes.pop(i, None)
        self.home.pop(i, None)


__all__ = ["OwnTokensCache", "PrefixCache"]
