"""Prefill/decode disaggregation (:mod:`allocator.sim.disagg`) against closed forms and the
single replica.

* One request alone: TTFT = prefill + transfer + the decode replica's one-token step, each
  part by hand, and E2EL adds ``O - 1`` lone decode steps.
* With an instant link, the run is two single-replica runs composed, under synchronous and
  under asynchronous scheduling (vLLM's default) alike: the prefill pool is
  :func:`~allocator.sim.simulate` of the requests with one output token, and the decode
  pool is :func:`~allocator.sim.simulate` of the requests sent at their prefill's finish
  with a one-token prompt (a step time blind to the context, a cache and budget that never
  bind: then a transferred prompt of ``P`` tokens with ``P - 1`` computed schedules as a
  1-token prompt does). Every first token, finish, ITL gap and decode step is equal. The
  decode pool's ITL then holds no prefill stall: every gap is at most the largest decode
  step plus one token per admitted request, while the aggregated replica's longest gap
  carries a whole prompt's prefill.
* Little's law per pool and over the whole, under either scheduling: the time in system
  the engine integrates equals the sum of the requests' times in each.
* What prompts share reaches the prefill pool: a shared prefix of ``S`` tokens is computed
  once, each later prompt hits it (``S`` tokens a prompt) and prefills only the rest.
* The transfer is ``latency + bytes / bandwidth``; the TTFT parts add up to the TTFT.
* Bad input: the counts, the link, sessions, ``max_concurrency``, prefix caching on the
  decode pool.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.exceptions import ParameterError
from allocator.sim import Requests, Scheduler, SpecPolicy, arrival_times, simulate
from allocator.sim.disagg import TTFT_PARTS, schedule_decode, simulate_disagg, transfer_seconds
from allocator.sim.requests import TokenContent
from allocator.sim.state import State

OFF = SpecPolicy.fixed(0, [0.0, 1.0])
SPEC = SpecPolicy.fixed(3, [0.0, 0.3, 0.3, 0.2, 0.2])
C = 0.02  # ms per prefill token


def decode_ms(b: int, k: int) -> float:
    return 6.0 + 0.4 * b * (1 + k) if b else 0.0


def step(b, k, ctx, pf):
    """A step time blind to the context: a decode part and C ms per prompt token."""
    return decode_ms(b, k) + C * pf


def sched(
    max_num_seqs: int, tokens: int = 1 << 20, budget: int = 1 << 16, on: bool = False
) -> Scheduler:
    """Synchronous scheduling; asynchronous with ``on``."""
    return Scheduler(max_num_seqs, budget, tokens, 16, None, on)


def poisson(n: int, rate: float, prompt: int, output: int, seed: int = 1) -> Requests:
    arr = arrival_times(n, rate, 1.0, np.random.default_rng(seed))
    return Requests(arr, np.full(n, prompt), np.full(n, output))


def test_one_request_by_hand():
    P, out, a = 1000, 10, 0.5
    kv, bw, lat = 3e6, 2e9, 4e-4
    r = Requests(np.array([a]), np.array([P]), np.array([out]))
    res = simulate_disagg(r, (OFF, step, sched(4)), (OFF, step, sched(4)), 1, 1, [kv], bw, lat)
    parts = {k: float(v[0]) for k, v in res.ttft_parts.items()}
    assert parts["prefill_queue"] == 0.0 and parts["decode_queue"] == 0.0
    assert parts["prefill"] == pytest.approx(C * P / 1e3, rel=1e-12)
    assert parts["transfer"] == pytest.approx(lat + kv / bw, rel=1e-12)
    # the decode replica computes the prompt's last token alone (no decoding sequence)
    assert parts["first_decode_step"] == pytest.approx(C * 1 / 1e3, rel=1e-9)
    ttft = C * P / 1e3 + lat + kv / bw + C / 1e3
    w = res.whole
    assert w.first_token_s[0] - a == pytest.approx(ttft, rel=1e-12)
    assert w.finish_s[0] - a == pytest.approx(ttft + (out - 1) * decode_ms(1, 0) / 1e3, rel=1e-12)
    assert sum(parts.values()) == pytest.approx(ttft, rel=1e-12)


@pytest.mark.parametrize("on", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", [OFF, SPEC], ids=["off", "k3"])
@pytest.mark.parametrize("seed", [0, 3])
def test_instant_link_is_two_single_replicas_composed(policy, seed, on):
    req = poisson(300, 25.0, 600, 80, seed=seed + 10)
    res = simulate_disagg(
        req, (OFF, step, sched(8, on=on)), (policy, step, sched(32, on=on)), 1, 1,
        np.full(300, 1e9), math.inf, 0.0, seed=seed,
    )  # fmt: skip
    # the prefill pool: one output token each
    pre = simulate(
        Requests(req.arrival_s, req.prompt_tokens, np.ones(300, dtype=np.int64)),
        OFF, step, sched(8, on=on), seed,
    )  # fmt: skip
    assert np.array_equal(res.prefill.fleet.finish_s, pre.finish_s)
    assert np.array_equal(res.whole.first_scheduled_s, pre.first_scheduled_s)
    # the decode pool: sent at the prefill's finish, the prompt's last token to compute
    order = np.lexsort((np.arange(300), pre.finish_s))
    assert np.array_equal(res.decode_order, order)
    dec = simulate(
        Requests(pre.finish_s[order], np.ones(300, dtype=np.int64), req.output_tokens[order]),
        policy, step, sched(32, on=on), seed,
    )  # fmt: skip
    w = res.whole
    assert res.decode.fleet.steps == dec.steps
    assert res.decode.fleet.duration_s == dec.duration_s
    assert np.array_equal(w.first_token_s[order], dec.first_token_s)
    assert np.array_equal(w.finish_s[order], dec.finish_s)
    assert np.array_equal(res.decode.fleet.itl_s, dec.itl_s)
    assert np.array_equal(w.itl_request, order[dec.itl_request])
    assert np.array_equal(w.decode_steps, dec.decode_steps)
    assert np.array_equal(res.ttft_parts["transfer"], np.zeros(300))
    # no prefill stall in the decode pool's ITL; the aggregated replica has them
    agg = simulate(req, policy, step, sched(32, on=on), seed)
    bound = (decode_ms(32, policy.max_k) + C * 32 * (1 + policy.max_k)) / 1e3
    assert w.itl_s.max() <= bound
    assert agg.itl_s.max() >= (decode_ms(1, policy.max_k) + C * 600) / 1e3


@pytest.mark.parametrize("on", [False, True], ids=["sync", "async"])
def test_ttft_parts_add_up_and_littles_law_per_pool(on):
    base = poisson(400, 30.0, 900, 60, seed=5)
    rng = np.random.default_rng(7)
    prompts, outputs = rng.integers(100, 1500, 400), rng.integers(2, 120, 400)
    req = Requests(base.arrival_s, prompts, outputs)
    kv = np.linspace(1e6, 5e7, 400)
    res = simulate_disagg(
        req, (OFF, step, sched(4, budget=1024, on=on)),
        (SPEC, step, sched(24, tokens=40_000, on=on)), 2, 3, kv, 5e9, 2e-5,
        router="least-requests", seed=2,
    )  # fmt: skip
    w = res.whole
    ttft = w.first_token_s - req.arrival_s
    total = sum(res.ttft_parts[p] for p in TTFT_PARTS)
    np.testing.assert_allclose(total, ttft, rtol=1e-12, atol=1e-12)
    assert all((res.ttft_parts[p] >= -1e-12).all() for p in TTFT_PARTS)
    np.testing.assert_allclose(res.transfer_s, 2e-5 + kv / 5e9, rtol=1e-15)
    for run in (res.prefill.fleet, res.decode.fleet, w):
        done = np.isfinite(run.finish_s)
        assert done.all()
        assert run.time_in_system_s == pytest.approx(
            float((run.finish_s - run.sent_s).sum()), rel=1e-9
        )
    # every request keeps its lengths through both pools (replicas fill their own arrays)
    np.testing.assert_array_equal(w.output_tokens, outputs)
    d_req = res.decode.fleet.requests
    np.testing.assert_array_equal(d_req.prompt_tokens, prompts[res.decode_order])
    np.testing.assert_array_equal(d_req.output_tokens, outputs[res.decode_order])
    assert res.decode.fleet.itl_s.size == int((w.chunks - 1).sum())
    # the decode pool receives each request at its transfer's end
    d = res.decode.fleet
    reach = res.prefill.fleet.finish_s + res.transfer_s
    np.testing.assert_array_equal(d.sent_s, reach[res.decode_order])


@pytest.mark.parametrize("on", [False, True], ids=["sync", "async"])
def test_the_prefill_pool_shares_what_prompts_share(on):
    """Five prompts of ``P`` tokens, each a shared prefix of ``S`` (16 blocks) and its own
    rest, sent 10 s apart to one prefill replica with prefix caching: the first computes
    ``P`` tokens, every later one hits the ``S`` shared tokens and computes ``P - S``
    (``C`` ms a token); vLLM counts ``P`` queried tokens a prompt."""
    n, S, P, out = 5, 256, 400, 8
    ids = np.stack([np.zeros(n), 1 + 2 * np.arange(n), 2 + 2 * np.arange(n)], 1).ravel()
    content = TokenContent(
        ids.astype(np.int64), np.tile([S, P - S, out], n), np.arange(0, 3 * n + 1, 3)
    )
    req = Requests(np.arange(n) * 10.0, np.full(n, P), np.full(n, out), content=content)
    cached = Scheduler(8, 4096, 1 << 16, 16, None, on, True)
    res = simulate_disagg(
        req, (OFF, step, cached), (OFF, step, sched(8, on=on)), 1, 1, np.zeros(n), math.inf
    )
    assert res.prefill.fleet.prefix_cache[:2] == (n * P, (n - 1) * S)
    hand = np.array([P] + [P - S] * (n - 1)) * C / 1e3
    np.testing.assert_allclose(res.ttft_parts["prefill"], hand, rtol=1e-12)
    assert np.isfinite(res.whole.finish_s).all()


def test_transfer_seconds():
    assert transfer_seconds(np.array([0.0, 5e9]), 1e9, 1e-3).tolist() == [1e-3, 5.001]
    assert transfer_seconds(np.array([7e12]), math.inf, 0.0).tolist() == [0.0]


def test_a_transferred_request_preempted_recomputes_prompt_and_output():
    """A decode cache of 11 usable blocks admits both 4-block prompts, which grow to 7
    blocks each: one is preempted and later recomputes prompt + output so far (its remote
    KV is gone)."""
    req = Requests(np.array([0.0, 0.0]), np.array([64, 64]), np.array([40, 40]))
    res = simulate_disagg(
        req, (OFF, step, sched(2)), (OFF, step, sched(2, tokens=192)), 1, 1, np.zeros(2),
        math.inf,
    )  # fmt: skip
    assert np.isfinite(res.whole.finish_s).all()
    assert res.whole.preemptions.sum() >= 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"prefill_replicas": 0}, "replicas"),
        ({"decode_replicas": 0}, "replicas"),
        ({"bandwidth_bytes_s": 0.0}, "bandwidth_bytes_s"),
        ({"latency_s": -1.0}, "latency_s"),
        ({"kv_bytes": np.zeros(3)}, "kv_bytes"),
        ({"decode": (OFF, step, Scheduler(4, 4096, 10**5, 16, 2, False))}, "scheduler"),
        ({"prefill": (OFF, step, Scheduler(4, 4096, 10**5, 16, 2, True))}, "scheduler"),
        (
            {"decode": (OFF, step, Scheduler(4, 4096, 10**5, 16, None, False, True))},
            "scheduler",
        ),
        ({"router": "fastest"}, "router"),
    ],
)
def test_refusals(kwargs, field):
    req = poisson(4, 10.0, 32, 4)
    args = {
        "requests": req,
        "prefill": (OFF, step, sched(4)),
        "decode": (OFF, step, sched(4)),
        "prefill_replicas": 1,
        "decode_replicas": 1,
        "kv_bytes": np.zeros(4),
        "bandwidth_bytes_s": 1e9,
        "latency_s": 0.0,
    }
    args.update(kwargs)
    with pytest.raises(ParameterError) as e:
        simulate_disagg(**args)
    assert e.value.field == field


def test_sessions_refused():
    req = Requests(
        np.zeros(2), np.array([8, 8]), np.array([2, 2]), after=np.array([-1, 0]),
        think_s=np.zeros(2),
    )  # fmt: skip
    with pytest.raises(ParameterError) as e:
        simulate_disagg(req, (OFF, step, sched(2)), (OFF, step, sched(2)), 1, 1, np.zeros(2), 1e9)
    assert e.value.field == "requests"


@pytest.mark.parametrize(
    "policy, preempted, chunk, taken",
    [(OFF, 0, 1, 1), (SPEC, 0, 1, 4), (OFF, 1, 64, 64), (SPEC, 1, 64, 64)],
    ids=["transferred", "transferred-padded", "recomputed", "recomputed-k3"],
)
def test_admission_of_a_transferred_request(policy, preempted, chunk, taken):
    """A transferred request computes its prompt's last token (padded to 1 + k under a
    static k, as vLLM pads a request with computed tokens); once preempted, its whole
    prompt and output so far."""
    state = State(Requests(np.zeros(1), np.array([64]), np.array([40])), policy, sched(2), 0)
    state.preemptions[0] = preempted
    state.take_sends()
    out = schedule_decode(state)
    assert out.admitted == [(0, 0, chunk, chunk, taken)]
    assert int(state.running.computed[0]) == 64 - chunk
    assert out.tokens == taken
