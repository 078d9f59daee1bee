"""Requests' keys (prefix groups, sessions) and the affinity routers that route on them,
against closed forms and brute force.

* prefix-affinity with ``K`` prefix groups over ``N`` replicas sends each group to one
  replica; each replica's requests, simulated with their shared tokens, then hit
  ``⌊P / B⌋ · B`` tokens per request once its group is warm (every request but the first
  of each group on it): a warm hit rate ``⌊P / B⌋ · B / I`` per replica, and the cold
  misses are one per group, where round-robin spreading the groups pays one per group per
  replica;
* session-affinity keeps every turn of a session on one replica;
* a trace's ``prefix_id``/``prefix_tokens`` and ``session_id`` columns give the content a
  brute-force token model gives (the longest common prefix of every pair of requests) and
  the keys numbered in order of first appearance;
* the keys a workload defines (a shared prefix: one group; ``turns``: sessions) and the
  refusals naming what to add.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from allocator.analysis.request_source import (
    check_router_keys,
    request_source,
)
from allocator.exceptions import ParameterError
from allocator.io.trace import read_trace
from allocator.sim import Requests, Scheduler, SpecPolicy, simulate
from allocator.sim.fleet import simulate_fleet
from allocator.sim.requests import TokenContent
from allocator.sim.sessions import session_ids


def _step(b, k, ctx, prefill):
    """1 ms a step plus 1 ms per 100 prefilled tokens, plus 0.1 ms per decoding sequence."""
    return 1.0 + 0.1 * b + prefill / 100.0


def _grouped(groups: np.ndarray, prompt: int, shared: int, out: int) -> TokenContent:
    """Request ``i`` starts with ``shared`` tokens of group ``groups[i]``'s prefix, the rest
    its own (segment ids: the group, then ``10_000 + i``)."""
    n = groups.size
    ids = np.empty(2 * n, dtype=np.int64)
    lengths = np.empty(2 * n, dtype=np.int64)
    ids[0::2], lengths[0::2] = groups, shared
    ids[1::2], lengths[1::2] = 10_000 + np.arange(n), prompt + out - shared
    return TokenContent(ids, lengths, 2 * np.arange(n + 1))


# ------------------------------------------------------------------ prefix-affinity
@pytest.mark.parametrize(
    ("groups", "replicas", "shared", "prompt", "block"),
    [(6, 3, 200, 300, 16), (5, 4, 64, 100, 16), (9, 2, 100, 130, 8)],
)
def test_prefix_affinity_keeps_each_group_on_one_replica_and_warm_hits_close(
    groups, replicas, shared, prompt, block
):
    """Each group on one replica; per replica, its requests (simulated with their shared
    tokens, prefix caching on, a cache large enough to evict nothing) hit ``⌊P / B⌋ · B``
    tokens each but the first of each group: hits over the warm queries is the closed form
    ``⌊P / B⌋ · B / I``. Round-robin over the same requests spreads each group over the
    replicas, so the same count gives a group a cold miss on every replica it reaches."""
    n, out = 240, 8
    rng = np.random.default_rng(groups)
    group = rng.integers(groups, size=n)
    arrival = np.sort(rng.uniform(0.0, 6.0, size=n))
    reqs = Requests(arrival, np.full(n, prompt), np.full(n, out))
    sched = Scheduler(16, 2048, 400_000, block, async_scheduling=False)
    warm = (shared // block) * block
    for router, affine in (("prefix-affinity", True), ("round-robin", False)):
        fleet = simulate_fleet(reqs, SpecPolicy.off(), _step, sched, replicas, router, 1, group)
        where = fleet.assignment
        homes = [np.unique(where[group == g]) for g in range(groups)]
        if affine:
            assert all(h.size == 1 for h in homes)
        cached = Scheduler(16, 2048, 400_000, block, async_scheduling=False,
                           enable_prefix_caching=True)  # fmt: skip
        cold_total = 0
        for r in range(replicas):
            idx = np.flatnonzero(where == r)
            if idx.size == 0:
                continue
            mine = Requests(
                arrival[idx],
                np.full(idx.size, prompt),
                np.full(idx.size, out),
                _grouped(group[idx], prompt, shared, out),
            )
            res = simulate(mine, SpecPolicy.off(), _step, cached)
            queries, hits, _, _ = res.prefix_cache
            cold = np.unique(group[idx]).size  # the first request of each group here
            cold_total += cold
            assert queries == idx.size * prompt
            assert hits == (idx.size - cold) * warm
            if idx.size > cold:
                assert hits / (queries - cold * prompt) == pytest.approx(warm / prompt, abs=1e-15)
        if affine:
            assert cold_total == groups
        else:
            assert cold_total > groups  # a group's prefix cached once per replica it reaches


def test_one_shared_prefix_sends_everything_to_one_replica():
    """``shared_prefix_len`` alone: one prefix group, so prefix-affinity keeps every request
    on the replica the first went to (the module docstring says so); least-requests
    spreads them."""
    src = request_source(200, input_len=100, output_len=10, shared_prefix_len=50, seed=3)
    reqs = src.at(20.0)
    np.testing.assert_array_equal(reqs.prefix_group, np.zeros(200))
    assert reqs.session is None
    sched = Scheduler(16, 2048, 100_000, async_scheduling=False)
    one = simulate_fleet(reqs, SpecPolicy.off(), _step, sched, 3, "prefix-affinity", 0,
                         reqs.prefix_group)  # fmt: skip
    assert np.unique(one.assignment).size == 1
    spread = simulate_fleet(reqs, SpecPolicy.off(), _step, sched, 3, "least-requests", 0)
    assert np.unique(spread.assignment).size == 3


# ------------------------------------------------------------------ session-affinity
def _session_trace(path: Path, sessions: int, turns: int, seed: int) -> tuple[Path, list]:
    """A trace of ``sessions`` interleaved sessions of ``turns`` rows each, a growing
    conversation; returns the path and the rows ``(t_s, prompt, output, session)``."""
    rng = np.random.default_rng(seed)
    rows = []
    length = {s: 0 for s in range(sessions)}
    t = 0.0
    order = rng.permutation(np.repeat(np.arange(sessions), turns))
    for s in order.tolist():
        t += float(rng.exponential(0.05))
        prompt = length[s] + int(rng.integers(20, 120))
        out = int(rng.integers(2, 40))
        length[s] = prompt + out
        rows.append((t, prompt, out, f"chat-{s:03d}"))
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens,session_id"]
    lines += [f"{1_700_000_000 + t:.6f},{p},{o},{s}" for t, p, o, s in rows]
    path.write_text("\n".join(lines) + "\n")
    return path, rows


def test_session_affinity_keeps_every_turn_of_a_session_on_one_replica(tmp_path):
    path, rows = _session_trace(tmp_path / "s.csv", 24, 6, 5)
    reqs = read_trace(path)
    assert reqs.session is not None
    sched = Scheduler(16, 2048, 200_000, async_scheduling=False)
    fleet = simulate_fleet(reqs, SpecPolicy.off(), _step, sched, 4, "session-affinity", 2,
                           reqs.session)  # fmt: skip
    names = [s for *_, s in rows]
    for name in set(names):
        idx = [i for i, s in enumerate(names) if s == name]
        assert np.unique(fleet.assignment[idx]).size == 1
    assert np.unique(fleet.assignment).size > 1
    # round-robin splits them
    rr = simulate_fleet(reqs, SpecPolicy.off(), _step, sched, 4, "round-robin", 2)
    assert any(
        np.unique(rr.assignment[[i for i, s in enumerate(names) if s == n]]).size > 1
        for n in set(names)
    )


# ------------------------------------------------------------------ trace columns
def _tokens(content: TokenContent, i: int) -> list[tuple[int, int]]:
    """Request ``i``'s tokens, each named by (segment id, offset in that segment's string)."""
    ids, lengths = content.segments(i)
    return [(int(s), j) for s, n in zip(ids, lengths, strict=True) for j in range(int(n))]


def _common(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_session_column_gives_the_brute_force_conversation(tmp_path):
    """Each session as explicit token lists (a turn: the previous turn's prompt and answer
    cut at the new prompt's length, then fresh tokens); the longest common prefix of every
    pair of rows equals the one the segments give."""
    path, rows = _session_trace(tmp_path / "s.csv", 5, 4, 7)
    # rows with a prompt shorter than the conversation so far (a truncated context)
    text = path.read_text().splitlines()
    fields = text[3].split(",")
    fields[1] = "10"
    text[3] = ",".join(fields)
    path.write_text("\n".join(text) + "\n")
    rows[2] = (rows[2][0], 10, rows[2][2], rows[2][3])
    reqs = read_trace(path)
    fresh = iter(range(10**9, 2 * 10**9))
    last: dict[str, list[int]] = {}
    brute = []
    for _, p, o, s in rows:
        seq = last.get(s, [])[:p]
        seq = seq + [next(fresh) for _ in range(p + o - len(seq))]
        last[s] = seq
        brute.append(seq)
    content = reqs.content
    assert content is not None
    np.testing.assert_array_equal(content.totals(), [p + o for _, p, o, _ in rows])
    for i in range(len(rows)):
        for j in range(i):
            want = _common(brute[i], brute[j])
            assert _common(_tokens(content, i), _tokens(content, j)) == want, (i, j)
    first = {}
    expect = [first.setdefault(s, len(first)) for *_, s in rows]
    np.testing.assert_array_equal(reqs.session, expect)
    np.testing.assert_array_equal(reqs.prefix_group, expect)


def test_prefix_columns_round_trip(tmp_path):
    """``prefix_id``/``prefix_tokens``: rows of one prefix share the smaller of their
    ``prefix_tokens``; keys numbered by first appearance; a row with 0 prefix tokens shares
    nothing but keeps its group."""
    rows = [
        ("sys-b", 40, 100, 5),
        ("sys-a", 64, 64, 3),
        ("sys-b", 30, 50, 2),
        ("sys-a", 0, 20, 4),
        ("sys-b", 40, 90, 1),
    ]
    lines = ["prefix_tokens,TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id"]
    lines += [f"{k},{i},{p},{o},{g}" for i, (g, k, p, o) in enumerate(rows)]
    path = tmp_path / "p.csv"
    path.write_text("\n".join(lines) + "\n")
    reqs = read_trace(path)
    np.testing.assert_array_equal(reqs.prefix_group, [0, 1, 0, 1, 0])
    assert reqs.session is None
    c = reqs.content
    assert c is not None
    for i, (gi, ki, _, _) in enumerate(rows):
        for j, (gj, kj, _, _) in enumerate(rows):
            want = min(ki, kj) if (gi == gj and i != j) else (0 if i != j else None)
            if want is not None:
                assert _common(_tokens(c, i), _tokens(c, j)) == want
    # the lengths alone
    plain = read_trace(path, shared=False)
    assert plain.content is None and plain.prefix_group is None
    np.testing.assert_array_equal(plain.prompt_tokens, reqs.prompt_tokens)


def test_session_trace_hits_the_previous_turn_on_one_replica(tmp_path):
    """One session whose turns are sent long after each other: turn ``t`` finds the full
    blocks the previous turn computed (its prompt and answer but the last token, whose KV
    no step computes) that its prompt shares, at most ``P_t - 1`` tokens:
    ``B · min(⌊min(L_{t-1} − 1, P_t) / B⌋, ⌊(P_t − 1) / B⌋)``."""
    B = 16
    turns = [(100, 20), (180, 30), (150, 10), (400, 5)]  # the third a truncated context
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens,session_id"]
    lines += [f"{10 * t},{p},{o},x" for t, (p, o) in enumerate(turns)]
    path = tmp_path / "one.csv"
    path.write_text("\n".join(lines) + "\n")
    reqs = read_trace(path)
    sched = Scheduler(4, 4096, 100_000, B, async_scheduling=False, enable_prefix_caching=True)
    res = simulate(reqs, SpecPolicy.off(), _step, sched)
    hits = 0
    for (p0, o0), (p1, _) in zip(turns, turns[1:], strict=False):
        hits += B * min(min(p0 + o0 - 1, p1) // B, (p1 - 1) // B)
    assert res.prefix_cache[:2] == (sum(p for p, _ in turns), hits)


@pytest.mark.parametrize(
    ("header", "rows", "says"),
    [
        ("TIMESTAMP,ContextTokens,GeneratedTokens,session_id", ["0,10,2,a", "1,10,2, "],
         "row 2: session_id is empty"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id,prefix_tokens",
         ["0,10,2,,4"], "row 1: prefix_id is empty"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id", ["0,10,2,a"],
         "column prefix_id needs column prefix_tokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_tokens", ["0,10,2,3"],
         "column prefix_tokens needs column prefix_id"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id,prefix_tokens",
         ["0,10,2,a,11"], "row 1: prefix_tokens must be an integer from 0 to the row's"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id,prefix_tokens",
         ["0,10,2,a,-1"], "prefix_tokens must be an integer"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,prefix_id,prefix_tokens,session_id",
         ["0,10,2,a,1,s"], "prefix_id and session_id both name"),
        # a session's later turn earlier than its first: the trace goes back in time
        ("TIMESTAMP,ContextTokens,GeneratedTokens,session_id", ["5,10,2,a", "3,30,2,a"],
         "row 2: TIMESTAMP goes back in time"),
    ],
)  # fmt: skip
def test_bad_share_columns(tmp_path, header, rows, says):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(ParameterError) as err:
        read_trace(path)
    assert err.value.field == "trace"
    assert says in err.value.message


# ------------------------------------------------------------------ workloads' keys
def test_keys_of_each_workload(tmp_path):
    plain = request_source(30, input_len=50, output_len=5).at(10.0)
    assert plain.prefix_group is None and plain.session is None
    turns = request_source(30, input_len=50, output_len=5, turns=4, think_time=0.5).at(10.0)
    np.testing.assert_array_equal(turns.session, np.arange(30) // 4)
    np.testing.assert_array_equal(turns.prefix_group, turns.session)
    assert turns.head(9).session is not None and turns.head(9).session.size == 9
    # session_ids on interleaved chains, against following each chain by hand
    after = np.array([-1, -1, 0, 1, -1, 2, 4])
    np.testing.assert_array_equal(session_ids(after), [0, 1, 0, 1, 2, 0, 2])
    staged = request_source(stages="5:4", input_len=50, output_len=5, shared_prefix_len=20)
    np.testing.assert_array_equal(staged.at(staged.mean_rate).prefix_group, 0)


def test_routers_without_keys_are_refused_naming_what_to_add():
    plain = request_source(30, input_len=50, output_len=5).at(10.0)
    with pytest.raises(ParameterError) as err:
        check_router_keys("prefix-affinity", plain)
    assert err.value.field == "router"
    assert "(shared_prefix_len)" in err.value.message and "prefix_id" in err.value.message
    shared = request_source(30, input_len=50, output_len=5, shared_prefix_len=10).at(10.0)
    check_router_keys("prefix-affinity", shared)
    with pytest.raises(ParameterError, match=r"give sessions \(turns\)"):
        check_router_keys("session-affinity", shared)
    for name in ("round-robin", "least-kv", None):
        check_router_keys(name, plain)


def test_keys_must_be_one_per_request():
    with pytest.raises(ParameterError) as err:
        Requests(np.zeros(3), np.ones(3), np.ones(3), prefix_group=np.array([0, 1]))
    assert err.value.field == "prefix_group"
    with pytest.raises(ParameterError) as err:
        Requests(np.zeros(2), np.ones(2), np.ones(2), session=np.array([0, -1]))
    assert err.value.field == "session"
