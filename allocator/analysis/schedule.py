"""Plans under load: the best configuration at each batch size, and the front at one.

The rules and their reasons: docs/design.md §8.5.

Both enumerate the problem's search space (``search.m``, ``require``, ``exclude``)
exhaustively, every subset at every ``k`` of ``search.k`` up to the largest ``k`` any
step time reaches, vectorised over subsets (:func:`allocator.core.space.iter_subsets`
chunks) with the step times of :mod:`allocator.model.under_load`. A configuration is a
candidate when it is within the budget (the problem's caps, on the model's metrics)
and has a step time at the batch size; configurations without one are counted and
left out, never guessed.

:func:`schedule` — for each batch size of ``serving.batch_sizes``, the configuration
of highest ``tokens_per_s`` (speculation off, ``k = 0`` and no drafters, is always a
candidate). Ties go to the smaller ``k``, then to fewer drafters, then to the first in
enumeration order. ``speculation_off_from`` is the smallest planned batch size ``b``
such that the schedule has ``k = 0`` at ``b`` and at every larger planned batch size;
``None`` when speculation still pays at the largest one. A planned batch size where no
configuration of the search space (budget aside) has a step time with ``k >= 1`` is an
input error: ``k = 0`` would win there by default, which is not a finding. A planned
batch size that does not fit in memory even with speculation off (more sequences than
the KV cache holds: ``serving.memory``, or the specs at the context) is left out with a
note, as ``capacity`` leaves it out; every configuration at a batch size is also held
to its own memory cap. With a context (tokens in each sequence's KV cache) the step
times and the memory cap are the ones at that context; :func:`schedule_by_context`
plans one schedule per context bucket.

:func:`serving_front` — ``solve --batch B``: the Pareto front of ``tokens_per_s``
against the problem's cost metric (``cost_per_mtok`` or a model cost metric) over the
speculative configurations (``k >= 1``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.problem import Problem
from ..core.result import Front, SolveResult
from ..engines import ENGINES, servable
from ..engines import export_schedule as engine_schedule
from ..exceptions import InputError, NotModelledError, ParameterError
from ..model.evaluator import (
    BestPerKey,
    Chunk,
    Evaluate,
    FrontKeeper,
    GridMax,
    Keeper,
    evaluate_space,
    mask_score,
)
from ..model.memory_fit import max_batch, memory_notes
from ..model.metrics import DRAFT_COST_CAPS, curves, evaluate_subsets, require_unit_cost
from ..model.under_load import (
    SERVING_METRICS,
    baseline_ms,
    metrics_from,
    need_serving,
    speculative_ks,
    step_grid,
    step_time_caveats,
    step_time_notes,
    tokens_per_s,
)
from .limits import position_notes, untimed_drafters

#: Subset x k cells evaluated per chunk (bounds memory).
MAX_CELLS = 1 << 20
#: Relative difference between a table's own ``k = 0`` step and the baseline above which
#: :func:`schedule` notes that the file's plain-decoding times disagree.
K0_TOLERANCE = 0.01
#: Why an engine of the registry without a ``k`` schedule by batch size
#: (:attr:`allocator.engines.base.Engine.has_schedule` false) takes none, from its source.
NO_SCHEDULE = {
    "sglang": (
        "SGLang takes no k schedule by batch size: --speculative-num-steps is one value "
        "for every batch (SGLang 0.5.23, sglang/srt/arg_groups/fields/spec.py), and "
        "--speculative-adaptive (EAGLE/EAGLE3, topk 1) moves the steps itself within "
        "per-batch-size candidate lists by a running acceptance average "
        "(sglang/srt/speculative/adaptive_spec_params.py), which is not a schedule this "
        "exports"
    ),
}
#: What to do instead, after :data:`NO_SCHEDULE`'s why, by the parameter refused.
INSTEAD = {
    "export": "export it for vllm, or serve SGLang the k of your batch size's row",
    "engine": "plan, export or simulate a k schedule for vllm, or give one k",
}


def schedule_engines() -> tuple[str, ...]:
    """The engines that take a ``k`` schedule by batch size (``has_schedule``)."""
    return tuple(name for name, e in ENGINES.items() if e.has_schedule)


def check_schedule_engine(engine: str, field: str = "engine") -> str:
    """``engine`` when it takes a ``k`` schedule by batch size
    (:attr:`~allocator.engines.base.Engine.has_schedule`); else a
    :class:`~allocator.exceptions.ParameterError` naming ``field``, one line: why it takes
    none (:data:`NO_SCHEDULE`) and what to do instead (:data:`INSTEAD`)."""
    if engine in ENGINES and not ENGINES[engine].has_schedule:
        why = NO_SCHEDULE.get(engine, f"{ENGINES[engine].label} takes no k schedule by batch size")
        raise ParameterError(field, f"{why}; {INSTEAD.get(field, INSTEAD['engine'])}")
    return engine


@dataclass(frozen=True)
class ScheduleExport:
    """A schedule as an engine takes it: ``text`` to print (vLLM: the
    ``--speculative-config`` JSON, one line) and notes for the user."""

    engine: str
    text: str
    notes: list[str]


@dataclass
class Schedule:
    """The plan per batch size.

    batch : ``(S,)`` int batch sizes; members : ``(S, N)`` bool; k : ``(S,)`` int.
    metrics : serving metrics of each chosen configuration, ``(S,)`` arrays keyed by
        :data:`~allocator.model.under_load.SERVING_METRICS`.
    ks : ``(K,)`` the ``k`` values compared (``0`` first); by_k : ``(S, K)`` the best
        ``tokens_per_s`` at each batch size and ``k`` within the budget (NaN: none).
    speculation_off_from : see the module docstring.
    evaluated : configurations compared (all batch sizes); unmeasured : of those,
        how many had no step time and were left out.
    """

    problem: str
    names: tuple[str, ...]
    batch: np.ndarray
    members: np.ndarray
    k: np.ndarray
    metrics: dict[str, np.ndarray]
    ks: np.ndarray
    by_k: np.ndarray
    speculation_off_from: int | None
    evaluated: int
    unmeasured: int
    notes: list[str] = field(default_factory=list)
    #: the schedule as an engine takes it, when asked for (:func:`export_schedule`)
    export: ScheduleExport | None = None
    #: tokens in each sequence's KV cache the schedule is planned at (0: none given)
    context: float = 0.0
    #: the rows carry ``context`` (a schedule by context bucket)
    with_context: bool = False
    #: planned batch sizes left out: more sequences than memory holds
    left_out: list[int] = field(default_factory=list)
    #: some answer rests on extrapolated step times (a note says which)
    extrapolated: bool = False

    def to_dict(self) -> dict:
        """The ``schedule --json`` document: ``{"rows": [...], "speculation_off_from",
        "notes"}``."""
        return {
            "rows": self.rows(),
            "speculation_off_from": self.speculation_off_from,
            "notes": list(self.notes),
        }

    def rows(self) -> list[dict]:
        """One plain dict per batch size, the ``rows`` of ``schedule --json`` (with
        ``context`` first in a schedule by context bucket)."""
        out = []
        for i, b in enumerate(self.batch):
            cost = float(self.metrics["cost_per_mtok"][i])
            head = {"context": _number(self.context)} if self.with_context else {}
            out.append(
                {
                    **head,
                    "batch": int(b),
                    "drafters": [
                        n for n, on in zip(self.names, self.members[i], strict=True) if on
                    ],
                    "k": int(self.k[i]),
                    "tokens_per_s": float(self.metrics["tokens_per_s"][i]),
                    "tokens_per_s_per_seq": float(self.metrics["tokens_per_s_per_seq"][i]),
                    "tpot_ms": float(self.metrics["tpot_ms"][i]),
                    "speedup": float(self.metrics["speedup"][i]),
                    "cost_per_mtok": None if np.isnan(cost) else cost,
                }
            )
        return out


def _number(v: float) -> int | float:
    """A context as JSON: an int when whole."""
    return int(v) if float(v).is_integer() else float(v)


@dataclass
class ContextSchedules:
    """``schedule --contexts``: one :class:`Schedule` per context bucket (ascending), the
    notes (those of every bucket once, the others prefixed by their context), and the
    export when asked for."""

    problem: str
    names: tuple[str, ...]
    schedules: list[Schedule]
    notes: list[str] = field(default_factory=list)
    export: ScheduleExport | None = None

    @property
    def contexts(self) -> list[float]:
        return [s.context for s in self.schedules]

    @property
    def extrapolated(self) -> bool:
        return any(s.extrapolated for s in self.schedules)

    def rows(self) -> list[dict]:
        return [row for s in self.schedules for row in s.rows()]

    def to_dict(self) -> dict:
        """``{"rows": [...] (each with its context), "speculation_off_from": [{"context",
        "speculation_off_from"}, ...], "notes"}``."""
        return {
            "rows": self.rows(),
            "speculation_off_from": [
                {"context": _number(s.context), "speculation_off_from": s.speculation_off_from}
                for s in self.schedules
            ],
            "notes": list(self.notes),
        }


def _serving_evaluation(problem: Problem, ks: np.ndarray) -> Evaluate:
    """The chunk evaluation of ``schedule`` and ``solve --batch``: the model's metrics
    ``(B, K)`` over ``k_min..k_max == ks`` (the problem limited to ``k <= ks[-1]``) and the
    bonus-convention ``E`` at ``ks``, ``e_bonus (B, K)``."""
    k_max = int(ks[-1])
    limited = problem.replace(k_max=k_max)
    bonus = limited.replace(convention="bonus")

    def evaluate(members: np.ndarray) -> dict[str, np.ndarray]:
        # tokens/s from step times: a drafter may have no unit_cost (verifier-units)
        model = evaluate_subsets(limited, members, verifier_units=False)  # (B, K), k in ks
        e, _ = curves(bonus, members, k_max)
        return {**model, "e_bonus": e[:, ks - 1]}

    return evaluate


def _serving_space(problem: Problem, ks: np.ndarray, keep: Keeper) -> None:
    """Every subset at every ``k`` of ``ks``, evaluated (:func:`_serving_evaluation`) and
    masked by the budget, handed to ``keep`` chunk by chunk (:data:`MAX_CELLS` cells each)."""
    evaluate = _serving_evaluation(problem, ks)
    evaluate_space(problem, keep, evaluate=evaluate, max_cells=MAX_CELLS, cells_per_subset=ks.size)


def _serving_at(
    problem: Problem, c: Chunk, ks: np.ndarray, batch: int, context: float = 0.0
) -> dict[str, np.ndarray]:
    """Serving metrics ``(B, K)`` of a chunk at ``batch`` sequences of ``context`` tokens
    (NaN where no step time)."""
    step = step_grid(problem, c.members, ks, batch, context)
    base = step_grid(problem, c.members, np.zeros(1, np.int64), batch, context)
    price = problem.serving.gpu_cost_per_hour if problem.serving else np.nan
    return metrics_from(c.metrics["e_bonus"], step, base, float(batch), price)


class _PerBatch:
    """The schedule's keeper: at each batch size, the best configuration (highest
    ``tokens_per_s``; then smaller ``k``, fewer drafters, first in enumeration order;
    speculation off to start with, so it wins a tie) and its serving metrics, the best
    ``tokens_per_s`` per ``k`` (``by_k``), and the counts behind the notes."""

    def __init__(
        self,
        problem: Problem,
        ks: np.ndarray,
        off: dict[str, np.ndarray],
        batches: np.ndarray,
        context: float = 0.0,
    ) -> None:
        self.problem, self.ks, self.batches, self.context = problem, ks, batches, context
        s_count = self.batches.size
        self.metrics = off  # speculation off at every batch size: the candidate to beat
        zero = np.zeros(s_count, np.int64)
        self.best = BestPerKey(
            s_count, problem.n, ks, off["tokens_per_s"], zero, tiebreak=[(0, 0)] * s_count
        )
        self.by_k = GridMax(s_count, ks.size)
        self.evaluated = self.unmeasured = self.no_room = 0
        # per batch size: does any speculative configuration (budget aside) have a step time?
        self.spec_timed = np.zeros(s_count, bool)

    def add(self, c: Chunk) -> None:
        problem, ks, price = self.problem, self.ks, need_serving(self.problem).gpu_cost_per_hour
        e = c.metrics["e_bonus"]
        m_rows = c.members.sum(axis=1)
        ctx = self.context
        room = max_batch(problem, c.members, ctx)  # hosted drafters take KV-cache memory
        for i, b in enumerate(self.batches):
            step = step_grid(problem, c.members, ks, float(b), ctx)
            tps = tokens_per_s(e, step, float(b))
            has = ~np.isnan(tps)
            self.spec_timed[i] |= bool(has.any())
            self.evaluated += int(c.feasible.sum())
            self.unmeasured += int((c.feasible & ~has).sum())
            fits = (room >= b)[:, None]
            self.no_room += int((c.feasible & has & ~fits).sum())
            ok = c.feasible & has & fits
            if not ok.any():
                continue
            masked = mask_score(tps, ok)
            self.by_k.offer(i, masked, ok)
            won = self.best.offer(i, c.members, masked, (ks[None, :], m_rows[:, None]))
            if won is not None:
                r0, j0 = won
                base = step_grid(problem, c.members[r0 : r0 + 1], np.zeros(1), float(b), ctx)
                point = metrics_from(e[r0, j0], step[r0, j0], base[0, 0], float(b), price)
                for name in SERVING_METRICS:
                    self.metrics[name][i] = point[name]


def schedule(problem: Problem, context: float = 0.0, *, with_context: bool = False) -> Schedule:
    """The best configuration within the budget at each of ``serving.batch_sizes`` that
    fits in memory, at ``context`` tokens in each sequence's KV cache (0: none given).
    ``with_context``: the rows carry the context (a bucket of
    :func:`schedule_by_context`)."""
    serving = need_serving(problem)
    planned = serving.batch_sizes
    ks = speculative_ks(problem)
    all_ks = np.concatenate([[0], ks])
    notes: list[str] = []
    # speculation off holds the most sequences: a batch size it cannot hold fits nothing
    room_off = int(max_batch(problem, np.zeros((1, problem.n), bool), context)[0])
    fits = planned <= room_off
    left_out = [int(b) for b in planned[~fits]]
    if not fits.any():
        where = "serving.memory" if problem.memory is not None else "context"
        raise InputError(
            where,
            f"no planned batch size fits in memory: a replica holds at most {room_off} "
            f"sequences{_at(context)} even with speculation off (serving.batch_sizes "
            f"{', '.join(str(int(b)) for b in planned)})",
        )
    if left_out:
        notes.append(
            f"batch {', '.join(map(str, left_out))} left out: a replica holds at most "
            f"{room_off} sequences{_at(context)} even with speculation off "
            f"({'serving.memory' if problem.memory is not None else 'the specs'})"
        )
    notes += memory_notes(problem, [context])
    batches = planned[fits]
    s_count = batches.size
    off = np.array([baseline_ms(problem, float(b), context) for b in batches])
    if np.isnan(off).any():
        i = int(np.flatnonzero(np.isnan(off))[0])
        ranges = [f"{t.batch[0]:g}..{t.batch[-1]:g}" for t in serving.tables]
        if serving.has_component_model:
            ranges.append(f"{serving.verify_batch[0]:g}..{serving.verify_batch[-1]:g}")
        raise NotModelledError(
            f"serving.batch_sizes.{i}",
            f"batch size {int(batches[i])} is outside every measured or modelled range "
            f"({', '.join(ranges)}): no k = 0 step time (the baseline) to plan with; step "
            "times are never extrapolated",
        )
    keeper = _PerBatch(problem, ks, _off_metrics(serving, off, batches), batches, context)
    if ks.size:
        _serving_space(problem, ks, keeper)
    if not keeper.spec_timed.any():
        untimed = untimed_drafters(problem)
        if untimed:
            name = untimed[0]
            raise NotModelledError(
                f"drafters[{name}].architecture",
                f"missing: the roofline has no drafting time for {name} (give its "
                f"architecture, its config.json, or serving.roofline.drafters.{name}."
                "fixed_ms), so no speculative step has a step time",
            )
        raise NotModelledError(
            "serving.batch_sizes",
            "no configuration of the search space has a step time with k >= 1 at any "
            f"planned batch size (search.k {problem.k_min}..{problem.k_max}): whether "
            "speculation pays cannot be said (step times are never extrapolated)",
        )
    if not keeper.spec_timed.all():
        # k = 0 there would read as "speculation stops paying" for want of a measurement:
        # those batch sizes are left out, said in a note, and the rest planned again
        timed = keeper.spec_timed
        gone = [int(b) for b in batches[~timed]]
        notes.append(
            f"batch {', '.join(map(str, gone))} left out: no configuration of the search "
            f"space has a step time with k >= 1 there (search.k {problem.k_min}.."
            f"{problem.k_max}), so whether speculation pays cannot be said (step times are "
            "never extrapolated; measure speculation there to plan it)"
        )
        batches, off = batches[timed], off[timed]
        s_count = batches.size
        keeper = _PerBatch(problem, ks, _off_metrics(serving, off, batches), batches, context)
        _serving_space(problem, ks, keeper)
    off_tps = _off_metrics(serving, off, batches)["tokens_per_s"]  # by_k's k = 0 column
    if keeper.unmeasured:
        notes.append(
            f"{keeper.unmeasured:,} configuration(s) within the budget have no step time at "
            "their batch size (no measured table and no component model covering them): "
            "left out"
        )
    if keeper.no_room:
        notes.append(
            f"{keeper.no_room:,} configuration(s) left out at some batch size: their drafters "
            "take KV-cache memory the batch needs ("
            + (
                "serving.memory, drafters[].memory_gb)"
                if problem.memory is not None
                else f"the specs{_at(context)})"
            )
        )
    notes += baseline_disagreements(problem, batches, off, context)
    best = keeper.best
    basis, extrapolation = step_time_caveats(problem, batches, best.k, [context], batches)
    notes += basis + extrapolation
    by_k = np.column_stack([off_tps, keeper.by_k.values])
    return Schedule(
        problem=problem.name,
        names=problem.names,
        batch=batches.copy(),
        members=best.members,
        k=best.k,
        metrics=keeper.metrics,
        ks=all_ks,
        by_k=by_k,
        speculation_off_from=speculation_off_from(batches, best.k),
        evaluated=s_count + keeper.evaluated,
        unmeasured=keeper.unmeasured,
        notes=notes,
        context=float(context),
        with_context=with_context,
        left_out=left_out,
        extrapolated=bool(extrapolation),
    )


def _off_metrics(serving, off: np.ndarray, batches: np.ndarray) -> dict[str, np.ndarray]:
    """Speculation off at every batch size: the serving metrics to beat."""
    metrics = metrics_from(
        np.ones(batches.size), off, off, batches.astype(float), serving.gpu_cost_per_hour
    )
    return {key: np.array(v, dtype=float) for key, v in metrics.items()}


def _at(context: float) -> str:
    return f" of {context:g} tokens" if context > 0 else ""


def schedule_by_context(problem: Problem, contexts: list[float]) -> ContextSchedules:
    """:func:`schedule` at each of ``contexts`` (tokens per sequence, ascending, each
    > 0): ``k`` by batch size and context bucket."""
    if not contexts:
        raise ParameterError("contexts", "give at least one context")
    if any(not np.isfinite(c) or c <= 0 for c in contexts):
        raise ParameterError("contexts", "every context must be a number of tokens > 0")
    if list(contexts) != sorted(set(contexts)):
        raise ParameterError("contexts", "must be strictly increasing")
    scheds = [schedule(problem, float(c), with_context=True) for c in contexts]
    notes: list[str] = []
    for s in scheds:
        for n in s.notes:
            shared = all(n in other.notes for other in scheds)
            own = n.startswith(f"context {s.context:g}")  # already says its context
            text = n if shared or own else f"context {s.context:g}: {n}"
            if text not in notes:
                notes.append(text)
    if len({tuple(map(int, s.k)) + tuple(map(int, s.batch)) for s in scheds}) > 1:
        notes.append(
            "k by batch size differs between the context buckets: the step times and the "
            "memory cap depend on the tokens each sequence holds"
        )
    return ContextSchedules(problem.name, problem.names, scheds, notes)


def check_export(engine: str) -> str:
    """``engine`` when a schedule exports to it (:func:`schedule_engines`); else a
    :class:`~allocator.exceptions.ParameterError` naming ``export``: for an engine that
    takes no schedule by batch size, why (:func:`check_schedule_engine`)."""
    check_schedule_engine(engine, "export")
    exports = schedule_engines()
    if engine not in exports:
        raise ParameterError(
            "export", f"{engine!r}: a schedule exports to {', '.join(exports)} only"
        )
    return engine


#: Where vLLM reads the schedule, and that it has no context axis (for the notes).
VLLM_BY_BATCH_ONLY = (
    "vLLM takes k by batch size only (num_speculative_tokens_per_batch_size, entries "
    "(range_start, range_end, k): vLLM 0.33.0, vllm/config/speculative.py and "
    "vllm/v1/spec_decode/dynamic/utils.py; a context axis is only proposed, in RFC "
    "vllm-project/vllm#48627)"
)


def export_schedule(
    sched: Schedule | ContextSchedules, problem: Problem, engine: str = "vllm"
) -> ScheduleExport:
    """``sched`` (of ``problem``) as ``engine`` takes it (docs/design.md §8.6). A schedule
    by context bucket whose ``k`` by batch size is the same in every bucket exports as
    one; where it differs, one ``--speculative-config`` per bucket, as one JSON object
    keyed by the context (vLLM has no context axis: :data:`VLLM_BY_BATCH_ONLY`)."""
    check_export(engine)

    if isinstance(sched, Schedule):
        text, one = engine_schedule(engine, sched.rows(), problem.drafter_map)
        return ScheduleExport(engine, text, one)
    texts: list[str | None] = []
    notes: list[str] = []
    for s in sched.schedules:
        rows = [{k: v for k, v in r.items() if k != "context"} for r in s.rows()]
        if all(r["k"] == 0 for r in rows):  # this bucket serves without speculation
            texts.append(None)
            notes.append(
                f"context {s.context:g}: the schedule never speculates there: serve that "
                "bucket without a speculative config (null)"
            )
            continue
        t, n = engine_schedule(engine, rows, problem.drafter_map)
        texts.append(t)
        notes += [m for m in n if m not in notes]
    if all(t is None for t in texts):
        raise ParameterError(
            "export", "the schedule never speculates: serve without a speculative config"
        )
    if len(set(texts)) == 1 and texts[0] is not None:
        notes.append(
            f"the same schedule at every context asked for "
            f"({', '.join(f'{c:g}' for c in sched.contexts)} tokens): one config serves them"
        )
        return ScheduleExport(engine, texts[0], notes)
    notes.append(
        VLLM_BY_BATCH_ONLY
        + ": the schedule differs by context, so one --speculative-config per context "
        "bucket is written, keyed by the context (tokens per sequence) it was planned "
        "at; run one server per bucket, or the one of the context your traffic holds"
    )
    doc = {
        f"{c:g}": None if t is None else json.loads(t)
        for c, t in zip(sched.contexts, texts, strict=True)
    }
    return ScheduleExport(engine, json.dumps(doc) + "\n", notes)


def baseline_disagreements(
    problem: Problem, batch: np.ndarray, off: np.ndarray, context: float = 0.0
) -> list[str]:
    """A note when a table's own ``k = 0`` step differs from the baseline ``off`` ``(S,)``
    (ms at each of ``batch``) by more than :data:`K0_TOLERANCE`: the schedule decides
    against the baseline while each row's speedup is over its own ``k = 0``
    (docs/design.md §8.5), so the two can then disagree."""
    serving = need_serving(problem)
    zero = np.zeros(1, np.int64)
    found = []
    for t in serving.tables:
        names = "+".join(n for n, on in zip(problem.names, t.members, strict=True) if on)
        for b, base in zip(batch, off, strict=True):
            own = float(step_grid(problem, t.members[None, :], zero, float(b), context)[0, 0])
            if not np.isnan(own) and abs(own - base) > K0_TOLERANCE * base:
                found.append(f"{names}'s table {own:.4g} ms against {base:.4g} at batch {b}")
    if not found:
        return []
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return [
        "the file's k = 0 (no speculation) step times disagree: "
        + "; ".join(found[:3])
        + more
        + ". The schedule compares tokens/s with the baseline (verify_ms(b, 1), else the "
        "first table's k = 0); each row's speedup is over its own configuration's k = 0"
    ]


def speculation_off_from(batch: np.ndarray, k: np.ndarray) -> int | None:
    """The smallest batch size ``b`` with ``k = 0`` at ``b`` and at every larger one
    (``batch`` ascending); ``None`` when the largest batch size still speculates."""
    k = np.asarray(k)
    if k.size == 0 or k[-1] != 0:
        return None
    spec = np.flatnonzero(k != 0)
    first = 0 if spec.size == 0 else int(spec[-1]) + 1
    return int(batch[first])


class _ServingFront:
    """``solve --batch``'s keeper: the front of tokens/s against the cost metric at one
    batch size over the cells within the budget with a step time that fit in memory,
    each point carrying the model's and the serving metrics; and the counts."""

    def __init__(self, problem: Problem, ks: np.ndarray, batch: int, context: float = 0.0) -> None:
        self.problem, self.ks, self.batch, self.context = problem, ks, batch, context
        self.front = FrontKeeper(problem.cost_metric, ks)
        self.evaluated = self.unmeasured = self.no_room = 0

    def add(self, c: Chunk) -> None:
        problem, ks, batch, ctx = self.problem, self.ks, self.batch, self.context
        sm = _serving_at(problem, c, ks, batch, ctx)
        has = ~np.isnan(sm["tokens_per_s"])
        self.evaluated += c.metrics["e_bonus"].size
        self.unmeasured += int((~has).sum())
        fits = (max_batch(problem, c.members, ctx) >= batch)[:, None]  # drafters take KV memory
        self.no_room += int((c.feasible & has & ~fits).sum())
        ok = c.feasible & has & fits
        r, j = np.nonzero(ok)
        if r.size == 0:
            return
        met = {name: np.asarray(v)[r, j] for name, v in c.metrics.items() if name != "e_bonus"}
        met["tokens_per_step"] = sm["expected_accepted"][r, j]
        for name in SERVING_METRICS:
            if name != "expected_accepted":
                met[name] = sm[name][r, j]
        met["batch"] = np.full(r.size, float(batch))
        met["throughput"] = met["tokens_per_s"]
        self.front.offer_points(c.members[r], ks[j], met)


def serving_front(
    problem: Problem, batch: int, context: float = 0.0
) -> tuple[Front, int, int, list[str]]:
    """The front of ``tokens_per_s`` against the cost metric at ``batch`` sequences of
    ``context`` tokens each (0: none given).

    Returns the front (its ``throughput`` metric is ``tokens_per_s``; it carries every
    model metric and every serving metric, plus ``batch``, and ``context`` when one is
    given), the configurations evaluated, how many of them had no step time (left out),
    and notes.
    """
    need_serving(problem)
    if not np.isfinite(context) or context < 0:
        raise ParameterError("context", f"{context} tokens: must be >= 0")
    ks = speculative_ks(problem)
    room_off = int(max_batch(problem, np.zeros((1, problem.n), bool), context)[0])
    if batch > room_off:
        raise InputError(
            "serving.memory" if problem.memory is not None else "batch",
            f"a replica holds at most {room_off} sequences{_at(context)} even with "
            f"speculation off; {batch} do not fit",
        )
    base = baseline_ms(problem, float(batch), context)
    if np.isnan(base):
        raise NotModelledError(
            "serving", f"no step time at batch {batch}: outside every measured or modelled range"
        )
    if ks.size == 0:
        raise NotModelledError(
            "serving",
            f"no speculative step time within search.k ({problem.k_min}..{problem.k_max})",
        )
    keeper = _ServingFront(problem, ks, batch, context)
    _serving_space(problem, ks, keeper)
    front = keeper.front.front()
    evaluated, unmeasured, no_room = keeper.evaluated, keeper.unmeasured, keeper.no_room
    if front is None:
        raise NotModelledError(
            "serving",
            f"no configuration within the budget has a step time at batch {batch}"
            + (
                f" and leaves the batch room in memory ({no_room:,} have a step time but "
                "their drafters take the KV-cache memory it needs: serving.memory, "
                "drafters[].memory_gb)"
                if no_room
                else ""
            ),
        )
    notes = [
        f"throughput is tokens_per_s at batch {batch} (E in the bonus convention over the "
        "step wall time); k = 0 (no speculation) gives "
        f"{batch * 1000.0 / base:.6g} tokens/s"
    ]
    if unmeasured:
        notes.append(
            f"{unmeasured:,} of {evaluated:,} configurations have no step time at batch "
            f"{batch} (no measured table and no component model covering them): left out"
        )
    if no_room:
        notes.append(
            f"{no_room:,} configuration(s) left out at batch {batch}: their drafters take "
            "KV-cache memory the batch needs ("
            + (
                "serving.memory, drafters[].memory_gb)"
                if problem.memory is not None
                else f"the specs{_at(context)})"
            )
        )
    if context > 0:
        front.metrics["context"] = np.full(len(front), float(context))
    notes += step_time_notes(problem, [batch], front.k, [context])
    notes += memory_notes(problem, [context])
    return front, evaluated, unmeasured, notes


#: Most context buckets ``schedule --contexts`` takes.
MAX_CONTEXTS = 64


def parse_contexts(contexts: Sequence[float] | str) -> list[float]:
    """``"1024,8192,32768"`` (or a list) as context buckets, tokens per sequence: numbers
    > 0, strictly increasing, at most :data:`MAX_CONTEXTS`; a :class:`ParameterError`
    naming ``contexts`` otherwise."""
    if isinstance(contexts, str):
        items = [t.strip() for t in contexts.split(",")]
        if not contexts.strip() or any(not t for t in items):
            raise ParameterError("contexts", "expected tokens per sequence, e.g. 1024,8192,32768")
        values = []
        for t in items[: MAX_CONTEXTS + 1]:
            try:
                values.append(float(t))
            except ValueError:
                raise ParameterError("contexts", f"{t[:40]!r} is not a number of tokens") from None
    else:
        values = [float(c) for c in list(contexts)[: MAX_CONTEXTS + 1]]
    if len(values) > MAX_CONTEXTS:
        raise ParameterError("contexts", f"at most {MAX_CONTEXTS} context buckets")
    if not values or any(not math.isfinite(v) or v <= 0 or v > 1e9 for v in values):
        raise ParameterError("contexts", "every context must be a number of tokens in (0, 1e9]")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ParameterError("contexts", "must be strictly increasing")
    return values


def front_at_batch(
    problem: Problem, batch: int, context: float = 0.0, engine: str = "vllm", pooled: bool = False
) -> SolveResult:
    """``solve --batch B``: :func:`serving_front` as a solve result, of the configurations
    ``engine`` serves (with ``pooled``: every configuration, labelled as the upper bound;
    :func:`allocator.engines.servable`), with notes on positions past those measured."""

    if problem.cost_metric in DRAFT_COST_CAPS:  # the cost axis is in verifier-units
        require_unit_cost(problem, needed_by=f"cost_metric {problem.cost_metric}")
    t0 = time.perf_counter()
    problem, served = servable(problem, engine, pooled)
    front, evaluated, _, notes = serving_front(problem, batch, context)
    return SolveResult(
        problem=problem.name,
        names=problem.names,
        strategy="exact",
        exact=True,
        front=front,
        evaluated=evaluated,
        seconds=time.perf_counter() - t0,
        notes=[*served, *notes, *position_notes(problem, front.members, front.k)],
    )


__all__ = [
    "INSTEAD",
    "K0_TOLERANCE",
    "MAX_CONTEXTS",
    "MAX_CELLS",
    "NO_SCHEDULE",
    "VLLM_BY_BATCH_ONLY",
    "ContextSchedules",
    "Schedule",
    "ScheduleExport",
    "baseline_disagreements",
    "check_export",
    "check_schedule_engine",
    "export_schedule",
    "front_at_batch",
    "parse_contexts",
    "schedule",
    "schedule_by_context",
    "schedule_engines",
    "serving_front",
    "speculation_off_from",
]
