"""The simulation's state: requests running and waiting, the KV pool, the client, the clock.

:class:`State` holds what vLLM's ``Scheduler`` holds (vLLM 0.33.0,
``vllm/v1/core/sched/scheduler.py``): ``running`` (here a :class:`Rows` table, one column
per running request in admission order, the order of ``self.running``), ``waiting`` (a
deque of request indices, FCFS: ``self.waiting``), the block pool
(:class:`~allocator.sim.block_pool.BlockPool`) and, beside them, the benchmark client
(:class:`~allocator.sim.client.Client`), the policy as tables by decode batch size, the
uniforms every decode step draws from, and what the run records (per-request times, gaps
between chunks, decode steps by drafts and tokens).

A request's state, vLLM's ``Request`` fields (``vllm/v1/request.py``) in
:class:`Rows`: ``prompt`` (``num_prompt_tokens``), ``output`` (``max_tokens``),
``emitted`` (``num_output_tokens``), ``computed`` (``num_computed_tokens``), ``blocks``
(the blocks it holds), ``target`` (tokens to compute before it samples: prompt plus output
so far at admission), ``prefilling`` (vLLM's ``is_prefill_chunk``: 1 until its prefill
completes), ``chunks`` (chunks streamed), ``draw`` (index of its next decode step's
uniform), ``pending`` (under async scheduling: 1 while a step that samples for it is in
flight, vLLM's ``num_output_placeholders > 0``), ``carried`` (the policy entry of the
drafts it carries: the entry at the scheduled count of the last step it was scheduled in,
vLLM's ``spec_token_ids`` as ``update_draft_token_ids`` or the async placeholders set them;
set when its prefill completes, so a preempted request's is renewed before it decodes
again). A preempted or waiting request keeps its column in :attr:`State.saved`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..exceptions import ParameterError
from .block_pool import BlockPool
from .client import Client
from .config import Scheduler
from .policy import SpecPolicy
from .prefix_cache import PrefixCache
from .requests import Requests
from .results import SimResult

#: The fields of a request's column, in table order.
FIELDS = (
    "req_id",
    "prompt",
    "output",
    "emitted",
    "computed",
    "blocks",
    "target",
    "prefilling",
    "chunks",
    "draw",
    "pending",
    "carried",
)
#: Largest number of steps played at once by the decode-only fast path.
STRETCH_STEPS = 512


def _uniforms(output_tokens: np.ndarray, seed: int, extra: int = 0) -> np.ndarray:
    """``sum(output_tokens - 1) + extra`` uniforms of ``numpy.random.default_rng(seed)``:
    one per decode step of each request, request after request, then ``extra`` more."""
    steps = int((np.asarray(output_tokens, dtype=np.int64) - 1).sum())
    return np.random.default_rng(seed).random(steps + extra)


def decode_uniforms(output_tokens: np.ndarray, seed: int) -> list[np.ndarray]:
    """The uniforms :func:`~allocator.sim.simulate` with ``seed`` draws, per request:
    entry ``[i][d]`` serves request ``i``'s ``d``-th decode step (``d``-th step scheduled
    past its prefill, counted over its whole life, recomputations and steps cut by the
    budget included), ``output_tokens[i] - 1`` of them (a request decodes at most that
    often). That step emits ``searchsorted(cdf, u, "right")`` tokens, ``cdf`` the
    cumulative pmf of the step's policy entry with its last entry set to 1, at most the
    tokens it scheduled and its tokens left. For tests that replay the same draws
    elsewhere (a differential test against vLLM's scheduler)."""
    o = np.asarray(output_tokens, dtype=np.int64)
    u = _uniforms(o, seed)
    cuts = np.cumsum(o - 1)[:-1]
    return [part.copy() for part in np.split(u, cuts)]


class Rows:
    """Requests as columns of one ``(len(FIELDS), capacity)`` int64 :attr:`table`; each field
    is a named view of its row (``rows.computed[j]`` is column ``j``'s computed tokens), so a
    request moves as one column and finished ones are dropped in one copy."""

    req_id: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    emitted: np.ndarray
    computed: np.ndarray
    blocks: np.ndarray
    target: np.ndarray
    prefilling: np.ndarray
    chunks: np.ndarray
    draw: np.ndarray
    pending: np.ndarray
    carried: np.ndarray

    def __init__(self, capacity: int) -> None:
        self.table = np.zeros((len(FIELDS), capacity), dtype=np.int64)
        for row, name in enumerate(FIELDS):
            setattr(self, name, self.table[row])


class State:
    """Everything one run changes (see the module docstring).

    Running: ``running`` columns ``[0, n)``, ``last[j]`` the time of column ``j``'s last
    chunk, s; ``n_pref`` of them prefilling. Waiting: ``waiting`` (request indices, the
    front first). Per request ``(N,)``: ``first_sched``, ``first_token``, ``finish`` (s,
    NaN until then), ``preemptions``; ``saved`` holds a request's column while it does not
    run, ``saved_last`` its last chunk's time.

    The policy by decode batch size ``b = 0..max_num_seqs``: ``entry_of[b]`` (its range),
    ``k_of[b]``; per range ``cdfs[r]`` ``(k + 2,)`` (the pmf's running sum, last entry 1)
    and ``mean_tokens[r]``; ``L``: lookahead slots; ``pad_to``: ``1 + k`` under a static
    ``k > 0``, else 0. Draws: ``U`` ``(sum(output - 1) + STRETCH_STEPS + 1,)`` uniforms,
    request ``i``'s from ``u_start[i]``. Recorded: ``itl`` and ``itl_req`` ``(G,)`` (gaps,
    s, and their requests, ``pos`` of them filled), ``hist`` ``(2 · (K + 1) · (K + 2),)``
    decode steps by [uncut, drafts verified, tokens emitted]; ``t`` the clock, s; ``area``
    the time in system, request-seconds; ``steps``; ``max_running``.
    """

    def __init__(self, requests: Requests, policy: SpecPolicy, sched: Scheduler, seed: int) -> None:
        self.requests = requests
        self.policy = policy
        self.sched = sched
        self.seed = seed
        n_req = len(requests)
        self.N = n_req
        self.P = requests.prompt_tokens
        self.O = requests.output_tokens
        self.budget = sched.max_num_batched_tokens
        self.max_seqs = sched.max_num_seqs
        self.async_sched = sched.async_scheduling
        self.pool = BlockPool(sched.num_blocks, sched.block_size)
        self.client = Client(
            requests.arrival_s, sched.max_concurrency, requests.after, requests.think_s
        )
        #: named blocks and their hashes under prefix caching (else ``None``)
        self.cache = (
            PrefixCache(
                sched.num_blocks,
                sched.block_size,
                sched.hash_lookahead_tokens,
                requests.content,
                n_req,
            )
            if sched.enable_prefix_caching
            else None
        )
        # the policy as tables by decode batch size 0..max_num_seqs
        self.L = policy.lookahead if policy.max_k > 0 else 0  # vLLM's num_lookahead_tokens
        self.kmax = policy.max_k  # vLLM's num_speculative_tokens
        self.W = self.kmax + 2
        self.H = (self.kmax + 1) * self.W  # cells of one histogram (drafts x tokens)
        sizes = np.arange(1, self.max_seqs + 1)
        entries = np.searchsorted(np.asarray(policy.starts), sizes, side="right") - 1
        self.entry_arr = np.concatenate(([0], entries))
        self.entry_of = self.entry_arr.tolist()
        self.k_of = np.asarray(policy.ks)[self.entry_arr].tolist()
        self.k_by_entry = np.asarray(policy.ks, dtype=np.int64)  # drafts of each entry
        self.one_entry = len(policy.ks) == 1
        # a static k (one range: no dynamic schedule) pads a new 1-token prompt (scheduler)
        self.pad_to = 1 + self.kmax if self.one_entry and self.kmax > 0 else 0
        self.cdfs = []
        for p in policy.pmfs:
            cdf = np.cumsum(p)
            cdf[-1] = 1.0
            self.cdfs.append(cdf)
        self.mean_tokens = [float(p @ np.arange(p.size)) for p in policy.pmfs]
        self.check_fit()
        # one uniform per decode step of each request (at most output - 1 of them), laid out
        # request after request, plus padding read (never used) by a stretch's unused cells
        decode_steps = self.O - 1
        self.u_start = np.concatenate(([0], np.cumsum(decode_steps)[:-1]))
        self.U = _uniforms(self.O, seed, STRETCH_STEPS + 1)
        # running requests, admission order
        self.running = Rows(self.max_seqs)
        self.last = np.zeros(self.max_seqs)
        self.n = 0
        self.n_pref = 0
        self.waiting: deque[int] = deque()
        # per request
        nan = np.full(n_req, np.nan)
        self.first_sched = nan.copy()
        self.first_token = nan.copy()
        self.finish = nan.copy()
        self.saved = Rows(n_req)
        self.saved.req_id[:] = np.arange(n_req)
        self.saved.prompt[:] = self.P
        self.saved.output[:] = self.O
        self.saved.draw[:] = self.u_start
        self.saved_last = np.zeros(n_req)
        self.preemptions = np.zeros(n_req, dtype=np.int64)
        gaps = int(decode_steps.sum())
        self.itl = np.empty(gaps)
        self.itl_req = np.empty(gaps, dtype=np.int32)
        self.pos = 0
        # decode steps by [uncut, drafts verified, tokens emitted]
        self.hist = np.zeros(2 * self.H, dtype=np.int64)
        # clock and counters
        self.t = 0.0
        self.dt_decode = 0.0  # the last decode-only step's time
        self.area = 0.0
        self.steps = 0
        self.max_running = 0
        self.prev_count = 0  # requests scheduled in the last step played (its k is next)
        # async scheduling: a request's running column, looked up by request
        self.col_of = np.zeros(n_req, dtype=np.int64)
        self.cols = np.arange(self.max_seqs)
        self.zeros = np.zeros(self.max_seqs, dtype=np.int64)
        #: when a list, every step played appends its scheduled tokens (for tests)
        self.step_tokens: list[int] | None = None

    # ------------------------------------------------------------------ checks
    def check_fit(self) -> None:
        """Every request must be able to finish alone: its largest KV footprint (prompt +
        output - 1 tokens, plus ``k`` drafts at batch size 1 and the lookahead) in blocks
        must not exceed the usable blocks. Otherwise it would be preempted for ever."""
        k1 = self.k_of[1]
        slots = np.where(self.O > 1, self.P + self.O - 1 + k1, self.P) + self.L
        bs = self.pool.block_size
        blocks = -(-slots // bs)
        usable = self.pool.usable
        bad = np.flatnonzero(blocks > usable)
        if bad.size:
            i = int(bad[0])
            what = "prompt" if -(-(self.P[i] + self.L) // bs) > usable else "request"
            raise ParameterError(
                "kv_cache_tokens",
                f"request {i}'s {what} does not fit the KV cache: prompt {int(self.P[i])} + "
                f"output {int(self.O[i])} tokens need {int(blocks[i])} blocks of {bs} "
                f"(with {k1} drafts and {self.L} lookahead slots), the cache holds "
                f"{usable} ({self.sched.kv_cache_tokens} tokens in {self.pool.num_gpu_blocks} "
                "blocks, one of them vLLM's null block)",
            )

    # ------------------------------------------------------------------ client
    def take_sends(self) -> None:
        """Requests the client has sent by now join the waiting queue (FCFS)."""
        t = self.t
        client = self.client
        while True:
            s = client.next_send_time()
            if s > t:
                return
            i = client.next_request()
            client.sent[i] = s
            self.waiting.append(i)
            self.area += t - s
            client.advance()

    def draw(self, di: np.ndarray | slice, sd: np.ndarray | int, cdf: np.ndarray) -> tuple:
        """The tokens each decoding column ``di`` emits this step: its next draw from
        ``cdf``, cut at the ``sd`` tokens it scheduled and at what its output has left,
        counted in the histogram; ``emitted``, ``chunks`` and ``draw`` advanced. Returns
        ``(em, rem)``: tokens emitted and what was left before, one per column."""
        run = self.running
        J = np.searchsorted(cdf, self.U[run.draw[di]], side="right")
        e = run.emitted[di]
        rem = run.output[di] - e
        em = np.minimum(np.minimum(J, sd), rem)
        self.hist += np.bincount(
            em + (sd - 1) * self.W + (rem >= sd) * self.H, minlength=2 * self.H
        )
        run.emitted[di] = e + em  # (a new array: ``e`` may be a view of the table)
        run.chunks[di] += 1
        run.draw[di] += 1
        return em, rem

    def draw_carried(
        self, di: np.ndarray, sd: np.ndarray, ents: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`draw` for decoding columns ``di`` each verifying the drafts of its own
        policy entry ``ents`` (the drafts it carried), each from that entry's pmf."""
        em = np.empty(di.size, dtype=np.int64)
        rem = np.empty(di.size, dtype=np.int64)
        for e in np.unique(ents).tolist():
            sel = ents == e
            em[sel], rem[sel] = self.draw(di[sel], sd[sel], self.cdfs[e])
        return em, rem

    def gaps(self, cols: np.ndarray | slice, t1: float, pos: int) -> int:
        """Running columns ``cols`` stream a chunk at ``t1``: the gap since each one's last
        chunk is recorded from ``pos`` on; returns the next free position."""
        run = self.running
        ids = run.req_id[cols]
        g = ids.size
        self.itl[pos : pos + g] = t1 - self.last[cols]
        self.itl_req[pos : pos + g] = ids
        self.last[cols] = t1
        return pos + g

    def emit_one(self, cols: np.ndarray, t1: float, pos: int) -> int:
        """Running columns ``cols`` complete a prefill at ``t1`` and emit one token: a
        request's first token, or (after a recomputation) the next one, a gap since its last
        chunk, recorded from ``pos``; returns the next free position."""
        run = self.running
        fresh = cols[run.emitted[cols] == 0]
        if fresh.size:
            self.first_token[run.req_id[fresh]] = t1
        pos = self.gaps(cols[run.emitted[cols] > 0], t1, pos)
        run.emitted[cols] += 1
        run.chunks[cols] += 1
        self.last[cols] = t1
        return pos

    def finish_rows(self, done: np.ndarray, times: np.ndarray | float) -> None:
        """Running columns ``done`` (bool over the ``n`` columns) finished, at ``times`` (one
        per finished column, or one for all); their blocks are freed (vLLM's
        ``_free_request``) and the client's slots free up in time order."""
        n = self.n
        run = self.running
        ids = run.req_id[:n][done]
        self.finish[ids] = times
        self.saved.chunks[ids] = run.chunks[:n][done]
        cache = self.cache
        if cache is None:
            self.pool.used -= int(run.blocks[:n][done].sum())
        else:  # in column order (vLLM frees in the order the step scheduled them)
            for i in ids.tolist():
                cache.free(i)
                cache.forget(i)
            self.pool.used = self.pool.usable - cache.free_count
        m = ids.size
        self.client.finish(times, m, ids)
        keep = ~done
        n2 = n - m
        run.table[:, :n2] = run.table[:, :n][:, keep]
        self.last[:n2] = self.last[:n][keep]
        self.n = n2

    # ------------------------------------------------------------------ output
    def result(self) -> SimResult:
        """The run as a :class:`~allocator.sim.results.SimResult`."""
        pos = self.pos
        shape = (self.kmax + 1, self.W)
        uncut = self.hist[self.H :].reshape(shape)
        return SimResult(
            requests=self.requests,
            sent_s=self.client.sent,
            first_scheduled_s=self.first_sched,
            first_token_s=self.first_token,
            finish_s=self.finish,
            output_tokens=np.where(np.isfinite(self.finish), self.O, self.saved.emitted),
            chunks=self.saved.chunks.copy(),
            preemptions=self.preemptions.copy(),
            itl_s=self.itl[:pos].copy(),
            itl_request=self.itl_req[:pos].astype(np.int64),
            decode_steps=self.hist[: self.H].reshape(shape) + uncut,
            uncut_decode_steps=uncut.copy(),
            duration_s=float(self.t),
            steps=int(self.steps),
            time_in_system_s=float(self.area),
            max_running_seqs=int(self.max_running),
            kv_cache_peak_fraction=self.pool.peak_fraction,
            scheduler=self.sched,
            policy=self.policy,
            seed=self.seed,
            prefix_cache=cache_counts(self.cache),
        )


def cache_counts(cache: PrefixCache | None) -> tuple[int, int, int, int]:
    """``(queries, hits, preempted_queries, preempted_hits)``, tokens (zeros without
    prefix caching)."""
    if cache is None:
        return (0, 0, 0, 0)
    return (cache.queries, cache.hits, cache.preempted_queries, cache.preempted_hits)


__all__ = ["FIELDS", "cache_counts", "STRETCH_STEPS", "Rows", "State", "decode_uniforms"]
