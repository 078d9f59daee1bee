"""The break-even correlation: which error correlation erases an ensemble's gain?

Under the exchangeable model with latent correlation ``r``, the ensemble's best
throughput (over the problem's ``k`` range, at its own best ``k``) falls as ``r``
grows — orthant probabilities increase with correlation (Slepian) — while a
single-drafter baseline does not depend on ``r``. The break-even ``r*`` solves
``S_ensemble(r) = S_baseline(r)`` (SciPy's ``brentq`` on ``[0, 1]``). It is reported
on the latent scale and as the Pearson correlation of the error indicators of the
ensemble's first two drafters at position 1. ``never`` is true when even ``r = 1``
(identical errors) leaves the ensemble ahead.

The problem's own error model and measured ``ensembles`` are set aside: the
question is asked of the exchangeable model. The problem's ``budget`` holds: each
side's best ``k`` is the best within every cap (at the correlation asked about, since
``draft_cost_per_token`` moves with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lazy_module
from ..core.budget import feasible_mask, infeasible_error
from ..exceptions import InfeasibleError, InputError, ParameterError
from ..model.errors import ExchangeableErrors, FactorErrors, GaussianErrors
from ..model.errors.latent import error_correlation
from ..model.metrics import evaluate_subsets

if TYPE_CHECKING:
    from scipy import optimize

    from ..core.problem import Problem
else:
    optimize = lazy_module("scipy.optimize")


@dataclass
class Breakeven:
    """The answer; throughputs in accepted units per verifier-unit of time."""

    ensemble: list[str]
    baseline: list[str]
    latent_correlation: float | None
    error_correlation: float | None
    gain_at_independence: float  # S_ens / S_base - 1 at r = 0
    gain_at_identical: float  # the same at r = 1
    never: bool
    baseline_throughput: float
    ensemble_throughput_at_independence: float
    note: str = ""

    def document(self) -> dict:
        return dict(self.__dict__)


def _check(problem: Problem, ensemble, baseline):
    if problem.pooling != "any-correct":
        raise InputError("pooling", "the break-even correlation is defined for any-correct pooling")
    ens = problem.mask(ensemble, "ensemble")
    base = problem.mask(baseline, "baseline")
    if ens.sum() < 2:
        raise ParameterError("ensemble", "name at least two drafters (a single one has no pairs)")
    return ens, base


def best_within_budget(problem: Problem, members: np.ndarray) -> np.ndarray:
    """Best throughput over the ``k`` within the problem's budget of each subset
    ``members (B, N)``, under the problem's own errors: ``(B,)``. A subset with no ``k``
    within the budget is an :class:`InfeasibleError` naming its drafters and the cap."""
    met = evaluate_subsets(problem, members)
    thr = np.asarray(met["throughput"], dtype=float)
    if not problem.budget:
        return thr.max(axis=1)
    ok = feasible_mask(met, problem.budget)
    for b in np.flatnonzero(~ok.any(axis=1)):
        row = {n: np.asarray(met[n])[b] for n in problem.budget}
        lowest = {n: float(np.min(np.broadcast_to(v, thr[b].shape))) for n, v in row.items()}
        exc = infeasible_error(problem.budget, lowest)
        names = "+".join(problem.names[i] for i in np.flatnonzero(members[b]))
        raise InfeasibleError(exc.field, f"{names} at no k: {exc.message}")
    return np.where(ok, thr, -np.inf).max(axis=1)


def best_throughput(problem: Problem, members: np.ndarray, correlation: float) -> np.ndarray:
    """Best throughput over the ``k`` within the budget of each subset ``members (B, N)``
    under exchangeable errors with latent ``correlation``: ``(B,)``."""
    exch = problem.with_errors(ExchangeableErrors(correlation=float(correlation)))
    return best_within_budget(exch.replace(ensembles=()), members)


def gain_curve(
    problem: Problem, ensemble: list[str], baseline: list[str], correlations
) -> np.ndarray:
    """Relative gain ``S_ens(r) / S_base(r) - 1`` at each latent correlation: ``(R,)``."""
    ens, base = _check(problem, ensemble, baseline)
    both = np.stack([ens, base])
    out = []
    for r in np.asarray(correlations, dtype=float):
        s = best_throughput(problem, both, r)
        out.append(s[0] / s[1] - 1.0)
    return np.array(out)


def breakeven(problem: Problem, ensemble: list[str], baseline: list[str]) -> Breakeven:
    """Solve for the latent correlation at which the ensemble's gain vanishes."""
    ens, base = _check(problem, ensemble, baseline)
    both = np.stack([ens, base])

    def diff(r: float) -> float:
        s = best_throughput(problem, both, r)
        return float(s[0] - s[1])

    s0 = best_throughput(problem, both, 0.0)
    s1 = best_throughput(problem, both, 1.0)
    g0, g1 = float(s0[0] / s0[1] - 1.0), float(s1[0] / s1[1] - 1.0)
    first = [problem.names.index(n) for n in ensemble[:2]]
    q1, q2 = 1.0 - problem.acceptance[first, 0]
    common: dict[str, Any] = dict(
        ensemble=list(ensemble),
        baseline=list(baseline),
        gain_at_independence=g0,
        gain_at_identical=g1,
        baseline_throughput=float(s0[1]),
        ensemble_throughput_at_independence=float(s0[0]),
    )
    if g0 <= 0.0:
        return Breakeven(
            latent_correlation=0.0,
            error_correlation=0.0,
            never=False,
            note="the ensemble does not beat the baseline even with independent errors",
            **common,
        )
    if g1 > 0.0:
        return Breakeven(
            latent_correlation=None,
            error_correlation=None,
            never=True,
            note="the ensemble stays ahead even with identical errors (correlation 1)",
            **common,
        )

    r = optimize.brentq(diff, 0.0, 1.0, xtol=1e-13, rtol=4 * np.finfo(float).eps, maxiter=200)
    return Breakeven(
        latent_correlation=float(r),
        error_correlation=float(error_correlation(r, q1, q2)),
        never=False,
        **common,
    )


def file_latent_correlation(problem: Problem, pair: list[str]) -> float | None:
    """The latent correlation between the two drafters ``pair`` under the problem's own
    error model, at position 1: 0 for ``independent``, ``r`` (or ``error_correlation``
    converted) for ``exchangeable``, ``β_i β_j`` for ``factor``, the matrix entry for
    ``gaussian``; ``None`` for ``empirical`` (a log has no latent scale)."""
    i, j = (problem.names.index(n) for n in pair)
    model = problem.errors
    if model.name == "independent":
        return 0.0
    if isinstance(model, ExchangeableErrors):
        kind, plan = model.latent(1.0 - problem.acceptance)
        if kind in ("independent", "comonotone"):
            return 0.0 if kind == "independent" else 1.0
        if kind == "factor":
            return float(plan[i, 0] * plan[j, 0])
        return float(plan[0, i, j])
    if isinstance(model, FactorErrors):
        beta = np.asarray(model.loadings, dtype=np.float64)
        return float(beta[i] * beta[j])
    if isinstance(model, GaussianErrors):
        return float(np.asarray(model.matrix, dtype=np.float64)[i, j])
    return None


def file_gain(problem: Problem, ensemble: list[str], baseline: list[str]) -> float:
    """``S_ens / S_base - 1`` under the problem's own error model (and its measured
    ``ensembles``), each at its own best ``k`` in the search range: a fraction."""
    both = np.stack([problem.mask(ensemble, "ensemble"), problem.mask(baseline, "baseline")])
    best = best_within_budget(problem, both)
    return float(best[0] / best[1] - 1.0)


@dataclass
class BreakevenReport:
    """``allocator breakeven``: the break-even answer under exchangeable errors, beside
    the gain under the problem's own errors.

    file_errors : the problem's error model; file_latent_correlation : between the
    ensemble's first two drafters under it (:func:`file_latent_correlation`);
    gain_at_file_errors : :func:`file_gain`; curve : ``(correlations (R,), gains (R,))``
    of :func:`gain_curve` when asked for.
    """

    breakeven: Breakeven
    file_errors: str
    file_latent_correlation: float | None
    gain_at_file_errors: float
    curve: tuple[np.ndarray, np.ndarray] | None = None

    def to_dict(self) -> dict:
        """The ``breakeven --json`` document."""
        return {
            **self.breakeven.document(),
            "file_errors": self.file_errors,
            "file_latent_correlation": self.file_latent_correlation,
            "gain_at_file_errors": self.gain_at_file_errors,
        }


def breakeven_report(
    problem: Problem,
    ensemble: list[str],
    baseline: list[str],
    curve_points: int | None = None,
) -> BreakevenReport:
    """:func:`breakeven`, the gain under the problem's own errors, and, with
    ``curve_points``, the gain at that many latent correlations evenly spaced on [0, 1]."""
    found = breakeven(problem, ensemble, baseline)
    report = BreakevenReport(
        found,
        problem.errors.name,
        file_latent_correlation(problem, found.ensemble[:2]),
        file_gain(problem, found.ensemble, found.baseline),
    )
    if curve_points is not None:
        grid = np.linspace(0.0, 1.0, curve_points)
        report.curve = (grid, gain_curve(problem, found.ensemble, found.baseline, grid))
    return report


__all__ = [
    "Breakeven",
    "BreakevenReport",
    "best_throughput",
    "best_within_budget",
    "breakeven",
    "breakeven_report",
    "file_gain",
    "file_latent_correlation",
    "gain_curve",
]
