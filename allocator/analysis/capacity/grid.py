"""Every configuration at every batch size, from the serving model: the grid capacity
for a token load sizes fleets on (:mod:`.by_load`, docs/design.md §8.11).

The serving model (:mod:`allocator.model.under_load`) gives, at every integer batch size ``b``
from 1 to the largest the step times reach (:func:`batch_limit`; ``serving.batch_sizes``
plays no part), every configuration's ``tokens_per_s(b)`` (one replica, whole batch) and
``tpot_ms(b) = step_ms / E``. A configuration is a subset of the search space with a ``k``
in ``search.k`` up to the largest ``k`` any step time reaches, within the problem's
``budget`` caps (:func:`configurations`), plus ``k = 0`` (no speculation, no drafter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...core.space import count_subsets
from ...exceptions import InputError
from ...model import under_load
from ...model.evaluator import FeasibleCells, evaluate_space
from ...model.memory_fit import max_batch
from ...model.metrics import evaluate_subsets

if TYPE_CHECKING:
    from ...core.problem import Problem

#: Most (configuration, batch size) pairs sized exactly (two float arrays of this many
#: cells are held at once, 8 bytes each).
MAX_CELLS = 20_000_000


@dataclass(frozen=True, eq=False)
class ServingGrid:
    """Every configuration at every batch size of ``serving``.

    batch : ``(S,)`` int, the batch sizes (every integer from 1 to :func:`batch_limit`);
    members : ``(C, N)`` bool; k : ``(C,)`` int (row 0 is ``k = 0`` without drafters);
    tokens_per_s : ``(S, C)`` tokens/s of one replica (NaN: no step time); tpot_ms :
    ``(S, C)`` ms, the mean time per output token of one sequence; max_batch : ``(C,)``
    int, the largest batch the replica holds with that configuration's drafters (memory);
    over_budget : speculative configurations the problem's ``budget`` left out (not rows);
    notes : what was left out, and why.
    """

    names: tuple[str, ...]
    batch: np.ndarray
    members: np.ndarray
    k: np.ndarray
    tokens_per_s: np.ndarray
    tpot_ms: np.ndarray
    max_batch: np.ndarray
    over_budget: int = 0
    notes: tuple[str, ...] = ()

    def fits(self) -> np.ndarray:
        """``(S, C)`` bool: a step time exists and the batch fits in memory."""
        return np.isfinite(self.tokens_per_s) & (self.batch[:, None] <= self.max_batch[None, :])

    def measured_to(self) -> np.ndarray:
        """``(C,)`` int: the largest batch size with a step time for each configuration
        (0: none)."""
        timed = np.isfinite(self.tokens_per_s)
        last = timed.shape[0] - 1 - np.argmax(timed[::-1], axis=0)
        return np.where(timed.any(axis=0), self.batch[last], 0)


# ---------------------------------------------------------------- the grid
def serving_model():
    """The serving model's functions (:mod:`allocator.model.under_load`)."""
    return under_load


def fleet_serving(problem: Problem):
    """The problem's serving arrays; an :class:`InputError` naming ``serving`` without them."""
    return serving_model().need_serving(
        problem, "sizing a fleet needs batch sizes, step times and gpu_cost_per_hour"
    )


def batch_limit(problem: Problem) -> tuple[int, str | None]:
    """The largest batch size any step time of the problem reaches, and a note when that is
    not a measured range: the largest batch of a measured ``step_ms`` table or of
    ``verify_ms``; the roofline's measured range when calibrated; else (a roofline with no
    measured range) the memory cap with no drafter, else the largest of
    ``serving.batch_sizes`` and ``serving.scheduler.max_num_seqs``."""
    serving = fleet_serving(problem)
    highs = [float(t.batch[-1]) for t in serving.tables]
    if serving.has_component_model:
        highs.append(float(serving.verify_batch[-1]))
    note = None
    if serving.has_roofline:
        measured = serving_model().predictor(problem).domain().get("decode_seqs")
        if measured is not None and np.isfinite(measured[1]):
            highs.append(float(measured[1]))
        elif not highs:
            if problem.memory is not None:
                cap = int(max_batch(problem, np.zeros((1, problem.n), bool))[0])
                highs.append(float(cap))
                why = f"the memory cap with no drafter ({cap})"
            else:
                top = int(serving.batch_sizes[-1])
                if serving.scheduler is not None:
                    top = max(top, int(serving.scheduler.max_num_seqs))
                highs.append(float(top))
                why = (
                    f"the largest of serving.batch_sizes and serving.scheduler.max_num_seqs ({top})"
                )
            note = (
                "the roofline has no measured batch range: batch sizes up to " + why + " are "
                "candidates"
            )
    return max(1, int(max(highs, default=1.0))), note


def configurations(
    problem: Problem, batches: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Row 0: no drafters, ``k = 0``; then every subset of the search space at every ``k``
    of the serving model's ``speculative_ks`` that is within the problem's ``budget``
    (each cap on the model's metrics, as ``schedule`` applies it). Returns ``members
    (C, N)`` bool, ``k (C,)`` int and how many configurations the budget left out.
    ``batches``: the batch sizes each is sized at (default :func:`batch_limit`'s)."""
    ks = serving_model().speculative_ks(problem)
    if batches is None:
        batches = batch_limit(problem)[0]
    pairs = count_subsets(problem) * ks.size * batches
    if pairs > MAX_CELLS:
        raise InputError(
            "search.m.max",
            f"{pairs:,} (configuration, batch size) pairs are too many to size exactly "
            f"(at most {MAX_CELLS:,}); lower search.m.max or search.k.max",
        )
    kept = FeasibleCells(ks)
    if ks.size:
        # the model's metrics over k_min..k_max == ks, as schedule evaluates them
        limited = problem.replace(k_max=int(ks[-1]))

        def evaluate(members: np.ndarray) -> dict[str, np.ndarray]:
            if not problem.budget:  # nothing to mask: the model need not run
                return {"feasible": np.ones((members.shape[0], ks.size), bool)}
            return evaluate_subsets(limited, members, verifier_units=False)

        evaluate_space(problem, kept, evaluate=evaluate, rows=1 << 16)
    row0 = np.zeros((1, problem.n), bool)
    members = np.concatenate([row0, kept.members(problem.n)])
    k = np.concatenate([np.zeros(1, np.int64), kept.k()])
    return members, k, kept.left_out


def untimed_drafters(problem: Problem) -> list[str]:
    """Drafters with neither a measured ``step_ms`` table of their own nor ``draft_ms`` (nor
    an ``architecture`` for the roofline): no speculative configuration of theirs has a
    step time."""
    serving = fleet_serving(problem)
    tabled = np.zeros(problem.n, bool)
    for t in serving.tables:
        tabled |= t.members
    out = []
    for i, name in enumerate(problem.names):
        if tabled[i] or serving.draft_ms[i].size:
            continue
        models = serving.drafter_models
        if serving.has_roofline and models and models[i] is not None:
            continue
        out.append(name)
    return out


def serving_grid(problem: Problem) -> ServingGrid:
    """Tokens/s and TPOT of every configuration at every integer batch size from 1 to
    :func:`batch_limit` (see the module doc), and notes on what has no step time.

    Raises :class:`InputError` (field ``serving``) when the problem has no serving section.
    """
    sm = serving_model()
    top, limit_note = batch_limit(problem)
    members, k, over_budget = configurations(problem, top)
    e = sm.bonus_expected(problem, members, k)  # (C,), independent of the batch size
    batch = np.arange(1, top + 1, dtype=np.int64)
    tps = np.full((batch.size, k.size), np.nan)
    tpot = np.full_like(tps, np.nan)
    for i, b in enumerate(batch):  # one pass per batch size; configurations vectorised
        step = sm.step_ms_or_nan(problem, members, k, float(b))
        tps[i] = sm.tokens_per_s(e, step, float(b))
        tpot[i] = step / e
    notes = [] if limit_note is None else [limit_note]
    lacking = untimed_drafters(problem)
    if lacking:
        notes.append(
            f"left out: {', '.join(lacking)} (neither a measured step_ms table nor draft_ms: "
            "no step time to speculate with)"
        )
    timed = np.isfinite(tps)
    missing = int(np.count_nonzero(~timed[:, timed.any(axis=0)]))  # configurations with some
    if missing:
        notes.append(
            f"{missing:,} (configuration, batch size) pair(s) of batch sizes 1..{top} have no "
            "step time (outside every measured range; never extrapolated): not candidates"
        )
    return ServingGrid(
        problem.names,
        batch,
        members,
        k,
        tps,
        tpot,
        max_batch(problem, members).astype(np.int64),
        over_budget,
        tuple(notes),
    )


__all__ = [
    "MAX_CELLS",
    "ServingGrid",
    "batch_limit",
    "configurations",
    "fleet_serving",
    "serving_grid",
    "serving_model",
    "untimed_drafters",
]
