"""``calibrate`` on runs at a request rate: the roofline's factors fitted through the
request-level simulator (docs/design.md §8.7, "Request-rate runs").

A run at a request rate (``vllm bench serve --request-rate R --save-result
--save-detailed``, SGLang ``bench_serving --request-rate R --output-details``) has no
steady state: its batch grows and shrinks with the arrivals, and its time to first token
is queueing plus prefill plus the time outside the engine. So it is not turned into a row
of step times: each run is **replayed** on the problem's simulated replica as ``allocator
validate`` replays it (:func:`allocator.analysis.validation.replay`: the run's rate and
burstiness, its completed requests at their own lengths), and the factors are those under
which the replays' metrics come closest to the measured ones.

**The objective.** For every run and every statistic of TTFT, TPOT, ITL and E2EL the file
carries (``mean``, ``median``, ``pNN``), the relative residual ``w · (predicted / measured −
1)``, ``w = 1`` for means and medians and :data:`TAIL_WEIGHT` for a percentile (a tail
rests on few requests, and on the measured run's noise); least squares over all of them.

**Common random numbers.** Every evaluation replays every run from the same ``seed`` (the
same arrivals, the same acceptance draws), so the objective is a deterministic function of
the factors; it moves with them continuously but for the steps at which a scheduling
decision flips, which are small against a finite difference of :data:`DIFF_STEP` of a
factor's range. The minimiser is :func:`scipy.optimize.least_squares` (trust region
reflective, within the bounds, 2-point differences of that step): a least-squares
problem of a few parameters with a residual vector, for which a Gauss–Newton step takes
few evaluations, each of which is a replay of every run (the cost), and whose Jacobian
at the end is the one :func:`allocator.calibration.roofline_fit.identify` needs for the
standard errors and the undetermined parameters (Nelder–Mead or Powell would give no
Jacobian and take more evaluations). ``ttft_overhead_ms`` shifts every TTFT and E2EL by
itself and changes no step (:func:`allocator.analysis.replica.outside_engine`): it is
added to the replays' metrics, so varying it replays nothing (the replays are cached by
the step-time factors).

**Fitted**: ``mem_eff``, ``compute_eff``, ``prefill_eff``, ``ttft_overhead_ms`` and, when
the runs speculate, the drafter's ``fixed_ms`` (``serving.roofline.drafters``); from a
file already calibrated on closed-loop runs (``serving.calibrated_from``) only
``prefill_eff`` and ``ttft_overhead_ms``, the step-time factors held (the two-step use:
closed-loop runs for the decode step, rate runs for time to first token). Each with a
95% interval ``±1.96`` standard errors (from the final Jacobian and the residual variance),
or reported "not separately determined" with the parameters it is confounded with, and
written at the fit's value either way: the file is the fit, and it is read back, every
run replayed from it, and not written if any metric differs from the fit's by more than
:data:`READ_BACK_RTOL` relative.

**Refused**, one line each, nothing written: runs of different models, GPUs or
tensor-parallel sizes (naming both files); a run at a request rate without its
per-request lengths; per-request arrays of unequal lengths; closed-loop runs (or CSV rows)
given to this fit (``calibrate`` sends such a mix to the steady-state relation, which
leaves the rate runs out with a note: calibrate the closed-loop runs alone, then the
rate runs with the calibrated file as ``--problem``); a problem without
``serving.hardware`` and ``serving.model``; a fit whose written file cannot reproduce it.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize

from ..calibration.report import calibrated_text
from ..calibration.roofline_fit import identify
from ..calibration.write import DIGITS
from ..core.problem import Problem
from ..estimate.bench_files import read_bench_files
from ..exceptions import InputError, ParameterError
from ..io.build import problem_from_file
from ..io.spec import load_problem, parse_problem
from ..model.steptime.roofline import MIN_EFF
from ..validate import seed as valid_seed
from .bench import plain_metrics
from .validation import (
    MeasuredRun,
    check_deployment,
    check_same_deployment,
    error_pct,
    measured_runs,
    replay,
)

__all__ = [
    "DIFF_STEP",
    "MAX_EVALUATIONS",
    "READ_BACK_RTOL",
    "TAIL_WEIGHT",
    "TOLERANCE",
    "RateCalibrationReport",
    "has_rate_runs",
    "rate_calibration",
]

#: Weight of a percentile's residual against a mean's or a median's.
TAIL_WEIGHT = 0.5
#: Finite-difference step of the Jacobian, relative (``max(1, |x|)`` times it): a factor's
#: step of 0.02, the overhead's 2% (at least 0.02 ms).
DIFF_STEP = 0.02
#: Evaluations of the objective at most (each replays every run once).
MAX_EVALUATIONS = 40
#: Relative change of the cost and of the factors at which the minimiser stops: a tenth of
#: the percent a measured latency statistic is known to (a run's own noise is larger).
TOLERANCE = 1e-3
#: Largest relative difference of a metric between the fit and its written file.
READ_BACK_RTOL = 1e-6
#: Upper bound of the fitted time outside the steps, ms.
MAX_OVERHEAD_MS = 10_000.0
#: Below this rank tolerance a direction of the scaled Jacobian counts as flat.
RANK_TOL = 1e-6
_KEY = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_SHIFTED = ("ttft", "e2el")


def has_rate_runs(files: Sequence[str | Path]) -> bool:
    """Whether ``files`` are benchmark files of runs at a finite request rate only (no CSV
    rows, no closed-loop run: those keep the steady-state relation, and the rate runs
    beside them are left out with a note). A file the benchmark reader refuses is not
    (the steady-state path then refuses it in its own words)."""
    if not files or any(Path(f).suffix.lower() == ".csv" for f in files):
        return False
    try:
        runs = read_bench_files([Path(f) for f in files], drafter=None)
    except InputError:
        return False
    return bool(runs) and all(math.isfinite(r.request_rate) for r in runs)


def _weights(metrics: Mapping[str, float]) -> dict[str, float]:
    """The fitted keys of one run's measured metrics and their weights (module
    docstring)."""
    out = {}
    for key, value in metrics.items():
        m = _KEY.match(key)
        if m is None or not value > 0:
            continue
        out[key] = 1.0 if m.group(1) in ("mean", "median") else TAIL_WEIGHT
    return out


def _shift(metrics: Mapping[str, object], overhead_ms: float) -> dict[str, float | None]:
    """A replay's latency statistics with ``overhead_ms`` added to TTFT and E2EL."""
    out: dict[str, float | None] = {}
    for key, v in metrics.items():
        m = _KEY.match(key)
        if m is None:
            continue
        value = None if v is None else float(v)  # type: ignore[arg-type]
        if value is not None and m.group(2) in _SHIFTED:
            value += overhead_ms
        out[key] = value
    return out


def _problem_at(problem: Problem, roofline: Mapping[str, object]) -> Problem:
    """``problem`` with ``serving.roofline`` replaced and no time outside the steps (the
    replays add it themselves)."""
    serving = problem.serving
    assert serving is not None
    return replace(problem, serving=replace(serving, roofline=dict(roofline), ttft_overhead_ms=0.0))


def _roofline_with(base: Mapping[str, Any], values: Mapping[str, float]) -> dict:
    """``serving.roofline`` factors with the fitted step-time parameters set."""
    out = {k: v for k, v in base.items() if k != "drafters"}
    drafters = {n: dict(d) for n, d in (base.get("drafters") or {}).items()}
    for name, v in values.items():
        if name == "ttft_overhead_ms":
            continue
        if name.startswith("draft."):
            _, dname, key = name.split(".", 2)
            drafters.setdefault(dname, {})[key] = float(v)
        else:
            out[name] = float(v)
    if drafters:
        out["drafters"] = drafters
    return out


def _round(v: float) -> float:
    return float(f"{v:.{DIGITS}g}")


@dataclass
class RateCalibrationReport:
    """``allocator calibrate`` on request-rate runs: the fit and the calibrated problem.

    problem, measured, out : the paths; seed : the replays' seed; parameters : each
    fitted parameter (``name``, ``value`` or ``None`` when not separately determined,
    ``stderr``, ``interval_95``, ``undetermined``, ``written``,
    ``determined_combination``); runs : per run its ``source``, ``request_rate`` and
    ``metrics`` (key → measured, predicted from the written file, ``error_pct``); cost :
    half the sum of squared weighted residuals; evaluations : replays of every run the
    fit made; data : the calibrated problem file as plain data; notes."""

    problem: str
    measured: str | list[str]
    out: str | None
    seed: int
    parameters: list[dict]
    runs: list[dict]
    cost: float
    evaluations: int
    data: dict
    notes: list[str]

    def text(self) -> str:
        """The calibrated problem file to write: a two-line comment, then YAML."""
        return calibrated_text(
            self.data, self.problem, self.measured, "(request-rate runs, through the simulator) "
        )

    def errors(self) -> list[float]:
        return [
            abs(m["error_pct"])
            for r in self.runs
            for m in r["metrics"].values()
            if m["error_pct"] is not None
        ]

    def to_dict(self) -> dict:
        """The ``calibrate --json`` document of a request-rate fit."""
        e = self.errors()
        return {
            "problem": self.problem,
            "measured": self.measured,
            "out": self.out,
            "form": "request-rate",
            "seed": self.seed,
            "objective": (
                "sum over runs and statistics of (w * (predicted / measured - 1))^2, w = 1 "
                f"for means and medians of TTFT, TPOT, ITL, E2EL, {TAIL_WEIGHT} for a "
                "percentile; every replay from the same seed"
            ),
            "cost": self.cost,
            "evaluations": self.evaluations,
            "parameters": self.parameters,
            "runs": self.runs,
            "evaluated_on": "fitted runs (in-sample), replayed from the written file",
            "median_abs_error_pct": float(np.median(e)) if e else None,
            "max_abs_error_pct": float(np.max(e)) if e else None,
            "notes": list(self.notes),
        }


def _rate_runs(problem: Problem, files: Sequence[str | Path]) -> list[MeasuredRun]:
    """The runs of ``files``, checked (module docstring, "Refused")."""
    csv = [str(f) for f in files if Path(f).suffix.lower() == ".csv"]
    if csv:
        raise InputError(
            "FILE",
            f"{Path(csv[0]).name} holds closed-loop rows beside runs at a request rate: they "
            "keep the steady-state relation; calibrate them alone first, then the rate runs "
            "with the calibrated file as --problem",
        )
    runs = measured_runs(files)
    check_same_deployment(runs)
    for run in runs:
        check_deployment(problem, run)
        if not math.isfinite(run.request_rate):
            raise InputError(
                run.source,
                "a closed-loop run (max_concurrency, all requests at once) beside runs at a "
                "request rate: it keeps the steady-state relation; calibrate the closed-loop "
                "runs alone first, then the rate runs with the calibrated file as --problem",
            )
        if not run.lengths_recorded:
            raise InputError(
                f"{run.source}: input_lens",
                "missing: a run at a request rate is fitted at its own request lengths; "
                "save them (vLLM --save-detailed, SGLang --output-details)",
            )
        if not _weights(run.metrics):
            raise InputError(
                run.source, "no TTFT, TPOT, ITL or E2EL statistic to fit (--percentile-metrics)"
            )
    return runs


def _free(problem: Problem, runs: Sequence[MeasuredRun], drafters: str | None) -> list[str]:
    serving = problem.serving
    assert serving is not None
    if serving.calibrated_from is not None:
        return ["prefill_eff", "ttft_overhead_ms"]
    names = ["mem_eff", "compute_eff", "prefill_eff", "ttft_overhead_ms"]
    if any(r.k > 0 for r in runs):
        name = drafters or (problem.names[0] if problem.n == 1 else None)
        if name is None:
            raise ParameterError(
                "drafters",
                f"the problem has {problem.n} drafters: name the one the speculative runs served",
            )
        models = serving.drafter_models or (None,) * problem.n
        if models[problem.names.index(name)] is None or name in (
            serving.roofline.get("drafters") or {}
        ):
            names.append(f"draft.{name}.fixed_ms")
    return names


def _start(problem: Problem, names: Sequence[str]) -> np.ndarray:
    serving = problem.serving
    assert serving is not None
    roof = serving.roofline
    out = []
    for n in names:
        if n == "ttft_overhead_ms":
            out.append(serving.ttft_overhead_ms)
        elif n.startswith("draft."):
            _, dname, key = n.split(".", 2)
            out.append(float((roof.get("drafters") or {}).get(dname, {}).get(key, 0.0)))
        else:
            out.append(float(roof.get(n, 1.0)))
    return np.asarray(out, float)


def _bounds(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    lo = [0.0 if n.endswith("_ms") else MIN_EFF for n in names]
    hi = [MAX_OVERHEAD_MS if n.endswith("_ms") else 1.0 for n in names]
    return np.asarray(lo), np.asarray(hi)


class _Objective:
    """The residuals of the module docstring as a function of the free parameters, with
    the replays cached by the step-time factors (the overhead replays nothing)."""

    def __init__(
        self,
        problem: Problem,
        runs: Sequence[MeasuredRun],
        names: Sequence[str],
        drafters: str | None,
        seed: int,
        tick: Callable[[], None],
    ) -> None:
        self.problem, self.runs, self.names = problem, list(runs), list(names)
        self.drafters, self.seed, self.tick = drafters, seed, tick
        self.weights = [_weights(r.metrics) for r in runs]
        self.cache: dict[tuple, list[dict]] = {}
        self.replays = 0

    def split(self, theta: np.ndarray) -> tuple[dict[str, float], float]:
        values = {n: float(v) for n, v in zip(self.names, theta, strict=True)}
        overhead = values.pop("ttft_overhead_ms", self.problem.serving.ttft_overhead_ms)  # type: ignore[union-attr]
        return values, overhead

    def simulated(self, step: Mapping[str, float], problem: Problem | None = None) -> list[dict]:
        key = tuple(sorted(step.items()))
        if problem is None and key in self.cache:
            return self.cache[key]
        serving = self.problem.serving
        assert serving is not None
        prob = problem or _problem_at(self.problem, _roofline_with(serving.roofline, step))
        out = []
        for run in self.runs:
            result, _ = replay(prob, run, drafters=self.drafters, seed=self.seed)
            out.append(plain_metrics(result.metrics))
        if problem is None:
            self.cache[key] = out
            self.replays += 1
            self.tick()
        return out

    def predicted(self, theta: np.ndarray) -> list[dict[str, float | None]]:
        step, overhead = self.split(theta)
        return [_shift(m, overhead) for m in self.simulated(step)]

    def residuals_of(self, predicted: Sequence[Mapping[str, float | None]]) -> np.ndarray:
        out = []
        for run, w, pred in zip(self.runs, self.weights, predicted, strict=True):
            for key, weight in w.items():
                p = pred.get(key)
                if p is None or not math.isfinite(p):
                    out.append(weight * 10.0)
                else:
                    out.append(weight * (p / run.metrics[key] - 1.0))
        return np.asarray(out, float)

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        return self.residuals_of(self.predicted(theta))


def _parameters(
    names: Sequence[str],
    theta: np.ndarray,
    written: Sequence[float],
    stderr: Mapping[str, float],
    why: Mapping[str, str],
    lo: np.ndarray,
    hi: np.ndarray,
) -> list[dict]:
    out = []
    for i, n in enumerate(names):
        flat = why.get(n)
        se = stderr.get(n, float("nan"))
        entry: dict = {
            "name": n,
            "value": None if flat else float(theta[i]),
            "stderr": None if flat or not math.isfinite(se) else se,
            "interval_95": None,
            "undetermined": flat,
            "written": float(written[i]),
            "determined_combination": None,
        }
        if not flat and math.isfinite(se):
            entry["interval_95"] = [
                float(max(lo[i], theta[i] - 1.96 * se)),
                float(min(hi[i], theta[i] + 1.96 * se)),
            ]
        if flat:
            m = re.match(r"only its combination with (.*) is determined", flat)
            if m:
                entry["determined_combination"] = f"{n} together with {m.group(1)}"
        out.append(entry)
    return out


def _file_data(problem_path: str | Path, names: Sequence[str], written: Sequence[float]) -> dict:
    """The problem file ``P`` with the fitted values written into ``serving``."""
    spec = load_problem(problem_path)
    data = spec.model_dump(mode="python", exclude_unset=True)
    serving = data["serving"]
    roof = dict(serving.get("roofline") or {})
    values = dict(zip(names, written, strict=True))
    if "ttft_overhead_ms" in values:
        serving["ttft_overhead_ms"] = values.pop("ttft_overhead_ms")
    new = _roofline_with(roof, values)
    for n in ("mem_eff", "compute_eff", "prefill_eff"):  # within the bounds as written
        if n in new and new[n] is not None:
            new[n] = min(max(float(new[n]), MIN_EFF), 1.0)
    serving["roofline"] = new
    parse_problem(data, source="out")
    return data


def _read_back(
    report: RateCalibrationReport,
    objective: _Objective,
    fitted: list[dict[str, float | None]],
    folder: Path,
) -> list[dict]:
    """Every run replayed from the written file (staged beside it, read, removed); its
    metrics, refused naming ``out`` where one differs from the fit's by more than
    :data:`READ_BACK_RTOL`."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".calibrate-", suffix=".yaml", dir=folder)
    except OSError as exc:
        raise InputError("out", f"cannot write in {folder}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(report.text())
        prob = problem_from_file(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)
    assert prob.serving is not None
    sims = objective.simulated({}, problem=_problem_at(prob, prob.serving.roofline))
    got = [_shift(m, prob.serving.ttft_overhead_ms) for m in sims]
    for run, a, b in zip(objective.runs, fitted, got, strict=True):
        for key in _weights(run.metrics):
            x, y = a.get(key), b.get(key)
            same = x == y or (
                x is not None and y is not None and abs(y - x) <= READ_BACK_RTOL * abs(x)
            )
            if not same:
                raise InputError(
                    "out",
                    f"the calibrated file, read back, gives {run.source} {key} = {y} where "
                    f"the fit gives {x}: the file would not be the fit, so it is not written",
                )
    return got


def rate_calibration(
    files: Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None = None,
    *,
    seed: int = 0,
    drafters: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RateCalibrationReport:
    """Fit the factors of the module docstring to the request-rate runs of ``files``
    for the problem file ``problem``; the calibrated file's text for ``out`` (staged
    beside it to be read back, not written). ``progress(done, total)`` after each
    evaluation (replays of every run; ``total`` the most there can be)."""
    valid_seed(seed)
    prob = problem_from_file(problem)
    serving = prob.serving
    if serving is None or serving.hardware is None or serving.model is None:
        raise InputError(
            "serving.model",
            "missing: runs at a request rate are fitted through the simulated replica's "
            "roofline; give serving.hardware and serving.model",
        )
    if drafters is not None and drafters not in prob.names:
        raise ParameterError(
            "drafters", f"{drafters!r} is not a drafter of the problem ({', '.join(prob.names)})"
        )
    runs = _rate_runs(prob, files)
    names = _free(prob, runs, drafters)
    lo, hi = _bounds(names)
    x0 = np.clip(_start(prob, names), lo, hi)
    done = [0]
    total = MAX_EVALUATIONS + 2

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0], total), total)

    objective = _Objective(prob, runs, names, drafters, seed, tick)
    res = optimize.least_squares(
        objective,
        x0,
        bounds=(lo, hi),
        method="trf",
        diff_step=DIFF_STEP,
        ftol=TOLERANCE,
        xtol=TOLERANCE,
        max_nfev=MAX_EVALUATIONS,
    )
    theta = np.asarray(res.x, float)
    r = objective(theta)
    jac = np.asarray(res.jac, float)
    stderr, why = identify(names, theta, jac, r, RANK_TOL)
    written = [_round(v) for v in theta]
    data = _file_data(problem, names, written)
    notes = [
        f"{len(runs)} run(s) at a request rate replayed on the simulated replica "
        f"(seed {seed}, the same for every evaluation) and fitted by least squares over "
        "their TTFT, TPOT, ITL and E2EL statistics"
    ]
    if serving.calibrated_from is not None:
        notes.append(
            "the problem is calibrated already (serving.calibrated_from): its step-time "
            "factors are held, prefill_eff and ttft_overhead_ms fitted"
        )
    if not res.success or res.nfev >= MAX_EVALUATIONS:
        notes.append(
            f"the minimiser stopped after {res.nfev} evaluations ({res.message}): the "
            "factors are its best so far"
        )
    if why:
        notes.append(
            "not separately determined by the runs, written at the fit's values: " + ", ".join(why)
        )
    report = RateCalibrationReport(
        str(problem),
        str(files[0]) if len(files) == 1 else [str(f) for f in files],
        None if out is None else str(out),
        seed,
        _parameters(names, theta, written, stderr, why, lo, hi),
        [],
        float(res.cost),
        objective.replays,
        data,
        notes,
    )
    # the file read back must be the fit: the same written values replayed
    refit = objective.predicted(np.asarray(written))
    folder = Path(out if out is not None else problem).resolve().parent
    got = _read_back(report, objective, refit, folder)
    for run, pred in zip(runs, got, strict=True):
        metrics = {}
        for key in _weights(run.metrics):
            m = float(run.metrics[key])
            p = pred.get(key)
            metrics[key] = {"measured": m, "predicted": p, "error_pct": error_pct(m, p)}
        report.runs.append(
            {"source": run.source, "request_rate": run.request_rate, "metrics": metrics}
        )
    tick()
    return report
