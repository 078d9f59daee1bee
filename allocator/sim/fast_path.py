"""The decode-only fast path: several engine steps played at once.

Stretches of steps in which nothing but decoding can happen (every running request
decoding, no admission possible, the budget not binding) are played several steps at once
as ``(H, b)`` matrices of steps by sequences, cut at the first step in which a request
arrives, the policy's ``k`` changes (a step's ``k`` is the policy's at the number of
requests the step before scheduled: a stretch starts only where that is the ``k`` at its
batch), the KV cache would overflow or (when a finish could let another request in) a
request finishes. The rules are those of
:mod:`allocator.sim.scheduler` played for ``H`` steps: each running request schedules
``1 + k`` tokens (the budget holds them all: vLLM's ``schedule``, the running loop), its
blocks grow to ``⌈(computed + 1 + k + lookahead) / block_size⌉`` and are never given back
before it finishes (``kv_cache_manager.py``, ``allocate_slots``), no waiting request could
be admitted (fewer than ``max_num_seqs`` would run, the budget left and the free blocks are
checked against the queue's head as :func:`~allocator.sim.scheduler.schedule_waiting` checks
them), and a finished request frees its blocks. The randomness does not depend on that
grouping: request ``i``'s ``d``-th decode step uses its ``d``-th uniform in either path, so
a stretch gives exactly what the same steps played one at a time give (a test plays both).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from ..exceptions import ParameterError
from .config import StepTime
from .scheduler import step_seconds
from .state import STRETCH_STEPS, State

#: Largest number of cells (steps x sequences) played at once in a decode-only stretch.
STRETCH_CELLS = 1 << 15
_STEPS = np.arange(STRETCH_STEPS)[:, None]


class ManyStepTimes(Protocol):
    """A step-time function's optional ``many``: ``(H,)`` ms for ``(H,)`` arguments."""

    def __call__(
        self, decode_seqs: np.ndarray, k: int, context_tokens: np.ndarray, prefill: np.ndarray
    ) -> np.ndarray: ...


def decode_stretch(state: State, step_ms: StepTime, many: ManyStepTimes | None) -> bool:
    """Play several decode-only steps at once when nothing but decoding can happen in
    them; ``False`` (nothing played) when the next step needs the general path.

    With nobody waiting and the client not held back by ``max_concurrency``, the
    stretch runs on through finishes (a finished sequence leaves the batch, which
    shrinks) until a request arrives, the policy's ``k`` changes with the batch size or
    the KV cache would overflow. Otherwise (requests wait but none can be admitted, or a
    finish would release the client's next request) it stops at the first finish."""
    n = state.n
    if n == 0 or state.n_pref:
        return False
    r = state.entry_of[n]
    if state.entry_of[state.prev_count] != r:
        return False  # the first step's k (from the step before) is not the stretch's
    if not state.one_entry and (state.running.carried[:n] != r).any():
        return False  # a request carries the drafts of another k
    k = state.k_of[n]
    per_step = n * (1 + k)
    if per_step > state.budget:
        return False
    pool = state.pool
    bs = pool.block_size
    t = state.t
    run = state.running
    e = run.emitted[:n]
    pe = run.prompt[:n] + e
    base = pe + (k + state.L + bs - 1)
    nb0 = run.blocks[:n]
    through = False
    if state.waiting:
        # admission must stay impossible through the stretch: max_num_seqs running, no
        # budget left, or the head's first chunk not fitting beside the blocks of the
        # stretch's first step (decoding only takes more blocks after it)
        if n < state.max_seqs and per_step < state.budget:
            i = state.waiting[0]
            tokens = int(state.saved.prompt[i] + state.saved.emitted[i])
            shared = 0
            if state.cache is None:
                si = min(tokens, state.budget - per_step)
                head = max(-(-(si + state.L) // bs), -(-tokens // bs))
            else:
                held = _head_hit(state, i, tokens, n)
                if held < 0:
                    return False  # (its hit could grow in the stretch: step by step)
                si = min(tokens - held * bs, state.budget - per_step)
                head = max(-(-(held * bs + si + state.L) // bs), -(-tokens // bs)) - held
                head += state.cache.evictable(state.cache.lookup(i, tokens))
                shared = int(nb0.sum()) - pool.used
            # each decoding row needs at most ⌈(1 + k) / block_size⌉ more blocks
            if pool.free - n * -(-(1 + k) // bs) >= head:
                return False
            used0 = int(np.maximum(base // bs, nb0).sum()) - shared
            if pool.usable - used0 >= head:
                return False
        next_send = math.inf
    else:
        next_send = state.client.next_send_time()
        through = next_send < math.inf or state.client.all_sent()
        # a finish that frees shared blocks or releases a session's next turn ends it
        through = through and state.cache is None and not state.client.held
    rem = run.output[:n] - e
    horizon = int(int(rem.max() if through else rem.min()) / state.mean_tokens[r]) + 2
    if next_send < math.inf and state.dt_decode > 0:
        # steps until the next arrival at the last decode step's pace, with a margin
        horizon = min(horizon, int(1.25 * (next_send - t) / state.dt_decode) + 4)
    horizon = max(1, min(horizon, STRETCH_STEPS, STRETCH_CELLS // n))
    steps = _STEPS[:horizon]
    J = np.searchsorted(state.cdfs[r], state.U[run.draw[:n] + steps], side="right")
    cum = J.cumsum(axis=0)
    fin = np.add.reduce(cum < rem, axis=0)  # each sequence's finishing step (horizon: none)
    active: np.ndarray | None = None
    if through:
        h_max = min(horizon, int(fin.max()) + 1)
        active = steps[:h_max] <= fin
        batch = np.add.reduce(active, axis=1)  # sequences decoding at each step
        if not state.one_entry:
            changed = state.entry_arr[batch] != r
            if changed.any():
                h_max = int(changed.argmax())
                active = active[:h_max]
        sizes = batch[:h_max].tolist()
    else:
        h_max = min(horizon, int(fin.min()) + 1)
        sizes = [n] * h_max
    prev = cum[:h_max] - J[:h_max]  # tokens each sequence emitted before each step
    # KV blocks: each sequence's grow with its tokens (a finished one's are freed); the
    # matrix is needed only when the blocks at the last step could overflow or peak
    tot: np.ndarray | None = None
    cache = state.cache
    # blocks held by several sequences (prefix caching) are counted once in the pool
    shared = int(nb0.sum()) - pool.used if cache is not None else 0
    if int(np.add.reduce(np.maximum((base + prev[-1]) // bs, nb0))) - shared > pool.peak:
        blocks = np.maximum((base + prev) // bs, nb0)
        tot = (blocks * active).sum(axis=1) if active is not None else blocks.sum(axis=1)
        tot -= shared
        over = tot > pool.usable
        if over.any():
            h_max = int(over.argmax())
            if h_max == 0:
                return False
    if active is not None:
        ctx = (((pe - 1 + prev) * active).sum(axis=1) / batch[: prev.shape[0]]).tolist()
    else:
        ctx = ((prev.sum(axis=1) + (int(pe.sum()) - n)) / n).tolist()
    waiting = len(state.waiting)
    if many is not None:
        # the stretch as cut above (at a KV overflow too: h_max), as the loop below plays it
        dts, ends, area = _times_at_once(
            state, many, sizes[:h_max], k, ctx[:h_max], t, next_send, waiting
        )
        hc = len(dts)
    else:
        dts = []
        ends = []
        start = t
        area = state.area
        inf = math.inf
        for h in range(h_max):
            if h and start >= next_send:
                break
            try:
                dt = float(step_ms(sizes[h], k, ctx[h], 0)) / 1000.0
            except (TypeError, ValueError):
                dt = math.nan
            if not 0.0 <= dt < inf:  # (NaN too)
                step_seconds(step_ms, sizes[h], k, ctx[h], 0)  # raises, naming the call
            dts.append(dt)
            area += (sizes[h] + waiting) * dt
            start += dt
            ends.append(start)
        hc = len(dts)
    last = hc - 1
    if state.step_tokens is not None:
        state.step_tokens.extend(size * (1 + k) for size in sizes[:hc])
    ends_arr = np.array(ends)
    left = rem - prev[:hc]  # tokens still to emit before each step
    code = np.minimum(J[:hc], left)  # tokens emitted, plus H where nothing could be cut
    np.add(code, state.H, out=code, where=left > k)
    act = None if active is None else active[:hc]
    g = hc * n if act is None else int(act.sum())
    pos = state.pos
    if act is None:
        # every sequence streams a chunk at every step: gaps straight into the buffer
        block = state.itl[pos : pos + g].reshape(hc, n)
        block[0] = ends[0] - state.last[:n]
        if hc > 1:
            block[1:] = np.diff(ends_arr)[:, None]  # t1 - last, as step by step
        state.itl_req[pos : pos + g].reshape(hc, n)[:] = run.req_id[:n]
        code = code.ravel()
    else:
        gaps = np.empty((hc, n))
        gaps[0] = ends[0] - state.last[:n]
        if hc > 1:
            gaps[1:] = np.diff(ends_arr)[:, None]
        state.itl[pos : pos + g] = gaps[act]
        state.itl_req[pos : pos + g] = run.req_id[:n][act.nonzero()[1]]
        code = code[act]
    state.pos = pos + g
    counts = np.bincount(code, minlength=state.H + state.W)
    lo = k * state.W
    state.hist[lo : lo + state.W] += counts[: state.W]
    state.hist[state.H + lo : state.H + lo + state.W] += counts[state.H :]
    # the state after the stretch (blocks and last chunk as of the last step: right for
    # the sequences still running, unused for those finished in the stretch)
    played = np.minimum(fin, last) + 1 if active is not None else hc
    if cache is not None:
        blocks = np.maximum((base + prev[:hc]) // bs, nb0)
        _name_blocks(state, nb0, blocks, pe + prev[last], pe + np.minimum(cum[last], rem))
    run.blocks[:n] = np.maximum((base + prev[last]) // bs, nb0)
    state.last[:n] = ends[-1]
    e += np.minimum(cum[last], rem)
    run.computed[:n] = run.prompt[:n] + e - 1
    run.chunks[:n] += played
    run.draw[:n] += played
    pool.used = int(run.blocks[:n].sum()) - shared
    if tot is not None:
        peak = int(tot[:hc].max())
        if peak > pool.peak:
            pool.peak = peak
    state.area = area
    state.t = ends[-1]
    state.dt_decode = dts[-1]
    state.steps += hc
    state.prev_count = sizes[last]
    if not state.one_entry:
        run.carried[:n] = state.entry_of[sizes[last]]
    done = fin <= last
    if done.any():
        state.finish_rows(done, ends_arr[fin[done]])
    return True


def _head_hit(state: State, i: int, tokens: int, n: int) -> int:
    """Prefix caching: the blocks waiting request ``i`` (``tokens`` known) finds cached
    now, or ``-1`` when a stretch could make it find more: the hash of its first block
    not found is one that a running column ``[0, n)`` has among its blocks yet to cache.
    Found blocks can only be lost in a stretch (its new blocks evict free cached ones),
    which makes admitting it no easier, so the count now is what the stretch may assume."""
    cache = state.cache
    assert cache is not None
    held = len(cache.lookup(i, tokens))
    if held >= min((tokens - 1) // cache.B, cache.hashable(tokens)):
        return held  # (nothing more to find)
    want = cache.block_hashes(i, held + 1)[held]
    ids = state.running.req_id[:n].tolist()
    for r in ids:
        if cache.cached[r] <= held:
            total = int(state.P[r] + state.O[r])
            if cache.hashable(total) > held and cache.block_hashes(r, held + 1)[held] == want:
                return -1
    return held


def _name_blocks(
    state: State, nb0: np.ndarray, blocks: np.ndarray, known: np.ndarray, after: np.ndarray
) -> None:
    """Prefix caching after a stretch of ``H`` steps: the blocks the ``n`` sequences took
    (``blocks`` ``(H, n)``, held at each step; ``nb0`` ``(n,)`` before) are taken from the
    free queue step after step, column after column, as step by step; each sequence then
    enters in the hash table the full blocks its last step's scheduling enters (of its
    ``known`` ``(n,)`` tokens then) or, with drafts, its last output enters (of its
    ``after`` ``(n,)`` tokens but the newest: :func:`~allocator.sim.scheduler.cache_output`),
    the most of those (each step enters at least what the one before did)."""
    cache = state.cache
    assert cache is not None
    ids = state.running.req_id[: nb0.size].tolist()
    new = np.diff(np.concatenate((nb0[None, :], blocks)), axis=0)
    for h, j in np.argwhere(new > 0).tolist():
        cache.grow(ids[j], int(new[h, j]))
    full = np.maximum(known - cache.lookahead, 0) // cache.B
    if state.kmax > 0:
        full = np.maximum(full, np.minimum(after - 1, after - cache.lookahead) // cache.B)
    for j in np.flatnonzero(full > cache.cached[ids]).tolist():
        cache.cache(ids[j], int(full[j]))


def _times_at_once(
    state: State,
    many: ManyStepTimes,
    sizes: list[int],
    k: int,
    ctx: list[float],
    t: float,
    next_send: float,
    waiting: int,
) -> tuple[list[float], list[float], float]:
    """A stretch's step times from the step function's ``many`` in one call: the steps'
    times (s) and ends, up to the first step starting at or after ``next_send``, and the
    time in system accumulated over them (the same numbers as step by step)."""
    h_max = len(sizes)
    ms = np.asarray(
        many(np.asarray(sizes), k, np.asarray(ctx), np.zeros(h_max, dtype=np.int64)),
        dtype=np.float64,
    )
    if ms.shape != (h_max,):
        raise ParameterError("step_ms", f"many() must return {h_max} step times, got {ms.shape}")
    dt = ms / 1000.0
    ends = np.add.accumulate(np.concatenate(([t], dt)))[1:]  # sequential, as step by step
    ok = (dt >= 0) & np.isfinite(dt)
    if not ok.all():
        bad = int(np.argmin(ok))
        if bad == 0 or ends[bad - 1] < next_send:  # that step would be played
            raise ParameterError(
                "step_ms",
                f"must be finite and >= 0, got {ms[bad]} at decode_seqs={sizes[bad]}, "
                f"k={k}, context_tokens={ctx[bad]:.1f}, prefill_tokens=0",
            )
        h_max = bad
    hc = h_max
    if next_send < math.inf and h_max > 1:
        hc = 1 + int(np.searchsorted(ends[: h_max - 1], next_send, side="left"))
    area = state.area
    for size, step in zip(sizes[:hc], dt[:hc].tolist(), strict=True):
        area += (size + waiting) * step
    return dt[:hc].tolist(), ends[:hc].tolist(), area


__all__ = ["STRETCH_CELLS", "STRETCH_STEPS", "ManyStepTimes", "decode_stretch"]
