"""One engine step as vLLM's V1 scheduler schedules it, and its output played.

vLLM 0.33.0, ``vllm/v1/core/sched/scheduler.py``. :func:`schedule` follows
``Scheduler.schedule`` (lines 699-1640) in its order; :func:`update_from_output` follows
``Scheduler.update_from_output`` (lines 2259-2770) for what a step emits. The rules:

* **Running requests first** (:func:`schedule_running`), in admission order
  (``self.running``, the loop at line 795), while the token budget
  ``max_num_batched_tokens`` is positive: a request still prefilling asks for the rest of
  its prompt, a decoding one for ``1 + k`` tokens (its last sampled token and ``k``
  drafts: ``num_tokens_with_spec - num_computed_tokens``); the budget cuts the request where
  it runs out (``min(num_new_tokens, token_budget, ...)``, line 847), so a decode cut to
  ``s < 1 + k`` verifies ``s - 1`` drafts, and the requests after it wait.
* **KV blocks** (:func:`allocate_slots`) for each scheduled request: enough blocks of
  ``block_size`` for its computed tokens, the tokens scheduled now and ``lookahead_tokens``
  more for the drafter (``allocate_slots(request, num_new_tokens, num_lookahead_tokens=
  ...)``, line 914; ``vllm/v1/core/kv_cache_manager.py``, ``allocate_slots``, lines
  380-625: slots ``num_computed + num_new + num_lookahead`` at line 552, refused when the
  new blocks exceed the free ones, line 586). Blocks stay with a request until it finishes
  or is preempted: rejected drafts roll back its computed tokens, not its blocks. The pool
  hands out all its blocks but the null block (:mod:`allocator.sim.block_pool`).
* **Preemption** (:func:`preempt`): when a running request's blocks cannot be allocated,
  the newest running request (``self.running[-1]``, line 938, FCFS policy;
  ``self.running.pop()``, line 970) is preempted and the allocation retried, until it fits
  or the request preempted itself (line 978), which ends the running loop (line 993). A
  preempted request loses its KV cache and its computed tokens (``_preempt_request``,
  lines 1799-1843: ``num_computed_tokens = 0``, line 1822) and its drafts, keeps its output
  tokens and goes back to the *front* of the waiting queue (``prepend_request``, line
  1842); admitted again, it recomputes prompt plus output so far (``num_new_tokens =
  request.num_tokens - num_computed_tokens``, line 1306). The tokens it had streamed stay
  streamed; the step that finishes the recomputation samples its next token.
* **Waiting requests** (:func:`schedule_waiting`) only in a step that preempted nothing
  (``if not preempted_reqs``, line 1050), first come first served while the budget is
  positive and fewer than ``max_num_seqs`` run (line 1073). The blocks of the whole prompt
  (prompt plus output so far, for a recomputation) must be free and its first chunk's
  blocks plus the lookahead must fit (``allocate_slots(..., full_sequence_must_fit=
  self.scheduler_reserve_full_isl)``, line 1449; ``scheduler_reserve_full_isl`` defaults to
  True, ``vllm/config/scheduler.py`` line 190; the check is ``kv_cache_manager.py`` lines
  531-548); the first that does not fit stops admission (line 1454). A prompt longer than
  the budget left is cut there (line 1346) and continues as a running request (chunked
  prefill). A new request with one token to compute (a 1-token prompt), when the policy
  has a static ``k > 0`` (one range: vLLM's ``dynamic_sd_lookup is None``), running
  requests were scheduled and none was a prefill chunk, is padded to ``1 + k`` tokens
  (placeholder drafts, all rejected: lines 1309-1330), or not admitted in this step when
  the budget left is smaller ("prefer to not schedule than schedule un-padded"). Its step
  takes ``1 + k`` tokens of the budget and blocks for ``1 + k`` plus the lookahead; it
  counts one prompt token in the step time.
* **Tokens** (:func:`update_from_output`): the step in which a prompt's prefill completes
  emits the request's first token (a partial chunk emits nothing); the request decodes
  from the next step. A decoding sequence emits ``j`` tokens with probability ``pmf[j]``
  of the policy at the step's decode batch size, never more than it scheduled nor past its
  output length (the rejected drafts roll ``num_computed_tokens`` back, line 2362;
  ``check_stop`` trims the tokens at ``max_tokens``: ``_update_request_with_output``,
  lines 2744-2770). The request finishes in the step that emits its last token and frees
  its blocks.

* **The step's k** (dynamic speculative decoding): the drafts a decoding request verifies
  were proposed after the previous step, ``num_spec_tokens_to_schedule =
  dynamic_sd_lookup[len(num_scheduled_tokens)]`` of that step (line 1710-1713: every request
  it scheduled counts, prefill chunks and admissions included); the step's pmf is the
  policy's entry at that count. With one range (a static ``k``) it is that ``k``. A
  decoding request left out of the previous step (the budget ran out before it) carries
  the drafts of the step it was last scheduled in: ``schedule`` takes
  ``request.spec_token_ids`` (lines 1010-1025), which ``update_draft_token_ids`` (lines
  2862-2881) sets after a step only for that step's requests, and
  ``AsyncScheduler._update_after_schedule`` (``async_scheduler.py`` lines 24-49) sets as
  placeholders when a step is scheduled; so it asks for ``1 + k`` of that step's ``k`` and
  draws from that entry's pmf (``State.running.carried``). The step time is asked at the
  step's ``k``.
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import ParameterError
from .config import StepTime
from .state import State

_EMPTY = np.zeros(0, dtype=np.int64)


class Scheduled:
    """What :func:`schedule` chose (vLLM's ``SchedulerOutput``).

    Running columns ``[0, m)`` scheduled, ``s`` tokens each (an int when all decode
    ``1 + k``, else ``(m,)``); ``plain``: every running request was decoding; ``k`` and
    ``entry``: the policy's ``k`` and pmf index at the decode batch; ``ents``: ``None``
    when every decoding request carries the drafts of ``entry``, else ``(n,)`` the entry
    each running column verifies (its carried drafts; ``entry`` for the others); ``admitted``: the
    waiting requests admitted, ``(column, request, prompt chunk, tokens to compute past
    the cache hit, tokens taken)`` (taken: the chunk, or ``1 + k`` for a padded 1-token prompt);
    ``tokens``: tokens scheduled in all, padding included.
    """

    __slots__ = ("admitted", "ents", "entry", "k", "m", "plain", "s", "tokens")

    def __init__(self) -> None:
        self.m = 0
        self.s: np.ndarray | int = _EMPTY
        self.plain = True
        self.k = 0
        self.entry = 0
        self.ents: np.ndarray | None = None
        self.admitted: list[tuple[int, int, int, int, int]] = []
        self.tokens = 0


def schedule(state: State) -> Scheduled:
    """Running requests, then (if none was preempted) waiting ones (vLLM's ``schedule``)."""
    out = Scheduled()
    preempted = schedule_running(state, out) if state.n else False
    if not preempted:
        schedule_waiting(state, out)
    pool = state.pool
    pool.note_peak()
    if state.n > state.max_running:
        state.max_running = state.n
    return out


def schedule_running(state: State, out: Scheduled) -> bool:
    """The running loop: tokens for columns ``[0, m)`` under the budget, then their blocks
    (preempting from the newest when they run out). Returns whether it preempted."""
    run = state.running
    n = state.n
    budget = state.budget
    out.plain = plain = state.n_pref == 0  # every running request is decoding
    skip = None
    if state.async_sched:
        # AsyncScheduler: a request whose step in flight is sure to reach its max_tokens
        # is skipped, no budget taken (line 800-815: ``num_computed_tokens + 2 -
        # num_output_placeholders >= num_prompt_tokens + max_tokens``, that is, its
        # known output plus the one token the step in flight surely samples)
        skip = (run.pending[:n] > 0) & (run.emitted[:n] + 1 >= run.output[:n])
        if skip.any():
            out.plain = plain = False  # (the general path, the skipped asking for 0)
    # the drafts verified now were proposed after the previous step, as many as the
    # policy gives at the number of requests scheduled in it (dynamic_sd_lookup); a
    # request left out of it carries those of the step it was last scheduled in
    prev = state.prev_count
    if not state.one_entry and n > state.n_pref:
        r0 = state.entry_of[prev]
        carried = run.carried[:n]
        dec = run.prefilling[:n] == 0
        if (dec & (carried != r0)).any():
            out.ents = np.where(dec, carried, r0)
            out.plain = plain = False
    if plain:
        out.entry = state.entry_of[prev]
        out.k = k = state.k_of[prev]
        if n * (1 + k) <= budget:
            m, s, scheduled = n, 1 + k, n * (1 + k)
        else:  # the budget cuts the decode batch
            m = -(-budget // (1 + k))
            s = np.full(m, 1 + k, dtype=np.int64)
            s[-1] = budget - (m - 1) * (1 + k)
            scheduled = budget
    else:
        pref = run.prefilling[:n] != 0
        decoding = n - state.n_pref
        out.entry = state.entry_of[prev]
        k = state.k_of[prev] if decoding else 0
        out.k = k
        drafts = k if out.ents is None else state.k_by_entry[out.ents]
        demand = np.where(pref, run.target[:n] - run.computed[:n], 1 + drafts)
        if skip is not None:
            demand[skip] = 0
        cum = demand.cumsum()
        if cum[-1] <= budget:
            m, s, scheduled = n, demand, int(cum[-1])
        else:
            before = cum - demand
            m = int(np.searchsorted(before, budget, side="left"))
            s = np.minimum(demand[:m], budget - before[:m])
            scheduled = budget
    # their KV blocks: computed + scheduled + lookahead slots, less the blocks held
    bs = state.pool.block_size
    need = np.maximum((run.computed[:m] + s + (state.L + bs - 1)) // bs - run.blocks[:m], 0)
    total = int(need.sum())
    preempted = False
    cache = state.cache
    if total <= state.pool.free:
        state.pool.used += total
        if cache is not None:
            grow(state, 0, m, need)
    else:
        m = allocate_slots(state, need, m)
        preempted = True
        need = need[:m]
        if isinstance(s, np.ndarray):
            s = s[:m]
            scheduled = int(s.sum())
        else:
            scheduled = m * s
    run.blocks[:m] += need
    if cache is not None:
        cache_full(state, m, s)
    out.m, out.s, out.tokens = m, s, scheduled
    return preempted


def cache_output(state: State, M: int, cols: np.ndarray | None = None) -> None:
    """Prefix caching at a step's output: each running column of ``cols`` (default
    ``[0, M)``) that has sampled, past its prefill, enters its full blocks of verified
    tokens (``update_from_output``, ``scheduler.py`` lines 2401-2415: ``cache_blocks(request,
    num_computed_tokens - num_in_flight_tokens)`` for a running request that received
    tokens, when speculation is configured or the step had output placeholders, that is
    under async scheduling; the computed tokens are then its tokens but the newest)."""
    cache = state.cache
    assert cache is not None
    run = state.running
    if cols is None:
        cols = np.flatnonzero(run.prefilling[:M] == 0)
    ids = run.req_id[cols]
    known = run.prompt[cols] + run.emitted[cols]
    full = np.minimum(known - 1, known - cache.lookahead) // cache.B
    for j in np.flatnonzero(full > cache.cached[ids]).tolist():
        cache.cache(int(ids[j]), int(full[j]))


def grow(state: State, lo: int, hi: int, need: np.ndarray) -> None:
    """Prefix caching: running columns ``[lo, hi)`` take ``need[lo:hi]`` fresh blocks from
    the free queue, in column order (vLLM allocates request after request)."""
    cache = state.cache
    assert cache is not None
    ids = state.running.req_id
    for j in (np.flatnonzero(need[lo:hi]) + lo).tolist():
        cache.grow(int(ids[j]), int(need[j]))


def cache_full(state: State, m: int, s: np.ndarray | int) -> None:
    """Prefix caching: each scheduled running column ``[0, m)`` enters its full blocks up to
    ``min(computed + scheduled, num_tokens)`` tokens that have a hash
    (``kv_cache_manager.py`` lines 596-602)."""
    cache = state.cache
    assert cache is not None
    run = state.running
    ids = run.req_id[:m]
    known = run.prompt[:m] + run.emitted[:m]
    upto = np.minimum(run.computed[:m] + s, known)
    full = np.minimum(upto, known - cache.lookahead) // cache.B
    more = full > cache.cached[ids]
    if isinstance(s, np.ndarray):
        more &= s[:m] > 0  # (a request skipped under async scheduling allocates nothing)
    for j in np.flatnonzero(more).tolist():
        cache.cache(int(ids[j]), int(full[j]))


def allocate_slots(state: State, need: np.ndarray, m: int) -> int:
    """Allocate ``need`` blocks to running columns ``[0, m)`` in order, preempting the
    newest running request whenever a column does not fit, until it fits or preempts
    itself (which ends the columns scheduled). Returns the number of columns scheduled;
    their blocks are counted in the pool."""
    pool = state.pool
    free = pool.free
    done = 0  # columns [0, done) have their blocks
    while done < m:
        cr = np.cumsum(need[done:m])
        over = cr > free
        if not over.any():
            pool.used = pool.usable - (free - int(cr[-1]))
            if state.cache is not None:
                grow(state, done, m, need)
            return m
        j = done + int(np.argmax(over))
        if j > done:
            free -= int(cr[j - done - 1])
            if state.cache is not None:
                grow(state, done, j, need)  # (before the preemptions free blocks)
        done = j
        while True:
            victim = state.n - 1
            free += preempt(state)
            if victim == j:
                pool.used = pool.usable - free
                return j
            if need[j] <= free:
                break
        m = min(m, state.n)
    pool.used = pool.usable - free
    return m


def preempt(state: State) -> int:
    """Preempt the newest running request (recompute): back to the waiting queue's front
    with its output so far. Returns the blocks it frees (the caller counts them)."""
    row = state.n - 1
    run = state.running
    i = int(run.req_id[row])
    state.saved.table[:, i] = run.table[:, row]
    state.saved_last[i] = state.last[row]
    state.preemptions[i] += 1
    state.saved.pending[i] = 0  # vLLM: num_output_placeholders = 0 (line 1836)
    if run.prefilling[row]:
        state.n_pref -= 1
    state.waiting.appendleft(i)
    state.n = row
    if state.cache is not None:
        return state.cache.free(i)  # (shared blocks stay with the others)
    return int(run.blocks[row])


def schedule_waiting(state: State, out: Scheduled) -> None:
    """Admit waiting requests first come first served while the budget, ``max_num_seqs``
    and the free blocks allow (the whole prompt's blocks free, the first chunk's taken).
    Under prefix caching a request starts from its cache hit: its computed tokens are the
    hit's, it computes the rest, and its blocks are the hit's plus fresh ones."""
    run = state.running
    saved = state.saved
    waiting = state.waiting
    budget_left = state.budget - out.tokens
    pool = state.pool
    bs, L = pool.block_size, state.L
    cache = state.cache
    pad = state.pad_to
    # vLLM pads a request with one token to compute when no running request was a prefill
    # chunk and running requests were scheduled or the request has computed tokens (a
    # cache hit): ``not prefill_scheduled and (scheduled_running_reqs or
    # num_computed_tokens > 0)``, scheduler.py lines 1309-1330
    running_scheduled = out.m > 0
    if pad:
        if running_scheduled and isinstance(out.s, np.ndarray) and state.async_sched:
            running_scheduled = bool((out.s[: out.m] > 0).any())  # (skipped: not scheduled)
        if not out.plain and run.prefilling[: out.m].any():
            pad = 0  # a running request was a prefill chunk
    free = pool.free
    while budget_left > 0 and waiting and state.n < state.max_seqs:
        i = waiting[0]
        tokens = int(saved.prompt[i] + saved.emitted[i])
        hit: list[int] = []
        held = evict = 0
        if cache is not None:
            hit = cache.lookup(i, tokens)
            held = len(hit)
            evict = cache.evictable(hit)
        computed = held * bs
        rest = tokens - computed
        chunk = min(rest, budget_left)
        taken = chunk
        if pad and rest == 1 and (running_scheduled or computed > 0):
            taken = pad
            if taken > budget_left:
                break
        blocks = -(-(computed + taken + L) // bs)
        # the whole prompt must fit before its first chunk is admitted (vLLM's
        # scheduler_reserve_full_isl); the chunk's blocks are what it takes now; hit blocks
        # taken off the free queue count against it (num_evictable_blocks)
        if max(blocks, -(-tokens // bs)) - held + evict > free:
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
        if cache is not None:
            cache.record(tokens, computed, bool(state.preemptions[i]))
            cache.admit(i, hit, blocks - held)
            cache.cache(i, min(computed + chunk, tokens - cache.lookahead) // bs)
            free = cache.free_count
        else:
            free -= blocks
        if math.isnan(state.first_sched[i]):
            state.first_sched[i] = state.t
        budget_left -= taken
        out.tokens += taken
        out.admitted.append((row, i, chunk, rest, taken))
    pool.used = pool.usable - free


def step_seconds(step_ms: StepTime, b: int, k: int, ctx: float, prefill: int) -> float:
    """One step's wall time, s, from the caller's ``step_ms`` (checked)."""
    ms = step_ms(b, k, ctx, prefill)
    try:
        value = float(ms)
    except (TypeError, ValueError):
        raise ParameterError("step_ms", f"must return a number of ms, got {ms!r}") from None
    if not (value >= 0.0 and math.isfinite(value)):
        raise ParameterError(
            "step_ms",
            f"must be finite and >= 0, got {value} at decode_seqs={b}, k={k}, "
            f"context_tokens={ctx:.1f}, prefill_tokens={prefill}",
        )
    return value / 1000.0


def update_from_output(state: State, out: Scheduled, step_ms: StepTime) -> None:
    """Play the scheduled step: its time from ``step_ms``, the tokens every scheduled
    request emits, first tokens, gaps between chunks, finishes (vLLM's
    ``update_from_output``)."""
    run = state.running
    m = out.m
    admitted = out.admitted
    M = m + len(admitted)
    if M == 0:  # nothing scheduled (the only running request preempted itself)
        return
    if state.step_tokens is not None:
        state.step_tokens.append(out.tokens)
    n_sys = state.n + len(state.waiting)
    k, r, s = out.k, out.entry, out.s
    # scheduled: running columns [0, m), decoding (di) or continuing a prefill (pi), and the
    # columns admitted now, [m, M)
    di: slice | np.ndarray
    pi: np.ndarray | None = None
    if out.plain:
        di = slice(0, m)
        b = m
        sd = s
        prefill_tokens = 0
    else:
        pref = run.prefilling[:m] != 0
        di, pi = np.flatnonzero(~pref), np.flatnonzero(pref)
        b = di.size
        sd = s[di]  # type: ignore[index]
        s_run = s[pi]  # type: ignore[index]
        prefill_tokens = int(s_run.sum())
    for _, _, chunk, _, _ in admitted:
        prefill_tokens += chunk
    if b:
        dt = step_seconds(step_ms, b, k, int(run.computed[di].sum()) / b, prefill_tokens)
    else:
        dt = step_seconds(step_ms, 0, 0, 0.0, prefill_tokens)
    t1 = state.t + dt
    pos = state.pos
    itl, itl_req, last = state.itl, state.itl_req, state.last
    finished = False
    if b:
        # every decoding sequence emits its draw, cut at what it scheduled and its output
        if out.ents is None:
            em, rem = state.draw(di, sd, state.cdfs[r])
        else:  # (each from the pmf of the drafts it carried)
            em, rem = state.draw_carried(di, sd, out.ents[di])  # type: ignore[arg-type]
        run.computed[di] = run.prompt[di] + run.emitted[di] - 1
        pos = state.gaps(di, t1, pos)
        finished = bool((em == rem).any())
    if pi is not None and pi.size:
        # running prefills continue; one that completes emits a token (the next after a
        # recomputation: a gap since the request's last chunk)
        c = run.computed[pi] + s_run
        run.computed[pi] = c
        complete = pi[c >= run.target[pi]]
        if complete.size:
            pos = state.emit_one(complete, t1, pos)
            run.prefilling[complete] = 0
            state.n_pref -= complete.size
            finished = True
    for row, i, chunk, rest, _ in admitted:
        run.computed[row] += chunk  # a padded request's placeholder drafts are rejected
        if chunk == rest:  # the rest of the prompt (and output so far) in one chunk
            if run.emitted[row]:
                itl[pos] = t1 - last[row]
                itl_req[pos] = i
                pos += 1
            else:
                state.first_token[i] = t1
            run.emitted[row] += 1
            run.prefilling[row] = 0
            run.chunks[row] += 1
            last[row] = t1
            state.n_pref -= 1
            finished = True
    state.pos = pos
    if state.cache is not None and state.kmax > 0:
        # with drafts, the blocks the step's verified tokens filled are cached at its
        # output (the newest token, not yet computed, left out)
        cache_output(state, M)
    state.area += n_sys * dt
    state.t = t1
    if not prefill_tokens:
        state.dt_decode = dt
    state.steps += 1
    state.prev_count = M
    if not state.one_entry:  # the drafts proposed after this step (update_draft_token_ids)
        run.carried[:M] = state.entry_of[M]
    if finished:
        done = run.emitted[:M] >= run.output[:M]
        if done.any():
            full = np.zeros(state.n, dtype=bool)
            full[:M] = done
            state.finish_rows(full, t1)


__all__ = [
    "Scheduled",
    "allocate_slots",
    "cache_full",
    "cache_output",
    "grow",
    "preempt",
    "schedule",
    "schedule_running",
    "schedule_waiting",
    "step_seconds",
    "update_from_output",
]
