"""Held-out rows: which rows ``--holdout`` keeps out of the fit, and whether the other
rows determine a held-out row's step time (docs/design.md §8.7).

``FRACTION`` (with ``seed``) holds out a seeded random fraction of the rows
(:func:`holdout_mask`: never the last row of a drafter set, so every drafter stays
fitted); the fit of the rest is reported on the held-out rows only, and that fit is
written. ``by-k`` and ``by-batch`` (:func:`hold_out_groups`) hold out every row at one
``k`` (one batch size) in turn, fit the others and predict the held-out rows; a group
whose step times the other rows cannot determine (no ``k = 0`` row left, a drafter left
without a row, a parameter it needs left flat: :func:`predictable`) is counted as not
predictable, not reported. The file written is then the fit of every row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.problem import Problem
from ..exceptions import InputError, ParameterError
from ..model.steptime import RooflinePredictor, StepInputs
from .fit import fit_form
from .roofline_fit import log_jacobian
from .rows import Measured, quoted

__all__ = [
    "GROUPS",
    "GroupHoldout",
    "hold_out_groups",
    "holdout_mask",
    "parse_holdout",
    "predictable",
]

#: The leave-one-group-out schemes of ``--holdout``.
GROUPS = ("by-k", "by-batch")


def parse_holdout(holdout: float | str | None) -> float | str | None:
    """``--holdout``: a fraction in (0, 1), ``by-k`` or ``by-batch``; a
    :class:`ParameterError` naming ``holdout`` otherwise."""
    if holdout is None:
        return None
    if isinstance(holdout, str):
        text = holdout.strip()
        if text in GROUPS:
            return text
        try:
            holdout = float(text)
        except ValueError:
            raise ParameterError(
                "holdout", f"{quoted(text)} is not by-k, by-batch or a fraction in (0, 1)"
            ) from None
    if not isinstance(holdout, int | float) or not 0.0 < holdout < 1.0:
        raise ParameterError("holdout", f"{holdout} is not a fraction in (0, 1)")
    return float(holdout)


def holdout_mask(data: Measured, fraction: float, seed: int) -> np.ndarray:
    """A seeded random choice of ``round(fraction · R)`` rows to hold out: ``(R,)`` bool.

    Rows are drawn in a random order; a row is skipped when holding it out would leave
    its drafter set with no fitted row or leave fewer than two rows to fit.
    """
    n = len(data)
    want = int(round(fraction * n))
    rng = np.random.default_rng(seed)
    keys = [row.tobytes() for row in data.members]
    left: dict[bytes, int] = {}
    for key in keys:
        left[key] = left.get(key, 0) + 1
    out = np.zeros(n, bool)
    for r in rng.permutation(n):
        if out.sum() >= want:
            break
        if left[keys[r]] <= 1 or n - out.sum() <= 2:
            continue
        out[r] = True
        left[keys[r]] -= 1
    return out


def predictable(
    model: RooflinePredictor, train: StepInputs, test: StepInputs, typical_ms: float
) -> bool:
    """Whether the step times of ``test`` are fixed by ``train``: they do not move along
    any direction of the model's default-free parameters that ``train`` leaves flat."""
    space = model.parameters()
    names = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    for d in model.drafters:  # without specs the drafters' slopes are free as well
        for key in ("fixed_ms", "seq_ms"):
            n = f"draft.{d.name}.{key}"
            if n not in names:
                names.append(n)
    scale = []
    for n in names:
        v = abs(space.values[space.index(n)])
        scale.append(v if v > 0 else (typical_ms if n.endswith("_ms") else 1.0))
    jt = log_jacobian(model, train, names, scale)
    jx = log_jacobian(model, test, names, scale)
    if not (np.all(np.isfinite(jt)) and np.all(np.isfinite(jx))):
        return False
    _, sv, vt = np.linalg.svd(jt, full_matrices=jt.shape[0] < jt.shape[1])
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv < 1e-6 * max(sv[0], 1e-300)]
    return null.size == 0 or float(np.abs(jx @ null.T).max()) < 1e-3


@dataclass
class GroupHoldout:
    """Leave-one-group-out (``--holdout by-k`` or ``by-batch``): every row predicted by the
    fit of the rows outside its group.

    by : ``"k"`` or ``"batch"``. groups : how many groups (distinct values). predicted
    ``(R,)`` step ms, NaN where not predictable. predictable ``(R,)`` bool. notes : the
    groups not predictable, and how the errors were made.
    """

    by: str
    groups: int
    predicted: np.ndarray
    predictable: np.ndarray
    notes: list[str]


def hold_out_groups(
    problem: Problem,
    form: str,
    data: Measured,
    step_ms: np.ndarray,
    x: StepInputs,
    scheme: str,
) -> GroupHoldout:
    """Each group of :data:`GROUPS` ``scheme`` (the rows at one ``k``, or one batch size)
    predicted by the fit (``form``) of the others: ``x`` the rows as the predictor's inputs,
    ``step_ms (R,)`` their measured step times. A group is not predictable when the other
    rows hold fewer than two rows or (today's form) no ``k = 0`` row, cannot be fitted, or leave a
    parameter its step times need undetermined (:func:`predictable`)."""
    by = scheme.removeprefix("by-")
    key = data.k.astype(float) if by == "k" else data.batch
    predicted = np.full(len(data), np.nan)
    ok = np.zeros(len(data), bool)
    groups = 0
    lost: list[str] = []
    for v in np.unique(key):
        test = key == v
        train = ~test
        groups += 1
        label = f"{by} = {v:g}"
        if train.sum() < 2 or (form == "today" and not (data.k[train] == 0).any()):
            lost.append(label)
            continue
        try:
            pred_g = fit_form(problem, form, data.take(train), step_ms[train]).predictor
        except (InputError, ValueError, np.linalg.LinAlgError):
            lost.append(label)
            continue
        xt, xx = x.take(train), x.take(test)
        if not predictable(pred_g, xt, xx, float(np.median(step_ms[train]))):
            lost.append(label)
            continue
        predicted[test] = pred_g.step_ms_of(xx)
        ok[test] = True
    notes = []
    if lost:
        notes.append(
            f"--holdout by-{by}: {len(lost)} of {groups} group(s) not predictable from the "
            f"others ({', '.join(lost[:6])}{', ...' if len(lost) > 6 else ''}): the other "
            "rows leave a parameter they need undetermined; they are not in the errors"
        )
    notes.append(
        f"--holdout by-{by}: each {by}'s rows predicted by the fit of the others; the file "
        "written is the fit of every row"
    )
    return GroupHoldout(by, groups, predicted, ok, notes)
