"""One configuration evaluated: every metric of a subset at one ``k`` (``evaluate``).

Without a batch size the metrics are the model's (:mod:`allocator.model.metrics`). At
``batch`` concurrent sequences they gain the serving metrics (:mod:`allocator.model.under_load`),
and ``k = 0`` is speculation off: no drafters, one token per plain verification pass
(``throughput = 1 / T`` with ``T`` the pass verifying no drafted token), no draft cost
(docs/design.md §6, §8.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.problem import MAX_K
from ..core.result import Front, Point
from ..exceptions import InputError, ParameterError
from ..validate import finite, whole
from .memory_fit import max_batch, memory_notes
from .metrics import evaluate_configs
from .timing import verify_time
from .under_load import serving_metrics, step_time_notes


@dataclass(frozen=True, eq=False)
class NotedPoint(Point):
    """A :class:`~allocator.core.result.Point` with notes on what its serving metrics rest
    on (extrapolation, memory, context): its document gains ``notes`` when there are any."""

    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        doc = super().to_dict()
        if self.notes:
            doc["notes"] = list(self.notes)
        return doc


if TYPE_CHECKING:
    from ..core.problem import Problem


def speculation_off(problem: Problem) -> dict[str, np.ndarray]:
    """The model's metrics of decoding without speculation (``k = 0``): each ``(1,)``,
    keyed as :data:`allocator.model.METRICS`; ``round_time`` one plain pass (verifier-units),
    ``throughput`` its inverse, one unit per pass, no drafting."""
    t = verify_time(np.zeros(1), problem.pass_cost, problem.token_cost, problem.pass_cost_curve)
    t1 = float(np.asarray(t).ravel()[0])
    zero = np.zeros(1)
    return {
        "throughput": np.array([1.0 / t1]),
        "expected_accepted": np.ones(1),
        "pooled_acceptance": zero,
        "round_time": np.array([t1]),
        "draft_cost_per_round": zero,
        "draft_cost_per_token": zero,
        "hosting_cost": zero,
        "drafters": zero,
    }


def evaluate_point(
    problem: Problem,
    members: np.ndarray,
    k: int,
    batch: int | None = None,
    context: float | None = None,
) -> Point:
    """Every metric of the configuration ``members`` (``(N,)`` bool) at draft length ``k``.

    With ``batch`` (the problem has a ``serving`` section) the point also holds the
    serving metrics at that many concurrent sequences, ``tokens_per_step`` the bonus
    convention's ``E`` and ``batch`` itself; ``k = 0`` (``members`` all False) is
    speculation off (:func:`speculation_off`). ``context``: tokens in each sequence's KV
    cache (the point then gives it); the point's notes say where the step time rests on
    extrapolation, and when the batch does not fit in memory. The step time is found first, so an
    unmeasured ``k`` fails (:class:`~allocator.exceptions.InputError` naming
    ``serving``) before the model builds acceptance curves up to ``k``.
    The arguments are taken as given: :func:`allocator.api.evaluate` checks them.
    """
    row = np.asarray(members, bool)[None, :]
    ks = np.array([k])
    if batch is None:
        metrics = evaluate_configs(problem, row, ks)
        return Point.of(Front(row, ks, metrics, problem.cost_metric), 0, problem.names)

    ctx = 0.0 if context is None else float(context)
    if k == 0:
        metrics = speculation_off(problem)
    # the step time first: an unmeasured k fails here, before the model builds its
    # acceptance curves up to k (which for a huge k would take all memory)
    sm = serving_metrics(problem, row, ks, batch, ctx)
    if k > 0:  # a drafter without unit_cost: the verifier-unit metrics are NaN (null)
        metrics = evaluate_configs(problem, row, ks, verifier_units=False)
    metrics["tokens_per_step"] = sm.pop("expected_accepted")
    metrics.update(sm)
    metrics["batch"] = np.array([float(batch)])
    if context is not None:
        metrics["context"] = np.array([ctx])
    notes = step_time_notes(problem, [batch], [k], [ctx])
    room = int(max_batch(problem, row, ctx)[0])
    if batch > room:
        notes.append(
            f"batch {batch} does not fit in memory: a replica holds at most {room} sequences "
            "of this configuration" + (f" of {ctx:g} tokens" if ctx > 0 else "")
        )
    notes += memory_notes(problem, [ctx])
    point = NotedPoint.of(Front(row, ks, metrics, problem.cost_metric), 0, problem.names)
    return NotedPoint(
        point.names, point.members, point.k, point.metrics, point.cost_metric, tuple(notes)
    )


def evaluate_configuration(
    problem: Problem,
    drafters: list[str],
    k: int,
    field: str = "drafters",
    batch: int | None = None,
    context: float | None = None,
) -> Point:
    """``evaluate``: :func:`evaluate_point` of the drafters named (``field`` names them in
    errors) at ``k``, with the arguments checked: ``k`` in ``1..MAX_K`` without ``batch``,
    ``0..MAX_K`` with it (``k = 0``: the drafters are not run), ``context`` only with
    ``batch`` and ``>= 0``; a ``batch`` needs the problem's ``serving`` section."""
    if context is not None:
        if batch is None:
            raise ParameterError("context", "needs a batch size (the step time under load)")
        finite(context, "context", lo=0, unit="tokens")
    whole(k, "k", lo=0, hi=MAX_K)
    if batch is None:
        if k < 1:
            raise ParameterError("k", "must be >= 1 (k = 0, no speculation, needs --batch)")
        return evaluate_point(problem, problem.mask(drafters, field), k)
    if problem.serving is None:
        raise InputError(
            "serving", "--batch needs a serving section in the problem (step times by batch)"
        )
    members = np.zeros(problem.n, bool) if k == 0 else problem.mask(drafters, field)
    return evaluate_point(problem, members, k, batch, context)


__all__ = ["NotedPoint", "evaluate_configuration", "evaluate_point", "speculation_off"]
