"""One configuration evaluated: every metric of a subset at one ``k`` (``evaluate``).

Without a batch size the metrics are the model's (:mod:`allocator.model.evaluate`). At
``batch`` concurrent sequences they gain the serving metrics (:mod:`allocator.model.serving`),
and ``k = 0`` is speculation off: no drafters, one token per plain verification pass
(``throughput = 1 / T`` with ``T`` the pass verifying no drafted token), no draft cost
(docs/design.md §6, §8.4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.result import Front, Point
from .evaluate import evaluate_configs

if TYPE_CHECKING:
    from ..core.problem import Problem


def speculation_off(problem: Problem) -> dict[str, np.ndarray]:
    """The model's metrics of decoding without speculation (``k = 0``): each ``(1,)``,
    keyed as :data:`allocator.model.METRICS`; ``round_time`` one plain pass (verifier-units),
    ``throughput`` its inverse, one unit per pass, no drafting."""
    from .timing import verify_time

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
    problem: Problem, members: np.ndarray, k: int, batch: int | None = None
) -> Point:
    """Every metric of the configuration ``members`` (``(N,)`` bool) at draft length ``k``.

    With ``batch`` (the problem has a ``serving`` section) the point also holds the
    serving metrics at that many concurrent sequences, ``tokens_per_step`` the bonus
    convention's ``E`` and ``batch`` itself; ``k = 0`` (``members`` all False) is
    speculation off (:func:`speculation_off`). The step time is found first, so an
    unmeasured ``k`` fails (:class:`~allocator.exceptions.InputError` naming
    ``serving``) before the model builds acceptance curves up to ``k``.
    The arguments are taken as given: :func:`allocator.api.evaluate` checks them.
    """
    row = np.asarray(members, bool)[None, :]
    ks = np.array([k])
    if batch is None:
        metrics = evaluate_configs(problem, row, ks)
        return Point.of(Front(row, ks, metrics, problem.cost_metric), 0, problem.names)
    from .serving import serving_metrics

    if k == 0:
        metrics = speculation_off(problem)
    # the step time first: an unmeasured k fails here, before the model builds its
    # acceptance curves up to k (which for a huge k would take all memory)
    sm = serving_metrics(problem, row, ks, batch)
    if k > 0:  # a drafter without unit_cost: the verifier-unit metrics are NaN (null)
        metrics = evaluate_configs(problem, row, ks, verifier_units=False)
    metrics["tokens_per_step"] = sm.pop("expected_accepted")
    metrics.update(sm)
    metrics["batch"] = np.array([float(batch)])
    return Point.of(Front(row, ks, metrics, problem.cost_metric), 0, problem.names)


__all__ = ["evaluate_point", "speculation_off"]
