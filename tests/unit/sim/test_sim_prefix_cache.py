"""Prefix caching in the simulator against closed forms and hand-traced vLLM 0.33.0 cases.

The rules (``allocator/sim/prefix_cache.py`` cites them): full-block hashes chained from the
first token; a hit of at most ``num_tokens - 1`` tokens at admission; blocks cached when
allocated; freed blocks go back tail first, uncached ones to the free queue's front, cached
ones to its back; new blocks taken from its front, evicting what they held; vLLM counts
``num_tokens`` queried and the hit tokens at every first admission (``PrefixCacheStats``),
a re-admission after preemption apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from allocator.exceptions import ParameterError
from allocator.sim import Requests, Scheduler, SpecPolicy, simulate
from allocator.sim.engine import _Engine
from allocator.sim.requests import TokenContent

ONE = [0.0, 1.0]  # one token a step at k = 0


def _content(segments: list[list[tuple[int, int]]]) -> TokenContent:
    ids = [s for req in segments for s, _ in req]
    lengths = [n for req in segments for _, n in req]
    starts = np.concatenate(([0], np.cumsum([len(r) for r in segments])))
    return TokenContent(np.array(ids), np.array(lengths), starts)


def _step(b, k, ctx, prefill):
    """1 ms plus 1 ms per prefilled token."""
    return 1.0 + prefill


def _per_request(r):
    return (
        r.sent_s,
        r.first_scheduled_s,
        r.first_token_s,
        r.finish_s,
        r.preemptions,
        r.itl_s,
    )


def _same(a, b):
    for x, y in zip(_per_request(a), _per_request(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.steps == b.steps
    assert a.kv_cache_peak_fraction == b.kv_cache_peak_fraction


# ---------------------------------------------------------------- closed form
@pytest.mark.parametrize(
    ("shared", "prompt", "block", "lookahead"),
    [
        (128, 300, 16, 0),
        (100, 300, 16, 0),
        (300, 300, 16, 0),
        (256, 256, 16, 0),
        (64, 200, 32, 1),
        (63, 200, 16, 1),
        (15, 40, 16, 0),
        (200, 200, 8, 1),
    ],
)
def test_warm_hit_rate_is_the_shared_full_blocks(shared, prompt, block, lookahead):
    """N requests, each prompt starting with the same ``shared`` tokens, sent one at a time.
    The first finds nothing; every later one finds the shared prefix's full blocks whose
    hash exists (a hash covers ``lookahead`` tokens past its block), at most ``prompt - 1``
    tokens: ``h = B · min(⌊(shared − lookahead) / B⌋, ⌊(prompt − 1) / B⌋)`` (a whole prompt
    shared recomputes its last block; the tokens after the prefix are each request's own).
    vLLM's rate counts ``prompt`` queried tokens per request: ``(N − 1) · h / (N · prompt)``."""
    n, out = 12, 5
    segs = [[(0, shared)] + ([(1 + i, prompt + out - shared)]) for i in range(n)]
    if shared == prompt:
        segs = [[(0, shared), (1 + i, out)] for i in range(n)]
    reqs = Requests(np.arange(n) * 1.0, np.full(n, prompt), np.full(n, out), _content(segs))
    sched = Scheduler(
        8, 4096, 64 * 1024, block, enable_prefix_caching=True, hash_lookahead_tokens=lookahead
    )
    r = simulate(reqs, SpecPolicy.off(), _step, sched)
    h = block * min(max(shared - lookahead, 0) // block, (prompt - 1) // block)
    assert r.prefix_cache == (n * prompt, (n - 1) * h, 0, 0)
    assert r.prefix_cache_hit_rate == pytest.approx((n - 1) * h / (n * prompt), abs=1e-15)
    # each later request prefills only what it did not find
    ttft = r.first_token_s - r.sent_s
    assert ttft[0] == pytest.approx((1 + prompt) / 1000)
    np.testing.assert_allclose(ttft[1:], (1 + prompt - h) / 1000)


def test_requests_sent_together_hit_blocks_allocated_in_the_same_step():
    """vLLM enters a request's blocks in the hash table when it allocates them, before
    the step computes them: the second of two identical prompts admitted in one step hits
    the first one's full blocks (30 tokens, block 8: 3 blocks, 24 tokens)."""
    segs = [[(0, 30), (1, 2)], [(0, 30), (2, 2)]]
    reqs = Requests([0.0, 0.0], [30, 30], [2, 2], _content(segs))
    r = simulate(
        reqs, SpecPolicy.off(), _step, Scheduler(4, 100, 1000, 8, enable_prefix_caching=True)
    )
    assert r.prefix_cache == (60, 24, 0, 0)


# ---------------------------------------------------------------- off and unique
def _random_workload(seed: int, share: bool):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    arrival = np.sort(np.round(rng.uniform(0, 0.3, n), 2))
    prompt = rng.integers(1, 90, n)
    output = rng.integers(1, 30, n)
    content = None
    if share:
        segs = []
        for i in range(n):
            pre = int(rng.integers(0, prompt[i] + 1))
            sid = int(rng.integers(0, 3))
            total = int(prompt[i] + output[i])
            segs.append(([(sid, pre)] if pre else []) + [(10 + i, total - pre)])
        content = _content(segs)
    k = int(rng.integers(0, 4))
    pmf = np.concatenate(([0.0], rng.dirichlet(np.ones(k + 1))))
    policy = SpecPolicy.fixed(k, pmf)
    block = int(rng.choice([1, 2, 4, 16]))
    need = -(-(int((prompt + output).max()) + 2 * k) // block) + 1
    blocks = int(rng.integers(need, 3 * need + 2))
    seqs = int(rng.integers(1, 6))
    budget = int(rng.integers(seqs, 150))
    return Requests(arrival, prompt, output, content), policy, block, blocks, seqs, budget


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_caching_on_without_sharing_or_preemption_changes_nothing(async_scheduling):
    """Every request's tokens its own and nothing preempted: no hit, so caching on plays
    the very steps caching off plays (and content given with caching off is ignored)."""
    played = 0
    for seed in range(120):
        reqs, policy, block, blocks, seqs, budget = _random_workload(seed, share=False)
        off = Scheduler(seqs, budget, blocks * block, block, async_scheduling=async_scheduling)
        on = Scheduler(
            seqs,
            budget,
            blocks * block,
            block,
            async_scheduling=async_scheduling,
            enable_prefix_caching=True,
        )
        a = simulate(reqs, policy, _step, off, seed=seed)
        if a.preemptions.any():
            continue
        b = simulate(reqs, policy, _step, on, seed=seed)
        _same(a, b)
        assert b.prefix_cache[1] == 0
        played += 1
    assert played >= 40


def test_content_is_ignored_with_caching_off():
    for seed in range(30):
        reqs, policy, block, blocks, seqs, budget = _random_workload(seed, share=True)
        plain = Requests(reqs.arrival_s, reqs.prompt_tokens, reqs.output_tokens)
        s = Scheduler(seqs, budget, blocks * block, block)
        _same(simulate(reqs, policy, _step, s, seed=1), simulate(plain, policy, _step, s, seed=1))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_pool_stays_consistent(async_scheduling):
    """With sharing and preemption: every request finishes, blocks held are counted once
    (the pool's used blocks are those with a reference), references equal the holders, and
    the fast path gives what step by step gives."""
    for seed in range(80):
        reqs, policy, block, blocks, seqs, budget = _random_workload(seed, share=True)
        sched = Scheduler(
            seqs,
            budget,
            blocks * block,
            block,
            async_scheduling=async_scheduling,
            enable_prefix_caching=True,
        )
        results = []
        for stretches in (True, False):
            e = _Engine(reqs, policy, _step, sched, seed, stretches=stretches)
            e.run()
            cache = e.state.cache
            assert cache is not None
            assert not cache.blocks  # every request let go of its blocks
            assert all(r == 0 for r in cache.ref)
            assert cache.free_count == sched.num_blocks - 1
            results.append(e.result())
        assert np.isfinite(results[0].finish_s).all()
        _same(results[0], results[1])
        assert results[0].prefix_cache == results[1].prefix_cache


# ---------------------------------------------------------------- hand traced
def test_hand_traced_eviction_order():
    """Block size 4, 6 blocks (free queue [1, 2, 3, 4, 5] after the null block), one
    token of output each, one request at a time.

    A (prompt 9: X[0:9]) takes 1, 2, 3; blocks 1, 2 are full and cached. A finishes and
    frees tail first: 3 (uncached) to the front, 2 then 1 (cached) to the back: [3, 4, 5,
    2, 1]. D (12 tokens of its own) takes 3, 4, 5, all cached; freed: [2, 1, 5, 4, 3].
    E (3 tokens of its own) takes 2, evicting A's second block; freed (uncached) to the
    front: [2, 1, 5, 4, 3]. B (prompt X[0:8] + 1 of its own) finds A's first block (1)
    but not the second: a hit of 4 tokens; it touches 1 and takes 2 and 5 (evicting D's
    first block). Queries 9 + 12 + 3 + 9 = 33, hits 4."""
    segs = [[(7, 9), (100, 1)], [(8, 13)], [(9, 4)], [(7, 8), (101, 2)]]
    reqs = Requests([0.0, 1.0, 2.0, 3.0], [9, 12, 3, 9], [1, 1, 1, 1], _content(segs))
    sched = Scheduler(4, 64, 6 * 4, 4, enable_prefix_caching=True)
    e = _Engine(reqs, SpecPolicy.off(), _step, sched, 0)
    seen = {}
    cache = e.state.cache
    assert cache is not None
    admit = cache.admit

    def spy(i, hit, new):
        admit(i, hit, new)
        seen[i] = (list(hit), list(cache.blocks[i]), list(cache.queue))

    cache.admit = spy  # type: ignore[method-assign]
    e.run()
    r = e.result()
    assert seen[0] == ([], [1, 2, 3], [4, 5])
    assert seen[1] == ([], [3, 4, 5], [2, 1])
    assert seen[2] == ([], [2], [1, 5, 4, 3])
    assert seen[3] == ([1], [1, 2, 5], [4, 3])
    assert r.prefix_cache == (33, 4, 0, 0)
    # B prefills the 5 tokens past its hit
    assert r.first_token_s[3] - r.sent_s[3] == pytest.approx((1 + 5) / 1000)


def test_hand_traced_preemption_readmits_onto_its_own_blocks():
    """Block size 4, 5 blocks (4 usable), k = 0, A and B (prompt 4, output 8, tokens their
    own) sent at 0. Step 1 prefills both (blocks 1 and 2, each cached: 4 tokens = 1 full
    block), steps 2-4 decode in their second blocks (3 and 4). In step 5 (computed 7,
    8 tokens known) B's second block fills and is cached. In step 6 A (computed 8) needs a
    third block and none is free: B, the newest, is preempted and frees 4 then 2, both
    cached, to the back: [4, 2]; A takes 4, evicting B's second block. B waits with 9
    tokens (prompt 4 + 5 emitted) until A finishes; then it finds its first block (2) still
    cached and recomputes 5 tokens, not 9. vLLM counts that re-admission apart: queries 8,
    hits 0; preempted queries 9, hits 4."""
    reqs = Requests([0.0, 0.0], [4, 4], [8, 8])
    sched = Scheduler(4, 64, 5 * 4, 4, enable_prefix_caching=True)
    r = simulate(reqs, SpecPolicy.fixed(0, ONE), _step, sched)
    assert list(r.preemptions) == [0, 1]
    assert r.prefix_cache == (8, 0, 9, 4)
    assert r.prefix_cache_hit_rate == 0.0
    # without caching B recomputes all 9 tokens: its re-admission step costs 1 + 9 ms
    off = simulate(reqs, SpecPolicy.fixed(0, ONE), _step, Scheduler(4, 64, 5 * 4, 4))
    assert list(off.preemptions) == [0, 1]
    assert off.finish_s[1] - r.finish_s[1] == pytest.approx(4 / 1000)


# ---------------------------------------------------------------- bad input
def test_content_must_cover_each_request():
    with pytest.raises(ParameterError) as err:
        Requests([0.0], [4], [2], _content([[(0, 5)]]))
    assert err.value.field == "content"
    with pytest.raises(ParameterError):
        _content([[(-1, 6)]])
    with pytest.raises(ParameterError):
        Scheduler(1, 1, 16, enable_prefix_caching=1)  # type: ignore[arg-type]
