"""The contract every router keeps (:mod:`allocator.sim.routers`), run on each one the
registry (:data:`allocator.sim.routers.ROUTERS`) holds.

To add a router: a module with a :class:`~allocator.sim.routers.Router` subclass,
registered in ``ROUTERS``; these tests then hold it to:

* a name (the registry's key), a one-line summary, and :attr:`reads` naming only what a
  :class:`~allocator.sim.routers.View` carries;
* a replica in range for every view, the same answers from the same seed, and answers
  that depend on no load it does not declare it reads;
* a keyed router refuses requests without keys in one line naming ``router``; an
  unkeyed one routes them;
* in a fleet: every request served once, each replica's requests in arrival order, and a
  fleet of one the single replica's run.
"""

from __future__ import annotations

import numpy as np
import pytest

from allocator.exceptions import ParameterError
from allocator.sim import Scheduler, SpecPolicy, fixed_requests, simulate, summary
from allocator.sim.fleet import simulate_fleet
from allocator.sim.routers import ROUTERS, Router, View, get_router

NAMES = sorted(ROUTERS)
READABLE = {"in_flight", "kv_usage"}


def views(replicas: int, n: int, seed: int, keys: int = 5) -> list[View]:
    """``n`` random views (loads, prompt lengths, keys from ``keys`` values)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = View(replicas)
        v.in_flight[:] = rng.integers(0, 6, replicas)
        v.kv_usage[:] = rng.random(replicas).round(2)
        v.request = i
        v.prompt_tokens = int(rng.integers(1, 4000))
        v.key = int(rng.integers(0, keys))
        out.append(v)
    return out


def step(b, k, ctx, pf):
    return (5.0 + 0.3 * b * (1 + k) if b else 0.0) + 0.01 * pf


@pytest.mark.parametrize("name", NAMES)
def test_registered_under_its_name_with_a_summary(name):
    cls = ROUTERS[name]
    assert issubclass(cls, Router)
    assert cls.name == name
    assert cls.summary and "\n" not in cls.summary
    assert set(cls.reads) <= READABLE
    assert isinstance(get_router(name), cls)


def test_unknown_router_lists_the_known_ones():
    with pytest.raises(ParameterError) as err:
        get_router("fastest")
    assert err.value.field == "router"
    assert all(name in str(err.value) for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("replicas", [1, 3, 8])
def test_in_range_and_seeded(name, replicas):
    answers = []
    for _ in range(2):
        router = get_router(name)
        router.start(replicas, seed=4)
        answers.append([router.choose(v) for v in views(replicas, 300, seed=1)])
    assert answers[0] == answers[1]
    assert all(isinstance(r, int) and 0 <= r < replicas for r in answers[0])


@pytest.mark.parametrize("name", NAMES)
def test_reads_only_what_it_declares(name):
    """The loads a router does not declare are scrambled: its answers do not move."""
    router_a, router_b = get_router(name), get_router(name)
    router_a.start(4, seed=2)
    router_b.start(4, seed=2)
    rng = np.random.default_rng(9)
    for v in views(4, 300, seed=3):
        a = router_a.choose(v)
        for field in READABLE - set(router_b.reads):
            getattr(v, field)[:] = rng.permutation(getattr(v, field)) + 1
        assert router_b.choose(v) == a


@pytest.mark.parametrize("name", NAMES)
def test_least_loaded_or_sticky(name):
    """A load-reading router picks a least loaded replica by what it reads, except that an
    affinity router keeps a key where it sent it first."""
    router = get_router(name)
    router.start(5, seed=0)
    home: dict[int, int] = {}
    for v in views(5, 400, seed=6):
        r = router.choose(v)
        if router.keyed:
            if v.key in home:
                assert r == home[v.key]
            else:
                assert v.in_flight[r] == v.in_flight.min()
            home.setdefault(v.key, r)
        elif "in_flight" in router.reads:
            assert v.in_flight[r] == v.in_flight.min()
        elif "kv_usage" in router.reads:
            assert v.kv_usage[r] == v.kv_usage.min()


@pytest.mark.parametrize("name", NAMES)
def test_keyed_routers_refuse_requests_without_keys(name):
    reqs = fixed_requests(6, 16, 4, request_rate=10.0)
    sched = Scheduler(4, 256, 4_000, async_scheduling=False)
    cls = ROUTERS[name]
    if cls.keyed:
        with pytest.raises(ParameterError) as err:
            simulate_fleet(reqs, SpecPolicy.off(), step, sched, 2, name)
        assert err.value.field == "router"
        assert "\n" not in str(err.value)
    else:
        simulate_fleet(reqs, SpecPolicy.off(), step, sched, 2, name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("replicas", [1, 3])
def test_in_a_fleet_every_request_served_once(name, replicas):
    reqs = fixed_requests(200, 64, 12, request_rate=40.0, seed=3)
    keys = np.random.default_rng(0).integers(0, 7, 200)
    sched = Scheduler(8, 512, 20_000, async_scheduling=False)
    pol = SpecPolicy.fixed(2, [0.0, 0.4, 0.3, 0.3])
    run = simulate_fleet(reqs, pol, step, sched, replicas, name, seed=1, keys=keys)
    assert run.router == name
    assert summary(run.fleet)["completed"] == 200
    counts = np.bincount(run.assignment, minlength=replicas)
    for r, part in enumerate(run.replicas):
        if part is None:
            assert counts[r] == 0
            continue
        assert len(part.requests) == counts[r]
        assert np.all(np.diff(part.requests.arrival_s) >= 0)
    if replicas == 1:
        one = simulate(reqs, pol, step, sched, seed=1)
        assert np.array_equal(run.fleet.finish_s, one.finish_s)
