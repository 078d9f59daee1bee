"""A fleet of replicas on one clock behind a router.

``R`` replicas, each the simulator of :mod:`allocator.sim.engine` (its
:class:`~allocator.sim.state.State`, :func:`~allocator.sim.scheduler.schedule`,
:func:`~allocator.sim.scheduler.update_from_output` and the decode-only fast path,
unchanged), receive the requests a router (:mod:`allocator.sim.routers`) sends them, one
request at a time, at its arrival. Before each arrival every replica the router looks at
is played up to the arrival: every step that starts before it (a step that starts at the
arrival or later waits, since the request may join it). The router then sees each
replica as :class:`~allocator.sim.routers.View` says (requests in flight counted by the
router, exact; KV-cache usage as of the last step completed at or before the arrival) and
the request joins the chosen replica's client.

**Async scheduling** (``Scheduler.async_scheduling``, vLLM's default): each replica plays
:mod:`allocator.sim.async_steps`' loop (:func:`~allocator.sim.async_steps.turn`) with its
own step in flight, and "up to the arrival" means every turn that starts before it. A turn
at time ``T`` is where step ``n + 1`` starts: it takes the requests sent up to ``T``,
schedules step ``n + 2`` and processes step ``n + 1`` at its end, which may lie past the
arrival (that output depends on nothing sent meanwhile); a turn at the arrival waits for
it. (vLLM 0.33.0, ``vllm/v1/engine/core.py``: ``run_busy_loop``, lines 1621-1631, adds the
requests received between two calls of ``step_with_batch_queue``, lines 708-817, which
schedules a step and, the queue then full, blocks on the older step's output; so requests
received while a step runs are added when it ends, after the step following it was
scheduled.) So a request arriving while step ``n + 1`` runs is first scheduled into step ``n + 3``
(by the turn at step ``n + 1``'s end), one arriving at ``T`` into step ``n + 2``, and one
arriving at an idle replica into a step that starts at once: as one replica alone given
the requests routed to it (a test compares each replica with that run). KV usage is
recorded after each turn that processed a step (what vLLM's scheduler reports after
``update_from_output``: it counts the blocks of the step scheduled before). A replica
played on past its last request processes the step still in flight (an extra step whose
tokens are dropped), which only moves its clock: its run ends, as alone, at the turn that
finished its last request.

A replica's client (:class:`OpenClient`) is the benchmark client of
:mod:`allocator.sim.client` whose requests are not known in advance: requests are appended
as they are routed, and until the next arrival the replica is told that nothing can be sent
before it (its *horizon*), so that the fast path stops there.

**What requests share** (``Requests.content``): each replica's prefix cache reads the
segments of the fleet's requests it received (:class:`_ReplicaContent`; segment ids are the
fleet's, each replica has its own cache, so a prefix is computed once per replica). The
fleet's ``prefix_cache`` counts are the replicas' summed.

**Sessions** (``Requests.after``, ``think_s``; :mod:`allocator.sim.sessions`): a later
turn is sent ``think_s`` after its previous turn finishes, on whichever replica ran it
(never before its ``arrival_s``), and the router chooses its replica then, as any arrival.
The sends are routed in time order (ties: the lower index first, as the single replica's
client): the first turns in index order merged with a heap of the later turns released so
far. A send is known only once the finish before it is played, so before each routing the
replicas that hold a turn a later turn waits for (*holders*) are played until none can
release a send before the next one known (:meth:`_Fleet.settle`). **The rule**: a release
comes from a finish at the end of a step that starts at its replica's clock (its next
step's start; idle, its next send) or later, so strictly after that clock. The holder with
the earliest clock plays the steps that start before the next send known and not after any
other holder's clock (its horizon), stopping after a step that finished a held turn (the
decode-only stretch then stops at every finish; under async scheduling a holder plays turn
by turn); the release joins the heap and the choice is made again. So no replica has played
a step starting after a send found later, and each replica is the single replica given its
requests at the fleet's sends (a test checks it, and that each send is its previous turn's
finish plus the think time). A replica that holds none plays as before, lazily, since it
releases nothing. (A step of zero time could end where another holder's next step starts;
step times are positive.)

**Equal to one replica**: a fleet of one replica is :func:`~allocator.sim.engine.simulate`
step for step (a test compares every array): the same steps, the same draws. The draws
are the single replica's: one ``numpy.random.Generator`` seeded by ``seed`` lays out one
uniform per decode step of every request, request after request
(:func:`~allocator.sim.state.decode_uniforms`); whichever replica serves request ``i``
draws its decode steps from request ``i``'s uniforms. So the same seed gives every router
the same acceptances per request (common random numbers: a comparison of routers is not
blurred by the draws).

**Memory**: each replica's per-request arrays hold its own requests: sized at first for
its share of the requests (and of their output tokens) with a margin, and when a replica
receives more than that, rebuilt twice as large and replayed from the start with the
requests it received (the run is deterministic, so the replay is exact): memory stays
within a small factor of one replica's run over all the requests. The uniforms are held
once for the fleet.

Not modelled in a fleet of more than one replica: the client's ``max_concurrency`` (one
client's limit spans the fleet; refused, one line); a fleet of one with it is
:func:`~allocator.sim.engine.simulate` itself.

**Results**: each replica's run is a :class:`~allocator.sim.results.SimResult` over its
own requests (local indices, in the order it received them, each arriving at its send,
its content's segments kept); the fleet's is their concatenation over all requests in
arrival order (:func:`concat_results`): per request its timeline, the ITL gaps pooled, the
decode-step histograms and prefix-cache counts summed, ``duration_s`` the latest
replica's, ``steps`` and ``time_in_system_s`` summed (so ``mean_concurrency`` is the
fleet's), ``max_running_seqs`` and ``kv_cache_peak_fraction`` the largest of one replica.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..exceptions import ParameterError
from ..validate import whole
from .async_steps import InFlight, turn
from .client import Client
from .config import Scheduler, StepTime
from .engine import simulate
from .fast_path import decode_stretch
from .policy import SpecPolicy
from .prefix_cache import PrefixCache
from .requests import Requests, TokenContent
from .results import SimResult
from .routers import Router, View, get_router
from .scheduler import schedule, update_from_output
from .state import STRETCH_STEPS, State

#: Most replicas one fleet simulates: each holds its own state, and every arrival looks at
#: every replica a load-reading router reads, so time and memory grow with the count
#: (a fleet of this many over 10,000 requests takes minutes, not hours).
MAX_REPLICAS = 1024
#: A replica's arrays are first sized for this multiple of its even share, plus
#: :data:`SLACK_REQUESTS` requests (and the longest request's output tokens).
FIRST_SHARE = 1.25
SLACK_REQUESTS = 16


class OpenClient(Client):
    """The benchmark client of one replica of a fleet: requests appended as the router
    sends them (``count`` so far, send times in ``arrival[:count]``), no
    ``max_concurrency``. Until :attr:`closed`, nothing more is sent before ``horizon``
    (s): the next arrival anywhere in the fleet.

    Sessions: ``glob`` the fleet's index of each of its requests, ``has_next`` ``(N,)``
    bool over the fleet's requests (``None``: no sessions), whether a later turn waits for
    that request's finish; ``held`` such requests received and not finished (the fast path
    then stops at every finish); ``released`` ``(finish s, fleet index)`` of those that
    finished, for the fleet to collect."""

    def __init__(
        self, capacity: int, glob: list[int] | None = None, has_next: np.ndarray | None = None
    ) -> None:
        super().__init__(np.zeros(capacity), None)
        self.count = 0
        self.horizon = 0.0
        self.closed = False
        self.glob = glob if glob is not None else []
        self.has_next = has_next
        self.released: list[tuple[float, int]] = []

    def next_send_time(self) -> float:
        """The next routed request's send, else the horizon (``inf`` once closed)."""
        i = self.next
        if i < self.count:
            return float(self.arrival[i])
        return math.inf if self.closed else self.horizon

    def all_sent(self) -> bool:
        return self.closed and self.next >= self.count

    def finish(self, times: np.ndarray | float, count: int, ids: np.ndarray | None = None) -> None:
        """:meth:`Client.finish`, and the finished requests a later turn waits for noted in
        :attr:`released`."""
        super().finish(times, count, ids)
        has_next = self.has_next
        if has_next is None or ids is None:
            return
        at = np.broadcast_to(np.asarray(times, dtype=np.float64), (count,))
        glob = self.glob
        for i, t in zip(np.asarray(ids).tolist(), at.tolist(), strict=True):
            g = glob[i]
            if has_next[g]:
                self.held -= 1
                self.released.append((t, g))


class _ReplicaContent(TokenContent):
    """What the fleet's requests share (``whole``) as one replica's prefix cache reads it:
    its request ``j`` is the fleet's ``of[j]`` (the list grows as requests are routed to
    it). Segment ids are the fleet's, so two replicas' requests name one prefix alike;
    each replica has its own cache."""

    whole: TokenContent
    of: list[int]

    def __init__(self, whole: TokenContent, of: list[int]) -> None:
        for name in ("ids", "lengths", "starts"):
            object.__setattr__(self, name, getattr(whole, name))
        object.__setattr__(self, "whole", whole)
        object.__setattr__(self, "of", of)

    def __len__(self) -> int:
        return len(self.of)

    def totals(self) -> np.ndarray:
        return self.whole.totals()[np.asarray(self.of, dtype=np.int64)]

    def head(self, n: int) -> TokenContent:
        return content_of(self.whole, np.asarray(self.of[:n], dtype=np.int64))

    def segments(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.whole.segments(self.of[i])


def content_of(content: TokenContent, ids: np.ndarray) -> TokenContent:
    """The segments of requests ``ids`` (``(M,)`` indices) of ``content``, in that order."""
    starts = content.starts
    counts = starts[ids + 1] - starts[ids]
    new_starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    at = np.repeat(starts[ids] - new_starts[:-1], counts) + np.arange(int(new_starts[-1]))
    return TokenContent(content.ids[at], content.lengths[at], new_starts)


class _Replica:
    """One replica of the fleet: its state, the requests it received (global indices), how
    far it has been played (``until``, s) and the KV blocks it reported last."""

    def __init__(self, state: State, capacity: int, tokens: int, ids: list[int]) -> None:
        self.state = state
        self.capacity = capacity
        self.tokens = tokens
        self.ids = ids  # (the list its client and its cache's content read)
        self.decode_steps = 0
        self.until = -math.inf
        self.kv_seen = 0
        self.done = 0  # finishes at or before the last arrival looked at
        self.flight: InFlight | None = None  # async scheduling: the step in flight
        self.drained_t = 0.0  # the clock after the turn that last finished all it received


@dataclass(frozen=True)
class FleetResult:
    """A fleet's run: ``fleet`` every request's timeline (:func:`concat_results`),
    ``replicas`` each replica's run over its own requests (``None`` for a replica that
    received none), ``assignment`` ``(N,)`` the replica of each request, ``router`` its
    name."""

    fleet: SimResult
    replicas: tuple[SimResult | None, ...]
    assignment: np.ndarray
    router: str


class _Fleet:
    """One fleet run (module docstring). ``stretches=False`` turns the decode-only fast
    path off in every replica (the reference it is tested against); ``step_tokens`` set
    before :meth:`play` makes each replica record its steps' tokens (tests)."""

    def __init__(
        self,
        requests: Requests,
        policy: SpecPolicy,
        step_ms: StepTime,
        sched: Scheduler,
        seed: int,
        count: int,
        router: Router,
        stretches: bool = True,
    ) -> None:
        self.requests = requests
        self.policy = policy
        self.step_ms = step_ms
        self.sched = sched
        self.seed = seed
        self.count = count
        self.router = router
        self.P = requests.prompt_tokens
        self.O = requests.output_tokens
        self.arrival = requests.arrival_s
        self.reps: list[_Replica] = []
        self.U = np.zeros(0)
        self.u_start = np.zeros(0, dtype=np.int64)
        # a router reading KV usage needs every step on its own (module docstring)
        self.stretches = stretches and "kv_usage" not in router.reads
        self.many = getattr(step_ms, "many", None) if self.stretches else None
        self.step_tokens = False  # True: each replica records its steps' tokens (tests)
        # sessions: request -> the later turns its finish releases; the sends known so far
        after = requests.after
        self.think = requests.think_s
        self.has_next: np.ndarray | None = None
        self.followers: dict[int, list[int]] = {}
        if after is not None and bool((after >= 0).any()):
            self.has_next = np.zeros(len(requests), dtype=bool)
            self.has_next[after[after >= 0]] = True
            for i in np.flatnonzero(after >= 0).tolist():
                self.followers.setdefault(int(after[i]), []).append(i)
            self.roots = np.flatnonzero(after < 0).tolist()
        else:
            self.roots = list(range(len(requests)))
        self.next_root = 0
        self.later: list[tuple[float, int]] = []  # released turns (send s, request), a heap
        self.pushed = np.zeros(len(requests), dtype=bool)
        self.sent_at = np.full(len(requests), np.nan)  # each request's send, s

    # ------------------------------------------------------------------ set-up
    def build(self) -> None:
        o = self.O
        # State's layout of the draws (one per decode step of each request, request after
        # request, then padding a stretch reads past the end), over every request of the
        # fleet: a fleet of one draws what simulate() draws (a test compares the runs)
        steps = int((o - 1).sum())
        self.U = np.random.default_rng(self.seed).random(steps + STRETCH_STEPS + 1)
        self.u_start = np.concatenate(([0], np.cumsum(o - 1)[:-1])).astype(np.int64)
        n = len(self.requests)
        share = int(FIRST_SHARE * n / self.count) + SLACK_REQUESTS
        tok_share = int(FIRST_SHARE * float((o - 1).sum()) / self.count) + int(o.max())
        self.reps = [self.new_replica(min(share, n), tok_share) for _ in range(self.count)]
        probe = self.reps[0].state  # every request must fit one replica's cache alone
        kept = probe.P, probe.O
        probe.P, probe.O = self.P, self.O
        try:
            probe.check_fit()
        finally:
            probe.P, probe.O = kept

    def new_replica(self, capacity: int, tokens: int) -> _Replica:
        ones = np.ones(capacity, dtype=np.int64)
        state = State(Requests(np.zeros(capacity), ones, ones.copy()), self.policy, self.sched, 0)
        ids: list[int] = []
        state.client = OpenClient(capacity, ids, self.has_next)
        content = self.requests.content
        if state.cache is not None and content is not None:
            # a cache that names blocks by their hashes (the state's, built before the
            # replica had requests, saw no content and took the own-tokens cache)
            state.cache = PrefixCache(
                self.sched.num_blocks,
                self.sched.block_size,
                self.sched.hash_lookahead_tokens,
                _ReplicaContent(content, ids),
                capacity,
            )
        state.U = self.U
        state.itl = np.empty(tokens)
        state.itl_req = np.empty(tokens, dtype=np.int32)
        state.seed = self.seed
        if self.step_tokens:
            state.step_tokens = []
        return _Replica(state, capacity, tokens, ids)

    # ------------------------------------------------------------------ routing
    def admit(self, r: int, g: int) -> None:
        """Request ``g`` joins replica ``r``'s client (rebuilt larger when full), sent at
        ``sent_at[g]``."""
        rep = self.reps[r]
        j = len(rep.ids)
        steps = int(self.O[g]) - 1
        if j >= rep.capacity or rep.decode_steps + steps > rep.tokens:
            rep = self.grow(r, j + 1, rep.decode_steps + steps)
        st = rep.state
        st.P[j] = self.P[g]
        st.O[j] = self.O[g]
        saved = st.saved
        saved.prompt[j] = self.P[g]
        saved.output[j] = self.O[g]
        saved.draw[j] = self.u_start[g]
        client = st.client
        assert isinstance(client, OpenClient)
        client.arrival[j] = self.sent_at[g]
        client.count = j + 1
        if self.has_next is not None and self.has_next[g]:
            client.held += 1
        rep.ids.append(g)
        rep.decode_steps += steps

    def grow(self, r: int, need: int, tokens: int) -> _Replica:
        """Replica ``r`` rebuilt at least twice as large and replayed to where it was."""
        old = self.reps[r]
        cap = max(2 * old.capacity, need)
        tok = max(2 * old.tokens, tokens)
        rep = self.new_replica(min(cap, len(self.requests)), tok)
        self.reps[r] = rep
        for g in old.ids:
            self.admit(r, g)
        if old.until > -math.inf:
            while not self.advance(rep, old.until):  # (paused at each turn released)
                pass
        rep.done = old.done
        return rep

    def advance(self, rep: _Replica, until: float) -> bool:
        """Play every step of ``rep`` that starts before ``until`` (s); under async
        scheduling every turn of its loop that starts before ``until``
        (:meth:`advance_async`). Sessions: it pauses after a step that finished a turn a
        later turn waits for (that turn's send is then known: :meth:`release`), returning
        ``False``; ``True`` when it got to ``until``."""
        st = rep.state
        client = st.client
        assert isinstance(client, OpenClient)
        client.horizon = until
        if st.async_sched:
            reached = self.advance_async(rep, client, until)
        else:
            reached = True
            step_ms, many, stretches = self.step_ms, self.many, self.stretches
            if st.t <= until:
                rep.kv_seen = st.pool.used
            while st.t < until:
                st.take_sends()
                if st.n == 0 and not st.waiting:
                    s = client.next_send_time()
                    if s >= until:
                        break
                    st.t = s
                    continue
                if not (stretches and decode_stretch(st, step_ms, many)):
                    update_from_output(st, schedule(st), step_ms)
                if st.t <= until:
                    rep.kv_seen = st.pool.used
                if client.released:
                    reached = False
                    break
        rep.until = until if reached else min(until, st.t)
        if client.released:
            self.release(client)
        return reached

    def advance_async(self, rep: _Replica, client: OpenClient, until: float) -> bool:
        """:meth:`advance` under async scheduling: every turn of
        :func:`~allocator.sim.async_steps.run_async`'s loop at a time before ``until``
        (s). A turn at time ``T`` (a step's start) takes the sends up to ``T`` and
        schedules the step after the one starting at ``T``, so a turn at ``until`` waits
        for the request arriving then; the step it processes may end past ``until`` (its
        output does not depend on what arrives meanwhile). KV usage is recorded after each
        turn that processed a step ending at or before ``until`` (what vLLM's scheduler
        reports after ``update_from_output``). Holding a turn a later turn waits for, the
        replica plays turn by turn (the stretch would run through its finish) and pauses
        after the turn that finished it (``False``)."""
        st = rep.state
        step_ms, many, stretches = self.step_ms, self.many, self.stretches
        flight = rep.flight
        reached = True
        while st.t < until and not (client.closed and client.finished >= client.count):
            st.take_sends()
            if flight is None and st.n == 0 and not st.waiting:
                s = client.next_send_time()
                if s >= until:
                    break
                st.t = s
                continue
            ended = flight is not None
            before = client.finished
            flight = turn(st, flight, step_ms, many, stretches and not client.held)
            if ended and st.t <= until:
                rep.kv_seen = st.pool.used
            if client.finished > before and client.finished >= client.count:
                rep.drained_t = st.t
            if client.released:
                reached = False
                break
        rep.flight = flight
        return reached

    # ------------------------------------------------------------------ sessions
    def release(self, client: OpenClient) -> None:
        """The later turns of the turns ``client`` saw finish join the pending sends: each
        sent ``think_s`` after that finish (never before its ``arrival_s``), as
        :class:`~allocator.sim.client.Client` sends it. A replica replayed after a rebuild
        finishes them again: each is pushed once."""
        assert self.think is not None
        think, arrival, pushed = self.think, self.arrival, self.pushed
        for t, g in client.released:
            for j in self.followers.get(g, ()):
                if not pushed[j]:
                    pushed[j] = True
                    heapq.heappush(self.later, (max(t + float(think[j]), float(arrival[j])), j))
        client.released.clear()

    def peek(self) -> tuple[float, int] | None:
        """The next send known: ``(s, request)``, the first sessions' turns (and every
        request without sessions) in index order merged with the released later turns
        (ties: the lower index first, as the single replica's client)."""
        head = None
        if self.next_root < len(self.roots):
            g = self.roots[self.next_root]
            head = (float(self.arrival[g]), g)
        if self.later and (head is None or self.later[0] < head):
            head = self.later[0]
        return head

    def pop(self) -> tuple[float, int]:
        head = self.peek()
        assert head is not None
        if self.later and self.later[0] == head:
            heapq.heappop(self.later)
        else:
            self.next_root += 1
        return head

    def settle(self) -> None:
        """Sessions: play the replicas holding a turn a later turn waits for until none of
        them can release a send before the next one known (:meth:`peek`), so that the next
        send known is the next send.

        The rule: a release comes from a finish, at the end of a step (a turn's processed
        step) that starts at the replica's clock or later, so after its clock. The holder
        whose next step (or, idle, next send) is earliest plays its steps that start before
        the next send known and not after any other holder's next step, and pauses after a
        step that finished a held turn. So no replica has played a step that starts after
        a send found later, and a later turn routed to any replica joins it as if known
        from the start. (A step of zero time could end where another replica's step starts;
        step times are positive.)"""
        while True:
            head = self.peek()
            a = head[0] if head is not None else math.inf
            best: _Replica | None = None
            first = second = math.inf
            for rep in self.reps:
                st = rep.state
                client = st.client
                if not client.held:
                    continue
                if st.n or st.waiting or rep.flight is not None:
                    k = st.t
                else:
                    k = max(st.t, client.next_send_time())
                if k < first:
                    best, first, second = rep, k, first
                elif k < second:
                    second = k
            if best is None or first >= a:
                return
            bound = min(a, second)
            self.advance(best, bound if bound >= a else math.nextafter(bound, math.inf))

    def look(self, view: View, a: float) -> None:
        """Every replica played to ``a`` and the view of it filled."""
        reads = self.router.reads
        for r, rep in enumerate(self.reps):
            if rep.until < a:
                self.advance(rep, a)
            if "in_flight" in reads:
                client = rep.state.client
                done = rep.done
                order = client.finish_order
                while done < client.finished and order[done] <= a:
                    done += 1
                rep.done = done
                view.in_flight[r] = len(rep.ids) - done
            if "kv_usage" in reads:
                view.kv_usage[r] = rep.kv_seen / rep.state.pool.usable

    def run(self, keys: np.ndarray | None) -> np.ndarray:
        """Route every request at its send, in the order sent; returns ``(N,)`` the replica
        of each."""
        router = self.router
        n = len(self.requests)
        view = View(self.count)
        chosen = np.empty(n, dtype=np.int64)
        reads = bool(router.reads)
        prompt = self.P.tolist()
        key_list = keys.tolist() if keys is not None else None
        sessions = self.has_next is not None
        while True:
            if sessions:
                self.settle()
            if self.peek() is None:
                break
            a, g = self.pop()
            self.sent_at[g] = a
            view.request = g
            view.prompt_tokens = prompt[g]
            view.key = key_list[g] if key_list is not None else -1
            if reads:
                self.look(view, a)
            r = router.choose(view)
            if not 0 <= r < self.count:  # pragma: no cover - the contract tests hold it
                raise AssertionError(f"router {router.name} chose replica {r}")
            rep = self.reps[r]
            if rep.until < a:
                self.advance(rep, a)
            self.admit(r, g)
            chosen[g] = r
        for rep in self.reps:
            client = rep.state.client
            assert isinstance(client, OpenClient)
            client.closed = True
            self.advance(rep, math.inf)
            if rep.state.async_sched and client.count:
                # the run of its requests alone ends at the turn that finished the last
                # of them: a step processed after it (a later arrival elsewhere played
                # it) only moved the clock
                rep.state.t = rep.drained_t
        return chosen

    def play(self, keys: np.ndarray | None) -> FleetResult:
        """The whole run: replicas built, every request routed, each replica's result."""
        self.build()
        chosen = self.run(keys)
        parts = [self.replica_result(rep) for rep in self.reps]
        ids = [np.asarray(rep.ids, dtype=np.int64) for rep in self.reps]
        whole_run = concat_results(self.requests, parts, ids)
        return FleetResult(whole_run, tuple(parts), chosen, self.router.name)

    def replica_result(self, rep: _Replica) -> SimResult | None:
        """One replica's run over its own requests (``None``: it received none)."""
        c = len(rep.ids)
        if c == 0:
            return None
        ids = np.asarray(rep.ids, dtype=np.int64)
        res = rep.state.result()
        content = self.requests.content
        local = Requests(  # (its requests in the order sent, arriving at their sends)
            self.sent_at[ids],
            self.P[ids],
            self.O[ids],
            None if content is None else content_of(content, ids),
        )
        return dataclasses.replace(
            res,
            requests=local,
            sent_s=res.sent_s[:c].copy(),
            first_scheduled_s=res.first_scheduled_s[:c].copy(),
            first_token_s=res.first_token_s[:c].copy(),
            finish_s=res.finish_s[:c].copy(),
            output_tokens=res.output_tokens[:c].copy(),
            chunks=res.chunks[:c].copy(),
            preemptions=res.preemptions[:c].copy(),
        )


def concat_results(
    requests: Requests, parts: list[SimResult | None], ids: list[np.ndarray]
) -> SimResult:
    """The fleet's run from its replicas' (module docstring): ``parts[r]`` over the
    requests ``ids[r]`` (global indices, ``(N_r,)``) of ``requests``."""
    n = len(requests)
    runs = [(p, i) for p, i in zip(parts, ids, strict=True) if p is not None]
    first = runs[0][0]
    per_request: dict[str, Any] = {
        name: np.empty(n, dtype=getattr(first, name).dtype)
        for name in (
            "sent_s",
            "first_scheduled_s",
            "first_token_s",
            "finish_s",
            "output_tokens",
            "chunks",
            "preemptions",
        )
    }
    for part, idx in runs:
        for name, arr in per_request.items():
            arr[idx] = getattr(part, name)
    return dataclasses.replace(
        first,
        requests=requests,
        itl_s=np.concatenate([p.itl_s for p, _ in runs]),
        itl_request=np.concatenate([i[p.itl_request] for p, i in runs]),
        decode_steps=sum((p.decode_steps for p, _ in runs), np.zeros_like(first.decode_steps)),
        uncut_decode_steps=sum(
            (p.uncut_decode_steps for p, _ in runs), np.zeros_like(first.uncut_decode_steps)
        ),
        duration_s=max(p.duration_s for p, _ in runs),
        steps=sum(p.steps for p, _ in runs),
        time_in_system_s=sum(p.time_in_system_s for p, _ in runs),
        max_running_seqs=max(p.max_running_seqs for p, _ in runs),
        kv_cache_peak_fraction=max(p.kv_cache_peak_fraction for p, _ in runs),
        prefix_cache=_summed([p.prefix_cache for p, _ in runs]),
        **per_request,
    )


def _summed(counts: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """The replicas' prefix-cache counts added up (each replica has its own cache)."""
    q, h, pq, ph = (sum(c[i] for c in counts) for i in range(4))
    return (q, h, pq, ph)


def check_replicas(replicas: object) -> int:
    """A replica count: an integer in ``1 ..`` :data:`MAX_REPLICAS`."""
    n = whole(replicas, "replicas", lo=1)
    if n > MAX_REPLICAS:
        raise ParameterError(
            "replicas",
            f"at most {MAX_REPLICAS:,} in one simulated fleet (each replica holds its own "
            f"state and each arrival looks at every replica, so time and memory grow with "
            f"the count), got {n:,}",
        )
    return n


def simulate_fleet(
    requests: Requests,
    policy: SpecPolicy,
    step_ms: StepTime,
    scheduler: Scheduler,
    replicas: int,
    router: Router | str = "round-robin",
    seed: int = 0,
    keys: np.ndarray | None = None,
) -> FleetResult:
    """Serve ``requests`` on ``replicas`` identical replicas behind ``router`` (a
    :class:`~allocator.sim.routers.Router` or its name) and return every run.

    ``policy``, ``step_ms``, ``scheduler``, ``seed``: as :func:`~allocator.sim.simulate`
    takes them, for every replica; what ``requests`` share (``content``) is read by each
    replica's prefix cache and their sessions (``after``, ``think_s``) send each later turn
    after its previous turn's finish, routed then (module docstring); ``keys``: ``(N,)``
    int64, each request's session or prefix group (``>= 0``), for the routers that need
    one. ``ParameterError`` on ``replicas`` (not in ``1 ..`` :data:`MAX_REPLICAS`),
    ``router`` (unknown, or keyed without ``keys``), ``keys``, ``scheduler``
    (``max_concurrency`` with more than one replica) and whatever :func:`simulate`
    refuses."""
    count = check_replicas(replicas)
    rule = get_router(router) if isinstance(router, str) else router
    if not isinstance(rule, Router):
        raise ParameterError("router", "must be a Router or a router's name")
    if not isinstance(requests, Requests):
        raise ParameterError("requests", "must be a Requests")
    key_arr = None
    if keys is not None:
        key_arr = np.asarray(keys)
        if (
            key_arr.shape != (len(requests),)
            or not np.issubdtype(key_arr.dtype, np.integer)
            or (key_arr.size and key_arr.min() < 0)
        ):
            raise ParameterError("keys", f"must be {len(requests)} integers >= 0, one a request")
    rule.check(key_arr is not None)
    rule.start(count, seed)
    if not isinstance(scheduler, Scheduler):
        raise ParameterError("scheduler", "must be a Scheduler")
    if scheduler.max_concurrency is not None:
        if count > 1:
            raise ParameterError(
                "scheduler",
                "max_concurrency is not modelled in a fleet of more than one replica (one "
                "client's limit spans the fleet)",
            )
        one = simulate(requests, policy, step_ms, scheduler, seed)
        return FleetResult(one, (one,), np.zeros(len(requests), dtype=np.int64), rule.name)
    # the checks simulate() makes, once, before any replica is built
    if not isinstance(policy, SpecPolicy):
        raise ParameterError("policy", "must be a SpecPolicy")
    if not callable(step_ms):
        raise ParameterError(
            "step_ms", "must be callable as step_ms(decode_seqs, k, context, prefill)"
        )
    return _Fleet(requests, policy, step_ms, scheduler, seed, count, rule).play(key_arr)


__all__ = [
    "FIRST_SHARE",
    "MAX_REPLICAS",
    "SLACK_REQUESTS",
    "FleetResult",
    "OpenClient",
    "check_replicas",
    "concat_results",
    "content_of",
    "simulate_fleet",
]
