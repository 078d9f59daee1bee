"""The prefix cache of requests whose tokens are each their own (no ``content``:
:class:`~allocator.sim.prefix_cache.OwnTokensCache`, no hash table) against the general
:class:`~allocator.sim.prefix_cache.PrefixCache` given the same requests as content, each
request one segment of its own: the two must play every step alike (the same per-request
times, preemptions, cache counts, and free queue at the end), through preemptions that
re-admit onto the request's own blocks, lookahead hashes, speculation, asynchronous
scheduling and the decode-only stretches."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.sim import Requests, Scheduler, SpecPolicy
from allocator.sim.engine import _Engine
from allocator.sim.prefix_cache import OwnTokensCache, PrefixCache
from allocator.sim.requests import TokenContent


def _step(b, k, ctx, prefill):
    return 1.0 + 0.3 * b * (1 + k) + prefill


def _workload(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    arrival = np.sort(np.round(rng.uniform(0, 0.3, n), 2))
    prompt = rng.integers(1, 90, n)
    output = rng.integers(1, 40, n)
    k = int(rng.integers(0, 4))
    pmf = np.concatenate(([0.0], rng.dirichlet(np.ones(k + 1))))
    block = int(rng.choice([1, 2, 4, 16]))
    need = -(-(int((prompt + output).max()) + 2 * k) // block) + 1
    blocks = int(rng.integers(need, 2 * need + 2))  # tight: preemptions
    seqs = int(rng.integers(1, 8))
    budget = int(rng.integers(seqs, 150))
    look = int(rng.integers(0, 2))
    return (arrival, prompt, output), SpecPolicy.fixed(k, pmf), block, blocks, seqs, budget, look


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_own_tokens_cache_plays_what_the_hash_table_plays(async_scheduling):
    preempted = 0
    for seed in range(150):
        (a, p, o), policy, block, blocks, seqs, budget, look = _workload(seed)
        n = a.size
        own = TokenContent(np.arange(n) + 5, p + o, np.arange(n + 1))
        sched = Scheduler(seqs, budget, blocks * block, block, async_scheduling=async_scheduling,
                          enable_prefix_caching=True, hash_lookahead_tokens=look)  # fmt: skip
        for stretches in (True, False):
            runs = []
            for content in (None, own):
                e = _Engine(Requests(a, p, o, content), policy, _step, sched, seed,
                            stretches=stretches)  # fmt: skip
                cache = e.state.cache
                assert cache is not None
                assert isinstance(cache, OwnTokensCache) == (content is None)
                assert isinstance(cache, PrefixCache)
                e.run()
                runs.append((e.result(), list(cache.queue), list(cache.ref)))
            (r0, q0, ref0), (r1, q1, ref1) = runs
            for name in ("sent_s", "first_scheduled_s", "first_token_s", "finish_s",
                         "preemptions", "itl_s", "chunks"):  # fmt: skip
                np.testing.assert_array_equal(getattr(r0, name), getattr(r1, name), err_msg=name)
            assert r0.steps == r1.steps
            assert r0.prefix_cache == r1.prefix_cache
            assert q0 == q1 and ref0 == ref1
            preempted += r0.prefix_cache[3] > 0  # hits at re-admission
    assert preempted >= 20  # runs whose re-admissions found their own blocks


def _reference_hashes(content: TokenContent, i: int, count: int, B: int, la: int) -> list[int]:
    """Block hashes as the rule states them, piece by piece over every segment: block
    ``j``'s hash is Python's hash of the previous one and the pieces ``(segment id, first
    offset, end offset)`` of the tokens ``[j B, (j + 1) B + la)``."""
    ids, lengths = content.segments(i)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist()
    out, prev = [], 0
    for j in range(count):
        a, b = j * B, (j + 1) * B + la
        pieces = tuple(
            (int(s), max(a, st) - st, min(b, st + int(n)) - st)
            for s, st, n in zip(ids, starts, lengths, strict=True)
            if st < b and st + int(n) > a
        )
        prev = hash((prev, pieces))
        out.append(prev)
    return out


def test_block_hashes_against_the_rule():
    """Segments of random lengths (many shorter than a block, some longer), hashes asked
    for in random increments, against the rule computed from scratch."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        segs = [rng.integers(1, 40, size=int(rng.integers(1, 8))) for _ in range(n)]
        ids = np.concatenate([rng.integers(0, 5, size=s.size) for s in segs])
        lengths = np.concatenate(segs)
        starts = np.concatenate(([0], np.cumsum([s.size for s in segs])))
        content = TokenContent(ids, lengths, starts)
        B, la = int(rng.choice([1, 2, 4, 16])), int(rng.integers(0, 2))
        cache = PrefixCache(8, B, la, content, n)
        for i in range(n):
            full = max(int(lengths[starts[i] : starts[i + 1]].sum()) - la, 0) // B
            got: list[int] = []
            while len(got) < full:
                got = list(cache.block_hashes(i, min(full, len(got) + int(rng.integers(1, 4)))))
            assert got == _reference_hashes(content, i, full, B, la)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_cache_plays_what_it_played_before_its_speed_up(async_scheduling, monkeypatch):
    """Requests sharing prefixes (several groups, partial blocks, whole prompts shared),
    tight caches (evictions, preemptions), lookahead, speculation: the simulator with the
    cache before its speed-up (``tests/support/prefix_cache_reference.py``) in place of the
    current one plays the same run, the same counts and the same free queue (with the
    current table pruned of stale entries at its usual pace, and at nearly every step)."""
    from allocator.sim import state as state_module
    from tests.support import prefix_cache_reference as old

    current = state_module.PrefixCache
    evicted = 0
    for seed in range(150):
        (a, p, o), policy, block, blocks, seqs, budget, look = _workload(1000 + seed)
        rng = np.random.default_rng(seed)
        n = a.size
        segs = []
        for i in range(n):
            pre = int(rng.integers(0, p[i] + 1))
            sid = int(rng.integers(0, 3))
            segs.append(([(sid, pre)] if pre else []) + [(10 + i, int(p[i] + o[i]) - pre)])
        ids = [x for r in segs for x, _ in r]
        lengths = [m for r in segs for _, m in r]
        starts = np.concatenate(([0], np.cumsum([len(r) for r in segs])))
        content = TokenContent(np.array(ids), np.array(lengths), starts)
        sched = Scheduler(seqs, budget, blocks * block, block, async_scheduling=async_scheduling,
                          enable_prefix_caching=True, hash_lookahead_tokens=look)  # fmt: skip
        # every other run prunes the table's stale entries at (nearly) every caching
        monkeypatch.setattr(current, "PRUNE_SLACK", -2 * blocks if seed % 2 else 1024)
        runs = []
        for cls in (current, old.PrefixCache):
            monkeypatch.setattr(state_module, "PrefixCache", cls)
            e = _Engine(Requests(a, p, o, content), policy, _step, sched, seed)
            e.run()
            cache = e.state.cache
            assert type(cache).__module__ == cls.__module__
            runs.append((e.result(), list(cache.queue), list(cache.ref)))
        (r0, q0, ref0), (r1, q1, ref1) = runs
        for name in ("sent_s", "first_scheduled_s", "first_token_s", "finish_s",
                     "preemptions", "itl_s", "chunks"):  # fmt: skip
            np.testing.assert_array_equal(getattr(r0, name), getattr(r1, name), err_msg=name)
        assert r0.steps == r1.steps
        assert r0.prefix_cache == r1.prefix_cache
        assert q0 == q1 and ref0 == ref1
        evicted += r0.prefix_cache[1] > 0 and r0.preemptions.sum() > 0
    assert evicted >= 10  # runs with both hits and preemptions
