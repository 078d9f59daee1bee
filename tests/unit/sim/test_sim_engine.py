"""The scheduler on hand-worked cases, and the loop's invariants.

Hand-worked cases use a constant 1 ms step (times are step counts) and deterministic
pmfs, so every number below was derived by following vLLM's rules by hand: running
requests first under the token budget, KV blocks for computed + scheduled + lookahead
tokens, the newest running request preempted when a block is missing (recompute: back to
the front of the waiting queue with its output), no admission in a step that preempted.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.io.trace import read_trace
from allocator.sim import (
    Requests,
    Scheduler,
    SpecPolicy,
    fixed_requests,
    simulate,
    summary,
)
from allocator.sim.engine import _Engine

TRACE = (
    Path(__file__).resolve().parents[3]
    / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
)


class Recorder:
    """A constant 1 ms step that records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, b, k, ctx, pf):
        self.calls.append((b, k, ctx, pf))
        return 1.0


def ms(x):
    return np.round(np.asarray(x) * 1000, 9).tolist()


def test_preemption_recompute_by_hand():
    """Two requests of prompt 8, output 12, speculation off, 8 usable blocks of 4 tokens
    (a cache of 36 tokens: 9 blocks, one of them vLLM's null block).

    Both prefill in step 1 (2 blocks each) and decode together; their 17th token needs a
    fifth block each in step 10 with none free: the newest (B) is preempted, its 4 blocks
    go to A, and no one is admitted in that step. B waits (its 17-token recomputation
    needs 5 blocks, 3 are free) until A finishes at the end of step 12, recomputes prompt +
    9 output tokens in step 13, which streams its 10th token, and finishes in step 15."""
    rec = Recorder()
    reqs = Requests(np.zeros(2), [8, 8], [12, 12])
    r = simulate(
        reqs, SpecPolicy.off(), rec, Scheduler(4, 100, 36, block_size=4, async_scheduling=False)
    )
    assert ms(r.first_token_s) == [1.0, 1.0]
    assert ms(r.finish_s) == [12.0, 15.0]
    assert r.preemptions.tolist() == [0, 1]
    assert r.chunks.tolist() == [12, 12]
    assert ms(r.first_scheduled_s) == [0.0, 0.0]
    assert r.kv_cache_peak_fraction == 1.0
    expected = [(0, 0, 0.0, 16)] + [(2, 0, float(c), 0) for c in range(8, 16)]
    expected += [(1, 0, 16.0, 0), (1, 0, 17.0, 0), (1, 0, 18.0, 0)]  # A alone
    expected += [(0, 0, 0.0, 17), (1, 0, 17.0, 0), (1, 0, 18.0, 0)]  # B recomputed, alone
    assert rec.calls == expected
    b_gaps = r.itl_s[r.itl_request == 1]
    assert ms(b_gaps) == [1.0] * 8 + [4.0, 1.0, 1.0]  # the recomputation shows as one gap


@pytest.mark.parametrize(
    "lookahead, finish, calls, peak",
    [
        # lookahead 1 (vLLM's num_speculative_tokens): in step 3 each needs a 4th block,
        # B gets none and preempts itself; B is readmitted in step 4 (11 tokens + 1
        # lookahead in the 3 blocks A left free) beside A's last step
        (
            None,
            [4.0, 5.0],
            [(0, 0, 0.0, 16), (2, 1, 8.0, 0), (1, 1, 10.0, 0), (1, 1, 12.0, 11), (1, 1, 11.0, 0)],
            1.0,
        ),
        # no lookahead (n-gram drafting): the blocks run out one step later, in step 4
        (
            0,
            [4.0, 5.0],
            [(0, 0, 0.0, 16), (2, 1, 8.0, 0), (2, 1, 10.0, 0), (1, 1, 12.0, 0), (0, 0, 0.0, 13)],
            6 / 7,
        ),
    ],
)
def test_lookahead_slots_by_hand(lookahead, finish, calls, peak):
    """k = 1 with a pmf that always accepts (2 tokens per step); prompts of 8, outputs of
    6, 7 usable blocks of 4 tokens (8 in the pool, one the null block). A decode step needs
    blocks for computed + 1 + k + lookahead tokens."""
    rec = Recorder()
    reqs = Requests(np.zeros(2), [8, 8], [6, 6])
    pol = SpecPolicy.fixed(1, [0.0, 0.0, 1.0], lookahead_tokens=lookahead)
    r = simulate(reqs, pol, rec, Scheduler(4, 100, 32, block_size=4, async_scheduling=False))
    assert ms(r.finish_s) == finish
    assert r.preemptions.tolist() == [0, 1]
    assert rec.calls == calls
    assert r.kv_cache_peak_fraction == pytest.approx(peak)


def test_chunked_prefill_by_hand():
    """A prompt of 1,000 tokens under a budget of 256 spans ⌈1000 / 256⌉ = 4 steps (256,
    256, 256, 232); the last emits the first token; decoding starts the step after."""
    rec = Recorder()
    r = simulate(
        Requests(np.zeros(1), [1000], [3]),
        SpecPolicy.off(),
        rec,
        Scheduler(4, 256, 10**4, async_scheduling=False),
    )
    assert rec.calls == [
        (0, 0, 0.0, 256),
        (0, 0, 0.0, 256),
        (0, 0, 0.0, 256),
        (0, 0, 0.0, 232),
        (1, 0, 1000.0, 0),
        (1, 0, 1001.0, 0),
    ]
    assert ms(r.first_token_s) == [4.0] and ms(r.finish_s) == [6.0]


def test_chunked_prefill_shares_the_budget_with_decodes():
    """Running requests first: A decodes one token per step and B's 600-token prompt gets
    the other 255 of the budget: 255, 255, 90, three steps (⌈600 / 255⌉)."""
    rec = Recorder()
    reqs = Requests(np.array([0.0, 0.0005]), [10, 600], [50, 2])
    r = simulate(reqs, SpecPolicy.off(), rec, Scheduler(4, 256, 10**4, async_scheduling=False))
    assert rec.calls[:5] == [
        (0, 0, 0.0, 10),
        (1, 0, 10.0, 255),
        (1, 0, 11.0, 255),
        (1, 0, 12.0, 90),
        (2, 0, (13 + 600) / 2, 0),
    ]
    assert ms(r.first_token_s) == [1.0, 4.0]
    assert ms(r.first_token_s - r.sent_s) == [1.0, 3.5]
    assert ms(r.finish_s) == [50.0, 5.0]


def test_budget_cuts_the_decode_batch():
    """Five decoding requests at k = 3 ask 4 tokens each; a budget of 10 schedules two and
    a half: the third verifies one draft (2 tokens), the last two wait for the next step."""
    rec = Recorder()
    pol = SpecPolicy.fixed(3, [0.0, 0.0, 0.0, 0.0, 1.0])
    reqs = Requests(np.zeros(5), [2] * 5, [9] * 5)
    r = simulate(reqs, pol, rec, Scheduler(8, 10, 10**4, async_scheduling=False))
    assert rec.calls[0] == (0, 0, 0.0, 10)  # the five prompts in one step
    assert rec.calls[1] == (3, 3, 2.0, 0)  # three decode (4 + 4 + 2 tokens)
    assert r.decode_steps[1, 2] >= 1  # a step that verified one draft and emitted 2
    assert np.all(r.output_tokens == 9)


def test_kv_never_exceeds_capacity_and_no_request_is_lost():
    trace = read_trace(TRACE, num_prompts=600, speedup=8.0)
    pol = SpecPolicy.fixed(2, [0.0, 0.4, 0.3, 0.3])
    r = simulate(
        trace,
        pol,
        lambda b, k, c, p: 5 + b + 0.01 * p,
        Scheduler(48, 1024, 16_000, async_scheduling=False),
        seed=1,
    )
    s = summary(r)
    assert s["preemptions"] > 10
    assert 0.9 < s["kv_cache_peak_fraction"] <= 1.0
    assert s["completed"] == 600 and np.array_equal(r.output_tokens, trace.output_tokens)
    assert np.all(r.first_token_s >= r.first_scheduled_s) and np.all(r.finish_s >= r.first_token_s)


def test_request_that_cannot_fit_is_refused():
    # alone, a request needs prompt + output - 1 + k + lookahead slots at worst, in the
    # cache's blocks but one (vLLM's null block)
    pol = SpecPolicy.fixed(1, [0.0, 0.5, 0.5])
    ok = Requests(np.zeros(1), [6], [7])  # 6 + 6 + 1 + 1 = 14 slots: 4 blocks of 4
    simulate(ok, pol, Recorder(), Scheduler(4, 100, 20, block_size=4, async_scheduling=False))
    with pytest.raises(InputError) as err:
        simulate(ok, pol, Recorder(), Scheduler(4, 100, 16, block_size=4, async_scheduling=False))
    assert err.value.field == "kv_cache_tokens" and "request 0" in err.value.message
    with pytest.raises(InputError) as err:
        simulate(
            Requests(np.zeros(1), [40], [2]),
            pol,
            Recorder(),
            Scheduler(4, 100, 16, 4, async_scheduling=False),
        )
    assert err.value.field == "kv_cache_tokens" and "prompt" in err.value.message


def test_max_concurrency():
    """The client keeps at most C requests in flight: request i is sent when it has
    arrived and the (i - C + 1)-th request has finished."""
    C = 3
    reqs = fixed_requests(40, 50, 30, math.inf)
    r = simulate(
        reqs,
        SpecPolicy.fixed(2, [0.0, 0.3, 0.3, 0.4]),
        lambda b, k, c, p: 4.0 + b,
        Scheduler(16, 2048, 10**5, max_concurrency=C, async_scheduling=False),
        seed=2,
    )
    # in flight at every send and finish instant
    times = np.concatenate([r.sent_s, r.finish_s])
    inflight = [(np.sum((r.sent_s <= t) & (r.finish_s > t))) for t in times]
    assert max(inflight) == C
    finishes = np.sort(r.finish_s)
    assert np.allclose(r.sent_s[:C], 0.0)
    assert np.allclose(r.sent_s[C:], finishes[: 40 - C])
    assert summary(r)["max_running_seqs"] == C


def test_deterministic_by_seed():
    trace = read_trace(TRACE, num_prompts=300, speedup=3.0)
    pol = SpecPolicy.fixed(3, [0.0, 0.3, 0.3, 0.2, 0.2])
    sched = Scheduler(32, 2048, 60_000, async_scheduling=False)

    def step(b, k, c, p):
        return 6.0 + b * (1 + k) * 0.5 + 0.01 * p

    a = simulate(trace, pol, step, sched, seed=4)
    b = simulate(trace, pol, step, sched, seed=4)
    c = simulate(trace, pol, step, sched, seed=5)
    for f in ("finish_s", "first_token_s", "itl_s", "chunks", "decode_steps"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert summary(a) == summary(b)
    assert not np.array_equal(a.finish_s, c.finish_s)


CASES = [
    ("plain", Scheduler(256, 8192, 400_000, async_scheduling=False), 1.0),
    ("small batch", Scheduler(16, 512, 40_000, async_scheduling=False), 1.0),
    (
        "client-limited, preempting",
        Scheduler(64, 2048, 30_000, max_concurrency=20, async_scheduling=False),
        5.0,
    ),
    ("large blocks", Scheduler(8, 4096, 20_000, block_size=32, async_scheduling=False), 5.0),
]
POLICIES = [
    SpecPolicy.fixed(4, [0.0, 0.2, 0.16, 0.128, 0.1024, 0.4096]),
    SpecPolicy.off(),
    SpecPolicy.by_batch_size(
        [
            (1, 4, 4, [0.0, 0.2, 0.16, 0.128, 0.1024, 0.4096]),
            (5, 8, 2, [0.0, 0.3, 0.3, 0.4]),
            (9, 9, 0, [0.0, 1.0]),
        ]
    ),
]


class _Step:
    """The linear step time of the stretch tests, per step and (``many``) on arrays."""

    def __call__(self, b, k, ctx, pf):
        return 8.0 + 0.05 * b * (1 + k) + 0.00002 * b * ctx + 0.06 * pf

    def many(self, b, k, ctx, pf):
        return 8.0 + 0.05 * b * (1 + k) + 0.00002 * b * ctx + 0.06 * pf


@pytest.mark.parametrize("name, sched, speedup", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("policy", POLICIES, ids=["k4", "off", "schedule"])
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("arrays", [False, True], ids=["per-step", "many"])
def test_stretches_equal_step_by_step(name, sched, speedup, policy, async_scheduling, arrays):
    """Decode-only stretches played as matrices give exactly what the same steps played
    one at a time give: every time, token, gap and counter, under synchronous and
    asynchronous scheduling, the stretch's times asked step by step or in one call."""
    trace = read_trace(TRACE, num_prompts=400, speedup=speedup)
    sched = dataclasses.replace(sched, async_scheduling=async_scheduling)
    step = _Step() if arrays else _Step().__call__

    runs = []
    played = []
    for stretches in (True, False):
        engine = _Engine(trace, policy, step, sched, 3, stretches=stretches)
        engine.step_tokens = []
        engine.run()
        runs.append(engine.result())
        played.append(engine.step_tokens)
    fast, slow = runs
    assert played[0] == played[1]
    assert fast.steps == slow.steps
    for f in (
        "sent_s",
        "first_scheduled_s",
        "first_token_s",
        "finish_s",
        "output_tokens",
        "chunks",
        "preemptions",
        "itl_s",
        "itl_request",
        "decode_steps",
        "uncut_decode_steps",
    ):
        assert np.array_equal(getattr(fast, f), getattr(slow, f)), f
    assert fast.kv_cache_peak_fraction == slow.kv_cache_peak_fraction
    assert fast.max_running_seqs == slow.max_running_seqs
    assert fast.time_in_system_s == pytest.approx(slow.time_in_system_s, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"kv_cache_tokens": 8}, "kv_cache_tokens"),
        ({"block_size": 0}, "block_size"),
        ({"max_concurrency": 0}, "max_concurrency"),
        # vLLM 0.33.0 refuses a token budget below max_num_seqs (config/scheduler.py 331)
        ({"max_num_seqs": 65}, "max_num_batched_tokens"),
        ({"async_scheduling": 1}, "async_scheduling"),
    ],
)
def test_bad_scheduler(kwargs, field):
    args = {"max_num_seqs": 4, "max_num_batched_tokens": 64, "kv_cache_tokens": 1024}
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        Scheduler(**args)
    assert err.value.field == field


def test_bad_step_times():
    reqs = Requests(np.zeros(1), [4], [4])
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(InputError) as err:
            simulate(
                reqs,
                SpecPolicy.off(),
                lambda b, k, c, p, v=bad: v,
                Scheduler(2, 64, 1024, async_scheduling=False),
            )
        assert err.value.field == "step_ms"


@pytest.mark.parametrize(
    "arrays, field",
    [
        (([0.0, 1.0], [4, 0], [4, 4]), "prompt_tokens"),
        (([0.0, 1.0], [4, 4], [-1, 4]), "output_tokens"),
        (([1.0, 0.0], [4, 4], [4, 4]), "arrival_s"),
        (([0.0], [4, 4], [4, 4]), "arrival_s"),
        (([0.0, math.nan], [4, 4], [4, 4]), "arrival_s"),
        (([0.0], [4.5], [4]), "prompt_tokens"),
    ],
)
def test_bad_requests(arrays, field):
    with pytest.raises(InputError) as err:
        Requests(*(np.asarray(a) for a in arrays))
    assert err.value.field == field


def test_client_queue_metrics_under_max_concurrency():
    """With ``max_concurrency`` vLLM also reports the client-side queue (arrival to send)
    and, at a finite rate, the end-to-end latency including it."""
    pol = SpecPolicy.off()
    burst = simulate(
        fixed_requests(20, 20, 10, math.inf),
        pol,
        lambda *a: 2.0,
        Scheduler(8, 512, 10**4, 16, 4, async_scheduling=False),
    )
    s = summary(burst)
    waits = burst.sent_s - burst.requests.arrival_s
    assert s["mean_client_queue_time_ms"] == pytest.approx(waits.mean() * 1000)
    assert "p99_e2el_including_client_queue_ms" not in s  # vLLM leaves it out at rate inf
    paced = simulate(
        fixed_requests(20, 20, 10, 400.0),
        pol,
        lambda *a: 2.0,
        Scheduler(8, 512, 10**4, 16, 4, async_scheduling=False),
    )
    s = summary(paced)
    total = paced.finish_s - paced.requests.arrival_s
    assert s["mean_e2el_including_client_queue_ms"] == pytest.approx(total.mean() * 1000)
    assert "mean_client_queue_time_ms" not in summary(
        simulate(
            fixed_requests(5, 20, 10, 400.0),
            pol,
            lambda *a: 2.0,
            Scheduler(8, 512, 10**4, async_scheduling=False),
        )
    )


def test_per_request_columns():
    r = simulate(
        Requests(np.zeros(3), [8, 8, 8], [1, 5, 5]),
        SpecPolicy.off(),
        lambda *a: 1.0,
        Scheduler(4, 100, 10**3, async_scheduling=False),
    )
    cols = r.columns()
    assert all(v.shape == (3,) for v in cols.values())
    assert np.isnan(cols["tpot_ms"][0]) and cols["tpot_ms"][1] == pytest.approx(1.0)
    assert cols["ttft_ms"].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert cols["e2el_ms"].tolist() == pytest.approx([1.0, 5.0, 5.0])


class TwoWayStep:
    """A linear step time callable per step and, for stretches, on arrays at once."""

    def __init__(self):
        self.many_calls = 0

    def __call__(self, b, k, ctx, pf):
        return (7.0 + 1.1 * k + 0.02 * b * (1 + k) + 2e-5 * b * ctx if b else 0.0) + 0.012 * pf

    def many(self, b, k, ctx, pf):
        self.many_calls += 1
        return np.where(b > 0, 7.0 + 1.1 * k + 0.02 * b * (1 + k) + 2e-5 * b * ctx, 0.0) + (
            0.012 * pf
        )


def test_step_function_on_arrays_gives_the_same_run():
    trace = read_trace(TRACE, num_prompts=500)
    pol = POLICIES[0]
    sched = Scheduler(64, 2048, 60_000, async_scheduling=False)
    both = TwoWayStep()
    fast = simulate(trace, pol, both, sched, seed=8)
    slow = simulate(trace, pol, both.__call__, sched, seed=8)
    assert both.many_calls > 100
    for f in ("finish_s", "first_token_s", "itl_s", "itl_request", "chunks", "decode_steps"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f)), f
    assert fast.time_in_system_s == pytest.approx(slow.time_in_system_s, rel=1e-12)


def test_admission_waits_until_the_whole_prompt_fits():
    """vLLM 0.33 admits a request only when the blocks of its whole prompt are free
    (``scheduler_reserve_full_isl``, default True), not merely its first chunk's.

    10 usable blocks of 4 tokens (11 in the pool, one the null block), budget 16. A
    (prompt 16, output 10) prefills in step 1 and from step 2 holds 5 blocks, growing to 7.
    B's 24-token prompt needs 6 blocks: its first chunk (15 tokens, 4 blocks) would fit
    beside A in step 2, its prompt never does while A runs. So B is first scheduled when A
    has finished (step 11, t = 10), prefills in steps 11-12 and finishes in step 13, never
    preempted. Admitting on the first chunk alone (the rule before) scheduled B at t = 1
    and preempted it 4 times."""
    reqs = Requests(np.zeros(2), [16, 24], [10, 2])
    r = simulate(
        reqs,
        SpecPolicy.off(),
        Recorder(),
        Scheduler(4, 16, 44, block_size=4, async_scheduling=False),
    )
    assert ms(r.first_scheduled_s) == [0.0, 10.0]
    assert ms(r.first_token_s) == [1.0, 12.0]
    assert ms(r.finish_s) == [10.0, 13.0]
    assert r.preemptions.tolist() == [0, 0]


def test_a_step_function_on_arrays_stops_a_stretch_where_the_kv_cache_runs_out():
    """A decode-only stretch cut where the KV cache would overflow must end there whichever
    way its step times are asked for: with ``many`` (one call for the stretch) the cut was
    lost, the stretch ran on past it, and the cache held more blocks than it has (peak
    1.048 of the cache, 1 preemption instead of 73 here)."""
    reqs = fixed_requests(600, 500, 200, 40.0, seed=3)
    pmf = np.array([0.0, 0.5, 0.25, 0.25])
    pol = SpecPolicy.fixed(2, pmf, 0)
    sched = Scheduler(16, 2048, 2000, async_scheduling=False)
    both = TwoWayStep()
    fast = simulate(reqs, pol, both, sched, seed=5)
    slow = _Engine(reqs, pol, both.__call__, sched, 5, stretches=False)
    slow.run()
    ref = slow.result()
    assert both.many_calls > 10
    assert fast.kv_cache_peak_fraction <= 1.0
    assert fast.preemptions.sum() == ref.preemptions.sum() > 0
    for f in ("finish_s", "first_token_s", "itl_s", "chunks", "decode_steps", "preemptions"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


@pytest.mark.parametrize(
    "budget, dynamic, first_scheduled, first_token, finish",
    [
        # padded to 1 + k = 3 tokens beside A's 3: the budget of 5 leaves 2, so B waits
        # until A has finished (end of step 5) and is admitted alone, unpadded, in step 6
        (5, False, 5.0, 6.0, 7.0),
        # a budget of 6 holds both: B is admitted padded in step 2
        (6, False, 1.0, 2.0, 3.0),
        # k by batch size (a dynamic schedule): never padded, B is admitted in step 2
        (5, True, 1.0, 2.0, 3.0),
    ],
)
def test_one_token_prompt_is_padded_to_a_decode(
    budget, dynamic, first_scheduled, first_token, finish
):
    """vLLM 0.33 pads a new request with one token to compute to ``1 + k`` tokens when
    ``k`` is static and the step's running requests all decode (scheduler.py lines
    1309-1330), and does not admit it in that step when the budget left is smaller.

    A (prompt 4, output 5) prefills in step 1 and decodes one token a step (k = 2, the
    pmf puts everything on 1 token) until step 5; B (prompt 1, output 2) is sent at 0.5 ms
    and seen in step 2, where A asks for 3 tokens."""
    pmf = [0.0, 1.0, 0.0, 0.0]
    if dynamic:
        pol = SpecPolicy.by_batch_size([(1, 1, 2, pmf), (2, 2, 2, pmf)])
    else:
        pol = SpecPolicy.fixed(2, pmf)
    reqs = Requests(np.array([0.0, 0.0005]), [4, 1], [5, 2])
    rec = Recorder()
    r = simulate(reqs, pol, rec, Scheduler(4, budget, 10**4, async_scheduling=False))
    assert ms(r.first_scheduled_s) == [0.0, first_scheduled]
    assert ms(r.first_token_s) == [1.0, first_token]
    assert ms(r.finish_s) == [5.0, finish]
    if first_scheduled == 1.0:
        assert rec.calls[1] == (1, 2, 4.0, 1)  # A decodes, B's prompt token (padded or not)


def test_decode_uniforms_are_the_draws_the_engine_uses():
    """``decode_uniforms`` splits the engine's uniforms by request (``output - 1`` each,
    request after request), and one request alone with ``k = 1`` and an even pmf emits 2
    tokens in a decode step whose uniform is at least 0.5, else 1: it takes as many steps
    as that rule says."""
    from allocator.sim import decode_uniforms
    from allocator.sim.state import State

    output = np.array([9, 1, 30])
    u = decode_uniforms(output, seed=5)
    assert [a.size for a in u] == [8, 0, 29]
    policy = SpecPolicy.fixed(1, [0.0, 0.5, 0.5], lookahead_tokens=0)
    sched = Scheduler(1, 64, 1024, 16, async_scheduling=False)
    state = State(Requests(np.zeros(3), np.array([4, 4, 4]), output), policy, sched, 5)
    assert np.array_equal(np.concatenate(u), state.U[: int((output - 1).sum())])
    left, want = 29, 1  # the prefill's step emits the first token
    for x in decode_uniforms(np.array([30]), seed=7)[0]:
        if left == 0:
            break
        left -= min(2 if x >= 0.5 else 1, left)
        want += 1
    res = simulate(
        Requests(np.zeros(1), np.array([4]), np.array([30])), policy, Recorder(), sched, 7
    )
    assert res.steps == want
