"""The simulated replica against a plain reference written from vLLM 0.33.0's scheduler.

``tests/support/reference_scheduler.py`` plays the same requests one ``Request`` object at a
time (a waiting deque, a running list, a free-block count). On random seeded workloads
chosen to reach the corners (KV caches of a few blocks that force preemption, 1-token
prompts, token budgets from ``max_num_seqs`` (vLLM's least) to below
``max_num_seqs · (1 + k)``, chunked prefill, ``k`` from 0 to 7, static and by-batch-size
policies, the client's ``max_concurrency``) the simulator, with its decode-only fast path on
and off, must give identical per-request send, first-scheduled, first-token and finish
times, preemption counts, per-step scheduled tokens and KV peak.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.sim import Requests, Scheduler, SpecPolicy
from allocator.sim.engine import _Engine
from tests.support.reference_scheduler import AsyncReplica, Replica

WORKLOADS = 520


def _pmf(rng: np.random.Generator, k: int) -> np.ndarray:
    """Tokens per step ``1..k+1``; sometimes all mass on one count."""
    if rng.random() < 0.2:
        p = np.zeros(k + 2)
        p[int(rng.integers(1, k + 2))] = 1.0
        return p
    return np.concatenate(([0.0], rng.dirichlet(np.ones(k + 1))))


def _policy(rng: np.random.Generator) -> SpecPolicy:
    lookahead = [None, 0, int(rng.integers(0, 9))][int(rng.integers(0, 3))]
    if rng.random() < 0.6:
        k = int(rng.integers(0, 8))
        return SpecPolicy.fixed(k, _pmf(rng, k), lookahead)
    entries = []
    start = 1
    for _ in range(int(rng.integers(2, 4))):
        end = start + int(rng.integers(0, 3))
        k = int(rng.integers(0, 8))
        entries.append((start, end, k, _pmf(rng, k)))
        start = end + 1 + int(rng.integers(0, 2))  # sometimes a gap
    return SpecPolicy.by_batch_size(entries, lookahead)


class LinearStep:
    """A step time, ms, linear in its arguments; with ``many`` for the stretches' one call."""

    def __init__(self, rng: np.random.Generator):
        self.c = rng.uniform(0.5, 2.0, size=5)

    def __call__(self, b: int, k: int, ctx: float, prefill: int) -> float:
        c = self.c
        return float(
            c[0] + c[1] * b + 0.1 * c[2] * k + 1e-3 * c[3] * b * ctx + 0.01 * c[4] * prefill
        )

    def many(self, b, k, ctx, prefill):
        c = self.c
        return c[0] + c[1] * b + 0.1 * c[2] * k + 1e-3 * c[3] * b * ctx + 0.01 * c[4] * prefill


def _workload(seed: int, async_scheduling: bool = False):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    if rng.random() < 0.3:
        arrival = np.zeros(n)
    else:  # ties now and then: arrivals on a coarse grid
        arrival = np.sort(np.round(rng.uniform(0, 0.2, n), int(rng.integers(1, 4))))
    prompt = np.where(rng.random(n) < 0.25, 1, rng.integers(1, 70, n))
    output = rng.integers(1, 40, n)
    policy = _policy(rng)
    block_size = int(rng.choice([1, 2, 4, 16]))
    lookahead = policy.lookahead if policy.max_k > 0 else 0
    # the cache one request needs alone at worst (largest k), plus the null block, plus a
    # little: a few requests at once overflow it
    worst = int(np.max(-(-(prompt + output - 1 + policy.max_k + lookahead) // block_size)))
    num_blocks = worst + 1 + int(rng.integers(0, worst + 1))
    max_num_seqs = int(rng.integers(1, 9))
    # vLLM refuses a budget below max_num_seqs; small ones cut decodes of 1 + k tokens
    small = max_num_seqs * (1 + policy.max_k) + 1
    budget = int(rng.choice([rng.integers(max_num_seqs, small), rng.integers(max_num_seqs, 200)]))
    concurrency = None if rng.random() < 0.6 else int(rng.integers(1, 6))
    sched = Scheduler(
        max_num_seqs, budget, num_blocks * block_size, block_size, concurrency, async_scheduling
    )
    step = LinearStep(rng)
    if rng.random() < 0.5:
        step_fn = step.__call__  # the per-step path of the stretches
    else:
        step_fn = step  # with many(): the stretches' one call
    return Requests(arrival, prompt, output), policy, sched, step_fn, step


def _reference(reqs, policy, sched, step, seed) -> Replica:
    cls = AsyncReplica if sched.async_scheduling else Replica
    return cls(
        reqs.arrival_s.tolist(),
        reqs.prompt_tokens.tolist(),
        reqs.output_tokens.tolist(),
        starts=policy.starts,
        ks=policy.ks,
        pmfs=policy.pmfs,
        lookahead=policy.lookahead,
        max_num_seqs=sched.max_num_seqs,
        max_num_batched_tokens=sched.max_num_batched_tokens,
        num_gpu_blocks=sched.kv_cache_tokens // sched.block_size,
        block_size=sched.block_size,
        max_concurrency=sched.max_concurrency,
        step_ms=step,
        seed=seed,
    ).run()


FIELDS = ("sent", "first_scheduled", "first_token", "finish", "num_preemptions")
SIM_FIELDS = ("sent_s", "first_scheduled_s", "first_token_s", "finish_s", "preemptions")


def _compare(seed: int, async_scheduling: bool) -> dict[str, int]:
    reqs, policy, sched, step_fn, step = _workload(seed, async_scheduling)
    ref = _reference(reqs, policy, sched, step, seed)
    expected = {f: np.array([getattr(r, f) for r in ref.requests]) for f in FIELDS}
    usable = ref.pool.usable
    for stretches in (True, False):
        engine = _Engine(reqs, policy, step_fn, sched, seed, stretches=stretches)
        engine.step_tokens = []
        engine.run()
        got = engine.result()
        where = f"workload {seed}, async {async_scheduling}, fast path {stretches}"
        for f, g in zip(FIELDS, SIM_FIELDS, strict=True):
            assert np.array_equal(getattr(got, g), expected[f]), f"{where}: {g}"
        assert engine.step_tokens == ref.step_tokens, f"{where}: scheduled tokens per step"
        assert got.steps == len(ref.step_tokens), where
        assert got.kv_cache_peak_fraction == ref.pool.peak_used / usable, where
        assert np.array_equal(got.output_tokens, reqs.output_tokens), where
    return {
        "preemptions": int(expected["num_preemptions"].sum()),
        "padded": int(ref.num_padded > 0),
        "cut": int(sched.max_num_batched_tokens < sched.max_num_seqs * (1 + policy.max_k)),
        "steps": len(ref.step_tokens),
        "dropped": int(getattr(ref, "num_dropped", 0) > 0),
        "stale": int(getattr(ref, "num_stale", 0) > 0),
    }


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_engine_matches_the_reference_scheduler(async_scheduling):
    totals = dict.fromkeys(("preemptions", "padded", "cut", "steps", "dropped", "stale"), 0)
    totals["preempting"] = 0
    for seed in range(WORKLOADS):
        seen = _compare(seed, async_scheduling)
        for key in seen:
            totals[key] += seen[key]
        totals["preempting"] += seen["preemptions"] > 0
    # the workloads reached the corners they are drawn for
    assert totals["preempting"] > WORKLOADS // 5, totals
    assert totals["padded"] > WORKLOADS // 10 and totals["cut"] > WORKLOADS // 10, totals
    assert math.isfinite(totals["steps"]) and totals["steps"] > 20 * WORKLOADS, totals
    if async_scheduling:  # extra steps dropped, output delivered to preempted requests
        assert totals["dropped"] > WORKLOADS // 10 and totals["stale"] > WORKLOADS // 20, totals
