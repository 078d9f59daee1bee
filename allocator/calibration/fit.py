"""The two fits of calibration (docs/design.md §8.7 and §8.12), both
:class:`~allocator.model.steptime.RooflinePredictor` s (the step-time contract; nothing
here computes a step time):

- *today's* (no ``serving.hardware``/``serving.model``): ``max(v0 + v1·b, c·b·t) +
  k·Σ_i (d0_i + d1_i·b) + overhead`` (``t = m·k + 1``; ``max_i`` under parallel
  drafting), :meth:`RooflinePredictor.from_linear`, fitted as below (:class:`StepModel`)
  and written as the ``verify_ms`` component model;
- the *roofline from specs* (``serving.hardware`` and ``serving.model`` given): the
  efficiency factors (``mem_eff``, ``compute_eff``, ``fixed_ms``, ``seq_ms``,
  ``overhead_ms``) and each drafter's ``fixed_ms``/``seq_ms`` fitted by
  :func:`~allocator.calibration.roofline_fit.fit_roofline`, with the rows' contexts and
  prefill, and written as ``serving.roofline``.

**Today's fit.** :func:`scipy.optimize.least_squares` on relative residuals
``predicted / measured − 1`` (so every row counts by its percentage error, as
reported), all parameters bounded below by 0, started from a non-negative linear fit
(:func:`scipy.optimize.nnls`, compute term left out) and from that start with the
compute term touching the most compute-heavy row; the lower cost wins, by more than
:data:`COST_RTOL` relative (else the first start: a flat valley's two ends tie, and the
fit must not pick by the last digits). Parameters the
rows cannot determine are fixed at 0 and said so in ``notes``: the batch slopes (``v1``
and every ``d1_i``) with one batch size measured, a drafter's ``d1_i`` when its
speculative rows are at one batch size, ``overhead`` without a speculative row. When no
drafter is measured at two ``k`` or more, draft cost and overhead are not separable (a
note says so); predictions at the measured points are unaffected.

**Parameters and intervals.** Every parameter is reported with its value, its standard
error from the fit's Jacobian (``s²·(JᵀJ)⁻¹``) and a 95% interval (Student's ``t`` on the
residual degrees of freedom, clipped at the lower bound); a parameter the rows cannot
determine (:func:`~allocator.calibration.roofline_fit.undetermined`, a flat direction of the
Jacobian, or a standard error above its value) is reported as undetermined, with no
value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..core.problem import Problem
from ..model.steptime import RooflinePredictor, StepInputs, roofline_of
from .confounded import combinations
from .roofline_fit import fit_roofline, identify
from .rows import Measured

if TYPE_CHECKING:
    from scipy import optimize, special
else:  # scipy loads when a fit runs
    optimize = lazy_module("scipy.optimize")
    special = lazy_module("scipy.special")

__all__ = [
    "COST_RTOL",
    "MIN_MS",
    "today_names",
    "Fit",
    "StepModel",
    "fit_form",
    "form_of",
]


#: Relative tolerance under which two starts' final costs tie (today's fit): where the
#: rows leave a valley of equal cost (the compute term against a drafter's batch slope,
#: with no row that needs the compute term), the starts end at different points of it
#: with costs equal to the last digits, which move with the BLAS kernels; a tie goes to
#: the first start, the linear one, in which no row is compute bound.
COST_RTOL = 1e-9

#: Smallest time written in today's tables (the format needs verify_ms and draft_ms
#: positive), ms: a pass fitted at 0 is written as this, which moves no step time by
#: 10⁻⁶ relative (the file must predict every row as the fit does).
MIN_MS = 1e-9


def today_names(names: tuple[str, ...]) -> dict[str, str]:
    """Today's parameters as the predictor names them → as ``calibrate`` reports them."""
    out = {
        "weights_ms": "verify_fixed_ms",
        "seq_ms": "verify_per_seq_ms",
        "token_ms": "compute_ms_per_token",
        "overhead_ms": "overhead_ms",
    }
    for n in names:
        out[f"draft.{n}.fixed_ms"] = f"drafters.{n}.fixed_ms"
        out[f"draft.{n}.seq_ms"] = f"drafters.{n}.per_seq_ms"
    return out


@dataclass
class StepModel:
    """Today's fitted step-time form (module docstring); every time in ms.

    ``verify_fixed`` ``v0``, ``verify_per_seq`` ``v1``, ``compute_per_token`` ``c``,
    ``overhead``; ``draft_fixed``, ``draft_per_seq`` ``(N,)`` (0 for drafters not fitted);
    ``fitted`` ``(N,)`` bool: drafters the rows measured; ``drafting``: ``sequential``
    or ``parallel``. Its step times are :meth:`predictor`'s (the step-time contract).
    """

    verify_fixed: float
    verify_per_seq: float
    compute_per_token: float
    overhead: float
    draft_fixed: np.ndarray
    draft_per_seq: np.ndarray
    fitted: np.ndarray
    drafting: str = "sequential"
    names: tuple[str, ...] = ()

    def predictor(self) -> RooflinePredictor:
        """The form as a roofline without specs (:meth:`RooflinePredictor.from_linear`)."""
        names = self.names or tuple(f"d{i}" for i in range(self.draft_fixed.size))
        return RooflinePredictor.from_linear(
            self.verify_fixed,
            self.verify_per_seq,
            self.compute_per_token,
            self.overhead,
            [
                (n, float(a), float(b))
                for n, a, b in zip(names, self.draft_fixed, self.draft_per_seq, strict=True)
            ],
            drafting="parallel" if self.drafting == "parallel" else "sequential",
        )

    def verify_ms(self, batch: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """``verify(b, t)``, broadcast over ``batch`` and ``tokens``: the predictor's
        verifier pass."""
        b, t = np.broadcast_arrays(np.asarray(batch, float), np.asarray(tokens, float))
        n = self.draft_fixed.size
        x = StepInputs(
            np.zeros((b.size, n), bool),
            np.zeros(b.size, np.int64),
            t.ravel().astype(np.int64),
            b.ravel().astype(float),
            np.zeros(b.size),
            np.zeros(b.size),
        )
        return self.predictor().verify_ms(x).reshape(b.shape)

    def draft_ms(self, batch: np.ndarray) -> np.ndarray:
        """``draft_i(b)`` for every drafter: ``(len(batch), N)``, the predictor's pass of
        each drafter drafting one token per sequence."""
        b = np.asarray(batch, float).ravel()
        n = self.draft_fixed.size
        x = StepInputs(
            np.ones((b.size, n), bool),
            np.ones(b.size, np.int64),
            np.full(b.size, n + 1, np.int64),
            b,
            np.zeros(b.size),
            np.zeros(b.size),
        )
        return self.predictor().drafter_pass_ms(x)

    def step_ms(self, members: np.ndarray, k: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Step time of each row: ``members (R, N)``, ``k (R,)``, ``batch (R,)`` → ``(R,)``
        (the predictor's)."""
        members = np.asarray(members, bool)
        k = np.asarray(k)
        m = members.sum(axis=1)
        return self.predictor().step_ms(members, k, m * k + 1, np.asarray(batch, float), 0.0, 0.0)


@dataclass
class _Layout:
    """Which parameters are free: positions in the vector ``x`` of the fit."""

    fit_v1: bool
    fit_overhead: bool
    drafters: np.ndarray  # indices of fitted drafters
    sloped: np.ndarray  # indices of fitted drafters whose batch slope d1 is free
    notes: list[str] = field(default_factory=list)

    def size(self) -> int:
        return 2 + int(self.fit_v1) + int(self.fit_overhead) + len(self.drafters) + len(self.sloped)

    def names(self, names: tuple[str, ...]) -> list[str]:
        """The parameter names of the vector, as ``calibrate --json`` reports them."""
        out = ["verify_fixed_ms"]
        if self.fit_v1:
            out.append("verify_per_seq_ms")
        out.append("compute_ms_per_token")
        if self.fit_overhead:
            out.append("overhead_ms")
        out += [f"drafters.{names[i]}.fixed_ms" for i in self.drafters]
        out += [f"drafters.{names[i]}.per_seq_ms" for i in self.sloped]
        return out

    def unpack(self, x: np.ndarray, n: int, drafting: str, names=()) -> StepModel:
        """The step model of parameter vector ``x`` (laid out as :meth:`size` counts:
        v0, [v1], c, [overhead], d0 of each fitted drafter, d1 of each sloped one)."""
        head = 2 + int(self.fit_v1) + int(self.fit_overhead)
        it = iter(x[:head])
        v0 = next(it)
        v1 = next(it) if self.fit_v1 else 0.0
        c = next(it)
        o = next(it) if self.fit_overhead else 0.0
        nd = len(self.drafters)
        d0 = np.zeros(n)
        d1 = np.zeros(n)
        d0[self.drafters] = x[head : head + nd]
        d1[self.sloped] = x[head + nd : head + nd + len(self.sloped)]
        fitted = np.zeros(n, bool)
        fitted[self.drafters] = True
        return StepModel(
            float(v0), float(v1), float(c), float(o), d0, d1, fitted, drafting, tuple(names)
        )


def _fmt_batch(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else f"{b:.4g}"


def _layout(data: Measured, names: tuple[str, ...]) -> _Layout:
    notes: list[str] = []
    several_batches = np.unique(data.batch).size > 1
    spec = data.k > 0
    used = np.flatnonzero(data.members[spec].any(axis=0)) if spec.any() else np.array([], int)
    if not several_batches:
        notes.append(
            f"one batch size measured ({_fmt_batch(data.batch[0])}): the batch slopes are not "
            "fitted and the calibrated file holds that batch size only"
        )
    if not spec.any():
        notes.append("no speculative row: only the verifier's plain decoding step is fitted")
    bare = sorted(set(data.batch.tolist()) - set(data.batch[~spec].tolist()))
    if spec.any() and bare:
        notes.append(
            f"no plain-decoding row (k = 0) at batch {', '.join(map(_fmt_batch, bare))}: the "
            "baseline there (speedup, where speculation stops paying) is the model's reading "
            "of the speculative rows, not a measurement"
        )
    elif several_batches:
        lo, hi = data.batch[spec].min(), data.batch[spec].max()
        if lo > data.batch.min() or hi < data.batch.max():
            notes.append(
                f"speculative rows span batch {_fmt_batch(lo)}..{_fmt_batch(hi)} of the "
                f"measured {_fmt_batch(data.batch.min())}..{_fmt_batch(data.batch.max())}: "
                "speculative step times outside that span rest on the model's form alone"
            )
    spread = [np.unique(data.k[spec & data.members[:, i]]).size > 1 for i in used]
    for i, varied in zip(used, spread, strict=True):
        if not varied and not any(spread):
            ks = np.unique(data.k[spec & data.members[:, i]])
            notes.append(
                f"{names[i]} is measured at one k only ({int(ks[0])}): its draft cost and the "
                "per-step overhead are not separable, so k other than the measured one is a guess"
            )
    sloped = []
    for i in used:
        at = np.unique(data.batch[spec & data.members[:, i]])
        if at.size > 1:
            sloped.append(i)
        elif several_batches:
            notes.append(
                f"{names[i]}'s speculative rows are at batch {_fmt_batch(at[0])} only: the "
                "batch slope of its draft time is not determined and is fixed at 0 (the same "
                "draft time at every batch size)"
            )
    return _Layout(several_batches, bool(spec.any()), used, np.asarray(sloped, np.int64), notes)


@dataclass
class _TodayFit:
    model: StepModel
    notes: list[str]
    names: list[str]
    theta: np.ndarray
    jac: np.ndarray
    residuals: np.ndarray
    layout: _Layout


def _fit_today(problem: Problem, data: Measured, step_ms: np.ndarray) -> _TodayFit:
    """Least-squares fit of today's form to measured step times ``(R,)`` ms (module
    docstring), its step times through the predictor; ``notes``: what the rows could not
    determine."""
    layout = _layout(data, problem.names)
    n = problem.n
    b = data.batch.astype(float)
    k = data.k.astype(float)
    spec = (k > 0).astype(float)
    rows = data.inputs(context=False, prefill=False)
    # non-negative linear start: the compute term left out, drafting as a sum
    cols = [np.ones_like(b)]
    if layout.fit_v1:
        cols.append(b)
    cols.append(np.zeros_like(b))  # compute term, started separately
    if layout.fit_overhead:
        cols.append(spec)
    for i in layout.drafters:
        cols.append(k * data.members[:, i])
    for i in layout.sloped:
        cols.append(k * data.members[:, i] * b)
    a = np.column_stack(cols) / step_ms[:, None]
    c_index = 2 if layout.fit_v1 else 1
    keep = np.ones(a.shape[1], bool)
    keep[c_index] = False
    x_lin = np.zeros(a.shape[1])
    x_lin[keep], _ = optimize.nnls(a[:, keep], np.ones_like(step_ms))

    def residuals(x: np.ndarray) -> np.ndarray:
        model = layout.unpack(x, n, problem.drafting, problem.names)
        return model.predictor().step_ms_of(rows) / step_ms - 1.0

    m = data.members.sum(axis=1)
    heavy = b * (m * k + 1)
    starts = [x_lin.copy()]
    start = x_lin.copy()
    start[c_index] = float(np.min(step_ms / heavy))
    starts.append(start)
    best = None
    for x0 in starts:
        res = optimize.least_squares(
            residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale="jac", max_nfev=2000
        )
        # a later start wins only when its cost is lower by more than COST_RTOL (and
        # 1e-15, for exact fits): two
        # ends of a flat valley tie, and the tie goes to the first start
        if best is None or res.cost < best.cost * (1.0 - COST_RTOL) - 1e-15:
            best = res
    assert best is not None
    model = layout.unpack(best.x, n, problem.drafting, problem.names)
    return _TodayFit(
        model,
        layout.notes,
        layout.names(problem.names),
        np.asarray(best.x, float),
        np.asarray(best.jac, float),
        np.asarray(best.fun, float),
        layout,
    )


def _today_parameters(problem: Problem, data: Measured, fit: _TodayFit) -> list[dict]:
    """Every parameter of today's form with its standard error and 95% interval, or the
    reason the rows cannot determine it."""
    stderr, why = identify(fit.names, fit.theta, fit.jac, fit.residuals)
    model = fit.model
    spec = data.k > 0
    if spec.any() and not (~spec).any():
        why.setdefault("overhead_ms", "no plain-decoding row: not separable from the base pass")
    if spec.any():
        varied = [
            np.unique(data.k[spec & data.members[:, i]]).size > 1 for i in fit.layout.drafters
        ]
        if not any(varied):
            why["overhead_ms"] = (
                "no drafter is measured at two k or more: the draft cost per pass and the "
                "per-step overhead are not separable"
            )
            for i in fit.layout.drafters:
                why[f"drafters.{problem.names[i]}.fixed_ms"] = (
                    "measured at one k only: not separable from the per-step overhead"
                )
    dof = len(data) - (len(fit.names) - sum(1 for n in fit.names if n in why))
    q = float(special.stdtrit(dof, 0.975)) if dof > 0 else float("nan")
    values = dict(zip(fit.names, fit.theta, strict=True))
    shown = today_names(problem.names)
    used = {  # the parameters of the written model, as reported: fitted or fixed at 0
        shown[n]: v
        for n, v in model.predictor().parameters().as_dict().items()
        if n in shown
        and (not n.startswith("draft.") or model.fitted[problem.names.index(n.split(".")[1])])
    }
    every = ["verify_fixed_ms", "verify_per_seq_ms", "compute_ms_per_token", "overhead_ms"]
    for i in range(problem.n):
        every += [
            f"drafters.{problem.names[i]}.fixed_ms",
            f"drafters.{problem.names[i]}.per_seq_ms",
        ]
    reasons: dict[str, str] = {}
    for name in every:
        if name not in values:
            if (
                name.startswith("drafters.")
                and not model.fitted[problem.names.index(name.split(".")[1])]
            ):
                reasons[name] = "the drafter is in no speculative row"
            elif name == "verify_per_seq_ms" or name.endswith("per_seq_ms"):
                reasons[name] = "its rows are at one batch size: the batch slope is fixed at 0"
            else:
                reasons[name] = "no speculative row"
        elif name in why:
            reasons[name] = why[name]
    back = {v: k for k, v in shown.items()}
    combos = combinations(
        model.predictor(),
        data.inputs(context=False, prefill=False),
        [back[n] for n in every if n in used],
        [back[n] for n in reasons if n in used],
        shown,
    )
    out = []
    for name in every:
        written = used.get(name)
        if name in reasons:
            out.append(_param(name, None, None, None, reasons[name], written, combos.get(name)))
            continue
        v = float(values[name])
        se = stderr.get(name, float("nan"))
        iv = None if not math.isfinite(se * q) else [max(0.0, v - q * se), v + q * se]
        out.append(_param(name, v, se, iv, None, written))
    return out


def _param(name, value, stderr, interval, reason, written=None, combination=None) -> dict:
    """One parameter as ``calibrate --json`` lists it: ``value`` (null when the rows do
    not determine it, ``undetermined`` saying why), ``written`` (the value the written
    file holds, which the fit used: an undetermined parameter is written at the fit's
    value, never dropped; null for a drafter no row measures) and
    ``determined_combination`` (what the rows do determine of it with the parameters it
    is confounded with, :func:`~.confounded.combinations`)."""
    return {
        "name": name,
        "value": value,
        "stderr": None if stderr is None or not math.isfinite(stderr) else float(stderr),
        "interval_95": interval,
        "undetermined": reason,
        "written": None if written is None else float(written),
        "determined_combination": combination,
    }


# ---------------------------------------------------------------- the roofline from specs
def _specs_model(problem: Problem) -> RooflinePredictor:
    """The problem's roofline at its file's factors (the fit's start)."""

    serving = problem.serving
    assert serving is not None
    r = roofline_of(serving, problem.names)
    assert r is not None
    return r


@dataclass
class _SpecsFit:
    model: RooflinePredictor
    parameters: list[dict]
    undetermined: dict[str, str]
    notes: list[str]


def _fit_specs(problem: Problem, data: Measured, step_ms: np.ndarray) -> _SpecsFit:
    """The roofline's factors fitted to the rows (contexts and prefill included)."""
    base = _specs_model(problem)
    rows = data.inputs()
    fit = fit_roofline(
        base, rows, step_ms, starts=[{"mem_eff": 0.2}, {"mem_eff": 0.9, "compute_eff": 0.05}]
    )
    space = base.parameters()
    free = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    kept = len([n for n in fit.free if n not in fit.undetermined])
    dof = len(data) - kept
    q = float(special.stdtrit(dof, 0.975)) if dof > 0 else float("nan")
    spec_rows = rows.speculative
    measured = {
        d.name for i, d in enumerate(base.drafters) if (spec_rows & rows.members[:, i]).any()
    }

    def used(name: str) -> bool:  # a parameter some fitted row's step time reads
        return not name.startswith("draft.") or name.split(".")[1] in measured

    values = fit.model.parameters().as_dict()
    combos = combinations(
        fit.model,
        rows,
        [n for n in free if used(n)],
        [n for n in free if used(n) and n in fit.undetermined],
    )
    params = []
    for name in free:
        written = values[name] if used(name) else None
        if name in fit.undetermined:
            params.append(
                _param(name, None, None, None, fit.undetermined[name], written, combos.get(name))
            )
            continue
        v = float(fit.values[name])
        se = fit.stderr.get(name, float("nan"))
        lo = space.lower[space.index(name)]
        hi = space.upper[space.index(name)]
        iv = None if not math.isfinite(se * q) else [max(lo, v - q * se), min(hi, v + q * se)]
        params.append(_param(name, v, se, iv, None, written))
    notes = []
    if (data.pre > 0).any():
        notes.append(
            "prefill shared the measured steps (benchmark runs under chunked prefill): the "
            "roofline's prefill term is fitted with them, at each run's mean prefill per step"
        )
    return _SpecsFit(fit.model, params, dict(fit.undetermined), notes)


# ---------------------------------------------------------------- either form
@dataclass
class Fit:
    """One fit of measured rows (``data``, for ``problem``) by one form.

    predictor : the fitted step-time predictor (either form). model : today's step model
    (``None`` for the roofline from specs). notes : what the rows could not determine.
    today, specs : the form's own fit (one of them is ``None``).
    """

    problem: Problem
    data: Measured
    predictor: RooflinePredictor
    model: StepModel | None
    notes: list[str]
    today: _TodayFit | None = None
    specs: _SpecsFit | None = None

    def parameters(self) -> list[dict]:
        """Every parameter with its value, standard error and 95% interval, or the reason
        the rows cannot determine it (as ``calibrate --json`` lists them)."""
        if self.today is not None:
            return _today_parameters(self.problem, self.data, self.today)
        assert self.specs is not None
        return self.specs.parameters


def form_of(problem: Problem) -> str:
    """The form calibration fits for ``problem``: ``"roofline"`` where its serving section
    gives ``hardware`` and ``model``, else ``"today"``."""
    return "roofline" if problem.serving is not None and problem.serving.has_roofline else "today"


def fit_form(problem: Problem, form: str, data: Measured, step_ms: np.ndarray) -> Fit:
    """Fit the rows ``data`` (measured step times ``step_ms (R,)``) by ``form``
    (``"today"`` or ``"roofline"``, :func:`form_of`)."""
    if form == "today":
        today = _fit_today(problem, data, step_ms)
        return Fit(problem, data, today.model.predictor(), today.model, today.notes, today=today)
    specs = _fit_specs(problem, data, step_ms)
    return Fit(problem, data, specs.model, None, specs.notes, specs=specs)
