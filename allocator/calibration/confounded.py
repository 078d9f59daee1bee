"""What the rows do determine when they cannot separate some parameters
(docs/design.md §8.7): for each parameter a fit leaves undetermined, the combination of
it and the parameters it is confounded with that the rows fix.

The step time is linear in every time parameter (``fixed_ms``, ``overhead_ms``, a
drafter's pass times, today's ``v0``...) and in ``1/η`` of each efficiency (``mem_eff``,
``compute_eff``) on its side of the roofline, so the combinations are written in those
terms: ``fixed_ms + 14.2/mem_eff`` (one pass's fixed time and its traffic read at
``mem_eff``), ``overhead_ms + 3·drafters.d.fixed_ms`` (the overhead and three drafting
passes, with every speculative row at ``k = 3``).

:func:`combinations` finds them from the fitted predictor's sensitivities ``∂ step_r /
∂ f_i`` at the rows (``f_i`` a time parameter or ``1/η``), by differences along each
``f_i`` (exact where the step is linear in it): the null directions of the relative
sensitivities, each column scaled to unit length (singular values at most
:data:`NULL_TOL` of the largest), say which parameters move together without changing
any fitted step time (linked through the projector onto those directions, which no
choice of basis changes); the combination of those parameters is the sensitivity row of
the row most sensitive to the parameter (a measured step time, so a combination the rows
determine), normalised to the first time parameter's coefficient, with its value at the
fit. Rows whose relative sensitivities are within :data:`ROW_RTOL` of the largest are
tied, and a tie goes to the first of them in the rows' order: which row a near-tie picks
must not move with the last digits of a BLAS kernel (two drafters with equal pass times
at the same ``k`` give ``overhead_ms + 3·drafters.a.fixed_ms`` and ``… + 3·drafters.b.
fixed_ms``, both determined; the report names the first drafter's on every CPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..model.steptime import RooflinePredictor, StepInputs

__all__ = ["NULL_TOL", "ROW_RTOL", "combinations"]

#: A direction of the scaled sensitivities is flat below this share of the largest
#: singular value (looser than the fit's 10⁻⁷: a direction held only by a 0.2% term,
#: the KV write, is still reported with its combination).
NULL_TOL = 1e-3
#: Relative sensitivities of two rows to a parameter within this share of each other tie
#: (the first row is taken), and a combination's coefficient below this share of its
#: largest is 0.
ROW_RTOL = 1e-6


def _is_eff(name: str) -> bool:
    return name.endswith("_eff")


def _sensitivities(
    model: RooflinePredictor, rows: StepInputs, names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """``∂ step_r / ∂ f_i`` ``(R, P)`` and ``f (P,)``: ``f_i = 1/θ_i`` for an efficiency,
    ``θ_i`` otherwise; differences of ``10⁻⁴·max(|f_i|, typical)`` upwards (an efficiency
    then moves down, inside its bounds)."""
    space = model.parameters()
    base = model.step_ms_of(rows)
    typical = float(np.median(base)) if base.size else 1.0
    f = np.empty(len(names))
    cols = []
    for j, n in enumerate(names):
        v = float(space.values[space.index(n)])
        fj = 1.0 / v if _is_eff(n) else v
        f[j] = fj
        h = 1e-4 * max(abs(fj), 1.0 if _is_eff(n) else typical)
        moved = 1.0 / (fj + h) if _is_eff(n) else v + h
        cols.append((model.with_parameters({n: moved}).step_ms_of(rows) - base) / h)
    d = np.column_stack(cols) if cols else np.zeros((len(rows), 0))
    return d, f


def _term(c: float, name: str, first: bool) -> str:
    sign = "-" if c < 0 else "+"
    a = abs(c)
    coef = "" if abs(a - 1.0) < ROW_RTOL and not _is_eff(name) else f"{a:.4g}"
    body = f"{coef}/{name}" if _is_eff(name) else (f"{coef}·{name}" if coef else name)
    if first:
        return body if c > 0 else f"-{body}"
    return f" {sign} {body}"


def combinations(
    model: RooflinePredictor,
    rows: StepInputs,
    names: Sequence[str],
    undetermined: Sequence[str],
    shown: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The determined combination of each ``undetermined`` parameter, as text.

    model : the fitted predictor. rows : the fitted rows. names : the predictor's
    parameters the fit used (:meth:`RooflinePredictor.parameters` names), the
    ``undetermined`` among them. shown : the name each parameter is reported under
    (default its own). Returns name (as shown) → ``"fixed_ms + 14.2/mem_eff = 19.2"``;
    a parameter no fitted step time depends on, or one not on a flat direction (its
    standard error only is large), has none.
    """
    shown = dict(shown or {})
    names = list(names)
    if not names or not len(rows):
        return {}
    d, f = _sensitivities(model, rows, names)
    step = np.maximum(np.abs(model.step_ms_of(rows)), 1e-300)
    ds = d / step[:, None]
    if not np.all(np.isfinite(ds)):
        return {}
    norms = np.linalg.norm(ds, axis=0)
    ds = ds / np.where(norms > 0, norms, 1.0)[None, :]  # each column by its own size
    _, sv, vt = np.linalg.svd(ds, full_matrices=ds.shape[0] < ds.shape[1])
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv <= NULL_TOL * max(float(sv[0]), 1e-300)]
    if null.size == 0:
        return {}
    proj = null.T @ null
    out: dict[str, str] = {}
    for name in undetermined:
        if name not in names:
            continue
        j = names.index(name)
        if proj[j, j] < 1e-2:
            continue
        group = {j}
        todo = [j]
        while todo:
            i = todo.pop()
            for m in np.flatnonzero(np.abs(proj[i]) > 1e-2):
                if int(m) not in group:
                    group.add(int(m))
                    todo.append(int(m))
        sens = np.abs(ds[:, j])
        r = int(np.flatnonzero(sens >= (1.0 - ROW_RTOL) * float(np.max(sens)))[0])
        members = sorted(group, key=lambda i: (_is_eff(names[i]), i))
        coef = {i: float(d[r, i]) for i in members}
        top = max(abs(c) for c in coef.values())
        if top <= 0:
            continue
        kept = [i for i in members if abs(coef[i]) > ROW_RTOL * top]
        if len(kept) < 2:
            continue
        norm = coef[kept[0]]
        terms = "".join(
            _term(coef[i] / norm, shown.get(names[i], names[i]), n == 0) for n, i in enumerate(kept)
        )
        value = sum(coef[i] / norm * f[i] for i in kept)
        out[shown.get(name, name)] = f"{terms} = {value:.6g}"
    return out
