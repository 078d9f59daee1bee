"""``allocator bench``: a simulated ``vllm bench serve`` of one replica, from a problem file.

The request-level simulator (:mod:`allocator.sim`) plays one vLLM replica; this module
gives it the problem's own pieces and reads the run as ``vllm bench serve`` reads a real
one:

* **The configuration** (:class:`Configuration`): speculation off, one drafter (or, with
  ``pooled``, several) at a fixed ``k``, or ``k`` by decode batch size from the problem's
  :func:`~allocator.analysis.schedule.schedule` (vLLM's
  ``num_speculative_tokens_per_batch_size``). Only what the named engine serves unless
  ``pooled`` (:func:`allocator.engines.servable`); a pooled configuration is an upper bound
  no engine serves, labelled so (:data:`allocator.engines.POOLED_BOUND`).
* **Tokens per step**: each decoding sequence's emitted tokens in a step are drawn from the
  configuration's own pmf, :func:`allocator.model.accepted.accepted_distribution` in
  the bonus convention (``k`` drafts plus the verifier's token; for a ``paper`` problem the
  round of ``k + 1`` units, docs/design.md §8.3): per-position acceptance, the error model,
  pooling and workload mixture as the model has them (a mixture's steps are drawn from its
  rounds-weighted mixture; requests are not tied to a workload). Chains only: a drafter's
  ``acceptance_by_rank`` (token trees) is not played.
* **Step times** only from the problem's step-time predictor
  (:func:`allocator.model.serving.predictor`): the decode step of ``b`` sequences at the
  step's ``k`` plus the prefill of the step's prompt tokens (``serving.prefill_ms``, or the
  roofline's own prefill), a step with no decoding sequence its prefill alone
  (:class:`ProblemStepTime`). Where the predictor ignores context and adds the prefill (the
  measured tables and the component model with a prefill table), its values are tabulated
  once for every decode batch size and every prefill size and looked up (exact: the same
  numbers); otherwise (the roofline) it is asked at every step.
* **The replica**: ``serving.scheduler`` (vLLM's ``max_num_seqs``, ``max_num_batched_tokens``,
  ``kv_cache_tokens``, ``block_size``). ``kv_cache_tokens`` is read, like
  ``serving.memory.kv_cache_gb``, with no drafter loaded: a hosted drafter's ``memory_gb``
  takes its share of the cache (``kv_cache_tokens · (1 − memory_gb / kv_cache_gb)``) when
  ``serving.memory`` gives ``kv_cache_gb``. Without ``kv_cache_tokens`` the cache is
  ``kv_cache_gb`` over the verifier's KV bytes per token (``serving.model``). The KV slots
  reserved past the verified tokens for the drafter (vLLM 0.33.0, ``vllm/config/vllm.py``,
  ``num_lookahead_tokens``, lines 626-652): the largest ``k`` (``num_speculative_tokens``)
  for ``eagle``, ``eagle3``, ``mtp`` and ``draft_model``; 0 for ``ngram`` and ``suffix``,
  which keep no draft KV.
* **Requests** (:class:`RequestSource`): ``num_prompts`` of fixed lengths arriving as vLLM's
  client sends them (gamma gaps of shape ``burstiness``, rescaled so the last arrives at
  ``N / rate``: :func:`allocator.sim.arrival_times`), or the first ``num_prompts`` rows of
  an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``). A trace's own
  rate is its rows over their time span; asked for another rate it is sped up or slowed
  down uniformly. One ``seed`` seeds everything: two independent streams are derived from
  it, one for the arrivals and one for the tokens per step (:func:`derived_seeds`).

Refused, one line each: ``max_num_seqs`` past the decode batch sizes the step times reach at
the configuration's ``k`` (``serving.scheduler.max_num_seqs``, or ``max_num_seqs`` when
given: step times are never extrapolated); a prefill table that does not reach the largest
prefill one step can hold (``serving.prefill_ms``: the smaller of ``max_num_batched_tokens``
and the tokens the ``max_num_seqs`` largest requests could recompute at once, prompt plus
output); a KV cache smaller than one request (``serving.scheduler.kv_cache_tokens``).

The result (:class:`BenchResult`) is ``vllm bench serve --save-result``'s document for the
run (:func:`allocator.sim.summary`: vLLM's keys and formulas, with ``--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99``) headed by vLLM's own ``date``,
``label``, ``num_prompts``, ``request_rate``, ``burstiness`` and ``max_concurrency``, and the
notes. The same seed gives the same document but for ``date``.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.methods import resolve_method
from ..core.serving import MAX_NUM_SEQS
from ..exceptions import InputError, NotModelledError, ParameterError
from ..model.accepted import emitted_pmf
from ..sim import (
    PERCENTILES,
    Requests,
    Scheduler,
    SimResult,
    SpecPolicy,
    arrival_times,
    read_trace,
    simulate,
    summary,
)
from ..sim.requests import MAX_SPAN_S, check_tokens

if TYPE_CHECKING:
    from ..core.problem import Problem

#: vLLM's default ``--num-prompts``.
DEFAULT_NUM_PROMPTS = 1000
#: Most requests one run simulates: 200,000 conversation requests take about a minute on
#: one core (memory: about 20 bytes per output token, plus the per-request arrays).
MAX_PROMPTS = 200_000
#: Largest draft length accepted.
MAX_BENCH_K = 64
#: Methods whose drafter keeps no KV of its own: vLLM reserves no lookahead slots for them
#: (vLLM 0.33.0, ``vllm/config/vllm.py`` lines 626-652).
NO_LOOKAHEAD = ("ngram", "suffix")
#: Context (tokens) at which step times are probed for a dependence on it.
CONTEXT_PROBE = 4096.0


# ---------------------------------------------------------------- the configuration
@dataclass(frozen=True, eq=False)
class Configuration:
    """What one replica runs.

    names : the problem's drafter names; members : ``(N,)`` bool, the drafters run (none:
    speculation off); k : the draft length (0: off), or ``None`` for a schedule; ranges : a
    schedule's inclusive decode-batch-size ranges ``(start, end, k)``, sorted, the first
    from 1 (vLLM's ``num_speculative_tokens_per_batch_size``; the last range's ``k`` holds
    past its end); pooled : several drafters pooled (an upper bound no engine serves).
    """

    names: tuple[str, ...]
    members: np.ndarray
    k: int | None
    ranges: tuple[tuple[int, int, int], ...] = ()
    pooled: bool = False

    @classmethod
    def off(cls, names: Sequence[str]) -> Configuration:
        """Speculation off: no drafter, ``k = 0``."""
        return cls(tuple(names), np.zeros(len(names), bool), 0)

    @property
    def drafters(self) -> list[str]:
        return [n for n, on in zip(self.names, self.members, strict=True) if on]

    @property
    def is_schedule(self) -> bool:
        return self.k is None

    @property
    def max_k(self) -> int:
        """The largest ``k`` run (vLLM's ``num_speculative_tokens``)."""
        if self.k is not None:
            return self.k
        return max(k for _, _, k in self.ranges)

    @property
    def speculative(self) -> bool:
        return self.max_k > 0

    def k_by_batch(self, max_num_seqs: int) -> np.ndarray:
        """``(S + 1,)`` int: ``k`` at decode batch size ``0..S`` (entry 0 is 0)."""
        out = np.zeros(max_num_seqs + 1, dtype=np.int64)
        if self.k is not None:
            out[1:] = self.k
            return out
        for start, end, k in self.ranges:
            out[start:] = k  # gaps and the tail carry the previous range's k, as vLLM does
            del end
        out[0] = 0
        return out

    def k_document(self) -> int | list[list[int]]:
        """``k`` as documents write it: an int, or a schedule's ``[start, end, k]`` list."""
        if self.k is not None:
            return int(self.k)
        return [[int(s), int(e), int(k)] for s, e, k in self.ranges]

    def label(self) -> str:
        """One line: ``speculation off``, ``eagle3, k=2`` or ``eagle3, k by batch size
        1-4: 3, 5-50: 2``; pooled ones say they are an upper bound."""
        if not self.speculative and self.k is not None:
            return "speculation off"
        names = "+".join(self.drafters)
        if self.k is not None:
            text = f"{names}, k={self.k}"
        else:
            parts = [f"{s}-{e}: {k}" if e > s else f"{s}: {k}" for s, e, k in self.ranges]
            text = f"{names}, k by batch size {', '.join(parts)}"
        if self.pooled and len(self.drafters) > 1:
            text += " (pooled: an upper bound no engine serves)"
        return text

    def tie_key(self) -> tuple:
        """Simplest first: speculation off, fewer drafters, a fixed ``k`` before a
        schedule, smaller ``k``, then the drafters' order in the problem."""
        return (
            int(self.speculative),
            int(self.members.sum()),
            int(self.is_schedule),
            self.max_k,
            tuple(int(i) for i in np.flatnonzero(self.members)),
            self.ranges,
        )

    def truncated(self, max_num_seqs: int) -> Configuration:
        """The same configuration run with at most ``max_num_seqs`` sequences (a schedule's
        ranges cut there)."""
        if self.k is not None:
            return self
        kept: list[tuple[int, int, int]] = []
        for s, e, k in self.ranges:
            if s > max_num_seqs:
                break
            if kept and kept[-1][2] == k:
                kept[-1] = (kept[-1][0], min(e, max_num_seqs), k)
            else:
                kept.append((s, min(e, max_num_seqs), k))
        return replace(self, ranges=tuple(kept))


def _engine_label(engine: str) -> str:
    from ..engines import ENGINES

    return ENGINES[engine].label


def configuration(
    problem: Problem,
    drafters: Sequence[str] | None = None,
    k: int | None = None,
    *,
    schedule: bool = False,
    max_num_seqs: int | None = None,
    engine: str = "vllm",
    pooled: bool = False,
) -> tuple[Configuration, list[str]]:
    """The configuration asked for, and notes: no ``drafters`` (or ``k = 0``) is speculation
    off; ``drafters`` with ``k`` a chain; ``schedule`` ``k`` by batch size from
    :func:`~allocator.analysis.schedule.schedule` up to ``max_num_seqs`` (default
    ``serving.scheduler.max_num_seqs``).

    Only what ``engine`` serves unless ``pooled`` (:func:`allocator.engines.servable`).
    Raises :class:`ParameterError` on ``drafters``, ``k`` or ``schedule``."""
    from ..engines import servable

    restricted, notes = servable(problem, engine, pooled)
    names = problem.names
    given = [d for d in (drafters or []) if d]
    if schedule and k is not None:
        raise ParameterError("schedule", "give a draft length (k) or a schedule, not both")
    if k is not None and (isinstance(k, bool) or not 0 <= int(k) <= MAX_BENCH_K):
        raise ParameterError("k", f"must be an integer in 0..{MAX_BENCH_K}, got {k!r}")
    if not given and not schedule:
        if k not in (None, 0):
            raise ParameterError("k", f"k = {k} needs the drafter(s) that draft (drafters)")
        return Configuration.off(names), notes
    members = problem.mask(given, "drafters") if given else None
    if members is not None and not pooled:
        label = _engine_label(engine)
        if members.sum() > 1:
            raise ParameterError(
                "drafters",
                f"{label} serves one drafter per server; name one, or ask for the pooled "
                "upper bound (pooled)",
            )
        if (members & restricted.excluded).any():
            raise ParameterError(
                "drafters",
                f"{given[0]}: {label} does not serve its method (or the search space "
                "excludes it); ask for the pooled upper bound (pooled) to simulate it anyway",
            )
    if not schedule:
        assert members is not None
        if k is None:
            raise ParameterError(
                "k", "give the draft length k (0: speculation off), or a schedule (k by batch size)"
            )
        if k == 0:
            notes.append("k = 0: speculation off (the drafters named are not run)")
            return Configuration.off(names), notes
        return Configuration(names, members, int(k), pooled=pooled), notes
    base = problem if pooled else restricted
    if members is not None:
        m = int(members.sum())
        base = base.replace(required=members, excluded=~members, m_min=m, m_max=m)
    size = max_num_seqs if max_num_seqs is not None else scheduler_limits(problem).max_num_seqs
    config, more = schedule_configuration(base, size, pooled)
    return config, notes + more


def scheduler_limits(problem: Problem):
    """``serving.scheduler`` (:class:`~allocator.core.serving.SchedulerLimits`); an
    :class:`InputError` naming it when the file has none."""
    from ..model.serving import need_serving

    limits = need_serving(problem, "the simulator needs the engine's scheduler").scheduler
    if limits is None:
        raise InputError(
            "serving.scheduler",
            "missing: the simulator needs the engine's scheduler, {max_num_seqs, "
            "max_num_batched_tokens, kv_cache_tokens, block_size} (vLLM's settings)",
        )
    return limits


def schedule_configuration(
    problem: Problem, max_num_seqs: int, pooled: bool = False
) -> tuple[Configuration, list[str]]:
    """``k`` by decode batch size ``1..max_num_seqs``: the problem's
    :func:`~allocator.analysis.schedule.schedule` at every integer batch size where some
    configuration of its search space has a speculative step time, ``k = 0`` (speculation
    off) at the others. Every speculative batch size must use one drafter set: vLLM runs one
    drafter for all of them (``ParameterError`` on ``drafters`` otherwise)."""
    from ..analysis.schedule import schedule as plan_schedule
    from ..model.serving import need_serving, predictor, speculative_ks

    serving = need_serving(problem)
    ks = speculative_ks(problem)
    sizes = np.arange(1, max_num_seqs + 1)
    if ks.size == 0:
        raise ParameterError("schedule", "no k >= 1 of search.k has a step time")
    pred = predictor(problem)
    allowed = ~problem.excluded
    singles = np.eye(problem.n, dtype=bool)[allowed]
    timed = np.zeros(sizes.size, bool)
    for row in singles if problem.m_max == 1 or not pooled else [allowed]:
        rows = np.repeat(row[None], sizes.size * ks.size, axis=0)
        kk = np.tile(ks, sizes.size)
        bb = np.repeat(sizes, ks.size).astype(float)
        m = int(row.sum())
        step = pred.step_ms(rows, kk, m * kk + 1, bb, 0.0, 0.0).reshape(sizes.size, ks.size)
        timed |= np.isfinite(step).any(axis=1)
    if not timed.any():
        raise ParameterError(
            "schedule",
            f"no speculative step time at any decode batch size up to {max_num_seqs}: "
            "nothing to schedule",
        )
    planned = sizes[timed]
    sub = problem.replace(serving=replace(serving, batch_sizes=planned.astype(np.int64)))
    sched = plan_schedule(sub)
    k_of = np.zeros(max_num_seqs + 1, dtype=np.int64)
    k_of[planned] = sched.k
    spec = sched.k > 0
    sets = {tuple(np.flatnonzero(m)) for m in sched.members[spec]}
    if len(sets) > 1:
        used = sorted(
            {"+".join(problem.names[i] for i in s) for s in sets},
        )
        raise ParameterError(
            "drafters",
            f"the schedule uses {', '.join(used)} at different batch sizes; vLLM serves one "
            "drafter for every batch size: name one (drafters)",
        )
    if not sets:
        members = np.zeros(problem.n, bool)
    else:
        members = np.zeros(problem.n, bool)
        members[list(next(iter(sets)))] = True
    ranges: list[tuple[int, int, int]] = []
    for b in range(1, max_num_seqs + 1):
        k = int(k_of[b])
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], b, k)
        else:
            ranges.append((b, b, k))
    notes = list(sched.notes)
    untimed = sizes[~timed]
    if untimed.size:
        notes.append(
            f"schedule: no speculative step time at decode batch sizes "
            f"{_spans(untimed)} (step times are never extrapolated): k = 0 there"
        )
    if not sets:
        notes.append("schedule: speculation does not pay at any batch size: k = 0 throughout")
        return Configuration.off(problem.names), notes
    config = Configuration(problem.names, members, None, tuple(ranges), pooled=pooled)
    return config, notes


def _spans(values: np.ndarray) -> str:
    """``[1, 2, 3, 7, 9, 10]`` as ``1-3, 7, 9-10``."""
    out: list[str] = []
    v: list[int | None] = [int(x) for x in values]
    start = prev = int(values[0])
    for x in [*v[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if x is not None:
            start = prev = x
    return ", ".join(out)


def lookahead_tokens(problem: Problem, config: Configuration) -> int:
    """KV slots vLLM reserves past the verified tokens for the drafter: 0 for ``ngram`` and
    ``suffix``, else the largest ``k`` (vLLM 0.33.0, ``vllm/config/vllm.py`` lines 626-652);
    pooled drafters take the largest of theirs."""
    if not config.speculative:
        return 0
    slots = 0
    for i in np.flatnonzero(config.members):
        info = problem.drafters[i] if problem.drafters else None
        method, _ = resolve_method(problem.names[i], None if info is None else info.method)
        slots = max(slots, 0 if method in NO_LOOKAHEAD else config.max_k)
    return slots


def spec_policy(problem: Problem, config: Configuration, max_num_seqs: int) -> SpecPolicy:
    """The simulator's policy: ``k`` and the emitted-tokens pmf by decode batch size."""
    look = lookahead_tokens(problem, config)
    if not config.speculative:
        return SpecPolicy.off()
    if config.k is not None:
        return SpecPolicy.fixed(config.k, emitted_pmf(problem, config.members, config.k), look)
    pmfs: dict[int, np.ndarray] = {}
    entries = []
    for s, e, k in config.truncated(max_num_seqs).ranges:
        if k not in pmfs:
            pmfs[k] = emitted_pmf(problem, config.members, k)
        entries.append((s, e, k, pmfs[k]))
    return SpecPolicy.by_batch_size(entries, look)


# ---------------------------------------------------------------- step times
class ProblemStepTime:
    """One configuration's step times from the problem's predictor, as the simulator asks
    for them (:class:`allocator.sim.StepTime`): ``(decode_seqs, k, context, prefill) -> ms``.

    The decode steps at every ``k`` the configuration runs and every decode batch size
    ``0..max_num_seqs`` (0 ms at 0), and the prefill-only steps of ``0..max_num_batched_tokens``
    tokens, are asked of the predictor once. When it ignores context and adds the prefill
    (probed: the same values at context 0 and :data:`CONTEXT_PROBE`, and decode plus
    prefill-only equal to the step with both at sampled points) a step is a lookup, else the
    predictor is asked at each step (``many``: a stretch of decode steps in one call)."""

    def __init__(
        self, problem: Problem, config: Configuration, max_num_seqs: int, budget: int
    ) -> None:
        from ..model.serving import predictor

        self.pred = predictor(problem)
        self.members = np.asarray(config.members, dtype=bool)
        self.m = int(self.members.sum())
        self.n = self.members.size
        self.max_num_seqs = int(max_num_seqs)
        k_of = config.truncated(max_num_seqs).k_by_batch(max_num_seqs)
        self.k_of = k_of
        self.ks = sorted({int(x) for x in k_of[1:]})
        sizes = np.arange(1, self.max_num_seqs + 1, dtype=float)
        self.dec: dict[int, np.ndarray] = {}
        context_free = True
        for k in self.ks:
            at0 = self._ask(k, sizes, np.zeros(sizes.size), np.zeros(sizes.size))
            far = self._ask(k, sizes, np.full(sizes.size, CONTEXT_PROBE), np.zeros(sizes.size))
            context_free &= bool(np.array_equal(at0, far, equal_nan=True))
            self.dec[k] = np.concatenate([[0.0], at0])
        tokens = np.arange(0, int(budget) + 1, dtype=float)
        pre = self._ask(0, np.zeros(tokens.size), np.zeros(tokens.size), tokens)
        pre[0] = 0.0
        self.pre = pre
        additive = context_free
        if additive:
            for k in self.ks:
                b = np.unique(np.clip([1, self.max_num_seqs // 2, self.max_num_seqs], 1, None))
                p = np.unique(np.clip([1, budget // 3, budget], 1, budget)).astype(float)
                bb, pp = np.meshgrid(b.astype(float), p)
                both = self._ask(k, bb.ravel(), np.zeros(bb.size), pp.ravel())
                want = self.dec[k][bb.ravel().astype(int)] + pre[pp.ravel().astype(int)]
                ok = np.isclose(both, want, rtol=1e-12, atol=1e-9) | (
                    np.isnan(both) & np.isnan(want)
                )
                additive &= bool(ok.all())
        self.exact_lookup = additive
        self._dec_lists = {k: v.tolist() for k, v in self.dec.items()}
        self._pre_list = pre.tolist()

    def _ask(self, k: int, decode_seqs, context, prefill) -> np.ndarray:
        """The predictor at draft length ``k`` over arrays of the step's inputs (rows with no
        decoding sequence run no drafter)."""
        b = np.asarray(decode_seqs, dtype=float)
        rows = np.repeat(self.members[None], b.size, axis=0)
        rows[b == 0] = False
        kk = np.where(b > 0, k, 0).astype(np.int64)
        verified = np.where(kk > 0, self.m * kk + 1, 1)
        return np.asarray(
            self.pred.step_ms(rows, kk, verified, b, np.asarray(context, float), prefill),
            dtype=float,
        )

    def __call__(self, decode_seqs: int, k: int, context_tokens: float, prefill_tokens: int):
        if self.exact_lookup:
            if decode_seqs == 0:  # the prefill alone (k is 0 then)
                return self._pre_list[prefill_tokens]
            return self._dec_lists[k][decode_seqs] + self._pre_list[prefill_tokens]
        return float(
            self._ask(k, np.array([decode_seqs]), np.array([context_tokens]), [prefill_tokens])[0]
        )

    def many(self, decode_seqs, k, context_tokens, prefill_tokens):
        if self.exact_lookup:
            return self.dec[k][decode_seqs] + self.pre[prefill_tokens]
        return self._ask(k, decode_seqs, context_tokens, np.asarray(prefill_tokens, float))

    def measured_to(self, k: int) -> int:
        """The largest decode batch size ``b`` such that every batch size ``1..b`` has a step
        time at ``k`` (0: none)."""
        ok = np.isfinite(self.dec[k][1:])
        return int(np.argmin(ok)) if not ok.all() else ok.size


def check_step_range(
    problem: Problem,
    config: Configuration,
    step: ProblemStepTime,
    field_name: str = "serving.scheduler.max_num_seqs",
) -> None:
    """Refuse a ``max_num_seqs`` past the decode batch sizes the step times reach at the
    ``k`` the configuration runs there (never extrapolated)."""
    for k in step.ks:
        used = np.flatnonzero(step.k_of == k)
        need = int(used.max())  # a budget cut runs k at any smaller batch too
        reach = step.measured_to(k)
        if reach < need:
            raise _range_error(config, k, reach, step.max_num_seqs, field_name)


def _range_error(config: Configuration, k: int, reach: int, size: int, field_name: str):
    what = "speculation off" if k == 0 and not config.speculative else f"{config.label()}"
    where = f"at k={k}" if config.is_schedule else ""
    if reach == 0 and k > 0 and not config.is_schedule:
        # not a batch-size problem: this k has no step time at any batch size
        return NotModelledError(
            "k",
            f"{what} has no step time at decode batch size 1 or any other (step times are "
            "never extrapolated): choose a k the serving section measures or models",
        )
    if reach == 0:
        message = (
            f"{size}: {what} has no step time {where} at decode batch size 1 "
            "(step times are never extrapolated)"
        )
    else:
        message = (
            f"{size} is past the step times' measured range: {what} {where} has step times "
            f"up to decode batch size {reach} (never extrapolated); give a max_num_seqs of "
            f"at most {reach}"
        )
    cls = ParameterError if field_name == "max_num_seqs" else NotModelledError
    return cls(field_name, " ".join(message.split()))


# ---------------------------------------------------------------- the replica
def kv_cache_tokens(problem: Problem, config: Configuration) -> int:
    """The KV cache in tokens with the configuration's drafters hosted (module docstring)."""
    limits = scheduler_limits(problem)
    serving = problem.serving
    assert serving is not None
    tokens = limits.kv_cache_tokens
    memory = problem.memory
    if tokens is None:
        if memory is None or serving.model is None:
            raise InputError(
                "serving.scheduler.kv_cache_tokens",
                "missing: the KV cache in tokens (vLLM's start-up line `GPU KV cache size: N "
                "tokens`); serving.memory alone gives GB per sequence at one length, not per "
                "token (with serving.model the tokens are kv_cache_gb over its KV bytes per "
                "token)",
            )
        tokens = int(memory.kv_cache_gb * 1e9 / serving.model.kv_bytes_per_token)
    if memory is not None and config.members.any():
        hosted = float(memory.hosted_gb(config.members[None])[0])
        tokens = int(math.floor(tokens * max(0.0, 1.0 - hosted / memory.kv_cache_gb)))
    return int(tokens)


def replica_scheduler(
    problem: Problem,
    config: Configuration,
    max_num_seqs: int | None = None,
    max_concurrency: int | None = None,
) -> Scheduler:
    """The simulator's :class:`~allocator.sim.Scheduler` for ``config`` on the problem's
    replica (``max_num_seqs`` replaces the file's)."""
    limits = scheduler_limits(problem)
    size = limits.max_num_seqs if max_num_seqs is None else max_num_seqs
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ParameterError("max_num_seqs", f"must be an integer >= 1, got {size!r}")
    if size > MAX_NUM_SEQS:
        raise ParameterError("max_num_seqs", f"at most {MAX_NUM_SEQS:,} sequences, got {size:,}")
    tokens = kv_cache_tokens(problem, config)
    if tokens < limits.block_size:
        raise InputError(
            "serving.scheduler.kv_cache_tokens",
            f"{tokens} tokens with {', '.join(config.drafters) or 'no drafter'} hosted: less "
            f"than one block of {limits.block_size}",
        )
    if max_concurrency is not None and (isinstance(max_concurrency, bool) or max_concurrency < 1):
        raise ParameterError("max_concurrency", f"must be an integer >= 1, got {max_concurrency!r}")
    return Scheduler(
        int(size), limits.max_num_batched_tokens, tokens, limits.block_size, max_concurrency
    )


@dataclass(frozen=True, eq=False)
class Replica:
    """Everything one simulated run of a configuration needs but the requests."""

    config: Configuration
    scheduler: Scheduler
    policy: SpecPolicy
    step: ProblemStepTime
    notes: tuple[str, ...] = ()


def replica(
    problem: Problem,
    config: Configuration,
    max_num_seqs: int | None = None,
    max_concurrency: int | None = None,
) -> Replica:
    """The replica running ``config`` (scheduler, policy, step times), checked against the
    step times' measured range (:func:`check_step_range`)."""
    sched = replica_scheduler(problem, config, max_num_seqs, max_concurrency)
    config = config.truncated(sched.max_num_seqs)
    step = ProblemStepTime(problem, config, sched.max_num_seqs, sched.max_num_batched_tokens)
    field_name = "serving.scheduler.max_num_seqs" if max_num_seqs is None else "max_num_seqs"
    check_step_range(problem, config, step, field_name)
    notes = []
    if config.speculative:
        from .fleet import tree_notes

        notes += tree_notes(problem)
        if problem.workloads:
            notes.append(
                "workloads: each decode step's tokens are drawn from the workloads' "
                "rounds-weighted mixture (requests are not tied to a workload)"
            )
    if not step.exact_lookup:
        notes.append(
            "step times asked of the predictor at every step (it reads the context or does "
            "not add the prefill to the decode step): slower than a lookup"
        )
    return Replica(
        config, sched, spec_policy(problem, config, sched.max_num_seqs), step, tuple(notes)
    )


def check_prefill(problem: Problem, rep: Replica, requests: Requests) -> None:
    """Refuse a prefill table that does not reach the largest prefill one step can hold: the
    smaller of ``max_num_batched_tokens`` and the tokens the ``max_num_seqs`` largest
    requests could (re)compute at once (prompt plus output but the last token)."""
    sched = rep.scheduler
    work = np.sort(requests.prompt_tokens + requests.output_tokens - 1)[::-1]
    need = int(min(sched.max_num_batched_tokens, int(work[: sched.max_num_seqs].sum())))
    if need < 1 or math.isfinite(rep.step.pre[need]):
        return
    serving = problem.serving
    assert serving is not None
    if serving.prefill_tokens.size == 0:
        raise InputError(
            "serving.prefill_ms",
            "missing: a step that prefills needs its time, serving.prefill_ms {tokens, ms} "
            "(measured), or the roofline (serving.hardware and serving.model)",
        )
    reach = int(serving.prefill_tokens[-1])
    raise InputError(
        "serving.prefill_ms",
        f"measured up to {reach:,} tokens, but one step can prefill {need:,} here (the "
        f"smaller of max_num_batched_tokens {sched.max_num_batched_tokens:,} and the "
        "longest prompts asked for, with their output for a recomputation); never "
        "extrapolated: measure longer prefills or lower serving.scheduler."
        "max_num_batched_tokens",
    )


# ---------------------------------------------------------------- requests
def derived_seeds(seed: int) -> tuple[int, int]:
    """Two independent seeds from ``seed``: the arrivals', the tokens-per-step draws'."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ParameterError("seed", f"must be an integer >= 0, got {seed!r}")
    states = [
        np.random.SeedSequence([int(seed), i]).generate_state(1, np.uint64)[0] for i in (0, 1)
    ]
    return int(states[0] >> np.uint64(1)), int(states[1] >> np.uint64(1))


@dataclass(frozen=True, eq=False)
class RequestSource:
    """The requests of a run, at any rate: their lengths, and either vLLM-style generated
    arrivals (``burstiness``, ``seed``) or a trace's own arrival times (``trace_s``, from
    its first row; its rate is ``N`` over their span)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    burstiness: float = 1.0
    seed: int = 0
    trace_s: np.ndarray | None = None
    trace: str | None = None

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def native_rate(self) -> float | None:
        """A trace's own rate, requests/s (``inf`` when its rows share one time); ``None``
        for generated arrivals."""
        if self.trace_s is None:
            return None
        span = float(self.trace_s[-1] - self.trace_s[0])
        return math.inf if span <= 0 else len(self) / span

    def at(self, rate: float) -> Requests:
        """The requests arriving at ``rate`` requests/s (``inf``: all at once)."""
        r = float(rate)
        if math.isnan(r) or r <= 0:
            raise ParameterError("request_rate", f"must be > 0 requests/s (or inf), got {rate}")
        if self.trace_s is None:
            times = arrival_times(len(self), r, self.burstiness, self.seed)
        elif math.isinf(r):
            times = np.zeros(len(self))
        else:
            native = self.native_rate
            assert native is not None
            if math.isinf(native):
                raise ParameterError(
                    "trace", "every row has the same timestamp: the trace has no rate to scale"
                )
            times = self.trace_s * (native / r)
            if times.size and times[-1] > MAX_SPAN_S:
                raise ParameterError(
                    "request_rate",
                    f"the trace at {r:g} requests/s spans {times[-1]:.3g} s, more than "
                    f"{MAX_SPAN_S:g} s: give a higher rate",
                )
        return Requests(times, self.prompt_tokens, self.output_tokens)

    @property
    def mean_output(self) -> float:
        return float(self.output_tokens.mean())


def request_source(
    num_prompts: int | None = None,
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    trace: str | Path | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
) -> RequestSource:
    """``num_prompts`` requests (default :data:`DEFAULT_NUM_PROMPTS`; with a trace its first
    rows, all of them by default) of ``input_len``/``output_len`` tokens or from ``trace``."""
    if num_prompts is not None and (
        isinstance(num_prompts, bool) or not isinstance(num_prompts, int | np.integer)
    ):
        raise ParameterError("num_prompts", f"must be an integer, got {num_prompts!r}")
    if num_prompts is not None and not 1 <= num_prompts <= MAX_PROMPTS:
        raise ParameterError("num_prompts", f"must be in 1..{MAX_PROMPTS:,}, got {num_prompts}")
    b = float(burstiness)
    if math.isnan(b) or b <= 0:
        raise ParameterError("burstiness", f"must be > 0 (or inf), got {burstiness}")
    arrival_seed, _ = derived_seeds(seed)
    if trace is not None:
        if input_len is not None or output_len is not None:
            raise ParameterError(
                "trace", "takes the lengths from its rows: give a trace or input/output lengths"
            )
        limit = num_prompts if num_prompts is not None else MAX_PROMPTS
        reqs = read_trace(trace, num_prompts=limit)
        if num_prompts is None and len(reqs) >= MAX_PROMPTS:
            raise ParameterError(
                "num_prompts", f"the trace has more than {MAX_PROMPTS:,} rows: take fewer"
            )
        return RequestSource(
            reqs.prompt_tokens, reqs.output_tokens, b, arrival_seed, reqs.arrival_s, str(trace)
        )
    if input_len is None or output_len is None:
        raise ParameterError("input_len", "give the requests: input and output lengths, or a trace")
    check_tokens("input_len", input_len)
    check_tokens("output_len", output_len)
    n = DEFAULT_NUM_PROMPTS if num_prompts is None else int(num_prompts)
    return RequestSource(
        np.full(n, int(input_len), dtype=np.int64),
        np.full(n, int(output_len), dtype=np.int64),
        b,
        arrival_seed,
    )


# ---------------------------------------------------------------- one run
def run(problem: Problem, rep: Replica, requests: Requests, seed: int = 0) -> SimResult:
    """Simulate ``requests`` on the replica ``rep`` (seeded by ``seed``'s second derived
    stream): the refusals of the module docstring first."""
    check_prefill(problem, rep, requests)
    _, sim_seed = derived_seeds(seed)
    try:
        return simulate(requests, rep.policy, rep.step, rep.scheduler, sim_seed)
    except ParameterError as exc:
        if exc.field == "kv_cache_tokens":
            raise InputError("serving.scheduler.kv_cache_tokens", exc.message) from None
        if exc.field == "step_ms":
            raise NotModelledError("serving", f"no step time: {exc.message}") from None
        raise


@dataclass
class BenchResult:
    """``allocator bench``'s answer: the run, its metrics as ``vllm bench serve`` writes
    them (:func:`allocator.sim.summary`), and notes."""

    problem: str
    config: Configuration
    scheduler: Scheduler
    num_prompts: int
    request_rate: float
    burstiness: float
    result: SimResult
    metrics: dict[str, float | int]
    notes: list[str] = field(default_factory=list)
    date: str = ""
    trace: str | None = None

    def label(self) -> str:
        """vLLM's ``label`` of the run: the configuration and ``max_num_seqs``."""
        return f"{self.config.label()}; max_num_seqs {self.scheduler.max_num_seqs}"

    def to_dict(self) -> dict:
        """``bench --json``: vLLM's header keys (``date``, ``label``, ``num_prompts``,
        ``request_rate``, ``burstiness``, ``max_concurrency``), then the metrics under
        ``vllm bench serve --save-result``'s keys and the simulator's own, then ``notes``."""
        rate: float | str = "inf" if math.isinf(self.request_rate) else float(self.request_rate)
        burst: float | str = "inf" if math.isinf(self.burstiness) else float(self.burstiness)
        doc: dict = {
            "date": self.date,
            "label": self.label(),
            "num_prompts": int(self.num_prompts),
            "request_rate": rate,
            "burstiness": burst,
            "max_concurrency": self.scheduler.max_concurrency,
        }
        doc.update(plain_metrics(self.metrics))
        doc["notes"] = list(self.notes)
        return doc

    def per_request_rows(self) -> tuple[list[str], list[list]]:
        """``--per-request``'s header and rows: one per request, in arrival order."""
        cols = self.result.columns()
        names = ["request", *cols]
        rows = []
        n = len(self.result.requests)
        arrays = [np.asarray(v) for v in cols.values()]
        for i in range(n):
            rows.append([i, *(_cell(a[i]) for a in arrays)])
        return names, rows

    def per_request_csv(self) -> str:
        """The per-request table as CSV text (times in s from the start, latencies ms)."""
        import csv
        import io

        names, rows = self.per_request_rows()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        w.writerows(rows)
        return buf.getvalue()


def _cell(x) -> object:
    v = x.item() if hasattr(x, "item") else x
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return v


def plain_metrics(metrics: dict) -> dict:
    """Metrics as JSON values: ints, floats, ``None`` for NaN."""
    out = {}
    for key, v in metrics.items():
        if isinstance(v, float | np.floating):
            value = float(v)
            out[key] = None if math.isnan(value) else value
        else:
            out[key] = int(v)
    return out


#: A queue is taken to grow through a run when the requests sent in its last quarter wait
#: longer than this (s) and more than :data:`GROWTH` times those of its first quarter.
QUEUE_GROWN_S = 1.0
GROWTH = 4.0


def overload_note(result: SimResult, request_rate: float) -> str | None:
    """A note when the queue grew through a run at a finite rate (``None`` otherwise): the
    requests sent in the last quarter waited (send to first scheduled) more than
    :data:`QUEUE_GROWN_S` and :data:`GROWTH` times the first quarter's mean. The replica then
    ran above what it sustains, and TTFT and E2EL grow with the number of requests sent."""
    if not math.isfinite(request_rate) or len(result.sent_s) < 8:
        return None
    order = np.argsort(result.sent_s, kind="stable")
    wait = (result.first_scheduled_s - result.sent_s)[order]
    q = len(wait) // 4
    first, last = float(wait[:q].mean()), float(wait[-q:].mean())
    if last <= QUEUE_GROWN_S or last <= GROWTH * first:
        return None
    return (
        f"the queue grew through the run: requests sent in its last quarter waited {last:,.3g} s "
        f"on average before they were scheduled, those of the first quarter {first:,.3g} s; "
        f"{request_rate:g} requests/s is more than this replica sustains, so TTFT and E2EL "
        "grow with the number of requests sent (capacity --request-rate finds the rate it "
        "sustains)"
    )


def bench(
    problem: Problem,
    source: RequestSource,
    config: Configuration,
    request_rate: float,
    *,
    max_num_seqs: int | None = None,
    max_concurrency: int | None = None,
    seed: int = 0,
    notes: Sequence[str] = (),
    percentiles: Sequence[float] = PERCENTILES,
) -> BenchResult:
    """One simulated ``vllm bench serve`` run of ``config`` on the problem's replica: the
    ``source``'s requests at ``request_rate`` (requests/s, ``inf``: all at once)."""
    rep = replica(problem, config, max_num_seqs, max_concurrency)
    requests = source.at(request_rate)
    result = run(problem, rep, requests, seed)
    all_notes = list(notes) + list(rep.notes)
    if config.pooled and len(config.drafters) > 1:
        from ..engines import POOLED_BOUND

        if POOLED_BOUND not in all_notes:
            all_notes.append(POOLED_BOUND)
    overloaded = overload_note(result, request_rate)
    if overloaded:
        all_notes.append(overloaded)
    if config.speculative:
        all_notes.append(
            f"KV slots reserved past the verified tokens for the drafter: "
            f"{rep.policy.lookahead} (as vLLM 0.33 reserves them for its method)"
        )
    return BenchResult(
        problem=problem.name,
        config=rep.config,
        scheduler=rep.scheduler,
        num_prompts=len(requests),
        request_rate=float(request_rate),
        burstiness=source.burstiness,
        result=result,
        metrics=summary(result, percentiles),
        notes=all_notes,
        date=datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        trace=source.trace,
    )


__all__ = [
    "CONTEXT_PROBE",
    "DEFAULT_NUM_PROMPTS",
    "MAX_BENCH_K",
    "MAX_PROMPTS",
    "NO_LOOKAHEAD",
    "BenchResult",
    "Configuration",
    "ProblemStepTime",
    "Replica",
    "RequestSource",
    "GROWTH",
    "QUEUE_GROWN_S",
    "bench",
    "check_prefill",
    "check_step_range",
    "configuration",
    "derived_seeds",
    "kv_cache_tokens",
    "lookahead_tokens",
    "plain_metrics",
    "replica",
    "replica_scheduler",
    "request_source",
    "run",
    "schedule_configuration",
    "scheduler_limits",
    "spec_policy",
]
