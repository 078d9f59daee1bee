"""Fitting the roofline step-time predictor to measured step times (docs/design.md §8.12).

:class:`~allocator.model.steptime.roofline.RooflinePredictor` predicts; this module fits
it. :meth:`~allocator.model.steptime.roofline.RooflinePredictor.parameters` is its
parameter-vector view (names, values, bounds, which the specs determine, which are fitted
by default); :func:`undetermined` says which of them a set of rows cannot determine by
its measurement axes and why; :func:`log_jacobian` is how each row's step time moves with
each parameter; :func:`identify` says which the fitted rows still leave flat and gives the
others' standard errors; :func:`fit_roofline` fits the rest by least squares on relative
residuals. Calibration's specs form (:mod:`.fit`) and the profiling plan
(:mod:`allocator.analysis.profile_plan`) use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..model.steptime.base import StepInputs, step_inputs
from ..model.steptime.roofline import ParameterSpace, RooflinePredictor

if TYPE_CHECKING:
    from scipy import optimize
else:  # scipy loads when a fit runs
    optimize = lazy_module("scipy.optimize")

__all__ = [
    "RooflineFit",
    "fit_roofline",
    "identify",
    "log_jacobian",
    "undetermined",
]


def _rows(rows) -> StepInputs:
    return rows if isinstance(rows, StepInputs) else step_inputs(*rows)


def undetermined(
    model: RooflinePredictor, rows, free: Sequence[str] | None = None
) -> dict[str, str]:
    """Which of the ``free`` parameters (default: those :meth:`~RooflinePredictor.parameters`
    fits by default) the measurement axes of ``rows`` cannot determine: name → reason.

    ``rows``: :class:`~allocator.model.steptime.base.StepInputs` (or the tuple of
    :meth:`~RooflinePredictor.step_ms` arguments). The rules, by axis:

    - no speculative row: ``overhead_ms`` and every drafter's parameters;
    - no plain-decoding row (``k = 0``) while speculative rows exist, or no drafter
      measured at two ``k`` or more: ``overhead_ms`` is not separable from the base pass
      and the draft cost (it is held, not fitted);
    - one batch size: the per-sequence slopes ``seq_ms`` and every ``draft.*.seq_ms``;
      a drafter whose speculative rows are at one batch size: its ``seq_ms``;
    - a drafter in no speculative row: its parameters;
    - with a verifier spec, a dense verifier, one context length and one prefill size:
      ``fixed_ms`` is not separable from ``mem_eff`` (the weights' read time and the
      fixed time are one constant; ``mem_eff`` takes it);
    - without specs, ``mem_eff`` and ``compute_eff`` (only their ratio to the peak terms
      shows); ``kv_ms`` and ``attn_ms`` need more than one context length.
    - ``prefill_eff``: no row prefills;
    - ``comm_eff`` (fitted by default only on more than one GPU): no all-reduce, or one
      token count per pass (``b·t + P``): the all-reduce is then one constant with
      ``fixed_ms``.

    :func:`fit_roofline` adds what the fitted rows still leave flat (its ``undetermined``).
    """
    x = _rows(rows)
    space = model.parameters()
    names = list(space.names if free is None else free)
    if free is None:
        names = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    for n in names:
        space.index(n)
    out: dict[str, str] = {}
    spec = x.speculative
    plain = ~spec
    batches = np.unique(x.decode_seqs)
    contexts = np.unique(x.context)
    prefills = np.unique(x.prefill)

    def mark(name: str, why: str) -> None:
        if name in names and name not in out:
            out[name] = why

    if not spec.any():
        mark("overhead_ms", "no speculative row")
        for n in names:
            if n.startswith("draft."):
                mark(n, "no speculative row")
    for i, d in enumerate(model.drafters):
        rows_i = spec & x.members[:, i]
        pre = f"draft.{d.name}."
        if not rows_i.any():
            for n in names:
                if n.startswith(pre):
                    mark(n, f"drafter {d.name} is in no speculative row")
        elif np.unique(x.decode_seqs[rows_i]).size < 2:
            mark(
                pre + "seq_ms",
                f"{d.name}'s speculative rows are at one batch size "
                f"({x.decode_seqs[rows_i][0]:g}): its per-sequence slope is not determined",
            )
    if spec.any() and not plain.any():
        mark(
            "overhead_ms",
            "no plain-decoding (k = 0) row: the base pass and the per-step overhead are not "
            "separable",
        )
    if spec.any():
        ks_varied = [
            np.unique(x.draft_steps[spec & x.members[:, i]]).size > 1
            for i in range(len(model.drafters))
        ]
        if not any(ks_varied):
            mark(
                "overhead_ms",
                "no drafter is measured at two k or more: the draft cost per pass and the "
                "per-step overhead are not separable",
            )
    if batches.size < 2:
        why = f"one batch size measured ({batches[0]:g}): per-sequence slopes are not determined"
        for n in names:
            if n == "seq_ms" or n.endswith(".seq_ms"):
                mark(n, why)
    if model.verifier_from_spec:
        if not model.peak.experts and contexts.size < 2 and prefills.size < 2:
            mark(
                "fixed_ms",
                "one context length and one prefill size with a dense verifier: the "
                "weights' read time (mem_eff) and the fixed time per pass are one constant",
            )
    else:
        for n in ("mem_eff", "compute_eff"):
            mark(n, "without hardware and model specs only its ratio to the peak terms shows")
        if contexts.size < 2:
            mark("kv_ms", "one context length: the KV read is not separable from seq_ms")
            mark("attn_ms", "one context length: attention is not separable from token_ms")
    if "comm_eff" in names:
        tokens = np.unique(x.decode_seqs * x.verified + x.prefill)
        if not model.has_comm:
            mark("comm_eff", "no all-reduce to fit: the replica is one GPU")
        elif tokens.size < 2:
            mark(
                "comm_eff",
                f"one token count per pass measured ({tokens[0]:g}): the all-reduce time is "
                "one constant with the fixed time per pass",
            )
    if not np.any(x.prefill > 0):
        mark("prefill_eff", "no row prefills: the prefill tokens' share of peak does not show")
    if model.form == "pnorm" and batches.size < 3:
        mark("p", "fewer than three batch sizes: the bend of the p-norm is not determined")
    return out


def log_jacobian(
    model: RooflinePredictor, rows: StepInputs, names: Sequence[str], scale: Sequence[float]
) -> np.ndarray:
    """``∂ log step / ∂ (θ_j / scale_j)`` of ``rows`` ``(R, J)`` for the parameters
    ``names`` (:meth:`RooflinePredictor.parameters`), by forward differences of
    ``10⁻⁴ · scale_j`` (backward at an upper bound): how much each row's step time moves
    with each parameter, on a common scale."""
    space = model.parameters()
    base = np.log(model.step_ms_of(rows))
    cols = []
    for n, s in zip(names, scale, strict=True):
        i = space.index(n)
        v, h = space.values[i], 1e-4 * s
        if v + h > space.upper[i]:
            h = -h
        bumped = model.with_parameters({n: v + h}).step_ms_of(rows)
        cols.append((np.log(bumped) - base) / (h / s))
    return np.column_stack(cols) if cols else np.zeros((len(rows), 0))


# ---------------------------------------------------------------- the fit
def identify(
    names: Sequence[str],
    theta: np.ndarray,
    jac: np.ndarray,
    residuals: np.ndarray,
    rank_tol: float = 1e-7,
) -> tuple[dict[str, float], dict[str, str]]:
    """Standard errors of fitted parameters and those the fit leaves undetermined.

    ``names (P,)`` and ``theta (P,)`` the fitted parameters, ``jac (R, P)`` the residuals'
    Jacobian at ``theta``, ``residuals (R,)``. A parameter is undetermined when no row's
    residual depends on it (its column of the Jacobian scaled by ``max(|θ|, 10⁻⁶)`` is
    below ``rank_tol`` of the largest), when it carries a direction of the scaled
    Jacobian whose singular value is below ``rank_tol`` of the largest (only a
    combination with others is determined: the parameter weighing most in that
    direction is dropped, and again until the rest have full rank), or when its standard
    error exceeds its value. Standard errors: ``s²·(JᵀJ)⁺`` over the determined ones, ``s²``
    the residual variance on ``R − P'`` degrees of freedom (NaN without any). Returns
    ``(stderr by name, reason by name of the undetermined)``.
    """
    names = list(names)
    theta = np.asarray(theta, dtype=float)
    r = np.asarray(residuals, dtype=float)
    scale = np.maximum(np.abs(theta), 1e-6)
    js = jac * scale[None, :]
    why: dict[str, str] = {}
    norms = np.linalg.norm(js, axis=0)
    top = float(norms.max()) if norms.size else 0.0
    for j, n in enumerate(names):
        if norms[j] <= rank_tol * max(top, 1e-300):
            why[n] = "the fitted step times do not depend on it (no fitted row shows it)"
    keep = [j for j, n in enumerate(names) if n not in why]
    while keep:
        a = js[:, keep]
        # the full V (not U: 10,000 rows would make it 800 MB) for the flat directions
        _, sv, vt = np.linalg.svd(a, full_matrices=a.shape[0] < a.shape[1])
        # fewer rows than parameters: the missing singular values are zero
        sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
        if sv[-1] >= rank_tol * max(sv[0], 1e-300):
            break
        comp = np.abs(vt[-1])
        j = keep[int(np.argmax(comp))]
        others = [names[keep[i]] for i in np.flatnonzero(comp > 0.1) if keep[i] != j]
        why[names[j]] = (
            "only its combination with "
            + (", ".join(others) or "the other parameters")
            + " is determined by these rows"
        )
        keep.remove(j)
    dof = r.size - len(keep)
    stderr = {n: float("nan") for n in names}
    if keep and dof > 0:
        s2 = float(r @ r) / dof
        cov = s2 * np.linalg.pinv(jac[:, keep].T @ jac[:, keep])
        for i, j in enumerate(keep):
            stderr[names[j]] = float(math.sqrt(max(cov[i, i], 0.0)))
            if stderr[names[j]] > max(abs(theta[j]), 1e-12) and names[j] not in why:
                why[names[j]] = (
                    f"its standard error ({stderr[names[j]]:.3g}) exceeds its value "
                    f"({theta[j]:.3g}): not determined by these rows"
                )
    return stderr, why


@dataclass(frozen=True, eq=False)
class RooflineFit:
    """Result of :func:`fit_roofline`.

    model : the fitted predictor (undetermined parameters kept at their input values).
    free : the names fitted. values : name → fitted value of every free parameter.
    stderr : name → standard error from the Jacobian (``s²·(JᵀJ)⁺``, ``s²`` the residual
    variance), NaN without residual degrees of freedom. undetermined : name → reason, for
    parameters the rows cannot determine (never to be written as values). residuals ``(R,)``:
    ``predicted / measured − 1``. cost : half the sum of squared residuals.
    """

    model: RooflinePredictor
    free: tuple[str, ...]
    values: dict[str, float]
    stderr: dict[str, float]
    undetermined: dict[str, str]
    residuals: np.ndarray
    cost: float

    def determined(self) -> dict[str, float]:
        """The fitted values the rows determine (``values`` less ``undetermined``)."""
        return {k: v for k, v in self.values.items() if k not in self.undetermined}


def _starts(space: ParameterSpace, free: list[str], x0: np.ndarray) -> list[np.ndarray]:
    grid: list[tuple[str, tuple[float, ...]]] = []
    if "compute_eff" in free:
        grid.append(("compute_eff", (1.0, 0.1, 0.01, 0.001)))
    if "p" in free:
        grid.append(("p", (2.0, 8.0)))
    starts = [x0.copy()]
    combos: list[dict[str, float]] = [{}]
    for key, vals in grid:
        combos = [dict(c, **{key: v}) for c in combos for v in vals]
    for c in combos:
        if not c:
            continue
        s = x0.copy()
        for key, v in c.items():
            s[free.index(key)] = v
        starts.append(s)
    return starts


def fit_roofline(
    model: RooflinePredictor,
    rows,
    measured_ms,
    *,
    free: Sequence[str] | None = None,
    starts: Sequence[Mapping[str, float]] = (),
    max_nfev: int = 800,
    rank_tol: float = 1e-7,
) -> RooflineFit:
    """Fit ``model``'s parameters to measured step times by least squares.

    rows : :class:`~allocator.model.steptime.base.StepInputs` ``(R,)`` (or the tuple of
    :meth:`~RooflinePredictor.step_ms` arguments). measured_ms ``(R,)`` > 0. free : names
    to fit (default: those fitted by default less :func:`undetermined`'s); the others stay
    at ``model``'s values. Minimises ``Σ_r (pred_r / measured_r − 1)²`` with
    :func:`scipy.optimize.least_squares` (trust region, within the bounds of
    :meth:`~RooflinePredictor.parameters`), from ``model``'s values, from each of
    ``starts`` (name → value overrides of those) and from a grid over ``compute_eff``
    (1, 0.1, 0.01, 0.001) and ``p`` (2, 8) when they are free; the lowest cost wins
    (``max_nfev`` evaluations per start). A free
    parameter the fitted rows still leave flat (a direction of the scaled Jacobian with a
    singular value below ``rank_tol`` of the largest, or whose standard error exceeds its
    value) is added to ``undetermined``.
    """
    x = _rows(rows)
    y = np.asarray(measured_ms, dtype=float)
    if y.shape != (len(x),):
        raise ValueError(f"measured_ms must be ({len(x)},), got {y.shape}")
    if not np.all(np.isfinite(y) & (y > 0)):
        raise ValueError("measured_ms must be finite and > 0")
    space = model.parameters()
    why = undetermined(model, x, free)
    if free is None:
        names = [n for n, f in zip(space.names, space.fitted, strict=True) if f and n not in why]
    else:
        names = [n for n in free if n not in why]
    idx = np.array([space.index(n) for n in names], dtype=np.int64)
    lo, hi = space.lower[idx], space.upper[idx]
    x0 = np.clip(space.values[idx], lo, hi)

    def predict(theta: np.ndarray) -> np.ndarray:
        m = model.with_parameters(dict(zip(names, theta, strict=True)))
        return m.step_ms_of(x)

    def residuals(theta: np.ndarray) -> np.ndarray:
        r = predict(theta) / y - 1.0
        return np.where(np.isfinite(r), r, 1e6)

    if not names:
        r = residuals(x0)
        return RooflineFit(model, (), {}, {}, why, r, 0.5 * float(r @ r))
    candidates = _starts(space, names, x0)
    for extra in starts:
        s0 = x0.copy()
        for key, v in extra.items():
            if key in names:
                s0[names.index(key)] = v
        candidates.append(s0)
    best = None
    for s in candidates:
        s = np.clip(s, lo, hi)
        res = optimize.least_squares(
            residuals, s, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=max_nfev
        )
        # a later start must be clearly better: ties go to the earlier (the model's values)
        if best is None or res.cost < best.cost * (1 - 1e-9) - 1e-15:
            best = res
    assert best is not None
    theta = best.x
    fitted = model.with_parameters(dict(zip(names, theta, strict=True)))
    r = residuals(theta)
    stderr, flat = identify(names, theta, np.asarray(best.jac, dtype=float), r, rank_tol)
    why = {**why, **flat}
    return RooflineFit(
        model=fitted,
        free=tuple(names),
        values={n: float(v) for n, v in zip(names, theta, strict=True)},
        stderr=stderr,
        undetermined=why,
        residuals=r,
        cost=float(best.cost),
    )
