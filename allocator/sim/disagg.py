"""Prefill/decode disaggregation: a prefill pool and a decode pool on one clock.

``P`` prefill replicas and ``D`` decode replicas, each the replica of
:mod:`allocator.sim.engine` behind a router of :mod:`allocator.sim.routers`, serve the
requests as vLLM's disaggregated serving with its NIXL connector serves them (vLLM 0.33.0;
the proxy is ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` of the vLLM
repository, the connector ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/``):

1. **Prefill.** The proxy sends the request to a prefill instance with ``max_tokens = 1``
   (and ``max_completion_tokens = 1``), ``stream = False`` and ``kv_transfer_params =
   {"do_remote_decode": True, ...}`` (``send_request_to_service``). The prefill instance
   schedules it as any request: it computes the whole prompt (``_prefill_backoff()`` is 0
   unless the model has Mamba layers, bounded replay, or a multi-module MTP drafter,
   ``nixl/base_scheduler.py`` lines 385-409), samples one token and finishes on the length
   cap; ``request_finished`` then keeps its blocks for the decode instance to read
   (``delay_free_blocks``, ``nixl/pull_scheduler.py`` lines 191-260) and returns the
   ``kv_transfer_params`` naming them. Its one token is not streamed to the client: the
   proxy reads the response only for those parameters. Here the prefill pool is the fleet
   of :mod:`allocator.sim.fleet` over the requests with one output token each; a request
   leaves it at its first (and only) token.
2. **Transfer.** The proxy sends the original request, with those parameters, to a decode
   instance, which pulls the prompt's KV from the prefill instance
   (``NixlPullConnector``; ``get_num_new_matched_tokens`` counts every prompt token as
   external, ``nixl/pull_scheduler.py`` lines 34-64). Here the transfer takes
   ``latency_s + kv_bytes / bandwidth_bytes_s`` from the prefill's finish, and the request
   reaches the decode pool's router at its end.
3. **Decode.** When the KV has arrived vLLM's scheduler sets the request's computed tokens
   to its prompt less one token (``_update_waiting_for_remote_kv``,
   ``vllm/v1/core/sched/scheduler.py`` lines 3467-3520: "a full prompt hit re-computes that
   token so the next one can be sampled"), so the decode instance computes the prompt's
   last token and samples the first output token from it, then decodes the rest (with
   speculation, as any decoding request). Here a decode replica admits a transferred
   request as :func:`~allocator.sim.scheduler.schedule_waiting` admits a waiting one, with
   ``prompt - 1`` tokens computed (so with a static ``k > 0`` its one token is padded to
   ``1 + k``, as vLLM pads a request with computed tokens); the whole prompt's blocks must
   be free, as for any admission. A transferred request preempted on the decode instance
   recomputes prompt and output there (its remote tokens are gone).

**Where TTFT ends.** The client's stream is the decode instance's (the proxy's
``generate_stream`` relays ``stream_service_response`` of the decode client), so the
client's first token is the decode instance's first token: TTFT = arrival to the decode
replica's first token, the sum of five parts per request, each returned
(:class:`DisaggResult`): the prefill queue (arrival to first scheduled on the prefill
replica), the prefill (to its token there), the transfer, the decode queue (transfer's end
to first scheduled on the decode replica) and the first decode step (to the first token).

**Scheduling.** Each pool plays its ``Scheduler``'s: asynchronous by default, as vLLM
0.33.0 runs a NIXL prefill or decode instance (``VllmConfig`` turns async scheduling on
unless a pooling model, the executor, ROCm DeepEP DBO or the V1 runner's drafter or
pipeline parallelism rule it out, and checks nothing of ``kv_transfer_config`` there,
``vllm/config/vllm.py`` lines 1640-1719; ``Scheduler.__init__`` only defers freeing a KV
consumer's blocks when batches overlap, ``scheduler.py`` lines 189-195). The prefill pool
is :func:`~allocator.sim.fleet.simulate_fleet` with its replicas' async loop; a decode
replica plays :func:`~allocator.sim.async_steps.turn` with :func:`schedule_decode` for the
scheduling (:func:`turn_decode`), up to each arrival as the fleet plays a replica. A
transferred request is then admitted by a turn and its first token sampled by the step
launched there, as any waiting request under ``AsyncScheduler``.

**What prompts share** (``Requests.content``): the prefill pool's requests carry it up
to their first output token (:func:`cut_content`), and each prefill replica's prefix cache
reads it (the fleet's ``_ReplicaContent``) when the prefill scheduler has prefix caching
on. The decode pool runs without: with prefix caching on, vLLM 0.33.0's decode instance
looks up its own cache first and asks the connector only for the tokens beyond the local
hit (``scheduler.py`` lines 1109-1141, ``get_num_new_matched_tokens(request,
block_aligned_local)``; ``nixl/pull_scheduler.py`` lines 59-65: ``count = actual -
num_computed_tokens``), and caches the blocks received under their hashes when the
transfer ends (``_update_waiting_for_remote_kv``, ``cache_blocks``, lines 3497-3501). So
the bytes pulled depend on the decode replica's cache when it schedules the request,
while here the transfer ends before the decode pool's router chooses the replica: the
pull of a prefix the decode replica holds is counted in full (an upper bound on the
transfer), and cached blocks are not kept for later requests there.

**Simplifications**, all stated: the decode instance reserves the prompt's blocks when it
admits the request after the transfer, not when it starts pulling (vLLM's
``WAITING_FOR_REMOTE_KVS`` holds them during the pull); the prefill instance frees its
blocks when it samples (vLLM keeps them until the decode instance has read them); the
transfer starts at the prefill's finish and shares no link with others (no contention);
the HTTP round trips of the proxy take no time; the decode pool runs without prefix
caching (its scheduler's ``cache`` must be off, above); no sessions (a later turn's send
depends on the decode pool's finish); no ``max_concurrency``.

**Draws.** The prefill pool draws nothing (one output token, no decode step). The decode
pool is played as :func:`~allocator.sim.fleet.simulate_fleet` plays a fleet, over the
requests in the order they reach it (transfer's end, ties by arrival), its draws laid out
in that order from ``seed``: a decode pool of one replica draws what
:func:`~allocator.sim.simulate` draws for those requests in that order. Its replicas'
arrays are sized for every request (the fleet's rebuild and replay is not used): memory
grows with the decode replicas times the requests.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..exceptions import ParameterError
from .async_steps import InFlight, launch, process
from .async_steps import decode_stretch as async_stretch
from .config import Scheduler, StepTime
from .fast_path import ManyStepTimes, decode_stretch
from .fleet import FleetResult, OpenClient, check_replicas, concat_results
from .fleet import simulate_fleet as _simulate_fleet
from .policy import SpecPolicy
from .requests import Requests, TokenContent
from .results import SimResult
from .routers import Router, View, get_router
from .scheduler import Scheduled, schedule_running, update_from_output
from .state import STRETCH_STEPS, State

#: The parts of a disaggregated request's TTFT, in order (:class:`DisaggResult`).
TTFT_PARTS = ("prefill_queue", "prefill", "transfer", "decode_queue", "first_decode_step")


def admit_transferred(state: State, out: Scheduled) -> None:
    """Admit waiting requests on a decode replica: as
    :func:`~allocator.sim.scheduler.schedule_waiting` admits them without prefix caching,
    but a request never preempted arrives with its prompt's KV, ``prompt - 1`` tokens
    computed (module docstring), and computes the one token left."""
    run = state.running
    saved = state.saved
    waiting = state.waiting
    budget_left = state.budget - out.tokens
    pool = state.pool
    bs, L = pool.block_size, state.L
    pad = state.pad_to
    running_scheduled = out.m > 0
    if pad and not out.plain and run.prefilling[: out.m].any():
        pad = 0  # a running request was a prefill chunk (scheduler.py lines 1309-1330)
    free = pool.free
    while budget_left > 0 and waiting and state.n < state.max_seqs:
        i = waiting[0]
        tokens = int(saved.prompt[i] + saved.emitted[i])
        computed = tokens - 1 if state.preemptions[i] == 0 else 0
        rest = tokens - computed
        chunk = min(rest, budget_left)
        taken = chunk
        if pad and rest == 1 and (running_scheduled or computed > 0):
            taken = pad
            if taken > budget_left:
                break
        blocks = -(-(computed + taken + L) // bs)
        if max(blocks, -(-tokens // bs)) > free:
            break
        waiting.popleft()
        row = state.n
        state.n += 1
        state.n_pref += 1
        saved.computed[i] = computed
        saved.blocks[i] = blocks
        saved.target[i] = tokens
        saved.prefilling[i] = 1
        run.table[:, row] = saved.table[:, i]
        state.last[row] = state.saved_last[i]
        free -= blocks
        if math.isnan(state.first_sched[i]):
            state.first_sched[i] = state.t
        budget_left -= taken
        out.tokens += taken
        out.admitted.append((row, i, chunk, rest, taken))
    pool.used = pool.usable - free


def schedule_decode(state: State) -> Scheduled:
    """One step of a decode replica: running requests, then (if none was preempted)
    transferred ones (:func:`admit_transferred`); vLLM's ``schedule`` otherwise."""
    out = Scheduled()
    preempted = schedule_running(state, out) if state.n else False
    if not preempted:
        admit_transferred(state, out)
    state.pool.note_peak()
    if state.n > state.max_running:
        state.max_running = state.n
    return out


def turn_decode(
    state: State,
    flight: InFlight | None,
    step_ms: StepTime,
    many: ManyStepTimes | None = None,
    stretches: bool = True,
) -> InFlight | None:
    """One turn of a decode replica's loop under async scheduling:
    :func:`~allocator.sim.async_steps.turn` with :func:`schedule_decode` for ``schedule``
    (the decode-only stretch admits nothing, so it is the same); returns the step then in
    flight."""
    if stretches and flight is not None and flight.plain:
        played = async_stretch(state, flight, step_ms, many)
        if played is not None:
            return played
    nxt: InFlight | None = None
    if state.n or state.waiting:
        out = schedule_decode(state)
        if out.tokens:
            start = state.t if flight is None else flight.end
            nxt = launch(state, out, step_ms, start)
    if flight is None:
        return nxt
    process(state, flight)
    return nxt


class _DecodePool:
    """The decode pool: ``count`` replicas behind ``router`` on one clock, played as
    :mod:`allocator.sim.fleet` plays a fleet (each replica up to an arrival before the
    router looks; the same view, the same draws, laid out request after request), each
    admitting with :func:`schedule_decode`. Each replica's arrays are sized for every
    request (no rebuild): memory grows with the replicas times the requests."""

    def __init__(
        self,
        requests: Requests,
        policy: SpecPolicy,
        step_ms: StepTime,
        sched: Scheduler,
        seed: int,
        count: int,
        router: Router,
    ) -> None:
        self.requests = requests
        self.policy = policy
        self.step_ms = step_ms
        self.sched = sched
        self.seed = seed
        self.count = count
        self.router = router
        self.states: list[State] = []
        self.ids: list[list[int]] = []
        self.until: list[float] = []
        self.kv_seen: list[int] = []
        self.done: list[int] = []
        self.flight: list[InFlight | None] = []  # async scheduling: each step in flight
        self.drained: list[float] = []  # the clock after the turn that finished them all
        self.stretches = "kv_usage" not in router.reads
        self.many = getattr(step_ms, "many", None)

    def build(self) -> None:
        req = self.requests
        n = len(req)
        o = req.output_tokens
        steps = int((o - 1).sum())
        U = np.random.default_rng(self.seed).random(steps + STRETCH_STEPS + 1)
        self.u_start = np.concatenate(([0], np.cumsum(o - 1)[:-1])).astype(np.int64)
        for r in range(self.count):
            ones = np.ones(n, dtype=np.int64)  # (each replica's own arrays, filled as routed)
            st = State(Requests(np.zeros(n), ones, ones.copy()), self.policy, self.sched, 0)
            if r == 0:  # every request must fit one replica's cache alone
                kept = st.P, st.O
                st.P, st.O = req.prompt_tokens, req.output_tokens
                try:
                    st.check_fit()
                finally:
                    st.P, st.O = kept
            st.client = OpenClient(n)
            st.U = U
            st.itl = np.empty(steps)
            st.itl_req = np.empty(steps, dtype=np.int32)
            st.seed = self.seed
            self.states.append(st)
            self.ids.append([])
            self.until.append(-math.inf)
            self.kv_seen.append(0)
            self.done.append(0)
            self.flight.append(None)
            self.drained.append(0.0)

    def admit(self, r: int, g: int) -> None:
        """Request ``g`` joins replica ``r``'s client (local index: its count so far)."""
        st = self.states[r]
        j = len(self.ids[r])
        req = self.requests
        st.P[j] = req.prompt_tokens[g]
        st.O[j] = req.output_tokens[g]
        saved = st.saved
        saved.prompt[j] = req.prompt_tokens[g]
        saved.output[j] = req.output_tokens[g]
        saved.draw[j] = self.u_start[g]
        client = st.client
        assert isinstance(client, OpenClient)
        client.arrival[j] = req.arrival_s[g]
        client.count = j + 1
        self.ids[r].append(g)

    def advance(self, r: int, until: float) -> None:
        """Play every step of replica ``r`` that starts before ``until`` (s)."""
        st = self.states[r]
        client = st.client
        assert isinstance(client, OpenClient)
        client.horizon = until
        if st.async_sched:
            self.advance_async(r, until)
            self.until[r] = until
            return
        step_ms, many, stretches = self.step_ms, self.many, self.stretches
        if st.t <= until:
            self.kv_seen[r] = st.pool.used
        while st.t < until:
            st.take_sends()
            if st.n == 0 and not st.waiting:
                s = client.next_send_time()
                if s >= until:
                    break
                st.t = s
                continue
            if not (stretches and decode_stretch(st, step_ms, many)):
                update_from_output(st, schedule_decode(st), step_ms)
            if st.t <= until:
                self.kv_seen[r] = st.pool.used
        self.until[r] = until

    def advance_async(self, r: int, until: float) -> None:
        """:meth:`advance` under async scheduling, as
        :meth:`allocator.sim.fleet._Fleet.advance_async` plays a replica (no sessions): every
        turn that starts before ``until`` (s), KV usage recorded after each turn that
        processed a step ending at or before it."""
        st = self.states[r]
        client = st.client
        assert isinstance(client, OpenClient)
        step_ms, many, stretches = self.step_ms, self.many, self.stretches
        flight = self.flight[r]
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
            flight = turn_decode(st, flight, step_ms, many, stretches)
            if ended and st.t <= until:
                self.kv_seen[r] = st.pool.used
            if client.finished > before and client.finished >= client.count:
                self.drained[r] = st.t
        self.flight[r] = flight

    def look(self, view: View, a: float) -> None:
        reads = self.router.reads
        for r, st in enumerate(self.states):
            if self.until[r] < a:
                self.advance(r, a)
            if "in_flight" in reads:
                client = st.client
                done = self.done[r]
                order = client.finish_order
                while done < client.finished and order[done] <= a:
                    done += 1
                self.done[r] = done
                view.in_flight[r] = len(self.ids[r]) - done
            if "kv_usage" in reads:
                view.kv_usage[r] = self.kv_seen[r] / st.pool.usable

    def run(self) -> np.ndarray:
        """Route every request in arrival order; returns ``(N,)`` the replica of each."""
        router = self.router
        req = self.requests
        n = len(req)
        view = View(self.count)
        chosen = np.empty(n, dtype=np.int64)
        arrival = req.arrival_s.tolist()
        prompt = req.prompt_tokens.tolist()
        for g in range(n):
            a = arrival[g]
            view.request = g
            view.prompt_tokens = prompt[g]
            view.key = -1
            if router.reads:
                self.look(view, a)
            r = router.choose(view)
            if self.until[r] < a:
                self.advance(r, a)
            self.admit(r, g)
            chosen[g] = r
        for r, st in enumerate(self.states):
            client = st.client
            assert isinstance(client, OpenClient)
            client.closed = True
            self.advance(r, math.inf)
            if st.async_sched and client.count:
                st.t = self.drained[r]  # (as the fleet: the turn that finished the last)
        return chosen

    def replica_result(self, r: int) -> SimResult | None:
        """One replica's run over its own requests (``None``: it received none)."""
        c = len(self.ids[r])
        if c == 0:
            return None
        ids = np.asarray(self.ids[r], dtype=np.int64)
        res = self.states[r].result()
        req = self.requests
        local = Requests(req.arrival_s[ids], req.prompt_tokens[ids], req.output_tokens[ids])
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


@dataclass(frozen=True)
class DisaggResult:
    """A disaggregated run.

    ``whole``: every request's timeline as the client sees it (send at its arrival, first
    scheduled on the prefill replica, first token and finish on the decode replica, the
    decode pool's ITL gaps and decode steps; ``steps`` and ``time_in_system_s`` the pools'
    plus the transfers', so that Little's law holds over the whole; ``max_running_seqs``
    and ``kv_cache_peak_fraction`` the largest of any replica). ``prefill`` and ``decode``:
    each pool's fleet run over its own requests (the decode pool's in the order they
    reached it, ``decode_order`` ``(N,)`` their indices in ``whole``). ``ttft_parts``: each
    part of :data:`TTFT_PARTS`, ``(N,)`` s, summing to each request's TTFT;
    ``kv_bytes`` ``(N,)`` and ``transfer_s`` ``(N,)`` the bytes moved and the time taken.
    """

    whole: SimResult
    prefill: FleetResult
    decode: FleetResult
    decode_order: np.ndarray
    ttft_parts: dict[str, np.ndarray]
    kv_bytes: np.ndarray
    transfer_s: np.ndarray


def cut_content(content: TokenContent, keep: np.ndarray) -> TokenContent:
    """Each request's first ``keep[i]`` tokens of ``content`` (``keep`` ``(N,)``, at most
    its total, >= 1): its segments up to there, the last cut short (a segment's first
    tokens are the same tokens, so they hash as the whole segment's do). The prefill
    pool's requests end at their first output token."""
    starts = content.starts
    per = np.diff(starts)
    owner = np.repeat(np.arange(per.size), per)
    end = np.cumsum(content.lengths)
    first = np.concatenate(([0], end))[starts[:-1]]  # tokens before each request
    begin = end - content.lengths - first[owner]  # each segment's offset in its request
    limit = np.asarray(keep, dtype=np.int64)[owner]
    kept = begin < limit
    lengths = np.minimum(content.lengths, limit - begin)[kept]
    counts = np.bincount(owner[kept], minlength=per.size)
    return TokenContent(
        content.ids[kept], lengths, np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    )


def transfer_seconds(kv_bytes: np.ndarray, bandwidth_bytes_s: float, latency_s: float):
    """``latency_s + kv_bytes / bandwidth_bytes_s`` per request, s (``(N,)``); an infinite
    bandwidth moves any bytes in no time."""
    b = np.asarray(kv_bytes, dtype=float)
    moved = np.zeros_like(b) if math.isinf(bandwidth_bytes_s) else b / bandwidth_bytes_s
    return latency_s + moved


def _check_link(bandwidth_bytes_s: object, latency_s: object) -> tuple[float, float]:
    try:
        bw, lat = float(bandwidth_bytes_s), float(latency_s)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError("bandwidth_bytes_s", "bandwidth and latency must be numbers") from None
    if not bw > 0:
        raise ParameterError("bandwidth_bytes_s", f"must be > 0 (inf: instant), got {bw}")
    if not (math.isfinite(lat) and lat >= 0):
        raise ParameterError("latency_s", f"must be finite and >= 0, got {lat}")
    return bw, lat


def _router(router: Router | str, count: int, seed: int) -> Router:
    rule = get_router(router) if isinstance(router, str) else router
    if not isinstance(rule, Router):
        raise ParameterError("router", "must be a Router or a router's name")
    rule.check(False)
    rule.start(count, seed)
    return rule


def simulate_disagg(
    requests: Requests,
    prefill: tuple[SpecPolicy, StepTime, Scheduler],
    decode: tuple[SpecPolicy, StepTime, Scheduler],
    prefill_replicas: int,
    decode_replicas: int,
    kv_bytes: np.ndarray,
    bandwidth_bytes_s: float,
    latency_s: float = 0.0,
    router: str = "round-robin",
    seed: int = 0,
) -> DisaggResult:
    """Serve ``requests`` on ``prefill_replicas`` prefill and ``decode_replicas`` decode
    replicas, each pool behind its own ``router`` (module docstring).

    ``prefill``, ``decode``: each pool's ``(policy, step_ms, scheduler)`` as
    :func:`~allocator.sim.simulate` takes them (the prefill pool's policy draws nothing:
    every request has one output token there); ``kv_bytes`` ``(N,)``: the KV bytes of each
    request's prompt; ``bandwidth_bytes_s`` (bytes/s, ``inf``: instant) and ``latency_s``
    (s) the link's. Each pool plays its scheduler's scheduling (asynchronous or not) and
    the prefill pool its prefix caching over ``requests.content``. ``ParameterError`` on
    ``requests`` (sessions), ``scheduler`` (``max_concurrency``, prefix caching on the
    decode pool),
    ``kv_bytes``, the link, the replica counts, ``router``, and whatever
    :func:`~allocator.sim.fleet.simulate_fleet` refuses."""
    if not isinstance(requests, Requests):
        raise ParameterError("requests", "must be a Requests")
    if requests.after is not None:
        raise ParameterError(
            "requests",
            "sessions are not modelled with disaggregation (a later turn is sent after the "
            "decode pool's finish)",
        )
    p_count = check_replicas(prefill_replicas)
    d_count = check_replicas(decode_replicas)
    bw, lat = _check_link(bandwidth_bytes_s, latency_s)
    n = len(requests)
    kvb = np.asarray(kv_bytes, dtype=float)
    if kvb.shape != (n,) or not np.all(np.isfinite(kvb)) or (n and kvb.min() < 0):
        raise ParameterError("kv_bytes", f"must be {n} finite numbers >= 0, one a request")
    for _, _, sched in (prefill, decode):
        if not isinstance(sched, Scheduler):
            raise ParameterError("scheduler", "must be a Scheduler")
        if sched.max_concurrency is not None:
            raise ParameterError(
                "scheduler", "max_concurrency is not modelled in a disaggregated pool"
            )
    d_policy, d_step, d_sched = decode
    if d_sched.enable_prefix_caching:
        raise ParameterError(
            "scheduler", "the decode pool runs without prefix caching (module docstring)"
        )
    if not isinstance(d_policy, SpecPolicy):
        raise ParameterError("policy", "must be a SpecPolicy")
    if not callable(d_step):
        raise ParameterError(
            "step_ms", "must be callable as step_ms(decode_seqs, k, context, prefill)"
        )
    # 1. prefill: every request with one output token
    p_policy, p_step, p_sched = prefill
    ones = np.ones(n, dtype=np.int64)
    content = requests.content
    if content is not None:  # what prompts share, as far as the first output token
        content = cut_content(content, requests.prompt_tokens + 1)
    p_requests = dataclasses.replace(requests, output_tokens=ones, content=content)
    p_run = _simulate_fleet(p_requests, p_policy, p_step, p_sched, p_count, router, seed)
    # 2. transfer
    done_p = p_run.fleet.finish_s
    xfer = transfer_seconds(kvb, bw, lat)
    reach = done_p + xfer
    order = np.lexsort((np.arange(n), reach))  # by arrival at the decode pool, then index
    d_requests = Requests(
        reach[order], requests.prompt_tokens[order], requests.output_tokens[order]
    )
    # 3. decode
    rule = _router(router, d_count, seed)
    pool = _DecodePool(d_requests, d_policy, d_step, d_sched, seed, d_count, rule)
    pool.build()
    chosen = pool.run()
    parts = [pool.replica_result(r) for r in range(d_count)]
    ids = [np.asarray(i, dtype=np.int64) for i in pool.ids]
    d_whole = concat_results(d_requests, parts, ids)
    d_run = FleetResult(d_whole, tuple(parts), chosen, rule.name)
    whole = _whole(requests, p_run.fleet, d_whole, order, xfer)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    p = p_run.fleet
    first_sched_d = d_whole.first_scheduled_s[back]
    ttft_parts = {
        "prefill_queue": p.first_scheduled_s - requests.arrival_s,
        "prefill": p.finish_s - p.first_scheduled_s,
        "transfer": xfer,
        "decode_queue": first_sched_d - reach,
        "first_decode_step": d_whole.first_token_s[back] - first_sched_d,
    }
    return DisaggResult(whole, p_run, d_run, order, ttft_parts, kvb, xfer)


def _whole(
    requests: Requests, p: SimResult, d: SimResult, order: np.ndarray, xfer: np.ndarray
) -> SimResult:
    """Every request's timeline as the client sees it (:class:`DisaggResult`)."""
    n = len(requests)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    return dataclasses.replace(
        d,
        requests=requests,
        sent_s=p.sent_s.copy(),
        first_scheduled_s=p.first_scheduled_s.copy(),
        first_token_s=d.first_token_s[back],
        finish_s=d.finish_s[back],
        output_tokens=d.output_tokens[back],
        chunks=d.chunks[back],
        preemptions=p.preemptions + d.preemptions[back],
        itl_request=order[d.itl_request],
        duration_s=max(p.duration_s, d.duration_s),
        steps=p.steps + d.steps,
        time_in_system_s=p.time_in_system_s + float(xfer.sum()) + d.time_in_system_s,
        max_running_seqs=max(p.max_running_seqs, d.max_running_seqs),
        kv_cache_peak_fraction=max(p.kv_cache_peak_fraction, d.kv_cache_peak_fraction),
        prefix_cache=p.prefix_cache,
    )


__all__ = [
    "TTFT_PARTS",
    "DisaggResult",
    "admit_transferred",
    "cut_content",
    "schedule_decode",
    "simulate_disagg",
    "transfer_seconds",
    "turn_decode",
]
