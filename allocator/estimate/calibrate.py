"""Calibration: a step-time model fitted to measured end-to-end throughput.

The model, the fit and their reasons: docs/design.md §8.7.

Input: rows measured on one deployment, each a configuration (``drafters``, ``k``), a
batch size ``b`` (concurrent sequences) and the aggregate output rate ``tokens_per_s``
over the batch, optionally the measured mean tokens per step ``mean_accepted`` (the
bonus convention: accepted drafted tokens plus the verifier's own, as vLLM's and
SGLang's "acceptance length").

**Rows to step times.** A step emits ``E`` tokens per sequence, so
``step_ms = 1000 · b · E / tokens_per_s``. ``E`` is the row's ``mean_accepted`` when
given; otherwise the problem's acceptance in the bonus convention, computed by the
serving model's :func:`~allocator.model.serving.bonus_expected` (the problem's pooling,
error model, ensembles and workload mixture, whatever its ``convention``). ``k = 0``
(no speculation) is ``E = 1``.

**The step-time model** (all times in ms, ``b`` sequences, ``t = m·k + 1`` verified
tokens per sequence for ``m`` drafters drafting ``k`` tokens each)::

    verify(b, t) = max(v0 + v1·b, c·b·t)                 # roofline
    draft_i(b)   = d0_i + d1_i·b                         # one drafted token, every sequence
    step(b, 0)   = verify(b, 1)
    step(b, k)   = verify(b, m·k + 1) + k · Σ_i draft_i(b) + overhead     (k > 0)

(``max_i`` instead of ``Σ_i`` under ``drafting: parallel``). Why this form: a decoding
forward pass at small batch is bound by memory traffic, the weights (``v0``) plus every
sequence's KV cache (``v1·b``), whatever the handful of tokens each sequence verifies;
only when ``b·t`` tokens' worth of arithmetic outlasts that traffic does the pass
become compute bound and grow with the verified tokens (``c·b·t``). This is what makes
speculation stop paying under load, and an affine-in-``t`` verifier could not show it
at all: at batch 1 its slope in ``t`` is indistinguishable from draft cost. A draft
model or head runs one small forward pass per drafted token for the whole batch,
memory bound throughout, hence affine in ``b``. ``overhead`` is the per-step cost of
speculation itself (sampling, bookkeeping, the draft model's catch-up pass).

**Fit.** :func:`scipy.optimize.least_squares` on relative residuals
``predicted / measured − 1`` (so every row counts by its percentage error, as
reported), all parameters bounded below by 0, started from a non-negative linear fit
(:func:`scipy.optimize.nnls`, compute term left out) and from that start with the
compute term touching the most compute-heavy row; the lower cost wins. Parameters the
rows cannot determine are fixed at 0 and said so in ``notes``: the batch slopes
(``v1`` and every ``d1_i``) with one batch size measured, a drafter's ``d1_i`` when its
speculative rows are at one batch size, ``overhead`` without a speculative row. When
no drafter is measured at two ``k`` or more, draft cost and overhead are not separable
(a note says so); predictions at the measured points are unaffected.

**Output.** The problem's ``serving`` section in the shared format: ``verify_ms`` (the
fitted ``verify`` at every measured batch size and every integer token count
``1..m_max·k_max + 1``, ``k_max`` the largest measured ``k``), each fitted drafter's
``draft_ms`` at the measured batch sizes, and ``overhead_ms``, so that the serving
model's component form ``verify_ms(b, m·k + 1) + k·Σ draft_ms_i(b) + overhead_ms``
reproduces the fitted step times at every measured batch size and every ``k`` up to
``k_max``, to the 6 significant digits written (a draft time fitted below
:data:`MIN_MS` is written as :data:`MIN_MS`, the format needing it positive).

``--holdout F --seed S`` holds out a seeded random fraction ``F`` of the rows (never the
last row of a drafter set, so every drafter stays fitted), fits on the rest, and
reports the error on the held-out rows only.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..exceptions import InputError, ParameterError
from ..model.serving import bonus_expected, drafting_pass, tokens_per_s

__all__ = [
    "MODEL_FORM",
    "Calibration",
    "CalibrationReport",
    "Measured",
    "StepModel",
    "bonus_expected",
    "calibrate",
    "calibrated_problem_data",
    "calibration_report",
    "check_paths",
    "fit_step_model",
    "holdout_mask",
    "read_measured",
    "serving_section",
]
from ..core.problem import Problem

REQUIRED_COLUMNS = ("drafters", "k", "batch", "tokens_per_s")
OPTIONAL_COLUMNS = ("mean_accepted",)
#: Smallest time written for a fitted drafter's draft_ms (the format needs > 0), ms.
MIN_MS = 1e-4
DIGITS = 6


@dataclass(frozen=True)
class Measured:
    """Measured rows, ``R`` of them, as arrays.

    ``members (R, N)`` bool over the problem's drafters; ``k``, ``batch`` ``(R,)`` int;
    ``tokens_per_s (R,)`` aggregate output tokens/s over the batch; ``mean_accepted
    (R,)`` tokens per step per sequence (bonus convention), NaN where not given;
    ``lines (R,)`` the file's line numbers, for messages.
    """

    members: np.ndarray
    k: np.ndarray
    batch: np.ndarray
    tokens_per_s: np.ndarray
    mean_accepted: np.ndarray
    lines: np.ndarray

    def __len__(self) -> int:
        return int(self.k.shape[0])

    def take(self, rows: np.ndarray) -> Measured:
        """The rows selected by a bool mask or index array."""
        return Measured(
            self.members[rows],
            self.k[rows],
            self.batch[rows],
            self.tokens_per_s[rows],
            self.mean_accepted[rows],
            self.lines[rows],
        )


def _number(text: str, column: str, line: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"measured.{column} (line {line})", f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise InputError(f"measured.{column} (line {line})", f"{text!r} is not a finite number")
    return v


def _whole(text: str, column: str, line: int) -> int:
    v = _number(text, column, line)
    if v != int(v):
        raise InputError(f"measured.{column} (line {line})", f"{text!r} is not a whole number")
    return int(v)


def read_measured(path: str | Path, problem: Problem) -> Measured:
    """Read a measured CSV (columns :data:`REQUIRED_COLUMNS`, optional ``mean_accepted``).

    Lines starting with ``#`` are comments (a bundled file states its source there).
    ``drafters``: names joined by ``+``, empty for no speculation (then ``k = 0``).
    Every bad cell is an :class:`InputError` naming the column and the line.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("measured", f"file not found: {p}")
    try:
        # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("measured", f"cannot read {p}: {type(exc).__name__}") from None
    numbered = [
        (i, line)
        for i, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not numbered:
        raise InputError("measured", f"{p} has no header and no rows")
    reader = csv.reader([line for _, line in numbered])
    rows = list(reader)
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"measured.{missing[0]}",
            f"missing column (the header has {', '.join(header)}; needed: "
            f"{', '.join(REQUIRED_COLUMNS)}, optional: {', '.join(OPTIONAL_COLUMNS)})",
        )
    unknown = [c for c in header if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise InputError(
            f"measured.{unknown[0]}",
            f"unknown column (known: {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})",
        )
    if len(set(header)) != len(header):
        raise InputError("measured", "a column is named twice")
    col = {c: header.index(c) for c in header}
    body = rows[1:]
    if not body:
        raise InputError("measured", f"{p} has a header but no rows")
    index = {n: i for i, n in enumerate(problem.names)}
    n_rows = len(body)
    members = np.zeros((n_rows, problem.n), bool)
    k = np.zeros(n_rows, np.int64)
    batch = np.zeros(n_rows, np.int64)
    tps = np.zeros(n_rows)
    acc = np.full(n_rows, np.nan)
    lines = np.array([line for line, _ in numbered[1:]], np.int64)
    for r, cells in enumerate(body):
        line = int(lines[r])
        if len(cells) != len(header):
            raise InputError(
                f"measured (line {line})", f"{len(cells)} cells for {len(header)} columns"
            )
        cell = {c: cells[i].strip() for c, i in col.items()}
        names = [s.strip() for s in cell["drafters"].split("+")] if cell["drafters"] else []
        for name in names:
            if name not in index:
                raise InputError(
                    f"measured.drafters (line {line})",
                    f"unknown drafter {name!r} (the problem has {', '.join(problem.names)})",
                )
            if members[r, index[name]]:
                raise InputError(f"measured.drafters (line {line})", f"{name!r} named twice")
            members[r, index[name]] = True
        k[r] = _whole(cell["k"], "k", line)
        batch[r] = _whole(cell["batch"], "batch", line)
        tps[r] = _number(cell["tokens_per_s"], "tokens_per_s", line)
        if k[r] < 0 or k[r] > problem.k_max:
            raise InputError(
                f"measured.k (line {line})",
                f"{k[r]} is outside 0..{problem.k_max} (the problem's search.k.max)",
            )
        if (k[r] == 0) != (not names):
            raise InputError(
                f"measured.k (line {line})",
                "k = 0 (no speculation) goes with an empty drafters cell, k > 0 with drafters",
            )
        if len(names) > (problem.m_max or problem.n):
            raise InputError(
                f"measured.drafters (line {line})",
                f"{len(names)} drafters exceed the problem's search.m.max ({problem.m_max})",
            )
        if batch[r] < 1:
            raise InputError(f"measured.batch (line {line})", f"{batch[r]} is not a batch size")
        if tps[r] <= 0:
            raise InputError(f"measured.tokens_per_s (line {line})", "must be > 0")
        text_acc = cell.get("mean_accepted", "")
        if text_acc:
            a = _number(text_acc, "mean_accepted", line)
            if not 1.0 <= a <= k[r] + 1 + 1e-9:
                raise InputError(
                    f"measured.mean_accepted (line {line})",
                    f"{a} is outside [1, k + 1] = [1, {k[r] + 1}] (tokens per step, "
                    "the verifier's own included)",
                )
            acc[r] = a
    return Measured(members, k, batch, tps, acc, lines)


@dataclass
class StepModel:
    """Fitted step-time model (module docstring); every time in ms.

    ``verify_fixed`` ``v0``, ``verify_per_seq`` ``v1``, ``compute_per_token`` ``c``,
    ``overhead``; ``draft_fixed``, ``draft_per_seq`` ``(N,)`` (0 for drafters not fitted);
    ``fitted`` ``(N,)`` bool: drafters the rows measured; ``drafting``: ``sequential``
    or ``parallel``.
    """

    verify_fixed: float
    verify_per_seq: float
    compute_per_token: float
    overhead: float
    draft_fixed: np.ndarray
    draft_per_seq: np.ndarray
    fitted: np.ndarray
    drafting: str = "sequential"

    def verify_ms(self, batch: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """``verify(b, t)``, broadcast over ``batch`` and ``tokens``."""
        b = np.asarray(batch, float)
        t = np.asarray(tokens, float)
        return np.maximum(
            self.verify_fixed + self.verify_per_seq * b, self.compute_per_token * b * t
        )

    def draft_ms(self, batch: np.ndarray) -> np.ndarray:
        """``draft_i(b)`` for every drafter: ``(len(batch), N)``."""
        b = np.asarray(batch, float)[:, None]
        return self.draft_fixed[None, :] + self.draft_per_seq[None, :] * b

    def step_ms(self, members: np.ndarray, k: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Step time of each row: ``members (R, N)``, ``k (R,)``, ``batch (R,)`` → ``(R,)``."""
        members = np.asarray(members, bool)
        k = np.asarray(k, float)
        m = members.sum(axis=1)
        per_token = drafting_pass(self.draft_ms(batch), members, self.drafting)
        spec = k > 0
        return self.verify_ms(batch, m * k + 1) + k * per_token + np.where(spec, self.overhead, 0.0)


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

    def unpack(self, x: np.ndarray, n: int, drafting: str) -> StepModel:
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
        return StepModel(float(v0), float(v1), float(c), float(o), d0, d1, fitted, drafting)


def _layout(data: Measured, names: tuple[str, ...]) -> _Layout:
    notes: list[str] = []
    several_batches = np.unique(data.batch).size > 1
    spec = data.k > 0
    used = np.flatnonzero(data.members[spec].any(axis=0)) if spec.any() else np.array([], int)
    if not several_batches:
        notes.append(
            f"one batch size measured ({int(data.batch[0])}): the batch slopes are not fitted "
            "and the calibrated file holds that batch size only"
        )
    if not spec.any():
        notes.append("no speculative row: only the verifier's plain decoding step is fitted")
    bare = sorted(set(data.batch.tolist()) - set(data.batch[~spec].tolist()))
    if spec.any() and bare:
        notes.append(
            f"no plain-decoding row (k = 0) at batch {', '.join(map(str, bare))}: the baseline "
            "there (speedup, where speculation stops paying) is the model's reading of the "
            "speculative rows, not a measurement"
        )
    elif several_batches:
        lo, hi = int(data.batch[spec].min()), int(data.batch[spec].max())
        if lo > data.batch.min() or hi < data.batch.max():
            notes.append(
                f"speculative rows span batch {lo}..{hi} of the measured "
                f"{int(data.batch.min())}..{int(data.batch.max())}: speculative step times "
                "outside that span rest on the model's form alone"
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
                f"{names[i]}'s speculative rows are at batch {int(at[0])} only: the batch slope "
                "of its draft time is not determined and is fixed at 0 (the same draft time at "
                "every batch size)"
            )
    return _Layout(several_batches, bool(spec.any()), used, np.asarray(sloped, np.int64), notes)


def fit_step_model(
    problem: Problem, data: Measured, step_ms: np.ndarray
) -> tuple[StepModel, list[str]]:
    """Least-squares fit of the step-time model to measured step times ``(R,)`` ms.

    Returns the model and notes on what the rows could not determine.
    """
    from scipy.optimize import least_squares, nnls

    layout = _layout(data, problem.names)
    n = problem.n
    b = data.batch.astype(float)
    k = data.k.astype(float)
    spec = (k > 0).astype(float)
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
    x_lin[keep], _ = nnls(a[:, keep], np.ones_like(step_ms))

    def residuals(x: np.ndarray) -> np.ndarray:
        model = layout.unpack(x, n, problem.drafting)
        return model.step_ms(data.members, data.k, data.batch) / step_ms - 1.0

    m = data.members.sum(axis=1)
    heavy = b * (m * k + 1)
    starts = [x_lin.copy()]
    start = x_lin.copy()
    start[c_index] = float(np.min(step_ms / heavy))
    starts.append(start)
    best = None
    for x0 in starts:
        res = least_squares(
            residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale="jac", max_nfev=2000
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    return layout.unpack(best.x, n, problem.drafting), layout.notes


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


@dataclass
class Calibration:
    """Result of :func:`calibrate`: the model, the rows and their errors.

    ``expected (R,)`` tokens per step used per row, ``measured_step (R,)`` and
    ``predicted_step (R,)`` ms, ``predicted_tps (R,)`` tokens/s, ``error_pct (R,)``
    ``100 · (predicted / measured − 1)`` of tokens/s, ``held_out (R,)`` bool.
    ``reported``: the rows the summary covers (held-out rows under ``--holdout``).
    """

    model: StepModel
    data: Measured
    expected: np.ndarray
    measured_step: np.ndarray
    predicted_step: np.ndarray
    predicted_tps: np.ndarray
    error_pct: np.ndarray
    held_out: np.ndarray
    notes: list[str]

    @property
    def reported(self) -> np.ndarray:
        return self.held_out if self.held_out.any() else np.ones_like(self.held_out)

    @property
    def median_abs_error_pct(self) -> float:
        return float(np.median(np.abs(self.error_pct[self.reported])))

    @property
    def max_abs_error_pct(self) -> float:
        return float(np.max(np.abs(self.error_pct[self.reported])))


def calibrate(
    problem: Problem, data: Measured, holdout: float | None = None, seed: int = 0
) -> Calibration:
    """Convert rows to step times, fit the step-time model, predict every row."""
    measured = data.members[data.k > 0].any(axis=0)
    if not measured.all():
        name = problem.names[int(np.flatnonzero(~measured)[0])]
        raise InputError(
            "measured.drafters",
            f"no speculative row measures {name!r}: the calibrated serving model needs a draft "
            "time for every drafter of the problem (measure it, or leave it out of the problem)",
        )
    given = ~np.isnan(data.mean_accepted)
    e = bonus_expected(problem, data.members, data.k)
    e = np.where(given, data.mean_accepted, e)
    step = 1000.0 * data.batch * e / data.tokens_per_s
    held = np.zeros(len(data), bool)
    notes: list[str] = []
    if holdout is not None:
        if not 0.0 < holdout < 1.0:
            raise ParameterError("holdout", f"{holdout} is not a fraction in (0, 1)")
        held = holdout_mask(data, holdout, seed)
        if not held.any():
            raise ParameterError(
                "holdout",
                f"no row can be held out of {len(data)} (each drafter set keeps one row "
                "and at least two rows are fitted)",
            )
    fit = ~held
    model, fit_notes = fit_step_model(problem, data.take(fit), step[fit])
    notes += fit_notes
    unfitted = data.members[held].any(axis=0) & ~model.fitted
    if unfitted.any():  # cannot happen by construction of the holdout; guard anyway
        raise ParameterError("holdout", "a held-out row's drafter has no fitted row")
    predicted = model.step_ms(data.members, data.k, data.batch)
    predicted_tps = tokens_per_s(e, predicted, data.batch)
    error = 100.0 * (predicted_tps / data.tokens_per_s - 1.0)
    return Calibration(model, data, e, step, predicted, predicted_tps, error, held, notes)


def serving_section(
    problem: Problem, cal: Calibration, previous: dict | None = None
) -> tuple[dict, dict[str, dict[int, float]], int]:
    """The ``serving`` section (shared format) and each fitted drafter's ``draft_ms``.

    Tables cover every measured batch size (held-out rows included) and every verified
    token count ``1..m_max·k_max + 1``, ``k_max`` the largest measured ``k``. ``previous``:
    the problem's own ``serving`` (its ``gpu_cost_per_hour`` and ``memory`` are kept).
    Returns ``(serving, draft_ms by drafter name, k_max)``.
    """
    model = cal.model
    batches = np.unique(cal.data.batch)
    k_max = max(int(cal.data.k.max()), 1)
    m_max = int(problem.m_max or problem.n)
    tokens = np.arange(1, m_max * k_max + 2)
    ms = model.verify_ms(batches[:, None], tokens[None, :])
    serving: dict = {"batch_sizes": [int(b) for b in batches]}
    for key in ("gpu_cost_per_hour", "memory"):
        if previous and previous.get(key) is not None:
            serving[key] = previous[key]
    serving["verify_ms"] = {
        "batch": [int(b) for b in batches],
        "tokens": [int(t) for t in tokens],
        "ms": [[_round(v) for v in row] for row in ms],
    }
    serving["overhead_ms"] = _round(model.overhead, floor=0.0)
    draft = model.draft_ms(batches)
    draft_ms = {
        problem.names[i]: {int(b): _round(draft[j, i]) for j, b in enumerate(batches)}
        for i in np.flatnonzero(model.fitted)
    }
    return serving, draft_ms, k_max


def _round(v: float, floor: float = MIN_MS) -> float:
    out = float(f"{float(v):.{DIGITS}g}")
    return max(out, floor)


def calibrated_problem_data(
    problem: Problem,
    cal: Calibration,
    out_path: str | Path | None,
    source: str | Path,
) -> tuple[dict, list[str]]:
    """The problem file ``P2`` as plain data: ``P`` (the file ``source``, which ``problem``
    was built from) with ``serving`` filled in.

    Everything else of ``P`` is kept as written (a pydantic dump of what the file set;
    comments are not kept). Changes, each returned as a note: ``serving`` replaced (its
    ``gpu_cost_per_hour`` and ``memory`` kept, measured ``step_ms`` tables dropped, its
    ``batch_sizes`` the measured ones), the
    fitted drafters' ``draft_ms`` set and other drafters' removed, ``search.k.max``
    lowered to the largest measured ``k``, and ``errors.outcomes`` rewritten relative to
    the new file's folder (``out_path``; ``None``: the folder of ``source``). The result is
    validated before it is returned.
    """
    from ..io.build import problem_from_spec
    from ..io.spec import load_problem, parse_problem

    spec = load_problem(source)
    base_dir = Path(source).resolve().parent
    data = spec.model_dump(mode="python", exclude_unset=True)
    notes: list[str] = []
    previous = data.get("serving")
    if previous and previous.get("step_ms"):
        notes.append(
            "serving.step_ms (measured tables) dropped: the calibrated model replaces them"
        )
    serving, draft_ms, k_max = serving_section(problem, cal, previous)
    planned = list(previous.get("batch_sizes") or []) if previous else []
    if planned and planned != serving["batch_sizes"]:
        notes.append(
            f"serving.batch_sizes {planned} replaced by the measured batch sizes "
            f"{serving['batch_sizes']}: the calibrated tables cover those"
        )
    data["serving"] = serving
    for d in data["drafters"]:
        if d["name"] in draft_ms:
            d["draft_ms"] = draft_ms[d["name"]]
        elif d.get("draft_ms"):
            del d["draft_ms"]
            notes.append(
                f"drafters.{d['name']}.draft_ms removed: not in the measured rows, its times "
                "belong to another calibration"
            )
    search = data.setdefault("search", {})
    krange = search.setdefault("k", {})
    if problem.k_max > k_max:
        krange["max"] = k_max
        if problem.k_min > k_max:
            krange["min"] = 1
        notes.append(
            f"search.k.max lowered from {problem.k_max} to {k_max}, the largest measured k "
            "(the calibrated tables do not extrapolate)"
        )
    new_dir = base_dir if out_path is None else Path(out_path).resolve().parent
    outcomes = (data.get("errors") or {}).get("outcomes")
    if outcomes and base_dir is not None:
        target = (base_dir / outcomes).resolve()
        rel = Path(os.path.relpath(target, new_dir)).as_posix()
        if rel != outcomes:
            data["errors"]["outcomes"] = rel
            notes.append(f"errors.outcomes rewritten as {rel} (relative to the new file)")
    parse_problem(data, source="out")
    problem_from_spec(parse_problem(data), base_dir=new_dir)
    return data, notes


#: The step-time model's form, as ``calibrate --json`` states it.
MODEL_FORM = {
    "verify": "max(verify_fixed_ms + verify_per_seq_ms * batch, "
    "compute_ms_per_token * batch * tokens)",
    "step": "verify(batch, m*k + 1) + k * draft(batch) + overhead_ms (k > 0)",
}


def _same(a: str | Path, b: str | Path) -> bool:
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return pa.samefile(pb)
    return pa.resolve() == pb.resolve()


def check_paths(
    measured: str | Path,
    problem: str | Path,
    out: str | Path | None,
    json: str | None = None,
) -> None:
    """Refuse outputs that would overwrite an input: ``out`` (the calibrated problem,
    ``.yaml`` or ``.yml``) and ``json`` (a document path; ``"-"`` is stdout) must be
    neither ``problem`` nor ``measured`` (nor, for ``json``, ``out``). Raises
    :class:`~allocator.exceptions.ParameterError` naming ``out`` or ``json``."""
    if out is not None:
        if Path(out).suffix.lower() not in (".yaml", ".yml"):
            raise ParameterError("out", "write the calibrated problem as .yaml or .yml")
        for name, path_ in (("--problem", problem), ("MEASURED.csv", measured)):
            if _same(out, path_):
                raise ParameterError(
                    "out", f"is the same file as {name} ({path_}); inputs are never overwritten"
                )
    if json not in (None, "-"):
        others = [("--problem", str(problem)), ("MEASURED.csv", str(measured))]
        if out is not None:
            others.append(("--out", str(out)))
        for name, other in others:
            if _same(json, other):
                raise ParameterError("json", f"is the same file as {name} ({other})")


@dataclass
class CalibrationReport:
    """``allocator calibrate``: the fit (:class:`Calibration`) and the calibrated problem.

    problem, measured, out : the paths as given (``out``: ``None`` when no file is to be
    written); holdout, seed : as asked; data : the calibrated problem file ``P2`` as plain
    data (:func:`calibrated_problem_data`); notes : the fit's, then the file's.
    """

    calibration: Calibration
    names: tuple[str, ...]
    problem: str
    measured: str
    out: str | None
    holdout: float | None
    seed: int
    data: dict
    notes: list[str]

    def text(self) -> str:
        """The calibrated problem file to write: a two-line comment, then YAML."""
        import yaml

        src = Path(self.problem).name
        header = (
            f"# {self.data['name']}: calibrated by `allocator calibrate` from "
            f"{Path(self.measured).name}\n"
            f"# and {src}; the comments of {src} are not kept.\n"
        )
        return header + yaml.safe_dump(self.data, sort_keys=False, allow_unicode=True)

    def to_dict(self) -> dict:
        """The ``calibrate --json`` document."""
        cal, names = self.calibration, self.names
        m = cal.model
        rows = []
        for r in range(len(cal.data)):
            rows.append(
                {
                    "drafters": [n for n, on in zip(names, cal.data.members[r], strict=True) if on],
                    "k": int(cal.data.k[r]),
                    "batch": int(cal.data.batch[r]),
                    "expected_accepted": float(cal.expected[r]),
                    "measured_tokens_per_s": float(cal.data.tokens_per_s[r]),
                    "predicted_tokens_per_s": float(cal.predicted_tps[r]),
                    "error_pct": float(cal.error_pct[r]),
                    "measured_step_ms": float(cal.measured_step[r]),
                    "predicted_step_ms": float(cal.predicted_step[r]),
                    "held_out": bool(cal.held_out[r]),
                }
            )
        held = bool(cal.held_out.any())
        return {
            "problem": self.problem,
            "measured": self.measured,
            "out": self.out,
            "model": {
                **MODEL_FORM,
                "verify_fixed_ms": m.verify_fixed,
                "verify_per_seq_ms": m.verify_per_seq,
                "compute_ms_per_token": m.compute_per_token,
                "overhead_ms": m.overhead,
                "drafting": m.drafting,
                "drafters": {
                    names[i]: {
                        "fixed_ms": float(m.draft_fixed[i]),
                        "per_seq_ms": float(m.draft_per_seq[i]),
                    }
                    for i in range(len(names))
                    if m.fitted[i]
                },
            },
            "rows_fitted": int((~cal.held_out).sum()),
            "holdout": {
                "fraction": self.holdout,
                "seed": self.seed,
                "rows": int(cal.held_out.sum()),
            }
            if held
            else None,
            "evaluated_on": "held-out rows" if held else "fitted rows (in-sample)",
            "median_abs_error_pct": cal.median_abs_error_pct,
            "max_abs_error_pct": cal.max_abs_error_pct,
            "rows": rows,
            "notes": self.notes,
        }


def calibration_report(
    measured: str | Path,
    problem: str | Path,
    out: str | Path | None = None,
    holdout: float | None = None,
    seed: int = 0,
) -> CalibrationReport:
    """Read the problem file ``problem`` and the rows ``measured`` (CSV), fit, and build
    the calibrated problem for the file ``out`` (:func:`check_paths` first; ``out=None``:
    for no file, paths kept relative to ``problem``'s folder)."""
    from ..io.build import problem_from_file

    check_paths(measured, problem, out)
    prob = problem_from_file(problem)
    data = read_measured(measured, prob)
    cal = calibrate(prob, data, holdout=holdout, seed=seed)
    p2, file_notes = calibrated_problem_data(prob, cal, out, problem)
    return CalibrationReport(
        cal,
        prob.names,
        str(problem),
        str(measured),
        None if out is None else str(out),
        holdout,
        seed,
        p2,
        cal.notes + file_notes,
    )
