"""A fleet whose replicas play asynchronous scheduling (:mod:`allocator.sim.fleet`,
:mod:`allocator.sim.async_steps`), against the single replica run alone.

* A fleet of one under async scheduling is :func:`~allocator.sim.simulate` under async
  scheduling: every array, and the tokens of every step in order.
* Each replica of a fleet of ``N`` is, array for array and step for step, one replica
  simulated alone over the requests it received, with the same draws per request
  (:func:`~allocator.sim.state.decode_uniforms`, laid out again for that replica's
  requests only). The fleet plays each replica in pieces, up to every arrival anywhere
  (every replica, for a router that reads load), and cuts the fast path's stretches there;
  the run alone knows only its own arrivals. So this checks the fleet's clock interleaving
  independently of how the fleet plays it: a turn at an arrival waits for that arrival, a
  step in flight across it is processed as if nothing arrived.
* The fast path (decode-only stretches) on and off give identical fleets, sync and async.
* By hand: when a request arriving mid-step, or at a step's start, gets its first token
  (sync and async), and the KV usage a router sees before and after a replica's first step
  completes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from allocator.io.trace import read_trace
from allocator.sim import Requests, Scheduler, SpecPolicy, fixed_requests, simulate
from allocator.sim.engine import _Engine
from allocator.sim.fleet import _Fleet, simulate_fleet
from allocator.sim.routers import Router, View, get_router
from allocator.sim.routers.least_kv import LeastKV
from allocator.sim.state import STRETCH_STEPS, decode_uniforms

from .test_fleet import SPEC, TRACE, same_run, step

#: a dynamic k: 3 drafts up to 6 requests in a step, 1 above (drafts carried across)
DYNAMIC = SpecPolicy.by_batch_size(
    [(1, 6, 3, [0.0, 0.3, 0.3, 0.2, 0.2]), (7, 64, 1, [0.0, 0.4, 0.6])]
)

ASYNC = [
    pytest.param(Scheduler(64, 2048, 200_000, async_scheduling=True), SPEC, 3.0, id="trace"),
    pytest.param(
        Scheduler(16, 1024, 24_000, async_scheduling=True), SPEC, 6.0, id="trace, preempting"
    ),
    pytest.param(Scheduler(8, 512, 60_000, async_scheduling=True), SpecPolicy.off(), 1.0, id="off"),
]


def alone(reqs: Requests, ids: np.ndarray, policy, sched, seed: int, stretches: bool = True):
    """Requests ``ids`` of ``reqs`` served by one replica alone, each with the draws it has
    in a run of all ``reqs`` seeded by ``seed``; returns the run and its steps' tokens."""
    local = Requests(reqs.arrival_s[ids], reqs.prompt_tokens[ids], reqs.output_tokens[ids])
    per_request = decode_uniforms(reqs.output_tokens, seed)
    mine = [per_request[i] for i in ids.tolist()]
    engine = _Engine(local, policy, step, sched, seed, stretches=stretches)
    st = engine.state
    st.U = np.concatenate([*mine, np.zeros(STRETCH_STEPS + 1)])
    st.saved.draw[:] = np.concatenate(([0], np.cumsum([u.size for u in mine])[:-1]))
    engine.step_tokens = []
    engine.run()
    return engine.result(), engine.step_tokens


def fleet_run(reqs, policy, sched, count, router, seed, stretches=True, keys=None):
    """:func:`simulate_fleet` with each replica's steps' tokens recorded, and the fast path
    on or off; returns the run and, per replica, its steps' tokens."""
    rule = get_router(router) if isinstance(router, str) else router
    fleet = _Fleet(reqs, policy, step, sched, seed, count, rule, stretches)
    fleet.step_tokens = True
    rule.start(count, seed)
    run = fleet.play(keys)
    return run, [rep.state.step_tokens for rep in fleet.reps]


@pytest.mark.parametrize("sched, policy, speedup", ASYNC)
def test_a_fleet_of_one_under_async_is_simulate(sched, policy, speedup):
    reqs = read_trace(TRACE, num_prompts=500, speedup=speedup)
    engine = _Engine(reqs, policy, step, sched, 7)
    engine.step_tokens = []
    engine.run()
    one = engine.result()
    assert one.steps > 0
    for router in ("round-robin", "least-requests", "least-kv"):
        run, tokens = fleet_run(reqs, policy, sched, 1, router, seed=7)
        same_run(run.fleet, one)
        same_run(run.replicas[0], one)
        assert tokens[0] == engine.step_tokens
        assert np.all(run.assignment == 0)
    # and through the public function
    same_run(simulate_fleet(reqs, policy, step, sched, 1, seed=7).fleet, one)


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize(
    "router, count, policy",
    [
        ("round-robin", 3, SPEC),
        ("round-robin", 5, SPEC),
        ("least-requests", 4, SPEC),
        ("least-kv", 3, DYNAMIC),
    ],
)
def test_each_replica_is_the_single_replica_of_its_requests(
    router, count, policy, async_scheduling
):
    """Round-robin's assignment does not depend on the replicas' state, so each replica's
    requests are known in advance; least-requests' does, and its replicas are played to
    every arrival anywhere. Either way each replica's run must be its requests' run
    alone."""
    reqs = read_trace(TRACE, num_prompts=900, speedup=3.0 * count)
    sched = Scheduler(16, 1024, 30_000, async_scheduling=async_scheduling)
    run, tokens = fleet_run(reqs, policy, sched, count, router, seed=3)
    if router == "round-robin":
        assert np.array_equal(run.assignment, np.arange(len(reqs)) % count)
    for r, part in enumerate(run.replicas):
        assert part is not None
        ids = np.flatnonzero(run.assignment == r)
        ref, ref_tokens = alone(reqs, ids, policy, sched, seed=3)
        same_run(part, ref)
        assert tokens[r] == ref_tokens, r
        # the fleet's arrays are the replica's, at the requests' own places
        assert np.array_equal(run.fleet.finish_s[ids], ref.finish_s)
        assert np.array_equal(run.fleet.first_token_s[ids], ref.first_token_s)


class Early(Router):
    """The first ``first`` requests to replica 0, the rest round-robin over the others,
    reading what ``reads`` says: so every replica is played to every arrival, replica 0
    long after its last request finished (its extra step, still in flight then, processed
    before the fleet ends)."""

    name = "early"

    def __init__(self, first: int, reads: frozenset[str]) -> None:
        super().__init__()
        self.first = first
        self.reads = reads  # type: ignore[misc]

    def choose(self, view: View) -> int:
        g = view.request
        return 0 if g < self.first else 1 + g % (self.replicas - 1)


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("reads", [{"in_flight"}, {"in_flight", "kv_usage"}])
def test_a_replica_played_past_its_last_request_is_the_replica_alone(reads, async_scheduling):
    reqs = read_trace(TRACE, num_prompts=600, speedup=6.0)
    sched = Scheduler(16, 1024, 30_000, async_scheduling=async_scheduling)
    run, tokens = fleet_run(reqs, SPEC, sched, 3, Early(40, frozenset(reads)), seed=2)
    for r, part in enumerate(run.replicas):
        assert part is not None
        ids = np.flatnonzero(run.assignment == r)
        ref, ref_tokens = alone(reqs, ids, SPEC, sched, seed=2)
        same_run(part, ref)
        assert tokens[r] == ref_tokens, r
    assert run.replicas[0].duration_s < float(reqs.arrival_s[-1])


def test_async_replicas_see_arrivals_one_step_later_than_sync_ones():
    """What a request arriving mid-step sees, on one replica of two behind round-robin,
    with a constant step time of 10 ms and one token a step (no speculation): request 0
    arrives at 0 and its prefill starts at once; request 2 (the replica's second) arrives
    at 15 ms, during the replica's second step [10, 20). Synchronous: it joins the step at
    20 ms and its first token comes at 30 ms. Asynchronous: the step at 20 ms was
    scheduled at 10 ms without it; it is seen by the scheduling at 20 ms, of the step
    [30, 40): first token at 40 ms. A request arriving exactly at a step's start (request
    4, at 40 ms) joins the step after under async (scheduled at 40 ms, run [50, 60)) and
    that step itself under sync."""
    reqs = Requests(
        np.array([0.0, 0.0, 0.015, 0.015, 0.040, 0.040]),
        np.full(6, 8),
        np.full(6, 8),
    )

    def flat(b, k, ctx, pf):
        return 10.0

    first = {}
    for on in (False, True):
        sched = Scheduler(8, 64, 4_000, async_scheduling=on)
        run = simulate_fleet(reqs, SpecPolicy.off(), flat, sched, 2, "round-robin")
        first[on] = np.round(run.fleet.first_token_s * 1000.0, 9).tolist()
    assert first[False] == [10.0, 10.0, 30.0, 30.0, 50.0, 50.0]
    assert first[True] == [10.0, 10.0, 40.0, 40.0, 60.0, 60.0]


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("router", ["round-robin", "least-requests"])
def test_the_fast_path_changes_nothing_in_a_fleet(router, async_scheduling):
    """Stretches cut at every arrival anywhere in the fleet (the horizon) against every
    step on its own."""
    reqs = read_trace(TRACE, num_prompts=800, speedup=12.0)
    sched = Scheduler(32, 2048, 60_000, async_scheduling=async_scheduling)
    fast, fast_tokens = fleet_run(reqs, SPEC, sched, 4, router, seed=4)
    slow, slow_tokens = fleet_run(reqs, SPEC, sched, 4, router, seed=4, stretches=False)
    assert np.array_equal(fast.assignment, slow.assignment)
    same_run(fast.fleet, slow.fleet)
    for a, b in zip(fast.replicas, slow.replicas, strict=True):
        assert a is not None and b is not None
        same_run(a, b)
    assert fast_tokens == slow_tokens


def test_async_fleet_rebuilt_replica_is_the_replica_alone():
    """Every request to one replica (one session): far past its first arrays, so it is
    rebuilt and replayed, its step in flight played again with it."""
    reqs = fixed_requests(400, 64, 24, request_rate=60.0, burstiness=0.5, seed=2)
    sched = Scheduler(16, 512, 20_000, async_scheduling=True)
    run = simulate_fleet(
        reqs, SPEC, step, sched, 4, "session-affinity", seed=2, keys=np.zeros(400, np.int64)
    )
    r = int(run.assignment[0])
    assert np.all(run.assignment == r)
    same_run(run.fleet, simulate(reqs, SPEC, step, sched, seed=2))
    # the same fleet, synchronous, differs (the async run is not the sync one renamed)
    sync = simulate_fleet(
        reqs,
        SPEC,
        step,
        dataclasses.replace(sched, async_scheduling=False),
        4,
        "session-affinity",
        seed=2,
        keys=np.zeros(400, np.int64),
    )
    assert not np.array_equal(sync.fleet.first_token_s, run.fleet.first_token_s)


class SeenKV(LeastKV):
    """least-kv that keeps the KV usage it saw at each arrival."""

    def reset(self) -> None:
        self.seen: list[np.ndarray] = []

    def choose(self, view: View) -> int:
        self.seen.append(view.kv_usage.copy())
        return super().choose(view)


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
def test_kv_usage_seen_is_as_of_the_last_step_completed(async_scheduling):
    """Steps of 10 ms; request 0 arrives at an idle fleet at 0 and its first step runs
    [0, 10). At 5 ms (request 1) no step of its replica has completed: the router sees no
    KV in use there, though the blocks of that step (and, under async scheduling, of the
    step after it, scheduled at 0 too) are allocated. At 25 ms (request 2) two steps have
    completed and request 0 (8 output tokens, one a step) still runs: its blocks are
    seen."""
    reqs = Requests(np.array([0.0, 0.005, 0.025]), np.full(3, 64), np.full(3, 8))

    def flat(b, k, ctx, pf):
        return 10.0

    router = SeenKV()
    sched = Scheduler(8, 256, 4_000, async_scheduling=async_scheduling)
    run = simulate_fleet(reqs, SpecPolicy.off(), flat, sched, 2, router)
    r0 = int(run.assignment[0])
    assert router.seen[0].tolist() == [0.0, 0.0]
    assert router.seen[1][r0] == 0.0
    assert router.seen[2][r0] > 0.0
    assert run.fleet.finish_s[0] == pytest.approx(0.080)
