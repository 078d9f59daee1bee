"""Async scheduling: each step scheduled while the step before it runs.

vLLM 0.33.0 runs its engine with a batch queue of two steps when ``async_scheduling`` is on
(``VllmConfig.max_concurrent_batches``, ``vllm/config/vllm.py`` lines 588-598: 2 without
pipeline parallelism) and ``AsyncScheduler`` (``vllm/v1/core/sched/async_scheduler.py``).
``EngineCore.step_with_batch_queue`` (``vllm/v1/engine/core.py`` lines 708-817) schedules a
step and, when the queue was empty, returns at once and schedules the next; once the queue
holds two steps it waits for the older one's output and processes it
(``update_from_output``). So, with no time spent on the CPU, step ``n + 1`` is scheduled
when step ``n`` starts on the GPU, from what steps up to ``n - 1`` returned, and it runs
when step ``n`` ends. What follows, each as the source has it:

* **Tokens in flight count as computed.** ``_update_after_schedule`` (``scheduler.py``
  lines 1845-1877) adds a step's scheduled tokens to ``num_computed_tokens`` when it is
  scheduled and decides ``is_prefill_chunk`` then; ``AsyncScheduler._update_after_schedule``
  adds ``1 + drafts`` output placeholders to each request that samples in it and gives it
  placeholder drafts (``_spec_token_placeholders``, as many as the step's
  ``num_spec_tokens_to_schedule``). So the next step asks for ``1 + k`` tokens and for KV
  blocks as if every draft in flight were accepted (``allocate_slots`` counts
  ``num_computed_tokens``): more KV, preemption sooner.
* **Output processed one step late.** ``update_from_output`` of step ``n`` rolls back the
  rejected drafts and the placeholders (lines 2355-2366, 2766-2769), emits the tokens and
  finishes requests; a finished request frees its blocks (``_free_request``) and its client
  slot only then, after step ``n + 1`` was scheduled without them.
* **An extra step.** A request is scheduled again while a step that samples for it is in
  flight unless that step surely reaches ``max_tokens`` (lines 800-815); when it does reach
  it (drafts accepted), the extra step's tokens are computed and dropped
  (``update_from_output`` skips a request already freed, lines 2322-2331).
* **Preempted in flight.** A request preempted while a step of it is in flight
  (``_preempt_request``, lines 1799-1843) gets its tokens from that step all the same
  (``num_stale_output_tokens``: appended, streamed, ``check_stop`` may finish it in the
  waiting queue; its rollback is not applied, lines 2312-2366), and is re-admitted only
  after that output (it is preempted by the scheduling of the next step, which admits
  nothing, line 1050).
* **Arrivals wait one more step.** Requests sent while step ``n`` runs are seen by the
  scheduling of step ``n + 2``, at step ``n``'s end, and run after step ``n + 1``.
* **An empty step resynchronises.** When a scheduling finds nothing to run it still takes
  its place in the queue (``step_with_batch_queue``): the engine waits for the step in
  flight and processes it, and the next step is scheduled with nothing in flight.

Each step's wall time is ``step_ms`` at the scheduler's view when it is scheduled (the
context of a decoding request counts the tokens of the step in flight). Stretches where
nothing but decoding can happen are played several turns of the loop at once
(:func:`decode_stretch`, as :mod:`allocator.sim.fast_path` does without async scheduling),
with the same result as turn by turn.
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import ParameterError
from .config import StepTime
from .fast_path import STRETCH_CELLS, ManyStepTimes
from .scheduler import Scheduled, cache_output, schedule, step_seconds
from .state import STRETCH_STEPS, State

_STEPS = np.arange(STRETCH_STEPS)[:, None]


class InFlight:
    """A step scheduled and not yet processed: the requests it scheduled (``ids``), their
    tokens (``s``), what each does (``kind``: 0 decodes, 1 a prefill chunk that leaves
    prompt to compute, 2 a chunk that completes the prompt and samples), the placeholder
    drafts a padded prompt rolls back (``roll``), its ``k``, pmf ``entry`` (or per id,
    ``ents``, the entry of the drafts each carried; ``None``: ``entry`` for all), tokens and
    end time."""

    __slots__ = ("end", "ents", "entry", "ids", "k", "kind", "plain", "roll", "s", "tokens")

    def __init__(self, out: Scheduled) -> None:
        self.k = out.k
        self.entry = out.entry
        self.ents: np.ndarray | None = None
        self.tokens = out.tokens
        self.end = 0.0
        self.ids = np.zeros(0, dtype=np.int64)
        self.s = self.ids
        self.kind = self.ids
        self.roll = self.ids
        self.plain = False  # running columns [0, len(ids)) all decoding, nothing else


def launch(state: State, out: Scheduled, step_ms: StepTime, start: float) -> InFlight:
    """The step's wall time (the scheduler's view now), then vLLM's
    ``_update_after_schedule``: the scheduled tokens computed, prefills that complete no
    longer prefill, placeholders for the requests that sample."""
    run = state.running
    m = out.m
    s = out.s if isinstance(out.s, np.ndarray) else np.full(m, out.s, dtype=np.int64)
    if not out.admitted and state.n_pref == 0 and out.ents is None and int(s[:m].min()) > 0:
        return _launch_decodes(state, out, s[:m], step_ms, start)
    cols = np.flatnonzero(s[:m] > 0)
    sc = s[cols]
    pref = run.prefilling[cols] != 0
    dec = cols[~pref]
    prefill = int(sc[pref].sum())
    rows = [a[0] for a in out.admitted]
    for _, _, chunk, _, _ in out.admitted:
        prefill += chunk
    b = dec.size
    if b:
        ctx = int(run.computed[dec].sum()) / b
        dt = step_seconds(step_ms, b, out.k, ctx, prefill)
    else:
        dt = step_seconds(step_ms, 0, 0, 0.0, prefill)
    f = InFlight(out)
    f.end = start + dt
    # the tokens scheduled count as computed now
    run.computed[cols] += sc
    kind = np.where(pref, 1, 0)
    done = pref & (run.computed[cols] >= run.target[cols])
    kind[done] = 2
    run.prefilling[cols[done]] = 0
    state.n_pref -= int(done.sum())
    roll = np.zeros(cols.size + len(rows), dtype=np.int64)
    kinds = [kind]
    taken = []
    for j, (row, _, chunk, rest, took) in enumerate(out.admitted):
        run.computed[row] += took  # (from the cache hit's tokens)
        taken.append(took)
        if chunk == rest:  # completes the prompt (and output so far): it samples
            run.prefilling[row] = 0
            state.n_pref -= 1
            roll[cols.size + j] = took - chunk  # a padded prompt's placeholder drafts
            kinds.append(np.array([2]))
        else:
            kinds.append(np.array([1]))
    every = np.concatenate((cols, np.asarray(rows, dtype=np.int64)))
    f.kind = np.concatenate(kinds)
    f.ids = run.req_id[every].copy()
    f.s = np.concatenate((sc, np.asarray(taken, dtype=np.int64)))
    f.roll = roll
    if out.ents is not None:
        f.ents = np.concatenate((out.ents[cols], np.full(len(rows), out.entry, dtype=np.int64)))
    if not state.one_entry:  # placeholders: the drafts of this step's count
        run.carried[every] = state.entry_of[every.size]
    run.pending[every[f.kind != 1]] += 1
    state.steps += 1  # (an extra step still in flight when the last request finishes counts)
    if state.step_tokens is not None:
        state.step_tokens.append(out.tokens)
    state.prev_count = every.size  # the next step's k (dynamic_sd_lookup)
    return f


def _launch_decodes(
    state: State, out: Scheduled, sc: np.ndarray, step_ms: StepTime, start: float
) -> InFlight:
    """:func:`launch` when the step only decodes running columns ``[0, m)`` (the common
    case, with fewer array operations; the same result)."""
    run = state.running
    m = sc.size
    comp = run.computed[:m]
    f = InFlight(out)
    f.end = start + step_seconds(step_ms, m, out.k, int(comp.sum()) / m, 0)
    comp += sc
    run.pending[:m] += 1
    f.ids = run.req_id[:m].copy()
    f.s = sc.copy()
    f.kind = state.zeros[:m]
    f.roll = f.kind
    f.plain = True
    if not state.one_entry:
        run.carried[:m] = state.entry_of[m]
    state.steps += 1
    if state.step_tokens is not None:
        state.step_tokens.append(out.tokens)
    state.prev_count = m
    return f


def process(state: State, f: InFlight) -> None:
    """vLLM's ``update_from_output`` for the step in flight, at its end: tokens emitted
    (the drafts rejected rolled back), first tokens, gaps, finishes; a request preempted
    meanwhile gets its tokens in the waiting queue; one finished meanwhile gets nothing."""
    run = state.running
    n = state.n
    t1 = f.end
    state.area += (n + len(state.waiting)) * (t1 - state.t)
    state.t = t1
    size = f.ids.size
    if f.plain and n >= size and bool((run.req_id[:size] == f.ids).all()):
        _process_decodes(state, f, size, t1)  # every column where it was, all decoding
        return
    if n:
        where = state.col_of
        where[run.req_id[:n]] = state.cols[:n]
        col = np.minimum(where[f.ids], n - 1)
        here = run.req_id[col] == f.ids  # (an entry left by a request gone is stale)
    else:
        col = np.zeros(f.ids.size, dtype=np.int64)
        here = col != 0
    pos = state.pos
    cdf = state.cdfs[f.entry]
    finished = False
    sel = here & (f.kind == 0)
    di = col[sel]
    if di.size:
        sd = f.s[sel]
        if f.ents is None:
            em, rem = state.draw(di, sd, cdf)
        else:
            em, rem = state.draw_carried(di, sd, f.ents[sel])
        run.computed[di] -= sd - em  # rejected drafts, and tokens past max_tokens
        run.pending[di] -= 1
        pos = state.gaps(di, t1, pos)
        finished = bool((em == rem).any())
    sel = here & (f.kind == 2)
    ci = col[sel]
    if ci.size:
        run.computed[ci] -= f.roll[sel]
        pos = state.emit_one(ci, t1, pos)
        run.pending[ci] -= 1
        finished = True
    state.pos = pos
    if state.cache is not None and (di.size or ci.size):
        cache_output(state, 0, np.concatenate((di, ci)))  # (output placeholders: always)
    gone = ~here & (f.kind != 1)
    if gone.any():
        _stale(state, f, np.flatnonzero(gone), cdf, t1)
    if finished:
        M = state.n
        done = run.emitted[:M] >= run.output[:M]
        if done.any():
            state.finish_rows(done, t1)


def _process_decodes(state: State, f: InFlight, size: int, t1: float) -> None:
    """:func:`process` when the step only decoded running columns ``[0, size)`` and they
    are still there (fewer array operations; the same result)."""
    run = state.running
    di = slice(0, size)
    sd = f.s
    em, rem = state.draw(di, sd, state.cdfs[f.entry])
    run.computed[di] -= sd - em
    run.pending[di] -= 1
    state.pos = state.gaps(di, t1, state.pos)
    if state.cache is not None:
        cache_output(state, 0, np.arange(size))
    if (em == rem).any():
        n = state.n
        done = run.emitted[:n] >= run.output[:n]
        state.finish_rows(done, t1)


def _stale(state: State, f: InFlight, which: np.ndarray, cdf: np.ndarray, t1: float) -> None:
    """Tokens of the step in flight for requests no longer running: finished ones (an
    extra step, dropped) and preempted ones (delivered as they wait, vLLM's stale
    output; their computed tokens stay 0)."""
    saved = state.saved
    for j in which.tolist():
        i = int(f.ids[j])
        if not math.isnan(state.finish[i]):
            continue  # finished while this step ran: its tokens are dropped
        e = int(saved.emitted[i])
        if f.kind[j] == 0:
            sd = int(f.s[j])
            c = cdf if f.ents is None else state.cdfs[int(f.ents[j])]
            J = int(np.searchsorted(c, state.U[saved.draw[i]], side="right"))
            rem = int(saved.output[i]) - e
            em = min(J, sd, rem)
            state.hist[em + (sd - 1) * state.W + (rem >= sd) * state.H] += 1
            saved.draw[i] += 1
        else:
            em = 1
        if e == 0:
            state.first_token[i] = t1
        else:
            state.itl[state.pos] = t1 - state.saved_last[i]
            state.itl_req[state.pos] = i
            state.pos += 1
        saved.emitted[i] = e + em
        saved.chunks[i] += 1
        state.saved_last[i] = t1
        if e + em >= saved.output[i]:  # finished in the waiting queue
            state.finish[i] = t1
            state.waiting.remove(i)
            state.client.finish(t1, 1, np.array([i]))
            if state.cache is not None:
                state.cache.forget(i)


def decode_stretch(
    state: State, f: InFlight, step_ms: StepTime, many: ManyStepTimes | None
) -> InFlight | None:
    """Several loop turns of :func:`run_async` at once where nothing but decoding can
    happen; the step then in flight, or ``None`` (nothing played) where the next turn
    needs the general path.

    It starts with ``f`` in flight decoding every running request (``1 + k`` tokens each,
    no prefill, nothing stale) and plays turn ``i = 0, 1, ...``: schedule step ``i + 1``,
    launch it, process step ``i``. Request ``j`` (``rem`` tokens left before step 0,
    ``prev[i]`` emitted in steps before ``i``, ``fin`` its finishing step) is in step
    ``i + 1`` unless the step in flight surely finishes it, ``prev[i] + 1 >= rem``
    (the ``AsyncScheduler`` skip); it may still finish in step ``i`` by accepted drafts
    (the extra step, whose tokens are dropped when processed). Its computed tokens when
    step ``i + 1`` is scheduled are those when step 1 was plus ``prev[i]`` (the step in
    flight counted, rejected drafts rolled back), its blocks grow to ``(computed + 1 + k +
    lookahead)`` slots and are freed when step ``fin`` is processed. The stretch is cut
    before the turn that would see a request sent, a step of no request, another ``k``
    (the ``k`` of step ``i + 1`` is the policy's at the size of step ``i``), the KV cache
    overflowing, or (when requests wait, or the client waits for a finish) a turn after a
    finish. The draws, times and records are those of the same turns played one at a
    time (a test plays both). With prefix caching on it plays nothing: blocks then have
    names, are shared and are cached as they fill, which the stretch does not follow."""
    n = state.n
    if n == 0 or state.n_pref or not f.plain or f.ids.size != n:
        return None
    if state.cache is not None:  # prefix caching: named, shared blocks, turn by turn
        return None
    run = state.running
    r, k = f.entry, f.k
    if state.entry_of[n] != r or n * (1 + k) > state.budget:
        return None
    if not (run.req_id[:n] == f.ids).all() or not (f.s == 1 + k).all():
        return None
    through = False
    if state.waiting:
        if n < state.max_seqs:
            return None  # (admission might be possible: the general path)
        next_send = math.inf
    else:
        next_send = state.client.next_send_time()
        # not through a finish while the client holds a request back (a session's next
        # turn, sent once this one finishes; max_concurrency), as fast_path's stretches
        through = (next_send < math.inf or state.client.all_sent()) and not state.client.held
    t = state.t
    e = run.emitted[:n]
    rem = run.output[:n] - e
    horizon = int(int(rem.max() if through else rem.min()) / state.mean_tokens[r]) + 3
    dt0 = f.end - t
    if next_send < math.inf and dt0 > 0:
        horizon = min(horizon, int(1.25 * (next_send - t) / dt0) + 4)
    horizon = max(1, min(horizon, STRETCH_STEPS, STRETCH_CELLS // n))
    steps = _STEPS[:horizon]
    J = np.searchsorted(state.cdfs[r], state.U[run.draw[:n] + steps], side="right")
    cum = J.cumsum(axis=0)
    prev = cum - J  # tokens each request emitted in the steps before step i
    fin = np.add.reduce(cum < rem, axis=0)  # each request's finishing step (horizon: none)
    sched = prev <= rem - 2  # (i, j): request j in step i + 1 (scheduled in turn i)
    sizes = np.add.reduce(sched, axis=1).tolist()  # requests in step i + 1
    # the turns that may be played: [0, h)
    h = horizon if through else min(horizon, int(fin.min()) + 1)
    if 0 in sizes[:h]:
        h = sizes.index(0)
    if not state.one_entry and h > 1:
        changed = state.entry_arr[np.asarray(sizes[: h - 1])] != r  # step i + 1's k: turn i + 1
        if changed.any():
            h = int(changed.argmax()) + 1
    if h == 0:
        return None
    sched = sched[:h]
    comp0 = run.computed[:n]
    bs = state.pool.block_size
    base = comp0 + (1 + k + state.L + bs - 1)
    blocks = np.maximum(
        np.maximum.accumulate(np.where(sched, (base + prev[:h]) // bs, 0), axis=0),
        run.blocks[:n],
    )
    running = steps[:h] <= fin  # (i, j): request j running in turn i
    tot = np.add.reduce(blocks * running, axis=1)
    over = tot > state.pool.usable
    if over.any():
        h = int(over.argmax())
        if h == 0:
            return None
    ctx_sum = np.add.reduce(np.where(sched[:h], comp0 + prev[:h], 0), axis=1).tolist()
    # step i + 1's time, launched in turn i; turn i >= 1 is played only when the step
    # before it ends before the next send (take_sends would find a request)
    ends: list[float] = []
    end = f.end
    dts: list[float]
    if many is not None:
        ms = np.asarray(
            many(
                np.asarray(sizes[:h]),
                k,
                np.asarray(ctx_sum, dtype=np.float64) / np.asarray(sizes[:h]),
                np.zeros(h, dtype=np.int64),
            ),
            dtype=np.float64,
        )
        if ms.shape != (h,):
            raise ParameterError("step_ms", f"many() must return {h} step times, got {ms.shape}")
        dt = ms / 1000.0
        acc = np.add.accumulate(np.concatenate(([end], dt)))
        # turn i (i >= 1) needs acc[i - 1] < next_send: acc[0] is step 0's end
        hc = h
        if next_send < math.inf:
            late = acc[: h - 1] >= next_send
            if late.any():
                hc = int(late.argmax()) + 1
        ok = (dt[:hc] >= 0) & np.isfinite(dt[:hc])
        if not ok.all():
            bad = int(np.argmin(ok))
            step_seconds(step_ms, sizes[bad], k, ctx_sum[bad] / sizes[bad], 0)  # raises
            raise ParameterError("step_ms", "many() disagrees with the step function")
        dts = dt[:hc].tolist()
        ends = acc[: hc + 1].tolist()
    else:
        dts = []
        ends = [end]
        for i in range(h):
            if i and ends[i - 1] >= next_send:
                break
            d = step_seconds(step_ms, sizes[i], k, ctx_sum[i] / sizes[i], 0)
            dts.append(d)
            end += d
            ends.append(end)
        hc = len(dts)
    # ends[i]: step i's end (ends[0] = f.end); turn i processes step i, at ends[i]
    last = hc - 1
    if state.step_tokens is not None:
        state.step_tokens.extend(size * (1 + k) for size in sizes[:hc])
    nrun = np.add.reduce(running[:hc], axis=1).tolist()
    waiting = len(state.waiting)
    area = state.area
    prior = t
    for i in range(hc):
        area += (nrun[i] + waiting) * (ends[i] - prior)
        prior = ends[i]
    # the tokens each step emits, its gaps and its histogram, as process() records them
    act = running[:hc]
    left = rem - prev[:hc]
    code = np.minimum(J[:hc], left)
    np.add(code, state.H, out=code, where=left > k)
    gaps = np.empty((hc, n))
    gaps[0] = ends[0] - state.last[:n]
    if hc > 1:
        gaps[1:] = np.diff(np.asarray(ends[:hc]))[:, None]
    pos = state.pos
    g = int(act.sum())
    state.itl[pos : pos + g] = gaps[act]
    state.itl_req[pos : pos + g] = run.req_id[:n][act.nonzero()[1]]
    state.pos = pos + g
    counts = np.bincount(code[act], minlength=state.H + state.W)
    lo = k * state.W
    state.hist[lo : lo + state.W] += counts[: state.W]
    state.hist[state.H + lo : state.H + lo + state.W] += counts[state.H :]
    # the step in flight after the stretch: step hc, scheduled in turn hc - 1
    nxt = InFlight.__new__(InFlight)
    nxt.k, nxt.entry, nxt.tokens = k, r, sizes[last] * (1 + k)
    nxt.ents = None
    nxt.end = ends[hc]
    nxt.ids = run.req_id[:n][sched[last]].copy()
    nxt.s = np.full(nxt.ids.size, 1 + k, dtype=np.int64)
    nxt.kind = np.zeros(nxt.ids.size, dtype=np.int64)
    nxt.roll = nxt.kind
    nxt.plain = True
    # the state after turn hc - 1 (for requests finished in the stretch: their values when
    # they finished, or unused)
    played = np.minimum(fin, last) + 1
    pool = state.pool
    run.blocks[:n] = blocks[last]
    peak = int(tot[:hc].max())
    if peak > pool.peak:
        pool.peak = peak
    pool.used = int(run.blocks[:n].sum())
    state.last[:n] = ends[last]
    run.computed[:n] = comp0 + cum[last]
    run.emitted[:n] = e + np.minimum(cum[last], rem)
    run.chunks[:n] += played
    run.draw[:n] += played
    if n > state.max_running:
        state.max_running = n
    state.area = area
    state.t = ends[last]
    state.steps += hc
    state.prev_count = sizes[last]
    if not state.one_entry:  # the placeholders of the step launched last
        run.carried[:n] = state.entry_of[sizes[last]]
    done = fin <= last
    if done.any():
        state.finish_rows(done, np.asarray(ends)[fin[done]])
    return nxt


def turn(
    state: State,
    flight: InFlight | None,
    step_ms: StepTime,
    many: ManyStepTimes | None = None,
    stretches: bool = True,
) -> InFlight | None:
    """One turn of :func:`run_async`'s loop at ``state.t`` (the client's sends up to then
    taken, something running, waiting or in flight), or a decode-only stretch of turns;
    returns the step then in flight. Schedule; with nothing in flight launch it now (the
    next turn, at the same time, schedules the step after it); otherwise launch it at the
    end of the step in flight, and process that step (``state.t`` moves to its end)."""
    if stretches and flight is not None and flight.plain:
        played = decode_stretch(state, flight, step_ms, many)
        if played is not None:
            return played
    nxt: InFlight | None = None
    if state.n or state.waiting:
        out = schedule(state)
        if out.tokens:
            start = state.t if flight is None else flight.end
            nxt = launch(state, out, step_ms, start)
    if flight is None:
        return nxt  # nothing in flight: the next is scheduled at once
    process(state, flight)
    return nxt


def run_async(
    state: State, step_ms: StepTime, many: ManyStepTimes | None = None, stretches: bool = True
) -> None:
    """The engine loop with a batch queue of two (``step_with_batch_queue``), turn after
    turn (:func:`turn`) until every request has finished; with nothing running, waiting or
    in flight the clock jumps to the next send. ``stretches``: decode-only stretches played
    several turns at once (:func:`decode_stretch`; the same result), ``many`` the step
    function's array form for them."""
    client = state.client
    flight: InFlight | None = None
    while client.finished < state.N:
        state.take_sends()
        if flight is None and state.n == 0 and not state.waiting:
            state.t = client.next_send_time()
            if math.isinf(state.t):  # pragma: no cover (every request was sent)
                raise AssertionError("nothing to run and nothing to send")
            continue
        flight = turn(state, flight, step_ms, many, stretches)


__all__ = ["InFlight", "decode_stretch", "launch", "process", "run_async", "turn"]
