"""Calibration: a step-time predictor fitted to measured end-to-end throughput.

The model, the fit and their reasons: docs/design.md §8.7 (today's form) and §8.12 (the
roofline).

**Input.** Rows measured on one deployment, from any mix of

- CSV files (columns ``drafters``, ``k``, ``batch``, ``tokens_per_s``, optional
  ``mean_accepted`` and ``context``): each row a configuration (``drafters``, ``k``), a
  batch size ``b`` (concurrent sequences), the aggregate output rate ``tokens_per_s`` over
  the batch, optionally the measured tokens per step ``mean_accepted`` (the bonus
  convention: accepted drafted tokens plus the verifier's own, as vLLM's and SGLang's
  "acceptance length") and the tokens in each sequence's KV cache ``context``;
- the engines' benchmark files (``vllm bench serve --save-result`` JSON, SGLang
  ``bench_serving`` output; :mod:`allocator.estimate.bench_files`): a closed-loop run at a
  fixed concurrency with fixed lengths is one row by the steady-state relation
  (:func:`~allocator.estimate.bench_files.steady_state`: batch by Little's law, context
  ``input + output/2``, the prefill that shared the steps, ``E`` the engine's acceptance
  length). Runs at a request rate (or with a ramp-up, or varied lengths) are left out
  with a note: fitting them needs the serving simulator inside the fit, which is not
  done here. Adaptive runs (``k`` changes per round) are left out too. The drafter of a
  speculative run is the problem's only drafter, or the one named (``drafters``).

**Rows to step times.** A step emits ``E`` tokens per sequence, so
``step_ms = 1000 · b · E / tokens_per_s``. ``E`` is the row's ``mean_accepted`` when
given; otherwise the problem's acceptance in the bonus convention
(:func:`~allocator.model.under_load.bonus_expected`). ``k = 0`` is ``E = 1``.

**Two forms**, both :class:`~allocator.model.steptime.RooflinePredictor` s (the step-time
contract; nothing here computes a step time):

- *today's* (no ``serving.hardware``/``serving.model``): ``max(v0 + v1·b, c·b·t) +
  k·Σ_i (d0_i + d1_i·b) + overhead`` (``t = m·k + 1``; ``max_i`` under parallel
  drafting), :meth:`RooflinePredictor.from_linear`, fitted as it always was (below) and
  written as the ``verify_ms`` component model;
- the *roofline from specs* (``serving.hardware`` and ``serving.model`` given): the
  efficiency factors (``mem_eff``, ``compute_eff``, ``fixed_ms``, ``seq_ms``,
  ``overhead_ms``) and each drafter's ``fixed_ms``/``seq_ms`` fitted by
  :func:`~allocator.model.steptime.roofline.fit_roofline`, with the rows' contexts and
  prefill, and written as ``serving.roofline``.

**Today's fit.** :func:`scipy.optimize.least_squares` on relative residuals
``predicted / measured − 1`` (so every row counts by its percentage error, as
reported), all parameters bounded below by 0, started from a non-negative linear fit
(:func:`scipy.optimize.nnls`, compute term left out) and from that start with the
compute term touching the most compute-heavy row; the lower cost wins. Parameters the
rows cannot determine are fixed at 0 and said so in ``notes``: the batch slopes (``v1``
and every ``d1_i``) with one batch size measured, a drafter's ``d1_i`` when its
speculative rows are at one batch size, ``overhead`` without a speculative row. When no
drafter is measured at two ``k`` or more, draft cost and overhead are not separable (a
note says so); predictions at the measured points are unaffected.

**Refused.** Rows without a plain-decoding (``k = 0``) row: the verifier's plain step and
speculation's per-step overhead cannot be told apart (the fit would put the forward
pass into the overhead and write a made-up baseline); such a fit is refused, naming what
to measure.

**Parameters and intervals.** Every parameter is reported with its value, its standard
error from the fit's Jacobian (``s²·(JᵀJ)⁻¹``) and a 95% interval (Student's ``t`` on the
residual degrees of freedom, clipped at the lower bound); a parameter the rows cannot
determine (:func:`~allocator.model.steptime.roofline.undetermined`, a flat direction of
the Jacobian, or a standard error above its value) is reported as undetermined, with no
value. In the file written by the roofline form an undetermined factor is not written
(the default, or the value the input file gave, stays).

**Output.** Today's form: the problem's ``serving`` section with ``verify_ms`` (the fitted
verifier at every measured batch size and every integer token count ``1..m_max·k_max +
1``), each fitted drafter's ``draft_ms`` at the measured batch sizes, and
``overhead_ms``, reproducing the fitted step times at every measured batch size and
every ``k`` up to ``k_max``, to the 6 significant digits written (a draft time fitted
below :data:`MIN_MS` is written as :data:`MIN_MS`, the format needing it positive).
Batch sizes from benchmark runs (Little's law gives fractions) are written at the nearest
whole batch size. Both forms record ``serving.calibrated_from``: the measured batch
sizes, ``k``, contexts and the speculative rows' batch sizes, so later commands note
when they plan outside them.

**Holdout.** ``FRACTION`` (with ``seed``) holds out a seeded random fraction of the rows
(never the last row of a drafter set, so every drafter stays fitted), fits on the rest,
and reports the error on the held-out rows only; that fit is written. ``by-k`` and
``by-batch`` hold out every row at one ``k`` (one batch size) in turn, fit the others and
predict the held-out rows; a group whose step times the other rows cannot determine (no
``k = 0`` row left, a drafter left without a row, a parameter it needs left flat) is
counted as not predictable, not reported. The file written is then the fit of every row.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.problem import Problem
from ..exceptions import InputError, ParameterError
from ..model.steptime import RooflinePredictor, StepInputs
from ..model.steptime.roofline import fit_roofline, identify, log_jacobian
from ..model.under_load import bonus_expected, tokens_per_s

__all__ = [
    "GROUPS",
    "MAX_ROWS",
    "MAX_SEED",
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
    "parse_holdout",
    "read_inputs",
    "read_measured",
    "serving_section",
]

REQUIRED_COLUMNS = ("drafters", "k", "batch", "tokens_per_s")
OPTIONAL_COLUMNS = ("mean_accepted", "context")
#: Smallest time written for a fitted drafter's draft_ms (the format needs > 0), ms.
MIN_MS = 1e-4
DIGITS = 6
#: Most measured rows one calibration takes (all files together).
MAX_ROWS = 10_000
#: Largest batch size and context a row may give.
MAX_BATCH = 10**9
MAX_CONTEXT = 10**9
#: A row's step time must lie in this range, ms (``1000 · b · E / tokens_per_s``).
STEP_RANGE = (1e-6, 1e9)
#: Largest seed (non-negative 63-bit integers, as every seeded command).
MAX_SEED = 2**63 - 1
#: The leave-one-group-out schemes of ``--holdout``.
GROUPS = ("by-k", "by-batch")


@dataclass(frozen=True)
class Measured:
    """Measured rows, ``R`` of them, as arrays.

    ``members (R, N)`` bool over the problem's drafters; ``k (R,)`` int; ``batch (R,)``
    float (whole for CSV rows; a benchmark run's Little's-law mean); ``tokens_per_s (R,)``
    aggregate output tokens/s over the batch; ``mean_accepted (R,)`` tokens per step per
    sequence (bonus convention), NaN where not given; ``lines (R,)`` the file's line
    numbers (0 for a benchmark run), for messages; ``context (R,)`` tokens in each
    sequence's KV cache (0: not given), ``prefill (R,)`` prompt tokens prefilled per step
    (benchmark runs), ``sources (R,)`` where each row comes from; ``has_context``: some
    row gives its context.
    """

    members: np.ndarray
    k: np.ndarray
    batch: np.ndarray
    tokens_per_s: np.ndarray
    mean_accepted: np.ndarray
    lines: np.ndarray
    context: np.ndarray | None = None
    prefill: np.ndarray | None = None
    sources: tuple[str, ...] = ()
    has_context: bool = False

    def __post_init__(self) -> None:
        n = int(self.k.shape[0])
        if self.context is None:
            object.__setattr__(self, "context", np.zeros(n))
        if self.prefill is None:
            object.__setattr__(self, "prefill", np.zeros(n))
        if not self.sources:
            object.__setattr__(self, "sources", tuple(f"line {int(x)}" for x in self.lines))

    def __len__(self) -> int:
        return int(self.k.shape[0])

    @property
    def ctx(self) -> np.ndarray:
        assert self.context is not None
        return self.context

    @property
    def pre(self) -> np.ndarray:
        assert self.prefill is not None
        return self.prefill

    def take(self, rows: np.ndarray) -> Measured:
        """The rows selected by a bool mask or index array."""
        idx = np.arange(len(self))[rows]
        return Measured(
            self.members[rows],
            self.k[rows],
            self.batch[rows],
            self.tokens_per_s[rows],
            self.mean_accepted[rows],
            self.lines[rows],
            self.ctx[rows],
            self.pre[rows],
            tuple(self.sources[i] for i in idx),
            self.has_context,
        )

    def inputs(self, context: bool = True, prefill: bool = True) -> StepInputs:
        """The rows as the step-time contract's inputs (a chain of ``m·k + 1`` verified
        tokens); ``context``/``prefill``: pass the rows' own (else 0)."""
        m = self.members.sum(axis=1)
        n = len(self)
        return StepInputs(
            self.members.copy(),
            self.k.astype(np.int64),
            (m * self.k + 1).astype(np.int64),
            self.batch.astype(float),
            self.ctx.astype(float) if context else np.zeros(n),
            self.pre.astype(float) if prefill else np.zeros(n),
        )


def concat(parts: Sequence[Measured]) -> Measured:
    """Rows of several inputs, in order."""
    return Measured(
        np.concatenate([p.members for p in parts]),
        np.concatenate([p.k for p in parts]),
        np.concatenate([p.batch for p in parts]),
        np.concatenate([p.tokens_per_s for p in parts]),
        np.concatenate([p.mean_accepted for p in parts]),
        np.concatenate([p.lines for p in parts]),
        np.concatenate([p.ctx for p in parts]),
        np.concatenate([p.pre for p in parts]),
        tuple(s for p in parts for s in p.sources),
        any(p.has_context for p in parts),
    )


# ---------------------------------------------------------------- reading CSV rows
def _number(text: str, column: str, line: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(
            f"measured.{column} (line {line})", f"{_shown(text)} is not a number"
        ) from None
    if not math.isfinite(v):
        raise InputError(
            f"measured.{column} (line {line})", f"{_shown(text)} is not a finite number"
        )
    return v


def _whole(text: str, column: str, line: int, lo: int, hi: int, what: str) -> int:
    v = _number(text, column, line)
    if v != int(v):
        raise InputError(
            f"measured.{column} (line {line})", f"{_shown(text)} is not a whole number"
        )
    if not lo <= v <= hi:
        raise InputError(f"measured.{column} (line {line})", f"{_shown(text)} {what}")
    return int(v)


#: A column name a field path may carry: short, of plain characters.
_SHOWN = re.compile(r"^[\w .+\-/]{1,40}$")
#: Longest cell a message quotes (escaped); longer ones are described, never echoed.
SHOWN_CHARS = 40


def _shown(text: str) -> str:
    """A cell as a message quotes it: escaped (``repr``) when short, else only its length,
    so that a file that is not a CSV (``/proc/self/environ``) is never echoed."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"(a {len(text):,}-character cell, not shown)"


def _rows_of(text: str, name: str) -> list[tuple[int, list[str]]]:
    """``(line number, cells)`` of every row that is not a comment (``#``) or blank, read
    by the csv module over the whole text so that a quoted cell may hold a newline."""
    kept: list[str] = []
    numbers: list[int] = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            kept.append(line)
            numbers.append(i)
    reader = csv.reader(io.StringIO("\n".join(kept)))
    out: list[tuple[int, list[str]]] = []
    try:
        done = 0  # lines read before this row (a quoted cell may span several)
        for cells in reader:
            start = numbers[min(done, len(numbers) - 1)]
            done = reader.line_num
            out.append((start, cells))
            if len(out) > MAX_ROWS + 1:
                raise InputError(
                    "measured", f"{name} has more than {MAX_ROWS:,} rows (the limit of one fit)"
                )
    except csv.Error as exc:
        raise InputError("measured", f"{name} is not a CSV: {exc}") from None
    return out


def read_measured(path: str | Path, problem: Problem, text: str | None = None) -> Measured:
    """Read a measured CSV (columns :data:`REQUIRED_COLUMNS`, optional ``mean_accepted``
    and ``context``).

    Lines starting with ``#`` are comments (a bundled file states its source there).
    ``drafters``: names joined by ``+``, empty for no speculation (then ``k = 0``).
    Every bad cell is an :class:`InputError` naming the column and the line; the file is
    read through :func:`allocator.io.inputs.read_input_text` (a regular file of text,
    within the size limit), and at most :data:`MAX_ROWS` rows are taken.
    """
    from ..io.inputs import MAX_LOG_BYTES, read_input_text

    p = Path(path)
    if text is None:
        text = read_input_text(p, "measured", MAX_LOG_BYTES)
    if "\x00" in text:
        raise InputError("measured", f"{p} holds NUL bytes: not a CSV text file")
    rows = _rows_of(text, str(p))
    if not rows:
        raise InputError("measured", f"{p} has no header and no rows")
    header = [h.strip() for h in rows[0][1]]
    known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"measured.{missing[0]}",
            f"missing column (needed: {', '.join(REQUIRED_COLUMNS)}; optional: "
            f"{', '.join(OPTIONAL_COLUMNS)}; the header has {len(header)} column(s))",
        )
    unknown = [(i, c) for i, c in enumerate(header) if c not in known]
    if unknown:
        i, c = unknown[0]
        where = f"measured.{c}" if _SHOWN.match(c) else f"measured (column {i + 1})"
        raise InputError(where, f"unknown column (known: {', '.join(known)})")
    if len(set(header)) != len(header):
        raise InputError("measured", "a column is named twice")
    col = {c: header.index(c) for c in header}
    body = rows[1:]
    if not body:
        raise InputError("measured", f"{p} has a header but no rows")
    if len(body) > MAX_ROWS:
        raise InputError("measured", f"{p} has more than {MAX_ROWS:,} rows (the limit of one fit)")
    index = {n: i for i, n in enumerate(problem.names)}
    n_rows = len(body)
    members = np.zeros((n_rows, problem.n), bool)
    k = np.zeros(n_rows, np.int64)
    batch = np.zeros(n_rows)
    tps = np.zeros(n_rows)
    acc = np.full(n_rows, np.nan)
    ctx = np.zeros(n_rows)
    lines = np.array([line for line, _ in body], np.int64)
    for r, (line, cells) in enumerate(body):
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
                    f"unknown drafter {_shown(name)} (the problem has {', '.join(problem.names)})",
                )
            if members[r, index[name]]:
                raise InputError(f"measured.drafters (line {line})", f"{name!r} named twice")
            members[r, index[name]] = True
        k[r] = _whole(
            cell["k"],
            "k",
            line,
            0,
            problem.k_max,
            f"is outside 0..{problem.k_max} (the problem's search.k.max)",
        )
        batch[r] = _whole(
            cell["batch"], "batch", line, 1, MAX_BATCH, f"is not a batch size (1..{MAX_BATCH:,})"
        )
        tps[r] = _number(cell["tokens_per_s"], "tokens_per_s", line)
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
        text_ctx = cell.get("context", "")
        if text_ctx:
            tokens = _number(text_ctx, "context", line)
            if not 0 <= tokens <= MAX_CONTEXT:
                raise InputError(
                    f"measured.context (line {line})",
                    f"{tokens:g} is not a number of tokens (0..{MAX_CONTEXT:,})",
                )
            ctx[r] = tokens
    sources = tuple(f"{p.name} line {int(x)}" for x in lines)
    return Measured(
        members, k, batch, tps, acc, lines, ctx, np.zeros(n_rows), sources, "context" in col
    )


# ---------------------------------------------------------------- benchmark files
def _bench_rows(
    paths: Sequence[Path], problem: Problem, drafter: str | None
) -> tuple[Measured | None, list[str]]:
    """The steady-state runs of benchmark files as rows, and notes on the runs left out."""
    from .bench_files import STEADY, read_bench_files, steady_state

    name = _drafter_name(problem, drafter)
    runs = read_bench_files(paths, drafter=name)
    serving = problem.serving
    if serving is not None and serving.hardware is not None:
        gpu = serving.hardware.gpu.name
        for run in runs:
            if run.hardware is not None and run.hardware.strip().lower() != gpu.lower():
                raise InputError(
                    run.source,
                    f"hardware {run.hardware!r}, but the problem's serving.hardware is "
                    f"{gpu!r}: one calibration is of one deployment",
                )
            tp = run.tensor_parallel
            if tp is not None and tp != serving.hardware.count:
                raise InputError(
                    run.source,
                    f"tensor-parallel size {tp}, but the problem's serving.hardware.count is "
                    f"{serving.hardware.count}",
                )
    notes: list[str] = []
    rate = [r for r in runs if r.kind != STEADY]
    if rate:
        notes.append(
            f"{len(rate)} benchmark run(s) at a request rate, with a ramp-up or with varied "
            f"lengths left out ({', '.join(r.source for r in rate[:3])}"
            f"{', ...' if len(rate) > 3 else ''}): only closed-loop runs at a fixed "
            "concurrency with fixed lengths have a steady state; the others would need the "
            "serving simulator inside the fit, which calibrate does not run"
        )
    adaptive = [r for r in runs if r.kind == STEADY and r.adaptive]
    if adaptive:
        notes.append(f"{len(adaptive)} adaptive run(s) left out: k changes from round to round")
    trees = [r for r in runs if r.kind == STEADY and not r.adaptive and (r.topk or 1) > 1]
    if trees:
        notes.append(
            f"{len(trees)} token-tree run(s) (top-k > 1) left out: the rows fitted are chains"
        )
    keep = [r for r in runs if r.kind == STEADY and not r.adaptive and (r.topk or 1) <= 1]
    if not keep:
        return None, notes
    if len(keep) > MAX_ROWS:
        raise InputError("FILE", f"more than {MAX_ROWS:,} runs (the limit of one fit)")
    n = len(keep)
    members = np.zeros((n, problem.n), bool)
    k = np.zeros(n, np.int64)
    batch = np.zeros(n)
    tps = np.zeros(n)
    acc = np.full(n, np.nan)
    ctx = np.zeros(n)
    pre = np.zeros(n)
    short = []
    for i, run in enumerate(keep):
        s = steady_state(run)
        if run.k > problem.k_max:
            raise InputError(
                run.source, f"k = {run.k} is past the problem's search.k.max ({problem.k_max})"
            )
        if run.k > 0:
            if name is None:
                raise ParameterError(
                    "drafters",
                    f"the problem has {problem.n} drafters: name the one the speculative "
                    f"benchmark runs served ({run.source} drafts k = {run.k})",
                )
            members[i, problem.names.index(name)] = True
        k[i], batch[i], tps[i] = run.k, s.batch, s.tokens_per_s
        acc[i], ctx[i], pre[i] = s.mean_accepted, s.context, s.prefill_tokens
        if run.k > 0 and s.verified_tokens is not None and s.verified_tokens < run.k + 0.99:
            short.append(run.source)
        for note in s.notes:
            notes.append(f"{run.source}: {note}")
    if short:
        notes.append(
            f"{len(short)} run(s) drafted fewer than k tokens per round on average "
            f"({', '.join(short[:3])}): their steps are fitted as chains of k"
        )
    sources = tuple(r.source for r in keep)
    return Measured(
        members, k, batch, tps, acc, np.zeros(n, np.int64), ctx, pre, sources, True
    ), notes


def _drafter_name(problem: Problem, drafter: str | None) -> str | None:
    """The drafter of speculative benchmark runs: ``drafter``, else the problem's only one."""
    if drafter is not None:
        if drafter not in problem.names:
            raise ParameterError(
                "drafters",
                f"{_shown(drafter)} is not a drafter of the problem ({', '.join(problem.names)})",
            )
        return drafter
    if problem.n == 1:
        return problem.names[0]
    return None


def read_inputs(
    paths: Sequence[str | Path], problem: Problem, drafter: str | None = None
) -> tuple[Measured, list[str]]:
    """Every row of ``paths``: benchmark files (text starting with ``{``: one steady-state
    run, one row) and CSV files (any other text, :func:`read_measured`); the notes on
    what was left out.
    ``drafter``: the drafter of the speculative benchmark runs (default: the problem's
    only drafter; with several, a speculative run without it is refused)."""
    from ..io.inputs import MAX_LOG_BYTES, read_input_text

    if not paths:
        raise ParameterError("measured", "give at least one file of measured rows")
    parts: list[Measured] = []
    notes: list[str] = []
    bench: list[Path] = []
    for p in map(Path, paths):
        text = read_input_text(p, "measured", MAX_LOG_BYTES)
        if text.lstrip().startswith("{"):  # a benchmark result (JSON, or one per line)
            bench.append(p)
        else:
            parts.append(read_measured(p, problem, text))
    if bench:
        rows, bench_notes = _bench_rows(bench, problem, drafter)
        notes += bench_notes
        if rows is not None:
            parts.append(rows)
    if not parts:
        raise InputError("measured", "no row to fit: " + "; ".join(notes))
    data = concat(parts)
    if len(data) > MAX_ROWS:
        raise InputError("measured", f"more than {MAX_ROWS:,} rows (the limit of one fit)")
    if any(p.has_context for p in parts) and not all(p.has_context for p in parts):
        notes.append("rows without a context (CSV without a context column) are taken at 0")
    return data, notes


# ---------------------------------------------------------------- today's form
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
    docstring), its step times through the predictor."""
    from scipy.optimize import least_squares, nnls

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
    x_lin[keep], _ = nnls(a[:, keep], np.ones_like(step_ms))

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
        res = least_squares(
            residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale="jac", max_nfev=2000
        )
        if best is None or res.cost < best.cost:
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


def fit_step_model(
    problem: Problem, data: Measured, step_ms: np.ndarray
) -> tuple[StepModel, list[str]]:
    """Least-squares fit of today's form to measured step times ``(R,)`` ms.

    Returns the model and notes on what the rows could not determine.
    """
    fit = _fit_today(problem, data, step_ms)
    return fit.model, fit.notes


def _today_parameters(problem: Problem, data: Measured, fit: _TodayFit) -> list[dict]:
    """Every parameter of today's form with its standard error and 95% interval, or the
    reason the rows cannot determine it."""
    from scipy.special import stdtrit

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
    q = float(stdtrit(dof, 0.975)) if dof > 0 else float("nan")
    values = dict(zip(fit.names, fit.theta, strict=True))
    out = []
    every = ["verify_fixed_ms", "verify_per_seq_ms", "compute_ms_per_token", "overhead_ms"]
    for i in range(problem.n):
        every += [
            f"drafters.{problem.names[i]}.fixed_ms",
            f"drafters.{problem.names[i]}.per_seq_ms",
        ]
    for name in every:
        if name not in values:
            if (
                name.startswith("drafters.")
                and not model.fitted[problem.names.index(name.split(".")[1])]
            ):
                reason = "the drafter is in no speculative row"
            elif name == "verify_per_seq_ms" or name.endswith("per_seq_ms"):
                reason = "its rows are at one batch size: the batch slope is fixed at 0"
            else:
                reason = "no speculative row"
            out.append(_param(name, None, None, None, reason))
            continue
        v = float(values[name])
        if name in why:
            out.append(_param(name, None, None, None, why[name]))
            continue
        se = stderr.get(name, float("nan"))
        iv = None if not math.isfinite(se * q) else [max(0.0, v - q * se), v + q * se]
        out.append(_param(name, v, se, iv, None))
    return out


def _param(name, value, stderr, interval, reason) -> dict:
    return {
        "name": name,
        "value": value,
        "stderr": None if stderr is None or not math.isfinite(stderr) else float(stderr),
        "interval_95": interval,
        "undetermined": reason,
    }


# ---------------------------------------------------------------- the roofline from specs
def _specs_model(problem: Problem) -> RooflinePredictor:
    """The problem's roofline at its file's factors (the fit's start)."""
    from ..model.steptime import roofline_of

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
    from scipy.special import stdtrit

    base = _specs_model(problem)
    rows = data.inputs()
    fit = fit_roofline(
        base, rows, step_ms, starts=[{"mem_eff": 0.2}, {"mem_eff": 0.9, "compute_eff": 0.05}]
    )
    space = base.parameters()
    free = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    kept = len([n for n in fit.free if n not in fit.undetermined])
    dof = len(data) - kept
    q = float(stdtrit(dof, 0.975)) if dof > 0 else float("nan")
    params = []
    for name in free:
        if name in fit.undetermined:
            params.append(_param(name, None, None, None, fit.undetermined[name]))
            continue
        v = float(fit.values[name])
        se = fit.stderr.get(name, float("nan"))
        lo = space.lower[space.index(name)]
        hi = space.upper[space.index(name)]
        iv = None if not math.isfinite(se * q) else [max(lo, v - q * se), min(hi, v + q * se)]
        params.append(_param(name, v, se, iv, None))
    notes = []
    if (data.pre > 0).any():
        notes.append(
            "prefill shared the measured steps (benchmark runs under chunked prefill): the "
            "roofline's prefill term is fitted with them, at each run's mean prefill per step"
        )
    return _SpecsFit(fit.model, params, dict(fit.undetermined), notes)


# ---------------------------------------------------------------- holdout
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
                "holdout", f"{_shown(text)} is not by-k, by-batch or a fraction in (0, 1)"
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
    _, sv, vt = np.linalg.svd(jt, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv < 1e-6 * max(sv[0], 1e-300)]
    return null.size == 0 or float(np.abs(jx @ null.T).max()) < 1e-3


# ---------------------------------------------------------------- the calibration
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
    a holdout). ``parameters``: each parameter's value, standard error, 95% interval, or
    why it is undetermined. ``holdout_by``: ``"k"``/``"batch"`` for a leave-one-group-out.
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


def _step_times(problem: Problem, data: Measured) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per step and measured step ms of every row (module docstring)."""
    given = ~np.isnan(data.mean_accepted)
    e = bonus_expected(problem, data.members, data.k)
    e = np.where(given, data.mean_accepted, e)
    step = 1000.0 * data.batch * e / data.tokens_per_s
    lo, hi = STEP_RANGE
    bad = np.flatnonzero(~((step >= lo) & (step <= hi)))
    if bad.size:
        r = int(bad[0])
        raise InputError(
            f"measured.tokens_per_s ({data.sources[r]})",
            f"{data.tokens_per_s[r]:.6g} tokens/s at batch {data.batch[r]:g} is a step of "
            f"{step[r]:.3g} ms, outside [{lo:g}, {hi:g}] ms",
        )
    return e, step


def _check_seed(seed: object) -> None:
    ok = isinstance(seed, int | np.integer) and not isinstance(seed, bool)
    if not ok or not 0 <= int(seed) <= MAX_SEED:  # type: ignore[call-overload]
        raise ParameterError("seed", f"{seed} is not a seed in 0..{MAX_SEED}")


def _refuse_without_baseline(data: Measured) -> None:
    if not (data.k == 0).any():
        raise InputError(
            "measured",
            "no plain-decoding (k = 0) row: the verifier's plain step and speculation's "
            "per-step overhead cannot be told apart, so the fit would write a made-up "
            "baseline; measure speculation off at one batch size at least "
            "(allocator profile-plan lists the runs)",
        )


def _fit(problem: Problem, form: str, data: Measured, step: np.ndarray):
    """Fit ``data`` by ``form``: ``(predictor, today's fit or None, specs fit or None)``."""
    if form == "today":
        today = _fit_today(problem, data, step)
        return today.model.predictor(), today, None
    specs = _fit_specs(problem, data, step)
    return specs.model, None, specs


def _inputs_for(form: str, data: Measured) -> StepInputs:
    return data.inputs(context=form == "roofline", prefill=form == "roofline")


def calibrate(
    problem: Problem,
    data: Measured,
    holdout: float | str | None = None,
    seed: int = 0,
) -> Calibration:
    """Convert rows to step times, fit the step-time predictor, predict every row
    (module docstring: the forms, the refusals, the holdouts)."""
    holdout = parse_holdout(holdout)
    if (
        isinstance(seed, bool)
        or not isinstance(seed, int | np.integer)
        or not 0 <= seed <= MAX_SEED
    ):
        raise ParameterError("seed", f"{seed} is not a seed in 0..{MAX_SEED}")
    form = "roofline" if problem.serving is not None and problem.serving.has_roofline else "today"
    measured = np.asarray(data.members[data.k > 0].any(axis=0), bool)
    if not measured.all() and form == "today":
        name = problem.names[int(np.flatnonzero(~measured)[0])]
        raise InputError(
            "measured.drafters",
            f"no speculative row measures {name!r}: the calibrated serving model needs a draft "
            "time for every drafter of the problem (measure it, or leave it out of the problem)",
        )
    _refuse_without_baseline(data)
    e, step = _step_times(problem, data)
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
    predictor, today, specs = _fit(problem, form, data.take(fit_rows), step[fit_rows])
    notes += today.notes if today is not None else specs.notes if specs is not None else []
    if form == "roofline" and not measured.all():
        lacking = [n for i, n in enumerate(problem.names) if not measured[i]]
        notes.append(
            f"no speculative row measures {', '.join(lacking)}: its drafting time is not "
            "calibrated (its parameters are undetermined)"
        )
    if today is not None:
        unfitted = data.members[held].any(axis=0) & ~today.model.fitted
        if unfitted.any():  # cannot happen by construction of the holdout; guard anyway
            raise ParameterError("holdout", "a held-out row's drafter has no fitted row")
    x = _inputs_for(form, data)
    predicted = predictor.step_ms_of(x)
    if isinstance(holdout, str):
        by = holdout.removeprefix("by-")
        key = data.k.astype(float) if by == "k" else data.batch
        held[:] = True
        ok[:] = False
        lost: list[str] = []
        for v in np.unique(key):
            test = key == v
            train = ~test
            groups += 1
            label = f"{by} = {v:g}"
            if train.sum() < 2 or not (data.k[train] == 0).any():
                lost.append(label)
                continue
            try:
                pred_g, _, _ = _fit(problem, form, data.take(train), step[train])
            except (InputError, ValueError, np.linalg.LinAlgError):
                lost.append(label)
                continue
            xt, xx = x.take(train), x.take(test)
            if not predictable(pred_g, xt, xx, float(np.median(step[train]))):
                lost.append(label)
                continue
            predicted[test] = pred_g.step_ms_of(xx)
            ok[test] = True
        predicted[~ok] = np.nan
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
    predicted_tps = tokens_per_s(e, predicted, data.batch)
    error = 100.0 * (predicted_tps / data.tokens_per_s - 1.0)
    if today is not None:
        parameters = _today_parameters(problem, data.take(fit_rows), today)
    else:
        assert specs is not None
        parameters = specs.parameters
    return Calibration(
        today.model if today is not None else None,
        data,
        e,
        step,
        predicted,
        predicted_tps,
        error,
        held,
        notes,
        predictor=predictor,
        form=form,
        parameters=parameters,
        predictable=ok,
        holdout_by=by,
        groups=groups,
    )


# ---------------------------------------------------------------- the file written
def _table_batches(data: Measured) -> tuple[np.ndarray, list[str]]:
    """The whole batch sizes the tables are written at: the measured ones, rounded."""
    b = np.unique(np.maximum(np.rint(data.batch), 1.0))
    notes = []
    if not np.all(data.batch == np.rint(data.batch)):
        notes.append(
            "benchmark runs give fractional mean batch sizes (Little's law): the calibrated "
            f"tables are written at the nearest whole ones ({', '.join(str(int(x)) for x in b)})"
        )
    return b, notes


def serving_section(
    problem: Problem, cal: Calibration, previous: dict | None = None
) -> tuple[dict, dict[str, dict[int, float]], int]:
    """Today's form as the ``serving`` section (shared format) and each fitted drafter's
    ``draft_ms``.

    Tables cover every measured batch size (held-out rows included) and every verified
    token count ``1..m_max·k_max + 1``, ``k_max`` the largest measured ``k``. ``previous``:
    the problem's own ``serving`` (its ``gpu_cost_per_hour`` and ``memory`` are kept).
    Returns ``(serving, draft_ms by drafter name, k_max)``.
    """
    model = cal.model
    assert model is not None
    batches, _ = _table_batches(cal.data)
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


def calibrated_from(cal: Calibration) -> dict:
    """The measured domain of the fitted rows (``serving.calibrated_from``)."""
    d = cal.data.take(~cal.held_out if cal.holdout_by is None else np.ones(len(cal.data), bool))
    out: dict = {
        "batch": [float(d.batch.min()), float(d.batch.max())],
        "k": [float(d.k.min()), float(d.k.max())],
    }
    if d.has_context:
        out["context"] = [float(d.ctx.min()), float(d.ctx.max())]
    spec = d.k > 0
    if spec.any():
        out["speculative_batch"] = [float(d.batch[spec].min()), float(d.batch[spec].max())]
        out["speculative_k"] = [float(d.k[spec].min()), float(d.k[spec].max())]
    out["rows"] = len(d)
    return {k: [_round(x, 0.0) for x in v] if isinstance(v, list) else v for k, v in out.items()}


def _roofline_section(problem: Problem, cal: Calibration, previous: dict) -> tuple[dict, list[str]]:
    """The roofline form's ``serving``: the problem's, its tables dropped, the determined
    factors written in ``serving.roofline`` (an undetermined one keeps the input's)."""
    notes: list[str] = []
    serving = {k: v for k, v in previous.items() if k not in ("step_ms", "verify_ms")}
    for key in ("step_ms", "verify_ms"):
        if previous.get(key):
            notes.append(f"serving.{key} dropped: the calibrated roofline replaces it")
    old = dict(previous.get("roofline") or {})
    roof = {k: v for k, v in old.items() if k != "drafters"}
    drafters = {n: dict(v) for n, v in (old.get("drafters") or {}).items()}
    held = []
    for p in cal.parameters:
        name = p["name"]
        if name.startswith("draft."):
            _, dname, key = name.split(".", 2)
            if key not in ("fixed_ms", "seq_ms"):
                continue
            if p["value"] is None:
                held.append(name)
                continue
            drafters.setdefault(dname, {})[key] = _round(p["value"], 0.0)
        elif name in ("mem_eff", "compute_eff", "fixed_ms", "seq_ms", "overhead_ms", "p"):
            if p["value"] is None:
                held.append(name)
                continue
            lo = 1e-4 if name.endswith("_eff") else 0.0
            roof[name] = (
                min(_round(p["value"], lo), 1.0)
                if name.endswith("_eff")
                else _round(p["value"], lo)
            )
    if drafters:
        roof["drafters"] = drafters
    serving["roofline"] = roof
    if held:
        notes.append(
            "not written (the rows do not determine them; the input file's values or the "
            f"defaults stay): {', '.join(held)}"
        )
    return serving, notes


def calibrated_problem_data(
    problem: Problem,
    cal: Calibration,
    out_path: str | Path | None,
    source: str | Path,
) -> tuple[dict, list[str]]:
    """The problem file ``P2`` as plain data: ``P`` (the file ``source``, which ``problem``
    was built from) with ``serving`` filled in.

    Everything else of ``P`` is kept as written (a pydantic dump of what the file set;
    comments are not kept). Changes, each returned as a note. Today's form: ``serving``
    replaced (its ``gpu_cost_per_hour`` and ``memory`` kept, measured ``step_ms`` tables
    dropped, its ``batch_sizes`` the measured ones), the fitted drafters' ``draft_ms`` set
    and other drafters' removed, ``search.k.max`` lowered to the largest measured ``k``.
    The roofline form: ``serving.roofline`` set to the fitted factors (tables dropped,
    the fitted drafters' ``draft_ms`` removed: their pass times are in
    ``serving.roofline.drafters``). Both: ``serving.calibrated_from``, and
    ``errors.outcomes`` rewritten relative to the new file's folder (``out_path``; ``None``:
    the folder of ``source``). The result is validated before it is returned.
    """
    from ..io.build import problem_from_spec
    from ..io.spec import load_problem, parse_problem

    spec = load_problem(source)
    base_dir = Path(source).resolve().parent
    data = spec.model_dump(mode="python", exclude_unset=True)
    notes: list[str] = []
    previous = data.get("serving")
    if cal.form == "today":
        if previous and previous.get("step_ms"):
            notes.append(
                "serving.step_ms (measured tables) dropped: the calibrated model replaces them"
            )
        serving, draft_ms, k_max = serving_section(problem, cal, previous)
        notes += _table_batches(cal.data)[1]
        planned = list(previous.get("batch_sizes") or []) if previous else []
        if planned and planned != serving["batch_sizes"]:
            notes.append(
                f"serving.batch_sizes {planned} replaced by the measured batch sizes "
                f"{serving['batch_sizes']}: the calibrated tables cover those"
            )
        serving["calibrated_from"] = calibrated_from(cal)
        data["serving"] = serving
        for d in data["drafters"]:
            if d["name"] in draft_ms:
                d["draft_ms"] = draft_ms[d["name"]]
            elif d.get("draft_ms"):
                del d["draft_ms"]
                notes.append(
                    f"drafters.{d['name']}.draft_ms removed: not in the measured rows, its "
                    "times belong to another calibration"
                )
        search = data.setdefault("search", {})
        krange = search.setdefault("k", {})
        if problem.k_max > k_max:
            krange["max"] = k_max
            if problem.k_min > k_max:
                krange["min"] = 1
            notes.append(
                f"search.k.max lowered from {problem.k_max} to {k_max}, the largest measured "
                "k (the calibrated tables do not extrapolate)"
            )
    else:
        assert previous is not None
        serving, roof_notes = _roofline_section(problem, cal, previous)
        notes += roof_notes
        serving["calibrated_from"] = calibrated_from(cal)
        data["serving"] = serving
        fitted = set(serving["roofline"].get("drafters") or {})
        for d in data["drafters"]:
            if d["name"] in fitted and d.get("draft_ms"):
                del d["draft_ms"]
                notes.append(
                    f"drafters.{d['name']}.draft_ms removed: its calibrated pass times are in "
                    "serving.roofline.drafters"
                )
    new_dir = base_dir if out_path is None else Path(out_path).resolve().parent
    outcomes = (data.get("errors") or {}).get("outcomes")
    if outcomes and base_dir is not None:
        target = (base_dir / outcomes).resolve()
        rel = Path(os.path.relpath(target, new_dir)).as_posix()
        if rel != outcomes:
            data["errors"]["outcomes"] = rel
            notes.append(f"errors.outcomes rewritten as {rel} (relative to the new file)")
    if cal.form == "roofline":
        _relocate_configs(data, base_dir, new_dir)
    parse_problem(data, source="out")
    problem_from_spec(parse_problem(data), base_dir=new_dir)
    return data, notes


def _relocate_configs(data: dict, base_dir: Path, new_dir: Path) -> None:
    """``config`` paths of the architectures, relative to the new file's folder."""
    places = [data.get("serving", {}).get("model")]
    places += [d.get("architecture") for d in data.get("drafters", [])]
    for arch in places:
        if isinstance(arch, dict) and arch.get("config") and not Path(arch["config"]).is_absolute():
            target = (base_dir / arch["config"]).resolve()
            arch["config"] = Path(os.path.relpath(target, new_dir)).as_posix()


#: The step-time model's form, as ``calibrate --json`` states it (today's form).
MODEL_FORM = {
    "verify": "max(verify_fixed_ms + verify_per_seq_ms * batch, "
    "compute_ms_per_token * batch * tokens)",
    "step": "verify(batch, m*k + 1) + k * draft(batch) + overhead_ms (k > 0)",
}
#: The roofline's form, as ``calibrate --json`` states it (docs/design.md §8.12).
ROOFLINE_FORM = {
    "pass": "max([W + X*cov(n) + kv*(b*C + n)] / mem_eff + fixed_ms + seq_ms*b, "
    "[flop*n + attn*(b*t*C + P(P+1)/2)] / compute_eff), n = b*t + P",
    "step": "pass + k * draft pass + overhead_ms (speculative)",
}


def _same(a: str | Path, b: str | Path) -> bool:
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return pa.samefile(pb)
    return pa.resolve() == pb.resolve()


def check_paths(
    measured: str | Path | Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None,
    json: str | None = None,
) -> None:
    """Refuse outputs that would overwrite an input: ``out`` (the calibrated problem,
    ``.yaml`` or ``.yml``) and ``json`` (a document path; ``"-"`` is stdout) must be
    neither ``problem`` nor a measured file (nor, for ``json``, ``out``). Raises
    :class:`~allocator.exceptions.ParameterError` naming ``out`` or ``json``."""
    files = [measured] if isinstance(measured, str | Path) else list(measured)
    if out is not None:
        if Path(out).suffix.lower() not in (".yaml", ".yml"):
            raise ParameterError("out", "write the calibrated problem as .yaml or .yml")
        for name, path_ in [("--problem", problem), *(("FILE", f) for f in files)]:
            if _same(out, path_):
                raise ParameterError(
                    "out", f"is the same file as {name} ({path_}); inputs are never overwritten"
                )
    if json not in (None, "-"):
        others = [("--problem", str(problem)), *(("FILE", str(f)) for f in files)]
        if out is not None:
            others.append(("--out", str(out)))
        for name, other in others:
            if _same(json, other):
                raise ParameterError("json", f"is the same file as {name} ({other})")


@dataclass
class CalibrationReport:
    """``allocator calibrate``: the fit (:class:`Calibration`) and the calibrated problem.

    problem, measured, out : the paths as given (``measured``: one path, or a list when
    several files were read; ``out``: ``None`` when no file is to be written); holdout,
    seed : as asked; data : the calibrated problem file ``P2`` as plain data
    (:func:`calibrated_problem_data`); notes : the inputs', the fit's, then the file's.
    """

    calibration: Calibration
    names: tuple[str, ...]
    problem: str
    measured: str | list[str]
    out: str | None
    holdout: float | str | None
    seed: int
    data: dict
    notes: list[str]

    def text(self) -> str:
        """The calibrated problem file to write: a two-line comment, then YAML."""
        import yaml

        src = Path(self.problem).name
        files = [self.measured] if isinstance(self.measured, str) else self.measured
        shown = ", ".join(Path(f).name for f in files[:3]) + (", ..." if len(files) > 3 else "")
        header = (
            f"# {self.data['name']}: calibrated by `allocator calibrate` from {shown}\n"
            f"# and {src}; the comments of {src} are not kept.\n"
        )
        return header + yaml.safe_dump(self.data, sort_keys=False, allow_unicode=True)

    def to_dict(self) -> dict:
        """The ``calibrate --json`` document."""
        cal, names = self.calibration, self.names
        bench = any(not s.split(" line ")[0].lower().endswith(".csv") for s in cal.data.sources)
        rows = []
        for r in range(len(cal.data)):
            row = {
                "drafters": [n for n, on in zip(names, cal.data.members[r], strict=True) if on],
                "k": int(cal.data.k[r]),
                "batch": _json_batch(cal.data.batch[r]),
            }
            if cal.data.has_context:
                row["context"] = float(cal.data.ctx[r])
            ok = cal.predictable is None or bool(cal.predictable[r])
            row.update(
                {
                    "expected_accepted": float(cal.expected[r]),
                    "measured_tokens_per_s": float(cal.data.tokens_per_s[r]),
                    "predicted_tokens_per_s": float(cal.predicted_tps[r]) if ok else None,
                    "error_pct": float(cal.error_pct[r]) if ok else None,
                    "measured_step_ms": float(cal.measured_step[r]),
                    "predicted_step_ms": float(cal.predicted_step[r]) if ok else None,
                    "held_out": bool(cal.held_out[r]),
                }
            )
            if cal.holdout_by is not None:
                row["predictable"] = ok
            if bench:
                row["source"] = cal.data.sources[r]
            rows.append(row)
        held = bool(cal.held_out.any())
        if cal.holdout_by is not None:
            holdout = {
                "by": cal.holdout_by,
                "groups": cal.groups,
                "rows": int(cal.reported.sum()),
                "not_predictable": int((~cal.predictable).sum())
                if cal.predictable is not None
                else 0,
            }
        elif held:
            holdout = {"fraction": self.holdout, "seed": self.seed, "rows": int(cal.held_out.sum())}
        else:
            holdout = None
        doc = {
            "problem": self.problem,
            "measured": self.measured,
            "out": self.out,
            "model": self._model(),
            "rows_fitted": len(cal.data) if cal.holdout_by else int((~cal.held_out).sum()),
            "holdout": holdout,
            "evaluated_on": "held-out rows" if held else "fitted rows (in-sample)",
            "median_abs_error_pct": _finite(cal.median_abs_error_pct),
            "max_abs_error_pct": _finite(cal.max_abs_error_pct),
            "rows": rows,
            "parameters": cal.parameters,
            "calibrated_from": self.data.get("serving", {}).get("calibrated_from"),
            "notes": self.notes,
        }
        return doc

    def _model(self) -> dict:
        cal, names = self.calibration, self.names
        m = cal.model
        if m is None:
            assert cal.predictor is not None
            r = cal.predictor
            return {
                "form": "roofline",
                **ROOFLINE_FORM,
                **{
                    p["name"]: p["value"]
                    for p in cal.parameters
                    if not p["name"].startswith("draft.")
                },
                "drafting": r.drafting,
                "drafters": {
                    d.name: {
                        key: next(
                            (
                                p["value"]
                                for p in cal.parameters
                                if p["name"] == f"draft.{d.name}.{key}"
                            ),
                            None,
                        )
                        for key in ("fixed_ms", "seq_ms")
                    }
                    for d in r.drafters
                },
            }
        # a parameter the rows leave undetermined is reported with no value (null), as the
        # roofline form has it: the fit's number for it is one point of a flat direction
        undetermined = {p["name"] for p in cal.parameters if p["value"] is None}

        def value(name: str, v: float) -> float | None:
            return None if name in undetermined else float(v)

        return {
            **MODEL_FORM,
            "verify_fixed_ms": value("verify_fixed_ms", m.verify_fixed),
            "verify_per_seq_ms": value("verify_per_seq_ms", m.verify_per_seq),
            "compute_ms_per_token": value("compute_ms_per_token", m.compute_per_token),
            "overhead_ms": value("overhead_ms", m.overhead),
            "drafting": m.drafting,
            "drafters": {
                names[i]: {
                    "fixed_ms": value(f"drafters.{names[i]}.fixed_ms", m.draft_fixed[i]),
                    "per_seq_ms": value(f"drafters.{names[i]}.per_seq_ms", m.draft_per_seq[i]),
                }
                for i in range(len(names))
                if m.fitted[i]
            },
        }


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _json_batch(b: float) -> int | float:
    return int(b) if float(b).is_integer() else float(b)


def calibration_report(
    measured: str | Path | Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None = None,
    holdout: float | str | None = None,
    seed: int = 0,
    drafters: str | None = None,
) -> CalibrationReport:
    """Read the problem file ``problem`` and the rows of ``measured`` (CSV and benchmark
    files, :func:`read_inputs`), fit, and build the calibrated problem for the file
    ``out`` (:func:`check_paths` first; ``out=None``: for no file, paths kept relative to
    ``problem``'s folder). ``drafters``: the drafter of the speculative benchmark runs."""
    from ..io.build import problem_from_file

    files = [measured] if isinstance(measured, str | Path) else list(measured)
    check_paths(files, problem, out)
    holdout = parse_holdout(holdout)
    _check_seed(seed)
    prob = problem_from_file(problem)
    data, input_notes = read_inputs(files, prob, drafters)
    cal = calibrate(prob, data, holdout=holdout, seed=seed)
    p2, file_notes = calibrated_problem_data(prob, cal, out, problem)
    return CalibrationReport(
        cal,
        prob.names,
        str(problem),
        str(files[0]) if len(files) == 1 else [str(f) for f in files],
        None if out is None else str(out),
        holdout,
        seed,
        p2,
        input_notes + cal.notes + file_notes,
    )
