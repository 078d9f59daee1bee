"""The problem → simulator adapter: one vLLM replica of a problem, for the request-level
simulator (:mod:`allocator.sim`) to play, and one run of it on requests
(:mod:`allocator.analysis.request_source`). ``bench`` (:mod:`allocator.analysis.bench`) and
capacity for a request rate (:mod:`allocator.analysis.capacity`) both run it.

* **The configuration** (:class:`Configuration`): speculation off, one drafter (or, with
  ``pooled``, several) at a fixed ``k``, or ``k`` by decode batch size from the problem's
  :func:`~allocator.analysis.schedule.schedule` (vLLM's
  ``num_speculative_tokens_per_batch_size``). Only what the named engine serves unless
  ``pooled`` (:func:`allocator.engines.servable`); a pooled configuration is an upper bound
  no engine serves, labelled so (:data:`allocator.engines.POOLED_BOUND`).
* **Tokens per step**: each decoding sequence's emitted tokens in a step are drawn from the
  configuration's own pmf, :func:`allocator.model.accepted_pmf.accepted_distribution` in
  the bonus convention (``k`` drafts plus the verifier's token; for a ``paper`` problem the
  round of ``k + 1`` units, docs/design.md §8.3): per-position acceptance, the error model,
  pooling and workload mixture as the model has them (a mixture's steps are drawn from its
  rounds-weighted mixture; requests are not tied to a workload). Chains only: a drafter's
  ``acceptance_by_rank`` (token trees) is not played.
* **Step times** only from the problem's step-time predictor
  (:func:`allocator.model.under_load.predictor`): the decode step of ``b`` sequences at the
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
Refused, one line each: ``max_num_seqs`` past the decode batch sizes the step times reach at
the configuration's ``k`` (``serving.scheduler.max_num_seqs``, or ``max_num_seqs`` when
given: step times are never extrapolated); a prefill table that does not reach the largest
prefill one step can hold (``serving.prefill_ms``: the smaller of ``max_num_batched_tokens``
and the tokens the ``max_num_seqs`` largest requests could recompute at once, prompt plus
output); a KV cache smaller than one request (``serving.scheduler.kv_cache_tokens``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.methods import resolve_method
from ..core.serving import MAX_NUM_SEQS
from ..engines import ENGINES, servable
from ..exceptions import InputError, NotModelledError, ParameterError
from ..model.accepted_pmf import emitted_pmf
from ..model.memory_fit import has_spec_memory, spec_room
from ..model.steptime import StepInputs
from ..model.under_load import need_serving, predictor, speculative_ks
from ..sim import Requests, Scheduler, SimResult, SpecPolicy, simulate
from ..validate import whole
from .capacity.by_load import tree_notes
from .limits import untimed_drafters
from .request_source import derived_seeds
from .schedule import check_schedule_engine
from .schedule import schedule as plan_schedule

if TYPE_CHECKING:
    from ..core.problem import Problem

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

    Only what ``engine`` serves unless ``pooled`` (:func:`allocator.engines.servable`); a
    ``schedule`` only for an engine that takes one
    (:func:`~allocator.analysis.schedule.check_schedule_engine`). Raises
    :class:`ParameterError` on ``drafters``, ``k``, ``schedule`` or ``engine``."""

    if schedule:
        check_schedule_engine(engine, "engine")

    restricted, notes = servable(problem, engine, pooled)
    names = problem.names
    given = [d for d in (drafters or []) if d]
    if schedule and k is not None:
        raise ParameterError("schedule", "give a draft length (k) or a schedule, not both")
    if k is not None:
        k = whole(k, "k", lo=0, hi=MAX_BENCH_K)
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
        b = np.asarray(decode_seqs, dtype=float).reshape(-1)
        rows = np.repeat(self.members[None], b.size, axis=0)
        rows[b == 0] = False
        kk = np.where(b > 0, k, 0).astype(np.int64)
        verified = np.where(kk > 0, self.m * kk + 1, 1).astype(np.int64)
        # built here, whole and non-negative by construction: the contract's checks
        # (step_inputs) cost more than the step time itself at every simulated step
        x = StepInputs(
            rows,
            kk,
            verified,
            b,
            np.broadcast_to(np.asarray(context, float).reshape(-1), b.shape).copy(),
            np.broadcast_to(np.asarray(prefill, float).reshape(-1), b.shape).copy(),
        )
        return np.asarray(self.pred.step_ms_of(x), dtype=float)

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
    if tokens is None and has_spec_memory(problem):
        # from the specs, as schedule caps the batch: the memory the weights leave (the
        # hosted drafters' included) over the KV bytes per token
        room, per_token = spec_room(serving, config.members[None])
        return max(0, int(math.floor(float(room[0]) / float(per_token[0]))))
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
    size = whole(size, "max_num_seqs", lo=1, hi=MAX_NUM_SEQS)
    tokens = kv_cache_tokens(problem, config)
    if tokens < limits.block_size:
        raise InputError(
            "serving.scheduler.kv_cache_tokens",
            f"{tokens} tokens with {', '.join(config.drafters) or 'no drafter'} hosted: less "
            f"than one block of {limits.block_size}",
        )
    if max_concurrency is not None:
        max_concurrency = whole(max_concurrency, "max_concurrency", lo=1)
    caching = bool(limits.enable_prefix_caching)
    return Scheduler(
        int(size),
        limits.max_num_batched_tokens,
        tokens,
        limits.block_size,
        max_concurrency,
        limits.async_scheduling,
        enable_prefix_caching=caching,
        hash_lookahead_tokens=hash_lookahead_tokens(problem, config) if caching else 0,
    )


#: Methods whose hashes cover a token past each block under prefix caching (vLLM 0.33.0,
#: ``vllm/config/vllm.py`` lines 655-692: ``num_hash_lookahead_tokens`` is the drafter's
#: ``num_prefill_lookahead_tokens``, 1 for the EAGLE family, which
#: ``SpeculativeConfig.use_eagle`` names, ``vllm/config/speculative.py`` line 2116).
HASH_LOOKAHEAD = ("eagle", "eagle3", "mtp")


def hash_lookahead_tokens(problem: Problem, config: Configuration) -> int:
    """Tokens past a block its prefix-cache hash covers: 1 when a member is an EAGLE,
    EAGLE-3 or MTP drafter, else 0. (A multi-module MTP drafter, several
    ``num_nextn_predict_layers``, reads ``num_speculative_tokens`` ahead in vLLM; a problem
    does not say how many modules it has, so one is assumed.)"""
    if not config.speculative:
        return 0
    for i in np.flatnonzero(config.members):
        info = problem.drafters[i] if problem.drafters else None
        method, _ = resolve_method(problem.names[i], None if info is None else info.method)
        if method in HASH_LOOKAHEAD:
            return 1
    return 0


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
    missing = [n for n in untimed_drafters(problem) if n in config.drafters]
    if config.speculative and missing:
        name = missing[0]
        raise NotModelledError(
            f"drafters[{name}].architecture",
            f"missing: the roofline has no drafting time for {name} (give its architecture, "
            f"its config.json, or serving.roofline.drafters.{name}.fixed_ms)",
        )
    sched = replica_scheduler(problem, config, max_num_seqs, max_concurrency)
    config = config.truncated(sched.max_num_seqs)
    step = ProblemStepTime(problem, config, sched.max_num_seqs, sched.max_num_batched_tokens)
    field_name = "serving.scheduler.max_num_seqs" if max_num_seqs is None else "max_num_seqs"
    check_step_range(problem, config, step, field_name)
    check_step_values(problem, step)
    notes = []
    if config.speculative:
        notes += tree_notes(problem)
        if problem.workloads:
            notes.append(
                "workloads: each decode step's tokens are drawn from the workloads' "
                "rounds-weighted mixture (requests are not tied to a workload)"
            )
    if scheduler_limits(problem).kv_cache_tokens is None and has_spec_memory(problem):
        notes.append(
            f"KV cache {sched.kv_cache_tokens:,} tokens, from the specs (no "
            "serving.scheduler.kv_cache_tokens): the replica's memory at vLLM's "
            "gpu_memory_utilization less the weights, over the KV bytes per token; an upper "
            "bound (activations and CUDA graphs not counted; vLLM prints the real figure at "
            "start-up: `GPU KV cache size: N tokens`)"
        )
    if not step.exact_lookup:
        notes.append(
            "step times asked of the predictor at every step (it reads the context or does "
            "not add the prefill to the decode step): slower than a lookup"
        )
    return Replica(
        config, sched, spec_policy(problem, config, sched.max_num_seqs), step, tuple(notes)
    )


#: Step times a run accepts, ms: from a nanosecond to about three hours. Outside, a run's
#: clock loses its precision (subnormal steps) or its durations overflow (inf throughputs).
MIN_STEP_MS = 1e-6
MAX_STEP_MS = 1e7


def check_step_values(problem: Problem, step: ProblemStepTime) -> None:
    """Refuse, naming the field they come from, step times outside
    [:data:`MIN_STEP_MS`, :data:`MAX_STEP_MS`] ms at the batch sizes and prefills the
    replica can run: a run on them gives no honest number."""
    serving = problem.serving
    assert serving is not None
    where = (
        "serving.step_ms"
        if serving.tables
        else "serving.verify_ms"
        if serving.has_component_model
        else "serving.roofline"
    )
    pre_where = "serving.prefill_ms" if serving.prefill_tokens.size else where
    checks = [(where, f"k = {k}, decode batch size", v) for k, v in step.dec.items()]
    checks.append((pre_where, "prefill of tokens", step.pre))
    for name, what, values in checks:
        v = np.asarray(values, float)[1:]
        bad = np.isfinite(v) & ((v < MIN_STEP_MS) | (v > MAX_STEP_MS))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                name,
                f"a step time of {v[i]:.6g} ms ({what} {i + 1}) lies outside "
                f"[{MIN_STEP_MS:g}, {MAX_STEP_MS:g}] ms: no GPU step takes that, and a run "
                "on it gives no honest number",
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


# ---------------------------------------------------------------- one run
def outside_engine(result: SimResult, overhead_ms: float) -> SimResult:
    """``result`` with each request's time outside the engine's steps
    (``serving.ttft_overhead_ms``: API server, tokenisation, detokenisation, streaming)
    added: its first and last chunks, and the run's duration, ``overhead_ms`` later, so
    that TTFT and E2EL grow by it and ITL and TPOT do not. Applied to the simulated run,
    not inside it: with requests sent at their own times (a request rate) the engine sees
    every request ``overhead_ms`` later than sent, which shifts its whole schedule and
    changes none of its steps, so the shift is exact; under ``max_concurrency`` the
    client's slot would also stay busy for it, which is not modelled (the next request is
    sent at the engine's last chunk). The simulator itself (:mod:`allocator.sim`) knows
    engine steps only. ``time_in_system_s`` stays the engine's."""
    if overhead_ms == 0.0:
        return result
    shift = overhead_ms / 1e3
    return replace(
        result,
        first_token_s=result.first_token_s + shift,
        finish_s=result.finish_s + shift,
        duration_s=result.duration_s + shift,
    )


def run(problem: Problem, rep: Replica, requests: Requests, seed: int = 0) -> SimResult:
    """Simulate ``requests`` on the replica ``rep`` (seeded by ``seed``'s second derived
    stream): the refusals of the module docstring first."""
    check_prefill(problem, rep, requests)
    _, sim_seed = derived_seeds(seed)
    serving = problem.serving
    overhead = 0.0 if serving is None else serving.ttft_overhead_ms
    try:
        return outside_engine(
            simulate(requests, rep.policy, rep.step, rep.scheduler, sim_seed), overhead
        )
    except ParameterError as exc:
        if exc.field == "kv_cache_tokens":
            raise InputError("serving.scheduler.kv_cache_tokens", exc.message) from None
        if exc.field == "step_ms":
            raise NotModelledError("serving", f"no step time: {exc.message}") from None
        raise


__all__ = [
    "MAX_STEP_MS",
    "MIN_STEP_MS",
    "check_step_values",
    "CONTEXT_PROBE",
    "MAX_BENCH_K",
    "NO_LOOKAHEAD",
    "Configuration",
    "ProblemStepTime",
    "Replica",
    "check_prefill",
    "check_step_range",
    "configuration",
    "kv_cache_tokens",
    "hash_lookahead_tokens",
    "lookahead_tokens",
    "outside_engine",
    "replica",
    "replica_scheduler",
    "run",
    "schedule_configuration",
    "scheduler_limits",
    "spec_policy",
]
