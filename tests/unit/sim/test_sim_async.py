"""Async scheduling (vLLM 0.33.0's ``AsyncScheduler`` with a batch queue of two) on cases
worked by hand, each against the synchronous scheduler on the same requests.

With a constant step time and no time on the CPU the GPU never waits either way; what
changes is what each scheduling knows: step ``n + 1`` is scheduled from the output of the
steps up to ``n - 1``. So a lone request's TTFT and E2E latency are the same, but when the
step in flight emits the request's last tokens through accepted drafts the step after it
was already scheduled and runs for nothing; and a request sent while a step runs starts
a step later. (The engine is held to a reference written from vLLM's source on 520
workloads in ``tests/differential/test_scheduler_reference.py``.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.sim import Requests, Scheduler, SpecPolicy, simulate
from allocator.sim.engine import _Engine


def ms(x):
    return np.round(np.asarray(x) * 1000, 9).tolist()


def test_async_scheduling_is_the_default_as_in_vllm():
    """``Scheduler`` plays vLLM 0.33.0's default, the ``AsyncScheduler``: a request finished
    by accepted drafts has one more step scheduled (here 3 steps where the synchronous
    scheduler plays 2: a prefill and one decode emitting all 3 drafts' tokens)."""
    assert Scheduler(8, 256, 10**5).async_scheduling is True
    pol = SpecPolicy.fixed(3, [0.0, 0.0, 0.0, 0.0, 1.0])
    reqs = Requests([0.0], [4], [5])
    default = simulate(reqs, pol, lambda *a: 1.0, Scheduler(8, 256, 10**5))
    sync = _run(reqs, pol, False)
    assert (default.steps, sync.steps) == (3, 2)


def _run(reqs, pol, async_scheduling, **kw):
    sched = Scheduler(8, 256, 10**5, async_scheduling=async_scheduling, **kw)
    return simulate(reqs, pol, lambda *a: 1.0, sched)  # every step 1 ms


@pytest.mark.parametrize("output", [1, 2, 3, 5, 6, 9, 10, 12, 13, 14])
def test_lone_request_all_drafts_accepted(output):
    """k = 3, every draft accepted (4 tokens a decode step), prompt 4. Either way: first
    token at 1 ms (the prefill), then ``D = ⌈(O - 1) / 4⌉`` decode steps, the last one
    emitting ``R = O - 1 - 4 (D - 1)`` tokens: E2E ``1 + D`` ms, ``1 + D`` steps in sync.
    Async schedules the step after the last one while the last is in flight, when the
    known output ``1 + 4 (D - 2)`` plus the one token the step in flight surely samples
    is short of ``O``, that is when ``R >= 2``: one extra step, its tokens dropped."""
    pol = SpecPolicy.fixed(3, [0.0, 0.0, 0.0, 0.0, 1.0])
    reqs = Requests([0.0], [4], [output])
    d = math.ceil((output - 1) / 4)
    r = output - 1 - 4 * (d - 1) if d else 0
    sync, asyn = _run(reqs, pol, False), _run(reqs, pol, True)
    for res in (sync, asyn):
        assert ms(res.first_token_s) == [1.0]
        assert ms(res.finish_s) == [1.0 + d]
        assert res.output_tokens.tolist() == [output]
    assert sync.steps == 1 + d
    assert asyn.steps == 1 + d + (r >= 2)


def test_lone_request_one_token_a_step_wastes_nothing():
    """k = 0: every step emits one token, so the step in flight never finishes a request
    the scheduler does not see coming; prompt 4, output 7: 7 steps of 1 ms either way."""
    pol = SpecPolicy.fixed(0, [0.0, 1.0])
    reqs = Requests([0.0], [4], [7])
    for a in (False, True):
        res = _run(reqs, pol, a)
        assert ms(res.first_token_s) == [1.0] and ms(res.finish_s) == [7.0]
        assert res.steps == 7


def test_a_request_sent_during_a_step_runs_a_step_later():
    """A (prompt 4, output 20, k = 0) keeps the engine busy from 0; B (prompt 4, output
    2) is sent at 1.5 ms, during step 2 (1-2 ms). Sync: the scheduling at 2 ms sees it and
    step 3 (2-3 ms) prefills it, first token at 3 ms, its second at 4 ms. Async: the
    scheduling at 2 ms is that of step 4 (3-4 ms, step 3 was scheduled at 1 ms), first
    token at 4 ms, second at 5 ms. Both are first scheduled at 2 ms."""
    pol = SpecPolicy.fixed(0, [0.0, 1.0])
    reqs = Requests([0.0, 0.0015], [4, 4], [20, 2])
    sync, asyn = _run(reqs, pol, False), _run(reqs, pol, True)
    assert ms(sync.first_scheduled_s) == ms(asyn.first_scheduled_s) == [0.0, 2.0]
    assert ms(sync.first_token_s) == [1.0, 3.0] and ms(sync.finish_s) == [20.0, 4.0]
    assert ms(asyn.first_token_s) == [1.0, 4.0] and ms(asyn.finish_s) == [20.0, 5.0]


def test_a_finished_request_frees_its_client_slot_a_step_later():
    """``max_concurrency`` 2, k = 0. A (prompt 4, output 3) and B (prompt 4, output 10)
    sent at 0, C (prompt 4, output 2) waits for a slot. A's last token comes at 3 ms in
    both (steps of 1 ms), which sends C at 3 ms. Sync: step 4 (3-4 ms) prefills C, its
    tokens at 4 and 5 ms. Async: the scheduling at 3 ms is that of step 5 (4-5 ms), C's
    tokens at 5 and 6 ms."""
    pol = SpecPolicy.fixed(0, [0.0, 1.0])
    reqs = Requests([0.0, 0.0, 0.0], [4, 4, 4], [3, 10, 2])
    sync = _run(reqs, pol, False, max_concurrency=2)
    asyn = _run(reqs, pol, True, max_concurrency=2)
    assert ms(sync.sent_s) == ms(asyn.sent_s) == [0.0, 0.0, 3.0]
    assert ms(sync.finish_s) == [3.0, 10.0, 5.0]
    assert ms(asyn.finish_s) == [3.0, 10.0, 6.0]


def test_async_stretches_are_played_and_change_nothing():
    """Under async scheduling the decode-only stretches play several turns of the loop at
    once (fewer step-function calls than steps) and give what the loop gives turn by
    turn, with a step function with ``many`` or without."""

    class Many:
        calls = 0

        def __call__(self, b, k, ctx, pf):
            Many.calls += 1
            return 1.0 + 0.1 * b + 0.001 * ctx + 0.01 * pf

        def many(self, b, k, ctx, pf):
            Many.calls += 1
            return 1.0 + 0.1 * b + 0.001 * ctx + 0.01 * pf

    pol = SpecPolicy.fixed(2, [0.0, 0.3, 0.3, 0.4])
    reqs = Requests(np.linspace(0, 0.02, 12), [5, 30] * 6, [9, 17, 40] * 4)
    sched = Scheduler(4, 64, 4000, async_scheduling=True)
    a = simulate(reqs, pol, Many(), sched, seed=5)
    assert Many.calls < a.steps  # stretches asked for several steps at once
    b = simulate(reqs, pol, Many().__call__, sched, seed=5)
    engine = _Engine(reqs, pol, Many(), sched, 5, stretches=False)
    engine.run()
    c = engine.result()
    for other in (b, c):
        assert np.array_equal(a.finish_s, other.finish_s) and a.steps == other.steps
        assert np.array_equal(a.itl_s, other.itl_s)
    assert np.array_equal(a.finish_s, b.finish_s) and a.steps == b.steps
