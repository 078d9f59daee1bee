"""A fleet's requests that share tokens and come in sessions (:mod:`allocator.sim.fleet`
with ``Requests.content``, ``after`` and ``think_s``), against the single replica and
closed forms.

* A fleet of one with a shared prefix, or with multi-turn sessions (and prefix caching
  on or off), is :func:`~allocator.sim.simulate` array for array, the prefix-cache counts
  and every step's tokens included.
* Round-robin over ``R`` replicas, every prompt of ``I`` tokens starting with the same
  ``P``: each replica misses on its first request and then hits the prefix's full blocks
  whose hash lies inside it, ``floor((P - h) / B) · B`` tokens of ``I`` (``h`` the hash
  lookahead, 0 or 1): counted by hand from the assignment, not from the run.
* Sessions behind any router: every later turn is sent ``think_s`` after its previous
  turn finished, on whichever replica that ran (checked from the timelines), and each
  replica is the single replica alone given its requests at those sends. Under session
  affinity a replica is the single replica of its sessions, sessions and all. So a turn
  is never routed to a replica that already played a step starting after the turn's send
  (the fleet's rule for when a finish may create an earlier arrival).
* Round-robin moves a session's second turn to the other replica, where only the shared
  prefix is cached; session affinity keeps it where its first turn's blocks are.

Each runs with the replicas' scheduling synchronous and asynchronous.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from allocator.io.trace import read_trace
from allocator.sim import Requests, Scheduler, SpecPolicy, arrival_times, simulate
from allocator.sim.engine import _Engine
from allocator.sim.fleet import _Fleet, content_of, simulate_fleet
from allocator.sim.routers import get_router
from allocator.sim.sessions import session_starts, sessions, shared_prefix
from allocator.sim.state import STRETCH_STEPS, decode_uniforms

from .test_fleet import SPEC, TRACE, same_run, step

MODES = pytest.mark.parametrize("on", [False, True], ids=["sync", "async"])


def session_requests(
    n: int, turns: int, Li: int, Lo: int, think: float, prefix: int, rate: float, seed: int
) -> Requests:
    """``n`` requests in sessions (:func:`~allocator.sim.sessions.sessions`), the first
    turns arriving at ``rate`` sessions/s (Poisson), each later turn's lower bound its
    first turn's arrival (as ``bench --turns`` lays them out)."""
    p, o, content, after, think_s = sessions(n, turns, Li, Lo, think, prefix)
    first = session_starts(after)
    starts = arrival_times(first.size, rate, 1.0, seed)
    arrival = starts[np.searchsorted(first, np.arange(n), side="right") - 1]
    return Requests(arrival, p, o, content, after, think_s)


def alone(reqs: Requests, ids: np.ndarray, sched, policy, seed: int, sent=None, keep=False):
    """Requests ``ids`` of ``reqs`` (in that order) served by one replica alone, each with
    the draws it has in a run of all ``reqs`` seeded by ``seed``, its content's segments;
    ``sent`` ``(N,)``: arrivals are these sends (no sessions); ``keep``: the sessions kept
    (each ``after`` among ``ids``). Returns the run and its steps' tokens."""
    content = None if reqs.content is None else content_of(reqs.content, ids)
    arrival = reqs.arrival_s[ids] if sent is None else sent[ids]
    after = think = None
    if keep:
        where = {g: j for j, g in enumerate(ids.tolist())}
        assert reqs.after is not None and reqs.think_s is not None
        after = np.array([where.get(int(reqs.after[g]), -1) for g in ids.tolist()])
        assert np.array_equal(after >= 0, reqs.after[ids] >= 0)  # no session split
        think = reqs.think_s[ids]
    local = Requests(
        arrival, reqs.prompt_tokens[ids], reqs.output_tokens[ids], content, after, think
    )
    per_request = decode_uniforms(reqs.output_tokens, seed)
    mine = [per_request[i] for i in ids.tolist()]
    engine = _Engine(local, policy, step, sched, seed)
    st = engine.state
    st.U = np.concatenate([*mine, np.zeros(STRETCH_STEPS + 1)])
    st.saved.draw[:] = np.concatenate(([0], np.cumsum([u.size for u in mine])[:-1]))
    engine.step_tokens = []
    engine.run()
    return engine.result(), engine.step_tokens


def fleet_run(reqs, policy, sched, count, router, seed, keys=None, stretches=True):
    """The fleet with each replica's steps' tokens recorded; returns the run, per replica
    its steps' tokens and its requests in the order it received them."""
    rule = get_router(router)
    fleet = _Fleet(reqs, policy, step, sched, seed, count, rule, stretches)
    fleet.step_tokens = True
    rule.start(count, seed)
    run = fleet.play(keys)
    ids = [np.asarray(rep.ids, dtype=np.int64) for rep in fleet.reps]
    return run, [rep.state.step_tokens for rep in fleet.reps], ids


def engine_run(reqs, policy, sched, seed, stretches=True):
    engine = _Engine(reqs, policy, step, sched, seed, stretches)
    engine.step_tokens = []
    engine.run()
    return engine.result(), engine.step_tokens


def check_sends(run, reqs: Requests) -> None:
    """Every request sent at its arrival, or (a later turn) ``think_s`` after its previous
    turn's finish, whichever is later, wherever that turn ran."""
    want = reqs.arrival_s.copy()
    if reqs.after is not None:
        later = reqs.after >= 0
        prev = run.finish_s[reqs.after[later]] + reqs.think_s[later]
        want[later] = np.maximum(prev, reqs.arrival_s[later])
    assert np.array_equal(run.sent_s, want)


# --------------------------------------------------------------------- a fleet of one
@MODES
@pytest.mark.parametrize("cache_tokens", [200_000, 30_000], ids=["roomy", "preempting"])
def test_a_fleet_of_one_with_a_shared_prefix_is_simulate(on, cache_tokens):
    reqs = read_trace(TRACE, num_prompts=400, speedup=4.0)
    prompt = np.maximum(reqs.prompt_tokens, 120)  # (every prompt holds the prefix)
    content = shared_prefix(prompt, reqs.output_tokens, 100)
    reqs = dataclasses.replace(reqs, prompt_tokens=prompt, content=content)
    sched = Scheduler(32, 1024, cache_tokens, async_scheduling=on, enable_prefix_caching=True)
    one, tokens = engine_run(reqs, SPEC, sched, 5)
    assert one.prefix_cache_hit_rate > 0
    for router in ("round-robin", "least-kv"):
        run, fleet_tokens, _ = fleet_run(reqs, SPEC, sched, 1, router, 5)
        same_run(run.fleet, one)
        same_run(run.replicas[0], one)
        assert run.fleet.prefix_cache == one.prefix_cache
        assert run.fleet.prefix_cache_hit_rate == one.prefix_cache_hit_rate
        assert fleet_tokens[0] == tokens
    if cache_tokens < 100_000:
        assert one.preemptions.sum() > 0


@MODES
@pytest.mark.parametrize("caching", [True, False], ids=["caching", "no caching"])
@pytest.mark.parametrize("think", [0.0, 0.8])
def test_a_fleet_of_one_with_sessions_is_simulate(on, caching, think):
    """Against the single replica played step by step (its fast path off: the reference
    its fast path must equal), and against :func:`simulate` where that holds (see
    :func:`test_simulate_async_stretch_runs_through_a_released_turn`)."""
    reqs = session_requests(240, 4, 300, 40, think, 64, rate=3.0, seed=2)
    sched = Scheduler(16, 512, 60_000, async_scheduling=on, enable_prefix_caching=caching)
    one, tokens = engine_run(reqs, SPEC, sched, 9, stretches=False)
    check_sends(one, reqs)
    for stretches in (True, False):
        run, fleet_tokens, _ = fleet_run(reqs, SPEC, sched, 1, "least-requests", 9, None, stretches)
        same_run(run.fleet, one)
        assert run.fleet.prefix_cache == one.prefix_cache
        assert fleet_tokens[0] == tokens
    same_run(simulate_fleet(reqs, SPEC, step, sched, 1, seed=9).fleet, one)
    same_run(simulate(reqs, SPEC, step, sched, 9), one)


def test_simulate_async_stretch_runs_through_a_released_turn():
    """The single replica (not the fleet): under async scheduling, sessions and no prefix
    caching, its fast path must give the run played turn by turn: a stretch bounded by
    the next known send must not play on past a finish whose next turn is sent before
    that."""
    reqs = session_requests(240, 4, 300, 40, 0.0, 64, rate=3.0, seed=2)
    sched = Scheduler(16, 512, 60_000, async_scheduling=True)
    plain, _ = engine_run(reqs, SPEC, sched, 9, stretches=False)
    same_run(simulate(reqs, SPEC, step, sched, 9), plain)


# --------------------------------------------------------------------- shared prefix
@MODES
@pytest.mark.parametrize("lookahead", [0, 1])
@pytest.mark.parametrize("P, Li", [(200, 260), (256, 300), (30, 100)])
def test_round_robin_shared_prefix_hits_its_full_blocks(on, lookahead, P, Li):
    """Each replica: its first request finds nothing, every later one the prefix's
    ``floor((P - h) / B)`` full blocks (the next token is the request's own), so its hit
    rate is ``(n_r - 1) · floor((P - h) / B) · B / (n_r · I)``, and once warm
    ``floor((P - h) / B) · B / I`` (``I`` is ``Li`` here). The cache holds everything
    (no eviction)."""
    B, R, n, Lo = 16, 3, 60, 20
    times = arrival_times(n, 20.0, 1.0, 4)
    prompt = np.full(n, Li)
    output = np.full(n, Lo)
    reqs = Requests(times, prompt, output, shared_prefix(prompt, output, P))
    sched = Scheduler(
        8,
        512,
        n * (Li + Lo + 32) + 4096,
        block_size=B,
        async_scheduling=on,
        enable_prefix_caching=True,
        hash_lookahead_tokens=lookahead,
    )
    run = simulate_fleet(reqs, SPEC, step, sched, R, "round-robin", seed=1)
    assert np.array_equal(run.assignment, np.arange(n) % R)
    shared = (P - lookahead) // B * B
    for r, part in enumerate(run.replicas):
        assert part is not None
        n_r = int((run.assignment == r).sum())
        assert part.preemptions.sum() == 0
        assert part.prefix_cache == (n_r * Li, (n_r - 1) * shared, 0, 0), r
    assert run.fleet.prefix_cache == (n * Li, (n - R) * shared, 0, 0)
    assert run.fleet.prefix_cache_hit_rate == pytest.approx((n - R) * shared / (n * Li))
    # a replica's requests after its first: each hits the shared blocks exactly
    warm = run.fleet.prefix_cache[1] / ((n - R) * Li)
    assert warm == pytest.approx(shared / Li)


# --------------------------------------------------------------------- sessions
@MODES
@pytest.mark.parametrize("router, count", [("round-robin", 3), ("least-requests", 4)])
@pytest.mark.parametrize("caching", [True, False], ids=["caching", "no caching"])
@pytest.mark.parametrize(
    "rate, think", [(2.5, 0.3), (2.5, 0.0), (np.inf, 0.0)], ids=["think", "at once", "burst"]
)
def test_each_replica_is_alone_at_the_fleets_sends(on, router, count, caching, rate, think):
    """Turns of one session land on different replicas; a later turn's send is only
    known once its previous turn finished elsewhere. Each replica must still be the
    replica alone given its requests at the sends the fleet made, and each send must be
    its previous turn's finish (anywhere) plus the think time. With no think time a turn is
    sent at a finish, often before the next arrival known: a replica allowed to play past
    another holder's clock (up to that arrival) runs ahead of turns sent to it (this case
    fails then); in the burst every session starts at 0 and nothing more is known."""
    reqs = session_requests(300, 3, 200, 30, think, 48, rate=rate * count, seed=6)
    sched = Scheduler(8, 512, 40_000, async_scheduling=on, enable_prefix_caching=caching)
    run, tokens, ids = fleet_run(reqs, SPEC, sched, count, router, 11)
    check_sends(run.fleet, reqs)
    moved = reqs.after >= 0
    if router == "round-robin" or np.isfinite(rate):
        assert (run.assignment[moved] != run.assignment[reqs.after[moved]]).any()
    for r in range(count):
        ref, ref_tokens = alone(reqs, ids[r], sched, SPEC, 11, sent=run.fleet.sent_s)
        same_run(run.replicas[r], ref)
        assert run.replicas[r].prefix_cache == ref.prefix_cache
        assert tokens[r] == ref_tokens, r
    # the fast path on and off: the same fleet
    plain, _, _ = fleet_run(reqs, SPEC, sched, count, router, 11, stretches=False)
    same_run(plain.fleet, run.fleet)


@MODES
@pytest.mark.parametrize("caching", [True, False], ids=["caching", "no caching"])
def test_session_affinity_keeps_a_session_on_one_replica(on, caching):
    """Keyed by session, every turn of a session runs where its first did, and each
    replica is the single replica of its sessions, closed loop and all."""
    turns, n, count = 4, 240, 3
    reqs = session_requests(n, turns, 250, 30, 0.5, 32, rate=4.0, seed=8)
    keys = np.arange(n) // turns
    sched = Scheduler(8, 512, 40_000, async_scheduling=on, enable_prefix_caching=caching)
    run, tokens, ids = fleet_run(reqs, SPEC, sched, count, "session-affinity", 3, keys)
    for s in range(n // turns):
        assert np.unique(run.assignment[keys == s]).size == 1
    check_sends(run.fleet, reqs)
    for r in range(count):
        mine = np.flatnonzero(run.assignment == r)  # (index order; the fleet's is sends')
        ref, ref_tokens = alone(reqs, mine, sched, SPEC, 3, keep=True)
        for name in ("sent_s", "first_token_s", "finish_s", "chunks", "preemptions"):
            assert np.array_equal(getattr(run.fleet, name)[mine], getattr(ref, name)), name
        part = run.replicas[r]
        assert part is not None
        for name in ("decode_steps", "uncut_decode_steps"):
            assert np.array_equal(getattr(part, name), getattr(ref, name)), name
        # the same gaps, each of the same request
        assert np.array_equal(part.itl_s, ref.itl_s)
        assert np.array_equal(ids[r][part.itl_request], mine[ref.itl_request])
        assert (part.duration_s, part.steps) == (ref.duration_s, ref.steps)
        assert part.prefix_cache == ref.prefix_cache
        assert tokens[r] == ref_tokens, r


@MODES
def test_round_robin_moves_the_second_turn_off_its_cache(on):
    """Sessions of two turns far apart (one at a time in the fleet), two replicas:
    round-robin sends every first turn to replica 0 and every second to replica 1, which
    has only the shared prefix cached (``floor(S / B) · B`` tokens once warm); session
    affinity keeps the second turn beside its first turn's blocks: its previous prompt
    and answer but the answer's last token (never computed), ``floor((I + O - 1) / B) ·
    B`` tokens."""
    B, S, Li, Lo, n = 16, 40, 120, 50, 40
    p, o, content, after, think = sessions(n, 2, Li, Lo, 0.2, S)
    arrival = np.repeat(10.0 * np.arange(n // 2), 2)  # a session every 10 s
    reqs = Requests(arrival, p, o, content, after, think)
    sched = Scheduler(8, 512, 40_000, block_size=B, async_scheduling=on,
                      enable_prefix_caching=True)  # fmt: skip
    policy = SpecPolicy.off()
    rr = simulate_fleet(reqs, policy, step, sched, 2, "round-robin", seed=0)
    second = after >= 0
    assert np.array_equal(rr.assignment, second.astype(np.int64))
    part = rr.replicas[1]
    assert part is not None
    turn2 = 2 * Li + Lo
    assert part.prefix_cache == ((n // 2) * turn2, (n // 2 - 1) * (S // B * B), 0, 0)
    keys = np.arange(n) // 2
    aff = simulate_fleet(reqs, policy, step, sched, 2, "session-affinity", seed=0, keys=keys)
    # per session: its first turn hits the shared prefix once its replica is warm, its
    # second its previous turn's blocks
    firsts = [int((aff.assignment[0::2] == r).sum()) for r in range(2)]
    first_hits = sum(max(f - 1, 0) for f in firsts) * (S // B * B)
    second_hits = (n // 2) * ((Li + Lo - 1) // B * B)
    assert aff.fleet.prefix_cache == ((n // 2) * (Li + turn2), first_hits + second_hits, 0, 0)
    assert aff.fleet.prefix_cache_hit_rate > rr.fleet.prefix_cache_hit_rate
