"""A fleet of replicas behind a router (:mod:`allocator.sim.fleet`), against the single
replica, queueing theory and brute force.

* A fleet of one is :func:`~allocator.sim.simulate`, every array equal.
* A fleet whose router sends everything to one replica (one session) is that replica alone,
  through the rebuilds and replays of a replica that outgrows its first arrays.
* Round-robin over ``N`` replicas of a Poisson stream gives each replica every ``N``-th
  arrival: gaps of a gamma (Erlang) law of shape ``N``, coefficient of variation
  ``1 / sqrt(N)`` (checked within four standard errors of the estimate).
* Join-the-shortest-queue (least-requests) is no worse than round-robin on P99 TTFT at the
  same load, on seeded cases in the queueing regime.
* Little's law per replica: the time in system the engine integrates equals the sum of
  the requests' end-to-end latencies.
* What least-requests saw at each arrival equals a brute-force count from the timelines.

Each runs with the replicas' scheduling synchronous and asynchronous (vLLM's default);
tests/unit/sim/test_fleet_async.py checks each replica against its requests run alone.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from allocator.exceptions import ParameterError
from allocator.io.trace import read_trace
from allocator.sim import (
    Requests,
    Scheduler,
    SpecPolicy,
    arrival_times,
    fixed_requests,
    simulate,
    summary,
)
from allocator.sim.fleet import MAX_REPLICAS, simulate_fleet
from allocator.sim.routers import LeastRequests, View

TRACE = (
    Path(__file__).resolve().parents[3]
    / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
)
SPEC = SpecPolicy.fixed(3, [0.0, 0.3, 0.3, 0.2, 0.2])
FIELDS = (
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
)


#: each test runs with synchronous and with asynchronous scheduling
MODES = pytest.mark.parametrize("on", [False, True], ids=["sync", "async"])


def mode(sched: Scheduler, on: bool) -> Scheduler:
    """``sched`` with asynchronous scheduling ``on``."""
    return dataclasses.replace(sched, async_scheduling=on)


def step(b, k, ctx, pf):
    return (6.0 + 0.4 * b * (1 + k) + 2e-5 * b * ctx if b else 0.0) + 0.02 * pf


def same_run(a, b) -> None:
    for name in FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    for name in ("duration_s", "steps", "max_running_seqs"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.kv_cache_peak_fraction == b.kv_cache_peak_fraction
    # the time in system is summed step by step: where the fast path's stretches are cut
    # changes the order of the additions (as stretches against step by step do)
    assert a.time_in_system_s == pytest.approx(b.time_in_system_s, rel=1e-12)
    sa, sb = summary(a), summary(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        if key == "mean_concurrency":
            assert sa[key] == pytest.approx(sb[key], rel=1e-12)
            continue
        assert sa[key] == sb[key] or (math.isnan(sa[key]) and math.isnan(sb[key])), key


CASES = [
    ("trace", Scheduler(64, 2048, 200_000, async_scheduling=False), 3.0, SPEC),
    ("trace, preempting", Scheduler(32, 1024, 24_000, async_scheduling=False), 6.0, SPEC),
    ("trace, off", Scheduler(16, 512, 60_000, async_scheduling=False), 1.0, SpecPolicy.off()),
]


@pytest.mark.parametrize(
    "sched, speedup, policy",
    [
        pytest.param(*c[1:], id=c[0], marks=[pytest.mark.slow] if i else [])
        for i, c in enumerate(CASES)
    ],
)
@MODES
def test_fleet_of_one_is_simulate(sched, speedup, policy, on):
    sched = mode(sched, on)
    reqs = read_trace(TRACE, num_prompts=600, speedup=speedup)
    for router in ("round-robin", "least-requests", "least-kv"):
        fleet = simulate_fleet(reqs, policy, step, sched, 1, router, seed=7)
        one = simulate(reqs, policy, step, sched, seed=7)
        assert fleet.router == router
        same_run(fleet.fleet, one)
        same_run(fleet.replicas[0], one)


@MODES
def test_one_session_on_many_replicas_is_one_replica_through_rebuilds(on):
    """Every request in one session: the first replica chosen gets all of them, far past
    its first arrays (sized for a quarter), so it is rebuilt and replayed several times;
    the run is still the single replica's, and the others receive nothing."""
    reqs = read_trace(TRACE, num_prompts=500, speedup=4.0)
    sched = Scheduler(32, 2048, 100_000, async_scheduling=on)
    fleet = simulate_fleet(
        reqs, SPEC, step, sched, 4, "session-affinity", seed=2, keys=np.zeros(500, np.int64)
    )
    r = int(fleet.assignment[0])
    assert np.all(fleet.assignment == r)
    assert sum(p is None for p in fleet.replicas) == 3
    one = simulate(reqs, SPEC, step, sched, seed=2)
    same_run(fleet.fleet, one)
    same_run(fleet.replicas[r], one)


@pytest.mark.parametrize(
    "n", [4, pytest.param(2, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)]
)
@MODES
def test_round_robin_thins_poisson_to_erlang(n, on):
    """Each replica's inter-arrival CV is 1/sqrt(n) within 4 standard errors: for gaps of
    a gamma law of shape n the sample variance has relative variance (2 + 6/n)/m over m
    gaps, so the CV's standard error is CV/2 * sqrt((2 + 6/n)/m)."""
    total = 8_000
    reqs = fixed_requests(total, 16, 2, request_rate=200.0, burstiness=1.0, seed=11)
    fleet = simulate_fleet(
        reqs, SpecPolicy.off(), step, Scheduler(64, 4096, 100_000, async_scheduling=on), n
    )
    cv_true = 1.0 / math.sqrt(n)
    for part in fleet.replicas:
        assert part is not None
        gaps = np.diff(part.requests.arrival_s)
        m = gaps.size
        se = cv_true / 2.0 * math.sqrt((2.0 + 6.0 / n) / m)
        cv = float(gaps.std() / gaps.mean())
        assert abs(cv - cv_true) < 4 * se, (cv, cv_true, se)
    # and the whole stream is Poisson: CV 1 (shape 1)
    gaps = np.diff(reqs.arrival_s)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 4 * 0.5 * math.sqrt(8.0 / gaps.size)


JSQ_CASES = [
    # (replicas, requests/s, burstiness, seed): from light load to past round-robin's knee
    (4, 12.0, 1.0, 1),
    (4, 20.0, 1.0, 2),
    (4, 28.0, 1.0, 3),
    (4, 36.0, 0.5, 4),
    (8, 60.0, 1.0, 5),
    (3, 18.0, 0.25, 6),
]


@pytest.mark.slow
@pytest.mark.parametrize("n, rate, burst, seed", JSQ_CASES)
@MODES
def test_least_requests_no_worse_than_round_robin_on_p99_ttft(n, rate, burst, seed, on):
    """Requests of two sizes (one in ten with 1,024 output tokens, the rest 16): round-robin
    sends requests to a replica clogged by long ones; joining the shortest queue does not.
    (With requests all alike and a light load round-robin's P99 TTFT can be the lower: it
    never sends two arrivals in a row to one replica, so prefills never share a step; see
    docs/guides/capacity.md.)"""
    total = 3000
    rng = np.random.default_rng(seed)
    out = np.where(rng.random(total) < 0.1, 1024, 16)
    reqs = Requests(arrival_times(total, rate, burst, seed=seed), np.full(total, 256), out)
    sched = Scheduler(16, 1024, 200_000, async_scheduling=on)
    p99 = {}
    for router in ("round-robin", "least-requests"):
        run = simulate_fleet(reqs, SPEC, step, sched, n, router, seed=seed)
        p99[router] = summary(run.fleet)["p99_ttft_ms"]
    assert p99["least-requests"] <= p99["round-robin"], p99


@pytest.mark.parametrize("router", ["round-robin", "least-requests", "least-kv"])
@MODES
def test_littles_law_per_replica(router, on):
    reqs = read_trace(TRACE, num_prompts=1200, speedup=10.0)
    run = simulate_fleet(
        reqs, SPEC, step, Scheduler(32, 2048, 60_000, async_scheduling=on), 3, router, seed=5
    )
    for part in run.replicas:
        assert part is not None
        s = summary(part)
        lhs = s["mean_concurrency"]
        rhs = s["request_throughput"] * s["mean_e2el_ms"] / 1000.0
        assert lhs == pytest.approx(rhs, rel=1e-9)
        assert part.time_in_system_s == pytest.approx(float(part.e2el_s.sum()), rel=1e-9)
    s = summary(run.fleet)
    assert s["mean_concurrency"] == pytest.approx(
        s["request_throughput"] * s["mean_e2el_ms"] / 1000.0, rel=1e-9
    )


class Recording(LeastRequests):
    """least-requests that keeps what it saw."""

    def reset(self) -> None:
        self.seen: list[np.ndarray] = []

    def choose(self, view: View) -> int:
        self.seen.append(view.in_flight.copy())
        return super().choose(view)


@MODES
def test_requests_in_flight_seen_equal_a_count_from_the_timelines(on):
    reqs = read_trace(TRACE, num_prompts=800, speedup=6.0)
    router = Recording()
    run = simulate_fleet(
        reqs, SPEC, step, Scheduler(16, 1024, 40_000, async_scheduling=on), 3, router, seed=1
    )
    finish = run.fleet.finish_s
    arrival = reqs.arrival_s
    for g, seen in enumerate(router.seen):
        earlier = np.arange(g)
        busy = finish[earlier] > arrival[g]
        brute = np.bincount(run.assignment[earlier][busy], minlength=3)
        assert np.array_equal(seen, brute), g
        assert run.assignment[g] in np.flatnonzero(seen == seen.min())


@MODES
def test_same_seed_same_fleet_and_per_request_draws_shared_by_routers(on):
    reqs = read_trace(TRACE, num_prompts=400, speedup=5.0)
    sched = Scheduler(16, 1024, 40_000, async_scheduling=on)
    a = simulate_fleet(reqs, SPEC, step, sched, 3, "least-requests", seed=9)
    b = simulate_fleet(reqs, SPEC, step, sched, 3, "least-requests", seed=9)
    same_run(a.fleet, b.fleet)
    assert np.array_equal(a.assignment, b.assignment)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": MAX_REPLICAS + 1}, "replicas"),
        ({"replicas": 2.5}, "replicas"),
        ({"router": "fastest"}, "router"),
        ({"router": "session-affinity"}, "router"),
        ({"router": "prefix-affinity"}, "router"),
        ({"keys": np.array([-1, 0])}, "keys"),
    ],
)
def test_bad_input(kwargs, field):
    reqs = fixed_requests(2, 8, 4, request_rate=1.0)
    args = {"replicas": 2, "router": "round-robin", **kwargs}
    with pytest.raises(ParameterError) as err:
        simulate_fleet(reqs, SPEC, step, Scheduler(4, 64, 4_000, async_scheduling=False), **args)
    assert err.value.field == field
    assert "\n" not in str(err.value)


@MODES
def test_client_limit_refused_past_one_replica(on):
    reqs = fixed_requests(4, 8, 4, request_rate=1.0)
    sched = Scheduler(4, 64, 4_000, max_concurrency=2, async_scheduling=on)
    with pytest.raises(ParameterError) as err:
        simulate_fleet(reqs, SPEC, step, sched, 2)
    assert err.value.field == "scheduler"
    assert "max_concurrency" in str(err.value)
    one = simulate_fleet(reqs, SPEC, step, sched, 1)
    same_run(one.fleet, simulate(reqs, SPEC, step, sched))


def test_a_request_too_long_for_the_cache_is_refused_before_any_run():
    reqs = fixed_requests(3, 5000, 4, request_rate=1.0)
    with pytest.raises(ParameterError) as err:
        simulate_fleet(reqs, SPEC, step, Scheduler(4, 64, 4_000, async_scheduling=False), 2)
    assert err.value.field == "kv_cache_tokens"
