"""Measured rows: CSV files and the engines' benchmark files read into :class:`Measured`,
and each row's step time (docs/design.md §8.7).

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
  (:func:`~allocator.calibration.steady_state.steady_state`: batch by Little's law, context
  ``input + output/2``, the prefill that shared the steps, ``E`` the engine's acceptance
  length). Runs at a request rate (or with a ramp-up, or varied lengths) are left out
  with a note: fitting them needs the serving simulator inside the fit, which is not
  done here. Adaptive runs (``k`` changes per round) are left out too. The drafter of a
  speculative run is the problem's only drafter, or the one named (``drafters``).

**Rows to step times** (:func:`step_times`). A step emits ``E`` tokens per sequence, so
``step_ms = 1000 · b · E / tokens_per_s``. ``E`` is the row's ``mean_accepted`` when
given; otherwise the problem's acceptance in the bonus convention
(:func:`~allocator.model.under_load.bonus_expected`). ``k = 0`` is ``E = 1``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.problem import Problem
from ..estimate.bench_files import STEADY, read_bench_files
from ..exceptions import InputError, ParameterError
from ..io.inputs import MAX_LOG_BYTES, read_input_text, shown_paths
from ..model.steptime import StepInputs
from ..model.under_load import bonus_expected
from .steady_state import steady_state

__all__ = [
    "MAX_BATCH",
    "MAX_CONTEXT",
    "MAX_ROWS",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "SHOWN_CHARS",
    "STEP_RANGE",
    "Measured",
    "concat",
    "quoted",
    "read_inputs",
    "read_measured",
    "step_times",
]

REQUIRED_COLUMNS = ("drafters", "k", "batch", "tokens_per_s")
OPTIONAL_COLUMNS = ("mean_accepted", "context")
#: Most measured rows one calibration takes (all files together).
MAX_ROWS = 10_000
#: Largest batch size and context a row may give.
MAX_BATCH = 10**9
MAX_CONTEXT = 10**9
#: A row's step time must lie in this range, ms (``1000 · b · E / tokens_per_s``).
STEP_RANGE = (1e-6, 1e9)


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
            f"measured.{column} (line {line})", f"{quoted(text)} is not a number"
        ) from None
    if not math.isfinite(v):
        raise InputError(
            f"measured.{column} (line {line})", f"{quoted(text)} is not a finite number"
        )
    return v


def _whole(text: str, column: str, line: int, lo: int, hi: int, what: str) -> int:
    v = _number(text, column, line)
    if v != int(v):
        raise InputError(
            f"measured.{column} (line {line})", f"{quoted(text)} is not a whole number"
        )
    if not lo <= v <= hi:
        raise InputError(f"measured.{column} (line {line})", f"{quoted(text)} {what}")
    return int(v)


#: A column name a field path may carry: short, of plain characters.
_SHOWN = re.compile(r"^[\w .+\-/]{1,40}$")
#: Longest cell a message quotes (escaped); longer ones are described, never echoed.
SHOWN_CHARS = 40


def quoted(text: str) -> str:
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


def read_measured(
    path: str | Path, problem: Problem, text: str | None = None, shown: str | None = None
) -> Measured:
    """Read a measured CSV (columns :data:`REQUIRED_COLUMNS`, optional ``mean_accepted``
    and ``context``).

    Lines starting with ``#`` are comments (a bundled file states its source there).
    ``drafters``: names joined by ``+``, empty for no speculation (then ``k = 0``).
    Every bad cell is an :class:`InputError` naming the column and the line; the file is
    read through :func:`allocator.io.inputs.read_input_text` (a regular file of text,
    within the size limit), and at most :data:`MAX_ROWS` rows are taken. ``shown``: how
    the rows' sources name the file (default its name; :func:`~allocator.io.inputs.shown_paths`).
    """

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
            f"missing column in {p} (needed: {', '.join(REQUIRED_COLUMNS)}; optional: "
            f"{', '.join(OPTIONAL_COLUMNS)}; the header has {len(header)} column(s); a "
            "measured file is a CSV of those columns, or an engine's benchmark JSON)",
        )
    unknown = [(i, c) for i, c in enumerate(header) if c not in known]
    if unknown:
        i, c = unknown[0]
        where = f"measured.{c}" if _SHOWN.match(c) else f"measured (column {i + 1})"
        raise InputError(where, f"unknown column in {p} (known: {', '.join(known)})")
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
                    f"unknown drafter {quoted(name)} (the problem has {', '.join(problem.names)})",
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
    sources = tuple(f"{shown or p.name} line {int(x)}" for x in lines)
    return Measured(
        members, k, batch, tps, acc, lines, ctx, np.zeros(n_rows), sources, "context" in col
    )


# ---------------------------------------------------------------- benchmark files
def _bench_rows(
    paths: Sequence[Path], problem: Problem, drafter: str | None
) -> tuple[Measured | None, list[str]]:
    """The steady-state runs of benchmark files as rows, and notes on the runs left out."""

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
            "concurrency with fixed lengths have a steady state; runs at a request rate are "
            "fitted through the serving simulator in a call of their own (give them alone, "
            "with this calibrated file as --problem)"
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
                f"{quoted(drafter)} is not a drafter of the problem ({', '.join(problem.names)})",
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

    if not paths:
        raise ParameterError("measured", "give at least one file of measured rows")
    parts: list[Measured] = []
    notes: list[str] = []
    bench: list[Path] = []
    for p, shown in zip(map(Path, paths), shown_paths(paths), strict=True):
        text = read_input_text(p, "measured", MAX_LOG_BYTES)
        if text.lstrip().startswith("{"):  # a benchmark result (JSON, or one per line)
            bench.append(p)
        else:
            parts.append(read_measured(p, problem, text, shown))
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


def step_times(problem: Problem, data: Measured) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per step ``E`` and measured step ms of every row ``(R,)`` each (module
    docstring, "Rows to step times")."""
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
