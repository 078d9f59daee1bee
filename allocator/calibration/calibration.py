"""One calibration: the rows' step times, the fit, every row predicted and its error
(docs/design.md §8.7).

**Refused** by today's form (no specs): rows without a plain-decoding (``k = 0``) row
(the verifier's plain step and speculation's per-step overhead cannot be told apart: the
fit would put the forward pass into the overhead and write a made-up baseline), rows that
leave a drafter of the problem without a speculative row (its written draft time would
be made up), and rows that vary in ``context`` (the form has no context term: the column
would be dropped). Each refusal names what to measure or add. The roofline form (specs)
takes rows without ``k = 0``: plain decoding is then predicted from the specs and the
fitted efficiencies, with ``overhead_ms`` held at the file's value (a note says so); it
notes a drafter without a speculative row and leaves its parameters undetermined.

The errors are on tokens/s, ``100 · (predicted / measured − 1)``: in sample, or on the
held-out rows only under ``--holdout`` (:mod:`.holdout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.problem import Problem
from ..exceptions import InputError, ParameterError
from ..model.steptime import RooflinePredictor, StepInputs
from ..model.under_load import tokens_per_s
from ..validate import MAX_SEED
from ..validate import seed as valid_seed
from .fit import StepModel, fit_form, form_of
from .holdout import hold_out_groups, holdout_mask, parse_holdout
from .rows import Measured, step_times

__all__ = [
    "MAX_SEED",
    "Calibration",
    "calibrate",
    "check_seed",
]


@dataclass
class Calibration:
    """Result of :func:`calibrate`: the model, the rows and their errors.

    ``model``: today's form (``None`` for the roofline from specs); ``predictor``: the
    fitted step-time predictor (either form); ``form``: ``"today"`` or ``"roofline"``.
    ``expected (R,)`` tokens per step used per row, ``measured_step (R,)`` and
    ``predicted_step (R,)`` ms, ``predicted_tps (R,)`` tokens/s, ``error_pct (R,)``
    ``100 · (predicted / measured − 1)`` of tokens/s (NaN for a held-out row the other
    rows cannot predict), ``held_out (R,)`` bool, ``predictable (R,)`` bool.
    ``reported``: the rows the summary covers (held-out rows that could be predicted under
    a holdout). ``inputs``: the rows as the fit reads them (today's form: context and
    prefill 0); ``predictor`` is the fit written (of every row under a
    leave-one-group-out). ``parameters``: each parameter's value, standard error, 95%
    interval, or why it is undetermined, with the value written and, for an undetermined
    one, the combination the rows determine. ``holdout_by``: ``"k"``/``"batch"`` for a
    leave-one-group-out.
    """

    model: StepModel | None
    data: Measured
    expected: np.ndarray
    measured_step: np.ndarray
    predicted_step: np.ndarray
    predicted_tps: np.ndarray
    error_pct: np.ndarray
    held_out: np.ndarray
    notes: list[str]
    predictor: RooflinePredictor | None = None
    form: str = "today"
    parameters: list[dict] = field(default_factory=list)
    predictable: np.ndarray | None = None
    holdout_by: str | None = None
    groups: int = 0
    inputs: StepInputs | None = None

    @property
    def reported(self) -> np.ndarray:
        ok = np.ones_like(self.held_out) if self.predictable is None else self.predictable
        held = self.held_out & ok
        return held if held.any() else (ok if not self.held_out.any() else held)

    @property
    def median_abs_error_pct(self) -> float:
        e = np.abs(self.error_pct[self.reported])
        return float(np.median(e)) if e.size else float("nan")

    @property
    def max_abs_error_pct(self) -> float:
        e = np.abs(self.error_pct[self.reported])
        return float(np.max(e)) if e.size else float("nan")


def check_seed(seed: object) -> None:
    """A seed is an integer (not a bool) in ``0..``:data:`MAX_SEED`; a
    :class:`ParameterError` naming ``seed`` otherwise."""
    valid_seed(seed)


def _refuse_varied_context(data: Measured) -> None:
    ctx = data.ctx
    if data.has_context and np.unique(ctx).size > 1:
        raise InputError(
            "measured.context",
            f"the rows vary in context ({ctx.min():g}..{ctx.max():g} tokens per sequence) "
            "and without serving.hardware and serving.model the fitted form has no context "
            "term (it would drop the column); add serving.hardware and serving.model to the "
            "problem (the roofline reads the context), or fit rows measured at one context",
        )


def _refuse_without_baseline(data: Measured) -> None:
    if not (data.k == 0).any():
        raise InputError(
            "measured",
            "no plain-decoding (k = 0) row: the verifier's plain step and speculation's "
            "per-step overhead cannot be told apart, so the fit would write a made-up "
            "baseline; measure speculation off at one batch size at least "
            "(allocator profile-plan lists the runs)",
        )


def calibrate(
    problem: Problem,
    data: Measured,
    holdout: float | str | None = None,
    seed: int = 0,
) -> Calibration:
    """Convert rows to step times (:func:`~.rows.step_times`), fit the step-time predictor
    (:mod:`.fit`: the forms), predict every row (:mod:`.holdout`: the holdouts); the
    refusals are this module's docstring's."""
    holdout = parse_holdout(holdout)
    check_seed(seed)
    form = form_of(problem)
    measured = np.asarray(data.members[data.k > 0].any(axis=0), bool)
    if not measured.all() and form == "today":
        name = problem.names[int(np.flatnonzero(~measured)[0])]
        raise InputError(
            "measured.drafters",
            f"no speculative row measures {name!r}: the calibrated serving model needs a draft "
            "time for every drafter of the problem (measure it, or leave it out of the problem)",
        )
    if form == "today":
        _refuse_without_baseline(data)
        _refuse_varied_context(data)
    e, step = step_times(problem, data)
    held = np.zeros(len(data), bool)
    ok = np.ones(len(data), bool)
    notes: list[str] = []
    by: str | None = None
    groups = 0
    if isinstance(holdout, float):
        held = holdout_mask(data, holdout, seed)
        if not held.any():
            raise ParameterError(
                "holdout",
                f"no row can be held out of {len(data)} (each drafter set keeps one row "
                "and at least two rows are fitted)",
            )
    fit_rows = ~held
    fitted = fit_form(problem, form, data.take(fit_rows), step[fit_rows])
    notes += fitted.notes
    if form == "roofline" and not (data.k[fit_rows] == 0).any():
        notes.append(
            "no plain-decoding (k = 0) row: plain decoding is predicted from the specs and "
            "the fitted efficiencies, and overhead_ms (not separable from the base pass) is "
            "held at the problem's value; measure speculation off at one batch size to "
            "calibrate it"
        )
    if form == "roofline" and not measured.all():
        lacking = [n for i, n in enumerate(problem.names) if not measured[i]]
        notes.append(
            f"no speculative row measures {', '.join(lacking)}: its drafting time is not "
            "calibrated (its parameters are undetermined)"
        )
    if fitted.model is not None:
        unfitted = data.members[held].any(axis=0) & ~fitted.model.fitted
        if unfitted.any():  # cannot happen by construction of the holdout; guard anyway
            raise ParameterError("holdout", "a held-out row's drafter has no fitted row")
    x = data.inputs(context=form == "roofline", prefill=form == "roofline")
    predicted = fitted.predictor.step_ms_of(x)
    if isinstance(holdout, str):
        groups_out = hold_out_groups(problem, form, data, step, x, holdout)
        by, groups = groups_out.by, groups_out.groups
        held[:] = True
        ok = groups_out.predictable
        predicted = groups_out.predicted
        notes += groups_out.notes
    predicted_tps = tokens_per_s(e, predicted, data.batch)
    error = 100.0 * (predicted_tps / data.tokens_per_s - 1.0)
    return Calibration(
        fitted.model,
        data,
        e,
        step,
        predicted,
        predicted_tps,
        error,
        held,
        notes,
        predictor=fitted.predictor,
        form=form,
        parameters=fitted.parameters(),
        predictable=ok,
        holdout_by=by,
        groups=groups,
        inputs=x,
    )
