"""Iteration-level simulation of one vLLM replica serving a stream of requests.

Each engine step is scheduled as vLLM's V1 scheduler does it (vLLM 0.33.0,
``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``, lines 699-1640) and then
played: its wall time comes from the caller's :class:`~allocator.sim.config.StepTime`,
and every decoding sequence emits a number of tokens drawn from the speculation policy's
pmf. Followed from the source:

* **Running requests first**, in the order they were admitted (``self.running``, the
  loop at line 795), while the token budget ``max_num_batched_tokens`` lasts: a request
  still prefilling asks for the rest of its prompt, a decoding one for ``1 + k`` tokens
  (its last sampled token and ``k`` drafts); the budget cuts the request where it runs out
  (``min(num_new_tokens, token_budget)``, line 846), so a decode cut to ``s < 1 + k``
  verifies ``s - 1`` drafts, and requests after it are not scheduled in that step.
* **KV blocks** for each scheduled request: enough blocks of ``block_size`` for its
  computed tokens, the tokens scheduled now and ``lookahead_tokens`` more for the drafter
  (``allocate_slots(request, num_new_tokens, num_lookahead_tokens=...)``, line 914;
  ``vllm/v1/core/kv_cache_manager.py``, ``allocate_slots``, lines 380-625: slots
  ``num_computed + num_new + num_lookahead`` at line 551, refused when the new blocks
  exceed the free ones, line 586). Blocks stay with a request until it finishes or is
  preempted: rejected drafts roll back its computed tokens, not its blocks.
* **Preemption**: when a running request's blocks cannot be allocated, the newest
  running request (``self.running[-1]``, line 938, FCFS policy) is preempted and the
  allocation retried, until it fits or the request preempted itself (line 978). A
  preempted request loses its KV cache and its computed tokens (``_preempt_request``,
  lines 1799-1843: ``num_computed_tokens = 0``) but keeps its output tokens; it goes back
  to the *front* of the waiting queue (``prepend_request``, line 1842) and, when admitted
  again, recomputes prompt plus output so far (``num_new_tokens = request.num_tokens -
  num_computed_tokens``, line 1306: ``num_tokens`` counts the output tokens). The tokens
  it had streamed stay streamed; the step that finishes the recomputation samples its next
  token.
* **No admission in a step that preempted** (``if not preempted_reqs``, line 1050).
  Otherwise waiting requests are admitted first come first served while the budget
  lasts, fewer than ``max_num_seqs`` run (line 1073), the blocks of the whole prompt (of
  prompt plus output so far, for a recomputation) are free and their first chunk's blocks
  plus the lookahead fit (``allocate_slots(..., full_sequence_must_fit=
  self.scheduler_reserve_full_isl)``, line 1449; ``scheduler_reserve_full_isl`` defaults to
  True, ``vllm/config/scheduler.py`` line 190; the check is ``kv_cache_manager.py`` lines
  531-548); the first that does not fit stops admission (line 1454).
  A prompt longer than the budget left is cut there and continues as a running request in
  the next steps (chunked prefill, line 1346).
* **Tokens**: the step in which a prompt's prefill completes emits the request's first
  token (a partial chunk emits nothing); the request decodes from the next step. A
  decoding sequence emits ``j`` tokens with probability ``pmf[j]`` of the policy at the
  step's decode batch size, never past its output length (``check_stop`` trims the
  accepted tokens at ``max_tokens``: ``_update_request_with_output``, lines 2744-2770). The
  request finishes in the step that emits its last token and frees its blocks.

Time starts at 0 (the benchmark's start) and advances by each step's ``step_ms``; with
nothing running or waiting it jumps to the next request the client sends. The client
(vLLM 0.33.0, ``vllm/benchmarks/serve.py``, ``benchmark``, lines 1001-1019) sends each
request at its arrival time, or with ``max_concurrency`` once fewer than that many of its
requests are in flight (an ``asyncio.Semaphore``, first come first served); latencies are
measured from the send (``output.start_time``, ``vllm/benchmarks/lib/
endpoint_request_func.py`` line 249). Every step's tokens of one request reach the client
as one streamed chunk at the end of the step.

Simplifications, all stated:

* no prefix caching (every admission computes its prompt from scratch; vLLM's default
  enables it), no async scheduling overlap (one ``schedule()`` per step, requests sent
  during a step are seen at the next), no watermark (vLLM's default 0),
  ``long_prefill_token_threshold`` 0 (its default), no ``max_model_len`` cap, no extra
  drafting slots in the budget (``max_num_new_slots_for_drafting`` is 0 for EAGLE, MTP and
  n-gram), no pipeline or data parallelism;
* the step's ``k`` is the policy's at the number of decoding requests running when the
  step is scheduled (vLLM's dynamic schedule picks the ``k`` of the drafts proposed after a
  step from the number of requests scheduled in it, line 1711, and verifies them in the
  next step); a budget cut or a preemption in the step does not change it;
* drafting costs what ``step_ms`` says (no separate drafter); no stop tokens (every
  request runs to its output length, as the benchmark's ``ignore_eos`` makes it); no
  merging of several steps' tokens into one chunk by a slow client;
* a request is refused (``ParameterError`` on ``kv_cache_tokens``) when it could not finish
  even alone: prompt + output - 1 tokens plus the drafts at batch size 1 and the lookahead,
  in blocks, more than the cache holds (vLLM refuses a ``max_model_len`` the cache cannot
  hold at start-up; here each request's own length is checked).

The loop is vectorised over running sequences. Stretches of steps in which nothing but
decoding can happen (every running request decoding, no admission possible, the budget
not binding) are played several steps at once as ``(H, b)`` matrices of steps by
sequences, cut at the first step in which a request arrives, the policy's ``k`` changes,
the KV cache would overflow or (when a finish could let another request in) a request
finishes. The randomness does not depend on that grouping: every request draws one
uniform per decode step up front from one ``numpy.random.Generator`` seeded by ``seed``
(its ``d``-th decode step uses its ``d``-th uniform, mapped through the step's pmf), so a
stretch gives exactly what the same steps played one at a time give.

Memory: per request a few scalars; per output token one uniform (8 bytes) and at most one
ITL gap with its request (12 bytes), allocated up front: about 20 bytes per output token
(44 MB for the 10,000 first requests of the Azure conversation trace, 2.2 M tokens).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..exceptions import ParameterError
from .config import Scheduler, StepTime
from .policy import SpecPolicy
from .requests import Requests
from .results import SimResult

# rows of the running-request table (one column per running request, in admission order):
# request id, prompt, output length, tokens emitted, tokens computed (in the KV cache),
# KV blocks held, tokens to compute before the next sample while prefilling, prefilling
# flag, chunks streamed, index of the request's next uniform
_ID, _P, _O, _E, _C, _NB, _TGT, _PREF, _CH, _U = range(10)
_ROWS = 10
#: Largest number of cells (steps x sequences) played at once in a decode-only stretch.
STRETCH_CELLS = 1 << 15
#: Largest number of steps played at once in a decode-only stretch.
STRETCH_STEPS = 512
_EMPTY = np.zeros(0, dtype=np.int64)


def simulate(
    requests: Requests,
    policy: SpecPolicy,
    step_ms: StepTime,
    scheduler: Scheduler,
    seed: int = 0,
) -> SimResult:
    """Serve ``requests`` on one replica and return every request's timeline.

    ``policy``: ``k`` and the emitted-tokens pmf by decode batch size; ``step_ms``: wall
    time of a step, ms (see :class:`~allocator.sim.config.StepTime`); ``scheduler``: the
    replica's vLLM settings and the client's ``max_concurrency``; ``seed``: seeds the one
    ``numpy.random.Generator`` every draw comes from (same seed, same result).

    Raises :class:`~allocator.exceptions.ParameterError` on ``kv_cache_tokens`` when some
    request could not finish even alone in the cache (prompt + output + speculative slots),
    and on ``step_ms`` when it returns a negative or non-finite time.
    """
    if not isinstance(requests, Requests):
        raise ParameterError("requests", "must be a Requests")
    if not isinstance(policy, SpecPolicy):
        raise ParameterError("policy", "must be a SpecPolicy")
    if not isinstance(scheduler, Scheduler):
        raise ParameterError("scheduler", "must be a Scheduler")
    if not callable(step_ms):
        raise ParameterError(
            "step_ms", "must be callable as step_ms(decode_seqs, k, context, prefill)"
        )
    engine = _Engine(requests, policy, step_ms, scheduler, seed)
    engine.run()
    return engine.result()


class _Engine:
    """The simulation's state. ``stretches=False`` plays every step on its own (the
    reference the stretches are tested against: both give identical results)."""

    def __init__(
        self,
        requests: Requests,
        policy: SpecPolicy,
        step_ms: StepTime,
        sched: Scheduler,
        seed: int,
        stretches: bool = True,
    ) -> None:
        self.requests = requests
        self.policy = policy
        self.sched = sched
        self.seed = seed
        self.step_ms = step_ms
        self.many = getattr(step_ms, "many", None) if stretches else None
        self.stretches = stretches
        #: when a list, every step played appends its scheduled tokens (for tests)
        self.step_tokens: list[int] | None = None
        n_req = len(requests)
        self.N = n_req
        self.P = requests.prompt_tokens
        self.O = requests.output_tokens
        self.arrival = requests.arrival_s
        self.bs = sched.block_size
        self.total_blocks = sched.num_blocks
        self.budget = sched.max_num_batched_tokens
        self.max_seqs = sched.max_num_seqs
        self.C = sched.max_concurrency
        self.L = policy.lookahead if policy.max_k > 0 else 0
        self.kmax = policy.max_k
        self.W = self.kmax + 2
        self.H = (self.kmax + 1) * self.W  # cells of one histogram (drafts x tokens)
        # the policy as dense tables by decode batch size 0..max_num_seqs
        sizes = np.arange(1, self.max_seqs + 1)
        entries = np.searchsorted(np.asarray(policy.starts), sizes, side="right") - 1
        self.entry_arr = np.concatenate(([0], entries))
        self.entry_of = self.entry_arr.tolist()
        self.k_of = np.asarray(policy.ks)[self.entry_arr].tolist()
        self.one_entry = len(policy.ks) == 1
        self.cdfs = []
        for p in policy.pmfs:
            cdf = np.cumsum(p)
            cdf[-1] = 1.0
            self.cdfs.append(cdf)
        self.mean_tokens = [float(p @ np.arange(p.size)) for p in policy.pmfs]
        self._check_fit()
        # one uniform per decode step of each request (at most output - 1 of them), plus
        # padding read (never used) past the last request by a stretch's unused cells
        decode_steps = self.O - 1
        self.u_start = np.concatenate(([0], np.cumsum(decode_steps)[:-1]))
        rng = np.random.default_rng(seed)
        self.U = rng.random(int(decode_steps.sum()) + STRETCH_STEPS + 1)
        # running requests: a table of rows x max_num_seqs, admission order
        self.R = np.zeros((_ROWS, self.max_seqs), dtype=np.int64)
        self.last = np.zeros(self.max_seqs)  # time of each running request's last chunk
        self.n = 0
        self.n_pref = 0  # running requests still prefilling
        self.waiting: deque[int] = deque()
        self.used = 0
        # per request
        nan = np.full(n_req, np.nan)
        self.sent = nan.copy()
        self.first_sched = nan.copy()
        self.first_token = nan.copy()
        self.finish = nan.copy()
        # every request's row of the running table, kept while it is not running
        self.G = np.zeros((_ROWS, n_req), dtype=np.int64)
        self.G[_ID] = np.arange(n_req)
        self.G[_P] = self.P
        self.G[_O] = self.O
        self.G[_U] = self.u_start
        self.g_last = np.zeros(n_req)
        self.g_pre = np.zeros(n_req, dtype=np.int64)
        self.next_send = 0
        self.finished = 0
        self.finish_order = np.empty(n_req)
        gaps = int(decode_steps.sum())
        self.itl = np.empty(gaps)
        self.itl_req = np.empty(gaps, dtype=np.int32)
        self.pos = 0
        # decode steps by [uncut, drafts verified, tokens emitted]
        self.hist = np.zeros(2 * self.H, dtype=np.int64)
        self.steps_h = np.arange(STRETCH_STEPS)[:, None]
        # clock and counters
        self.t = 0.0
        self.dt_decode = 0.0  # the last decode-only step's time
        self.area = 0.0
        self.steps = 0
        self.peak_blocks = 0
        self.max_running = 0

    # ------------------------------------------------------------------ checks
    def _check_fit(self) -> None:
        """Every request must be able to finish alone: its largest KV footprint (prompt +
        output - 1 tokens, plus ``k`` drafts at batch size 1 and the lookahead) in blocks
        must not exceed the cache. Otherwise it would be preempted for ever."""
        k1 = self.k_of[1]
        slots = np.where(self.O > 1, self.P + self.O - 1 + k1, self.P) + self.L
        blocks = -(-slots // self.bs)
        bad = np.flatnonzero(blocks > self.total_blocks)
        if bad.size:
            i = int(bad[0])
            what = (
                "prompt" if -(-(self.P[i] + self.L) // self.bs) > self.total_blocks else "request"
            )
            raise ParameterError(
                "kv_cache_tokens",
                f"request {i}'s {what} does not fit the KV cache: prompt {int(self.P[i])} + "
                f"output {int(self.O[i])} tokens need {int(blocks[i])} blocks of {self.bs} "
                f"(with {k1} drafts and {self.L} lookahead slots), the cache holds "
                f"{self.total_blocks} ({self.sched.kv_cache_tokens} tokens)",
            )

    def _time(self, b: int, k: int, ctx: float, prefill: int) -> float:
        """One step's wall time, s, from the caller's ``step_ms``."""
        ms = self.step_ms(b, k, ctx, prefill)
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

    # ------------------------------------------------------------------ client
    def _next_send_time(self) -> float:
        """When the client sends its next request (``inf``: all sent, or held back by
        ``max_concurrency`` until a request in flight finishes)."""
        i = self.next_send
        if i >= self.N:
            return math.inf
        t = float(self.arrival[i])
        if self.C is not None and i >= self.C:
            j = i - self.C  # the (i - C + 1)-th finish frees the slot request i waits for
            if j >= self.finished:
                return math.inf
            t = max(t, float(self.finish_order[j]))
        return t

    def _take_sends(self) -> None:
        """Requests the client has sent by now join the waiting queue (FCFS)."""
        t = self.t
        while True:
            s = self._next_send_time()
            if s > t:
                return
            i = self.next_send
            self.sent[i] = s
            self.waiting.append(i)
            self.area += t - s
            self.next_send += 1

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        while self.finished < self.N:
            self._take_sends()
            if self.n == 0 and not self.waiting:
                self.t = self._next_send_time()
                continue
            if not (self.stretches and self._stretch()):
                self._step()

    def _finish(self, done: np.ndarray, times: np.ndarray | float) -> None:
        """Running rows ``done`` (bool over the ``n`` rows) finished, at ``times`` (one per
        finished row, or one for all); their blocks are freed."""
        n = self.n
        Rn = self.R[:, :n]
        ids = Rn[_ID][done]
        self.finish[ids] = times
        self.G[_CH, ids] = Rn[_CH][done]
        self.used -= int(Rn[_NB][done].sum())
        m = ids.size
        # in time order: the client's slots free up in that order
        self.finish_order[self.finished : self.finished + m] = (
            np.sort(times) if isinstance(times, np.ndarray) else times
        )
        self.finished += m
        keep = ~done
        n2 = n - m
        self.R[:, :n2] = Rn[:, keep]
        self.last[:n2] = self.last[:n][keep]
        self.n = n2

    def _preempt_last(self) -> int:
        """Preempt the newest running request (recompute): back to the waiting queue's
        front with its output so far. Returns the blocks it frees."""
        row = self.n - 1
        R = self.R
        i = int(R[_ID, row])
        self.G[:, i] = R[:, row]
        self.g_last[i] = self.last[row]
        self.g_pre[i] += 1
        if R[_PREF, row]:
            self.n_pref -= 1
        self.waiting.appendleft(i)
        self.n = row
        return int(R[_NB, row])

    def _step(self) -> None:
        """One engine step, scheduled as vLLM's ``schedule()`` and played."""
        t = self.t
        R = self.R
        n = self.n
        n_sys = n + len(self.waiting)
        bs, L = self.bs, self.L
        budget = self.budget
        free = self.total_blocks - self.used
        plain = self.n_pref == 0  # every running request is decoding
        preempted = False
        k = 0
        r = 0
        m = 0
        s: np.ndarray | int = _EMPTY
        scheduled = 0
        if n:
            # running requests first, in admission order, under the token budget
            if plain:
                r = self.entry_of[n]
                k = self.k_of[n]
                if n * (1 + k) <= budget:
                    m, s, scheduled = n, 1 + k, n * (1 + k)
                else:  # the budget cuts the decode batch
                    m = -(-budget // (1 + k))
                    s = np.full(m, 1 + k, dtype=np.int64)
                    s[-1] = budget - (m - 1) * (1 + k)
                    scheduled = budget
            else:
                pref = R[_PREF, :n] != 0
                ndec0 = n - self.n_pref
                r = self.entry_of[ndec0]
                k = self.k_of[ndec0] if ndec0 else 0
                demand = np.where(pref, R[_TGT, :n] - R[_C, :n], 1 + k)
                cum = demand.cumsum()
                if cum[-1] <= budget:
                    m, s, scheduled = n, demand, int(cum[-1])
                else:
                    before = cum - demand
                    m = int(np.searchsorted(before, budget, side="left"))
                    s = np.minimum(demand[:m], budget - before[:m])
                    scheduled = budget
            # their KV blocks: computed + scheduled + lookahead slots
            need = np.maximum((R[_C, :m] + s + (L + bs - 1)) // bs - R[_NB, :m], 0)
            total = int(need.sum())
            if total <= free:
                free -= total
            else:
                free, m = self._allocate_preempting(need, m, free)
                preempted = True
                need = need[:m]
                if isinstance(s, np.ndarray):
                    s = s[:m]
                    scheduled = int(s.sum())
                else:
                    scheduled = m * s
            R[_NB, :m] += need
        # then waiting requests, first come first served (none in a step that preempted)
        budget_left = budget - scheduled
        admitted: list[tuple[int, int, int, int]] = []  # (row, request, chunk, tokens)
        if not preempted:
            G = self.G
            while budget_left > 0 and self.waiting and self.n < self.max_seqs:
                i = self.waiting[0]
                tokens = int(G[_P, i] + G[_E, i])
                si = min(tokens, budget_left)
                blocks = -(-(si + L) // bs)
                # the whole prompt must fit before its first chunk is admitted (vLLM's
                # scheduler_reserve_full_isl); the chunk's blocks are what it takes now
                if max(blocks, -(-tokens // bs)) > free:
                    break
                self.waiting.popleft()
                row = self.n
                self.n += 1
                self.n_pref += 1
                G[_C, i] = 0
                G[_NB, i] = blocks
                G[_TGT, i] = tokens
                G[_PREF, i] = 1
                R[:, row] = G[:, i]
                self.last[row] = self.g_last[i]
                free -= blocks
                if math.isnan(self.first_sched[i]):
                    self.first_sched[i] = t
                budget_left -= si
                admitted.append((row, i, si, tokens))
        self.used = self.total_blocks - free
        if self.used > self.peak_blocks:
            self.peak_blocks = self.used
        if self.n > self.max_running:
            self.max_running = self.n
        M = m + len(admitted)
        if M == 0:  # nothing scheduled (the only running request preempted itself)
            return
        if self.step_tokens is not None:
            self.step_tokens.append(scheduled + sum(a[2] for a in admitted))
        # scheduled: running rows [0, m), decoding (di) or continuing a prefill (pi), and
        # the rows admitted now, [m, M)
        di: slice | np.ndarray
        pi: np.ndarray | None = None
        if plain:
            di = slice(0, m)
            b = m
            sd = s
            prefill_tokens = 0
        else:
            pref = R[_PREF, :m] != 0
            di, pi = np.flatnonzero(~pref), np.flatnonzero(pref)
            b = di.size
            sd = s[di]  # type: ignore[index]
            s_run = s[pi]  # type: ignore[index]
            prefill_tokens = int(s_run.sum())
        for _, _, si, _ in admitted:
            prefill_tokens += si
        if b:
            dt = self._time(b, k, int(R[_C, di].sum()) / b, prefill_tokens)
        else:
            dt = self._time(0, 0, 0.0, prefill_tokens)
        t1 = t + dt
        pos = self.pos
        finished = False
        if b:
            # every decoding sequence emits its draw, cut at its output length
            J = np.searchsorted(self.cdfs[r], self.U[R[_U, di]], side="right")
            e = R[_E, di]
            rem = R[_O, di] - e
            em = np.minimum(np.minimum(J, sd), rem)
            self.hist += np.bincount(
                em + (sd - 1) * self.W + (rem >= sd) * self.H, minlength=2 * self.H
            )
            e = e + em  # (a new array: ``e`` was a view of the table for a slice)
            R[_E, di] = e
            R[_C, di] = R[_P, di] + e - 1
            R[_CH : _U + 1, di] += 1
            self.itl[pos : pos + b] = t1 - self.last[di]
            self.itl_req[pos : pos + b] = R[_ID, di]
            pos += b
            self.last[di] = t1
            finished = bool((em == rem).any())
        if pi is not None and pi.size:
            # running prefills continue; one that completes emits a token (the next after
            # a recomputation: a gap since the request's last chunk)
            c = R[_C, pi] + s_run
            R[_C, pi] = c
            complete = pi[c >= R[_TGT, pi]]
            if complete.size:
                again = complete[R[_E, complete] > 0]
                fresh = complete[R[_E, complete] == 0]
                if fresh.size:
                    self.first_token[R[_ID, fresh]] = t1
                g = again.size
                if g:
                    self.itl[pos : pos + g] = t1 - self.last[again]
                    self.itl_req[pos : pos + g] = R[_ID, again]
                    pos += g
                R[_E, complete] += 1
                R[_PREF, complete] = 0
                R[_CH, complete] += 1
                self.last[complete] = t1
                self.n_pref -= complete.size
                finished = True
        for row, i, si, tokens in admitted:
            R[_C, row] = si
            if si == tokens:  # the whole prompt (and output so far) in one chunk
                if R[_E, row]:
                    self.itl[pos] = t1 - self.last[row]
                    self.itl_req[pos] = i
                    pos += 1
                else:
                    self.first_token[i] = t1
                R[_E, row] += 1
                R[_PREF, row] = 0
                R[_CH, row] += 1
                self.last[row] = t1
                self.n_pref -= 1
                finished = True
        self.pos = pos
        self.area += n_sys * dt
        self.t = t1
        if not prefill_tokens:
            self.dt_decode = dt
        self.steps += 1
        if finished:
            done = R[_E, :M] >= R[_O, :M]
            if done.any():
                full = np.zeros(self.n, dtype=bool)
                full[:M] = done
                self._finish(full, t1)

    def _allocate_preempting(self, need: np.ndarray, m: int, free: int) -> tuple[int, int]:
        """Allocate ``need`` blocks to running rows ``[0, m)`` in order, preempting the
        newest running request whenever a row does not fit, until it fits or preempts
        itself (which ends the running rows scheduled). Returns the free blocks left and
        the number of rows scheduled."""
        done = 0  # rows [0, done) have their blocks
        while done < m:
            cr = np.cumsum(need[done:m])
            over = cr > free
            if not over.any():
                return free - int(cr[-1]), m
            j = done + int(np.argmax(over))
            if j > done:
                free -= int(cr[j - done - 1])
            done = j
            while True:
                victim = self.n - 1
                free += self._preempt_last()
                if victim == j:
                    return free, j
                if need[j] <= free:
                    break
            m = min(m, self.n)
        return free, m

    def _stretch(self) -> bool:
        """Play several decode-only steps at once when nothing but decoding can happen in
        them; ``False`` (nothing played) when the next step needs the general path.

        With nobody waiting and the client not held back by ``max_concurrency``, the
        stretch runs on through finishes (a finished sequence leaves the batch, which
        shrinks) until a request arrives, the policy's ``k`` changes with the batch size or
        the KV cache would overflow. Otherwise (requests wait but none can be admitted, or a
        finish would release the client's next request) it stops at the first finish."""
        n = self.n
        if n == 0 or self.n_pref:
            return False
        k = self.k_of[n]
        per_step = n * (1 + k)
        if per_step > self.budget:
            return False
        r = self.entry_of[n]
        bs = self.bs
        t = self.t
        Rn = self.R[:, :n]
        e = Rn[_E]
        pe = Rn[_P] + e
        base = pe + (k + self.L + bs - 1)
        nb0 = Rn[_NB]
        through = False
        if self.waiting:
            # admission must stay impossible through the stretch: max_num_seqs running, no
            # budget left, or the head's first chunk not fitting beside the blocks of the
            # stretch's first step (decoding only takes more blocks after it)
            if n < self.max_seqs and per_step < self.budget:
                i = self.waiting[0]
                tokens = int(self.G[_P, i] + self.G[_E, i])
                si = min(tokens, self.budget - per_step)
                head = max(-(-(si + self.L) // bs), -(-tokens // bs))
                # each decoding row needs at most ⌈(1 + k) / block_size⌉ more blocks
                if self.total_blocks - self.used - n * -(-(1 + k) // bs) >= head:
                    return False
                used0 = int(np.maximum(base // bs, nb0).sum())
                if self.total_blocks - used0 >= head:
                    return False
            next_send = math.inf
        else:
            next_send = self._next_send_time()
            through = next_send < math.inf or self.next_send >= self.N
        rem = Rn[_O] - e
        horizon = int(int(rem.max() if through else rem.min()) / self.mean_tokens[r]) + 2
        if next_send < math.inf and self.dt_decode > 0:
            # steps until the next arrival at the last decode step's pace, with a margin
            horizon = min(horizon, int(1.25 * (next_send - t) / self.dt_decode) + 4)
        horizon = max(1, min(horizon, STRETCH_STEPS, STRETCH_CELLS // n))
        steps = self.steps_h[:horizon]
        J = np.searchsorted(self.cdfs[r], self.U[Rn[_U] + steps], side="right")
        cum = J.cumsum(axis=0)
        fin = np.add.reduce(cum < rem, axis=0)  # each sequence's finishing step (horizon: none)
        active: np.ndarray | None = None
        if through:
            h_max = min(horizon, int(fin.max()) + 1)
            active = steps[:h_max] <= fin
            batch = np.add.reduce(active, axis=1)  # sequences decoding at each step
            if not self.one_entry:
                changed = self.entry_arr[batch] != r
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
        if int(np.add.reduce(np.maximum((base + prev[-1]) // bs, nb0))) > self.peak_blocks:
            blocks = np.maximum((base + prev) // bs, nb0)
            tot = (blocks * active).sum(axis=1) if active is not None else blocks.sum(axis=1)
            over = tot > self.total_blocks
            if over.any():
                h_max = int(over.argmax())
                if h_max == 0:
                    return False
        if active is not None:
            ctx = (((pe - 1 + prev) * active).sum(axis=1) / batch[: prev.shape[0]]).tolist()
        else:
            ctx = ((prev.sum(axis=1) + (int(pe.sum()) - n)) / n).tolist()
        waiting = len(self.waiting)
        if self.many is not None:
            # the stretch as cut above (at a KV overflow too: h_max), as the loop below plays it
            dts, ends, area = self._times_at_once(
                sizes[:h_max], k, ctx[:h_max], t, next_send, waiting
            )
            hc = len(dts)
        else:
            dts = []
            ends = []
            start = t
            area = self.area
            step_ms = self.step_ms
            inf = math.inf
            for h in range(h_max):
                if h and start >= next_send:
                    break
                try:
                    dt = float(step_ms(sizes[h], k, ctx[h], 0)) / 1000.0
                except (TypeError, ValueError):
                    dt = math.nan
                if not 0.0 <= dt < inf:  # (NaN too)
                    self._time(sizes[h], k, ctx[h], 0)  # raises, naming the call
                dts.append(dt)
                area += (sizes[h] + waiting) * dt
                start += dt
                ends.append(start)
            hc = len(dts)
        last = hc - 1
        if self.step_tokens is not None:
            self.step_tokens.extend(size * (1 + k) for size in sizes[:hc])
        ends_arr = np.array(ends)
        left = rem - prev[:hc]  # tokens still to emit before each step
        code = np.minimum(J[:hc], left)  # tokens emitted, plus H where nothing could be cut
        np.add(code, self.H, out=code, where=left > k)
        act = None if active is None else active[:hc]
        g = hc * n if act is None else int(act.sum())
        pos = self.pos
        if act is None:
            # every sequence streams a chunk at every step: gaps straight into the buffer
            block = self.itl[pos : pos + g].reshape(hc, n)
            block[0] = ends[0] - self.last[:n]
            if hc > 1:
                block[1:] = np.diff(ends_arr)[:, None]  # t1 - last, as step by step
            self.itl_req[pos : pos + g].reshape(hc, n)[:] = Rn[_ID]
            code = code.ravel()
        else:
            gaps = np.empty((hc, n))
            gaps[0] = ends[0] - self.last[:n]
            if hc > 1:
                gaps[1:] = np.diff(ends_arr)[:, None]
            self.itl[pos : pos + g] = gaps[act]
            self.itl_req[pos : pos + g] = Rn[_ID][act.nonzero()[1]]
            code = code[act]
        self.pos = pos + g
        counts = np.bincount(code, minlength=self.H + self.W)
        lo = k * self.W
        self.hist[lo : lo + self.W] += counts[: self.W]
        self.hist[self.H + lo : self.H + lo + self.W] += counts[self.H :]
        # the state after the stretch (blocks and last chunk as of the last step: right for
        # the sequences still running, unused for those finished in the stretch)
        played = np.minimum(fin, last) + 1 if active is not None else hc
        Rn[_NB] = np.maximum((base + prev[last]) // bs, nb0)
        self.last[:n] = ends[-1]
        e += np.minimum(cum[last], rem)
        Rn[_C] = Rn[_P] + e - 1
        Rn[_CH] += played
        Rn[_U] += played
        self.used = int(Rn[_NB].sum())
        if tot is not None:
            peak = int(tot[:hc].max())
            if peak > self.peak_blocks:
                self.peak_blocks = peak
        self.area = area
        self.t = ends[-1]
        self.dt_decode = dts[-1]
        self.steps += hc
        done = fin <= last
        if done.any():
            self._finish(done, ends_arr[fin[done]])
        return True

    def _times_at_once(
        self, sizes: list[int], k: int, ctx: list[float], t: float, next_send: float, waiting: int
    ) -> tuple[list[float], list[float], float]:
        """A stretch's step times from the step function's ``many`` in one call: the steps'
        times (s) and ends, up to the first step starting at or after ``next_send``, and the
        time in system accumulated over them (the same numbers as step by step)."""
        h_max = len(sizes)
        assert self.many is not None
        ms = np.asarray(
            self.many(np.asarray(sizes), k, np.asarray(ctx), np.zeros(h_max, dtype=np.int64)),
            dtype=np.float64,
        )
        if ms.shape != (h_max,):
            raise ParameterError(
                "step_ms", f"many() must return {h_max} step times, got {ms.shape}"
            )
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
        area = self.area
        for size, step in zip(sizes[:hc], dt[:hc].tolist(), strict=True):
            area += (size + waiting) * step
        return dt[:hc].tolist(), ends[:hc].tolist(), area

    # ------------------------------------------------------------------ output
    def result(self) -> SimResult:
        pos = self.pos
        shape = (self.kmax + 1, self.W)
        uncut = self.hist[self.H :].reshape(shape)
        return SimResult(
            requests=self.requests,
            sent_s=self.sent,
            first_scheduled_s=self.first_sched,
            first_token_s=self.first_token,
            finish_s=self.finish,
            output_tokens=np.where(np.isfinite(self.finish), self.O, self.G[_E]),
            chunks=self.G[_CH].copy(),
            preemptions=self.g_pre.copy(),
            itl_s=self.itl[:pos].copy(),
            itl_request=self.itl_req[:pos].astype(np.int64),
            decode_steps=self.hist[: self.H].reshape(shape) + uncut,
            uncut_decode_steps=uncut.copy(),
            duration_s=float(self.t),
            steps=int(self.steps),
            time_in_system_s=float(self.area),
            max_running_seqs=int(self.max_running),
            kv_cache_peak_fraction=self.peak_blocks / self.total_blocks,
            scheduler=self.sched,
            policy=self.policy,
            seed=self.seed,
        )


__all__ = [
    "STRETCH_CELLS",
    "STRETCH_STEPS",
    "simulate",
]
