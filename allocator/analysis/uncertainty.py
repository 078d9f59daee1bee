"""Sampling uncertainty of estimated acceptance, carried through to the decision.

Estimated drafters carry a 95% interval per position (``acceptance_interval``,
written by ``allocator estimate`` as a Jeffreys Beta-posterior interval). Each
interval is turned back into the Beta distribution it came from
(:func:`beta_from_interval`), posterior draws of every drafter's per-position
acceptance are taken (:func:`posterior_draws`), and the problem is re-solved on
each draw (:func:`analyse`):

- for every configuration on the reported front: the share of draws in which it
  is *the* optimum (highest throughput within the budget over the whole search
  space), and the 5th, 50th and 95th percentiles and mean of its throughput;
- configurations that are optimal in some draw but not on the front are listed too;
- with a robust quantile ``Q`` the front itself is built from the ``Q``-quantile
  of each configuration's throughput over the draws instead of its throughput at
  the point estimate (costs and the budget are taken at the point estimate).

Drafters without an interval keep their point value in every draw. Draws of
different drafters and positions are independent (the posteriors of independent
binomial counts). With an ``empirical`` error model the joint log itself is
resampled instead (:func:`empirical_draws`), which keeps the drafters' dependence,
workload by workload. Otherwise a workload takes the drawn acceptance of every
drafter it does not override (its own overrides carry no interval and stay fixed).

The search space is walked once, in chunks of subsets; each chunk is evaluated for
all draws at once (``draws x subsets x k``, :func:`batched_throughput`) when the
errors are independent with one class of traffic, and draw by draw through the full
model otherwise. The draws are reproducible from ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lazy_module
from ..core.budget import feasible_mask
from ..core.documents import names_of, number
from ..core.result import Front
from ..core.space import count_subsets
from ..estimate.counts import LEVEL, PRIOR  # the intervals' level; Jeffreys prior weight
from ..exceptions import ParameterError
from ..model.acceptance import expected_accepted, extend_positions
from ..model.errors import EmpiricalErrors
from ..model.evaluator import BestPerKey, Chunk, FrontKeeper, Pass, evaluate_space
from ..model.metrics import evaluate_configs, evaluate_subsets
from ..validate import probability, whole

if TYPE_CHECKING:
    from scipy import special

    from ..core.problem import Problem, Workload
else:
    special = lazy_module("scipy.special")

#: Refuse more than this many (configuration x draw) evaluations.
MAX_EVALUATIONS = 200_000_000
#: Cells (draws x subsets x k) evaluated per chunk (memory bound).
CHUNK_CELLS = 1 << 22
PERCENTILES = (5.0, 50.0, 95.0)
#: Progress reports of the last phase (scoring the front under every draw), at most.
PROGRESS_STEPS = 200

#: ``progress(done, total, front_size)``: evaluations (configuration x draw) done of the
#: total; the same callback the searches take (:mod:`allocator.search`).
Progress = Callable[[int, int | None, int | None], None]


def beta_from_interval(
    lo: np.ndarray, hi: np.ndarray, level: float = LEVEL, iterations: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    """The Beta distribution whose equal-tailed ``level`` interval is ``[lo, hi]``.

    Vectorised Newton iteration on ``(log a, log b)`` matching the two quantiles
    in logit space, started from the method of moments of a normal approximation.
    Arrays of any common shape; returns ``(a, b)``.
    """
    eps = 1e-9
    lo = np.clip(np.asarray(lo, dtype=float), eps, 1 - eps)
    hi = np.clip(np.asarray(hi, dtype=float), eps, 1 - eps)
    lo, hi = np.broadcast_arrays(lo, hi)
    if np.any(hi <= lo):
        raise ValueError("interval must have lo < hi")
    tail = (1.0 - level) / 2.0
    z = special.ndtri(1 - tail)
    mean = (lo + hi) / 2
    sd = (hi - lo) / (2 * z)
    conc = np.maximum(mean * (1 - mean) / sd**2 - 1, 0.2)
    x = np.stack([np.log(mean * conc), np.log((1 - mean) * conc)])  # (2, ...)
    target = np.stack([special.logit(lo), special.logit(hi)])

    def f(x):
        a, b = np.exp(x)
        q = np.stack([special.betaincinv(a, b, tail), special.betaincinv(a, b, 1 - tail)])
        return special.logit(np.clip(q, 1e-300, 1 - 1e-16)) - target

    h = 1e-6
    for _ in range(iterations):
        r = f(x)
        if np.all(np.abs(r) < 1e-10):
            break
        ja = (f(x + np.array([h, 0.0]).reshape((2,) + (1,) * (x.ndim - 1))) - r) / h
        jb = (f(x + np.array([0.0, h]).reshape((2,) + (1,) * (x.ndim - 1))) - r) / h
        det = ja[0] * jb[1] - jb[0] * ja[1]
        det = np.where(np.abs(det) < 1e-300, 1e-300, det)
        dx0 = (jb[1] * r[0] - jb[0] * r[1]) / det
        dx1 = (-ja[1] * r[0] + ja[0] * r[1]) / det
        step = np.stack([dx0, dx1])
        step = np.clip(step, -1.0, 1.0)  # damping: at most a factor e per iteration
        x = x - step
    a, b = np.exp(x)
    return a, b


def _interval_rows(
    problem: Problem,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Point values, interval ends and which entries have an interval: each ``(N, J)``,
    ``J`` the wider of the problem's ``acceptance`` and ``acceptance_interval``."""
    acc = problem.acceptance
    iv = problem.acceptance_interval
    if iv is None:
        nan = np.full_like(acc, np.nan)
        return acc, nan, nan.copy(), np.zeros(acc.shape, bool)
    width = max(acc.shape[1], iv.shape[1])
    acc = extend_positions(acc, width)
    lo = extend_positions(iv[:, :, 0], width)
    hi = extend_positions(iv[:, :, 1], width)
    return acc, lo, hi, np.isfinite(lo)


def posterior_draws(problem: Problem, n_draws: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``n_draws`` posterior draws of the ``(N, J)`` acceptance: ``(D, N, J)``, and the
    names of the drafters that vary.

    Drafters with an interval (``problem.acceptance_interval``) are drawn from its Beta;
    the others keep ``problem.acceptance``. Both are read from ``problem`` as it is (a
    :meth:`~allocator.core.problem.Problem.replace` of either is sampled as replaced).
    """
    whole(n_draws, "samples", lo=1)
    acc, lo, hi, has = _interval_rows(problem)
    rng = np.random.default_rng(seed)
    out = np.broadcast_to(acc, (n_draws,) + acc.shape).copy()
    if has.any():
        a, b = beta_from_interval(lo[has], hi[has])
        draws = rng.beta(a, b, size=(n_draws, a.size))
        out[:, has] = np.clip(draws, 1e-12, 1.0)
    names = [n for n, h in zip(problem.names, has, strict=True) if h.any()]
    return out, names


def draw_problem(problem: Problem, acceptance: np.ndarray) -> Problem:
    """``problem`` with acceptance ``(N, J)`` replaced, under the problem's own error model.

    The parametric models take the marginals at call time, so the model object carries
    over as it is (whatever :meth:`~allocator.core.problem.Problem.with_errors` put there; the
    file's ``errors:`` section is not read again); it is checked against the drawn
    marginals.
    """
    problem.errors.validate(1.0 - acceptance)
    return problem.replace(acceptance=acceptance)


def empirical_draws(model, n_draws: int, rng) -> list[tuple[object, np.ndarray]]:
    """Posterior draws of an empirical (outcome-log) error model.

    At each logged position the failure masks seen are multinomial counts; a draw
    takes their probabilities from the Dirichlet posterior ``Dir(counts + 1/2)``
    (Jeffreys) and rebuilds the model on them. Masks never seen keep probability 0
    (as in a Bayesian bootstrap): a drafter that never failed in the log stays at
    acceptance 1 in every draw. Returns ``(errors, acceptance (N, P))``
    per draw, the acceptance being each drafter's marginal under the draw.
    """
    n = model.n
    weights = [rng.dirichlet(c + PRIOR, size=n_draws) for c in model.counts]  # (D, U_p)
    single = np.int64(1) << np.arange(n, dtype=np.int64)
    fails = np.stack(
        [
            w @ ((u[:, None] & single[None, :]) != 0)
            for w, u in zip(weights, model.masks, strict=True)
        ],
        axis=2,
    )  # (D, N, P)
    return [
        (
            EmpiricalErrors.from_counts(n, model.masks, [w[d] for w in weights]),
            np.clip(1.0 - fails[d], 1e-12, 1.0),
        )
        for d in range(n_draws)
    ]


def _widen(acc: np.ndarray, width: int) -> np.ndarray:
    """``(N, J)`` per-position values extended (last column repeats) to at least ``width``."""
    return extend_positions(acc, max(acc.shape[1], width))


def draw_problems(problem: Problem, n_draws: int, seed: int) -> tuple[list, list[str]]:
    """The problem under ``n_draws`` posterior draws, and the names of what varies.

    An ``empirical`` error model is redrawn from its log (:func:`empirical_draws`),
    each workload's part of the log too; otherwise the drafters'
    ``acceptance_interval`` Betas are (:func:`posterior_draws`), and a workload takes
    the drawn acceptance of every drafter it does not override.
    """
    rng = np.random.default_rng(seed)
    if isinstance(problem.errors, EmpiricalErrors):
        whole = empirical_draws(problem.errors, n_draws, rng)
        parts: list[Any] = [
            None if w.errors is None else empirical_draws(w.errors, n_draws, rng)
            for w in problem.workloads
        ]
        problems = []
        for d, (errors, acc) in enumerate(whole):
            workloads = tuple(
                w
                if part is None
                else replace(
                    w, errors=part[d][0], acceptance=_widen(part[d][1], w.acceptance.shape[1])
                )
                for w, part in zip(problem.workloads, parts, strict=True)
            )
            problems.append(
                problem.replace(
                    acceptance=_widen(acc, problem.acceptance.shape[1]),
                    errors=errors,
                    workloads=workloads,
                )
            )
        return problems, list(problem.names)
    draws, resampled = posterior_draws(problem, n_draws, seed)
    if problem.workloads:
        free = np.array(
            [
                np.ones(problem.n, bool) if w.overrides is None else ~w.overrides
                for w in problem.workloads
            ]
        )  # (W, N): drafter takes the problem's acceptance in this workload
        varies = [n for n, f in zip(problem.names, free.T, strict=True) if f.any()]
        resampled = [n for n in resampled if n in varies]
        if not resampled:
            raise ParameterError(
                "samples",
                "every workload overrides the acceptance of the drafters that have an "
                "acceptance_interval, and per-workload acceptance carries no interval; use "
                "errors: empirical with the outcome log to resample per workload",
            )
    out = []
    for a in draws:
        p = draw_problem(problem, a)
        if problem.workloads:
            redrawn: list[Workload] = []
            for w, f in zip(problem.workloads, free, strict=True):
                width = max(w.acceptance.shape[1], a.shape[1])
                acc = np.where(f[:, None], _widen(a, width), _widen(w.acceptance, width))
                redrawn.append(replace(w, acceptance=acc))
            p = p.replace(workloads=tuple(redrawn))
        out.append(p)
    return out, resampled


def _batchable(problem: Problem) -> bool:
    """Whether :func:`batched_throughput` applies (the model's plain independent case)."""
    return (
        problem.errors.name == "independent"
        and not problem.workloads
        and not getattr(problem, "ensembles", ())
        and problem.pooling == "any-correct"
    )


def batched_throughput(problem: Problem, members: np.ndarray, acceptance: np.ndarray):
    """Throughput and budget feasibility of every subset at every ``k`` for every draw.

    Independent errors, one class of traffic, any-correct pooling, no measured
    ensembles (:func:`_batchable`): the pooled acceptance of all draws at once is
    ``1 - exp(members @ log(1 - a_d))``, ``(D, B, J)``, and ``E_k`` comes from the
    model's own :func:`~allocator.model.acceptance.expected_accepted` over the leading
    axes. Round time and costs do not depend on acceptance and are taken from
    :func:`~allocator.model.metrics.evaluate_subsets` once.

    ``members``: bool ``(B, N)``; ``acceptance``: ``(D, N, J)``. Returns two ``(D, B, K)``
    arrays.
    """
    nominal = evaluate_subsets(problem, members)
    ks = problem.k_values
    q = 1.0 - acceptance
    zero = q <= 0.0
    m = members.astype(float)
    log_fail = np.einsum("bn,dnj->dbj", m, np.log(np.where(zero, 1.0, q)))
    fail = np.exp(log_fail)
    if zero.any():
        fail[np.einsum("bn,dnj->dbj", m, zero.astype(float)) > 0] = 0.0
    e = expected_accepted(1.0 - fail, problem.k_max, problem.convention)[..., ks - 1]
    met = dict(nominal)
    met["throughput"] = e / nominal["round_time"]
    met["expected_accepted"] = e
    met["draft_cost_per_token"] = nominal["draft_cost_per_round"] / e
    return met["throughput"], feasible_mask(met, problem.budget)


def _looped_throughput(problem: Problem, problems, members: np.ndarray):
    """As :func:`batched_throughput`, one draw at a time through the full model."""
    mets = [evaluate_subsets(p, members) for p in problems]
    thr = np.stack([met["throughput"] for met in mets])
    feasible = np.stack([feasible_mask(met, problem.budget) for met in mets])
    return thr, feasible


class _RobustFront:
    """The robust front's keeper: each chunk's configurations within the budget at the
    point estimate, costs at the point estimate, scored by the ``quantile``-quantile of
    their throughput over the draws."""

    def __init__(self, problem: Problem, quantile: float) -> None:
        self.problem, self.quantile = problem, quantile
        self.front = FrontKeeper(problem.cost_metric, problem.k_values)

    def add(self, chunk: Chunk) -> None:
        nominal = evaluate_subsets(self.problem, chunk.members)
        qt = np.quantile(chunk.metrics["throughput"], self.quantile, axis=0)
        feasible = feasible_mask(nominal, self.problem.budget)
        self.front.offer(chunk.members, nominal, feasible, score=qt)


@dataclass
class UncertaintyReport:
    """What :func:`analyse` finds. Arrays ``(P,)`` follow ``front``'s points."""

    samples: int
    seed: int
    quantile: float | None
    resampled: list[str]
    front: Front
    optimal_share: np.ndarray
    percentiles: dict[str, np.ndarray]
    quantile_throughput: np.ndarray | None
    other_optima: list[dict] = field(default_factory=list)

    def to_dict(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The ``uncertainty`` object of ``solve --json``: per front point (same order as
        ``front``) its share of draws as the optimum and its throughput's spread, then the
        configurations off the front that were the optimum in some draw."""
        f = self.front
        q = self.quantile_throughput
        pct = self.percentiles
        points = [
            {
                "drafters": names_of(names, f.members[i]),
                "k": int(f.k[i]),
                "optimal_share": float(self.optimal_share[i]),
                **{
                    key: float(pct[key][i])
                    for key in (
                        "throughput_p05",
                        "throughput_p50",
                        "throughput_p95",
                        "throughput_mean",
                    )
                },
                "throughput_quantile": None if q is None else float(q[i]),
            }
            for i in range(len(f))
        ]
        return {
            "samples": int(self.samples),
            "seed": int(self.seed),
            "robust_quantile": number(self.quantile),
            "resampled": [str(r) for r in self.resampled],
            "points": points,
            "other_optima": [
                {
                    "drafters": [str(n) for n in o["drafters"]],
                    "k": int(o["k"]),
                    "optimal_share": float(o["optimal_share"]),
                }
                for o in self.other_optima
            ],
        }


def _key(members_row: np.ndarray, k: int) -> tuple:
    return (np.packbits(members_row).tobytes(), int(k))


def analyse(
    problem: Problem,
    front: Front,
    n_draws: int,
    seed: int = 0,
    quantile: float | None = None,
    progress: Progress | None = None,
) -> UncertaintyReport:
    """Re-solve ``problem`` on ``n_draws`` posterior draws (module docstring).

    ``front`` is the front found at the point estimate; with ``quantile`` it is
    replaced by the front of the ``quantile``-quantile of throughput.

    ``progress``: called as ``progress(done, total, None)`` with the evaluations
    (configuration x draw) done: every (subset, k) of the search space under every draw,
    then every configuration of the reported front under every draw (``total`` grows or
    shrinks when the robust front replaces ``front``).
    """
    if quantile is not None:
        probability(quantile, "robust", zero=False, one=False)
    problems, resampled = draw_problems(problem, n_draws, seed)
    if not resampled:
        raise ParameterError(
            "samples",
            "no drafter has an acceptance_interval to sample from (write one, or estimate "
            "the file with `allocator estimate`)",
        )
    ks = problem.k_values
    total = count_subsets(problem) * len(ks) * n_draws
    if total > MAX_EVALUATIONS:
        raise ParameterError(
            "samples",
            f"{total:,} evaluations (configurations x draws) are too many; lower --samples "
            "or narrow the search (search.m.max, search.k.max)",
        )
    best = BestPerKey(n_draws, problem.n, ks)  # the optimum of each draw
    robust = _RobustFront(problem, quantile) if quantile is not None else None
    batched = _batchable(problem) and all(
        p.errors.name == "independent" and not p.workloads for p in problems
    )
    acc_draws = np.stack([p.acceptance for p in problems]) if batched else None

    def evaluate(members: np.ndarray) -> dict[str, np.ndarray]:
        """Every draw at once: throughput and budget feasibility ``(D, B, K)``."""
        if acc_draws is not None:
            thr, feasible = batched_throughput(problem, members, acc_draws)
        else:
            thr, feasible = _looped_throughput(problem, problems, members)
        return {"throughput": thr, "feasible": feasible}

    done = 0

    def report(total_now: int) -> None:
        if progress is not None:
            progress(done, total_now, None)

    def tick(seen: Pass) -> None:
        nonlocal done
        done = seen.cells
        report(total + len(front) * n_draws)

    report(total + len(front) * n_draws)
    evaluate_space(
        problem,
        [best] if robust is None else [best, robust],
        evaluate=evaluate,
        max_cells=CHUNK_CELLS,
        cells_per_subset=len(ks) * n_draws,
        progress=tick,
    )
    if robust is not None:
        robust_front = robust.front.front()
        if robust_front is not None:
            front = robust_front
    # throughput of the reported configurations in every draw: (D, P)
    per_draw = np.zeros((n_draws, len(front)))
    if len(front):
        every = max(1, n_draws // PROGRESS_STEPS)
        for scored, p in enumerate(problems, 1):
            per_draw[scored - 1] = evaluate_configs(p, front.members, front.k)["throughput"]
            if scored % every == 0 or scored == n_draws:
                done = total + scored * len(front)
                report(total + len(front) * n_draws)
    done = total + len(front) * n_draws
    report(done)
    pct = np.percentile(per_draw, PERCENTILES, axis=0) if len(front) else np.zeros((3, 0))
    percentiles = {
        "throughput_p05": pct[0],
        "throughput_p50": pct[1],
        "throughput_p95": pct[2],
        "throughput_mean": per_draw.mean(axis=0),
    }
    q_thr = np.quantile(per_draw, quantile, axis=0) if quantile is not None else None
    found = np.isfinite(best.score)
    counts: dict[tuple, int] = {}
    example: dict[tuple, tuple] = {}
    for d in np.flatnonzero(found):
        key = _key(best.members[d], best.k[d])
        counts[key] = counts.get(key, 0) + 1
        example[key] = (best.members[d], int(best.k[d]))
    front_keys = [_key(front.members[i], front.k[i]) for i in range(len(front))]
    share = np.array([counts.get(k, 0) / n_draws for k in front_keys])
    on_front = set(front_keys)
    others = [
        {
            "drafters": [n for n, on in zip(problem.names, example[k][0], strict=True) if on],
            "k": example[k][1],
            "optimal_share": c / n_draws,
        }
        for k, c in sorted(counts.items(), key=lambda kv: -kv[1])
        if k not in on_front
    ]
    return UncertaintyReport(
        samples=n_draws,
        seed=seed,
        quantile=quantile,
        resampled=resampled,
        front=front,
        optimal_share=share,
        percentiles=percentiles,
        quantile_throughput=q_thr,
        other_optima=others,
    )


__all__ = [
    "CHUNK_CELLS",
    "MAX_EVALUATIONS",
    "PERCENTILES",
    "PROGRESS_STEPS",
    "Progress",
    "UncertaintyReport",
    "analyse",
    "batched_throughput",
    "beta_from_interval",
    "draw_problem",
    "draw_problems",
    "empirical_draws",
    "posterior_draws",
]
