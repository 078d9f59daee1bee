"""Joint outcome logs: one row per verified position, one 0/1 column per drafter.

Format (CSV with a header, or JSON Lines with one object per row):

- ``round``: an identifier of the draft round; a round's rows are contiguous.
- ``position``: 1, 2, 3, … within the round, in order (position ``j`` is logged
  only when the round reached it, i.e. every earlier position was accepted).
  Without a ``round`` column, rows are taken as samples at their position in any
  order (as a harness that logs a fixed number of rows per position writes them):
  positions must then start at 1 and leave no gap.
- ``workload`` (optional): the class of traffic; constant within a round.
- every other column: one drafter, 1 when its unit at that position was correct.

Estimation. Because a row at position ``j`` exists exactly when the round
reached ``j``, the rows at position ``j`` are a sample of "every earlier unit was
accepted", and the fraction of them where drafter ``i`` is correct estimates the
conditional acceptance ``a_i(j)`` of docs/design.md §1 directly: ``successes = column sum``,
``trials = rows at j``. Positions reached by fewer than ``min_trials`` rows (30 by
default) are dropped from the end of the list, whose last value then repeats;
with the ``empirical`` error model every logged position is kept, since that model
reads the log at every position and the file's acceptance must agree with it.

Workloads: each workload's acceptance comes from its own rows; its weight is its
share of the log's rows (verified positions, a proxy for its share of generated
units).

Token trees: per-rank columns ``NAME@1``, ``NAME@2``, … (0/1: the drafter's rank-``r``
candidate at that position was the verifier's token; at most one per row) give the
drafter ``NAME`` its ``acceptance_by_rank``. ``NAME@1`` is also its chain column (a
plain ``NAME`` column beside them is refused). At position ``j`` the rows where ranks
``< r`` all failed are the trials of rank ``r`` and those where rank ``r`` then matched
its successes: ``p_r(j) = successes / trials`` with 95% Jeffreys intervals. Ranks whose
trials over all positions fall below ``min_trials`` are dropped from the end; when at
least two leading positions have ``min_trials`` trials at every kept rank the list is
written per depth (those positions, the last repeating), otherwise pooled over positions
into one list (Sequoia's positional model, docs/design.md §8.10; conditional ``p``, not
Sequoia's unconditional acceptance-rate vector:
:func:`allocator.model.token_tree.from_unconditional`).
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import InputError, ParameterError
from .base import Reader, ReadOptions, excerpt, quote
from .correlation import fit_loadings, latent_correlations, phi_correlations
from .counts import (
    MIN_TRIALS,
    DrafterCounts,
    Estimate,
    RankCounts,
    WorkloadCounts,
    read_text,
)
from .jsonl import parse_json_text

RESERVED = ("round", "position", "workload")
#: A per-rank column: ``NAME@r``.
RANK_COLUMN = re.compile(r"^(?P<name>.+)@(?P<rank>[0-9]+)$")
ERROR_MODELS = ("empirical", "factor", "independent")


def _refuse_nul(text: str, path: Path) -> None:
    """A NUL byte is no text (Python's csv reader takes it inside a cell since 3.11)."""
    at = text.find("\x00")
    if at >= 0:
        line = text.count("\n", 0, at) + 1
        raise InputError(f"{path.name} line {line}", "holds a NUL byte (\\x00): not a text log")


def read_table(path: Path) -> tuple[list[str], list[list[str]], int]:
    """Columns and rows (strings) of a CSV or JSONL file, and the line of the first row."""
    text = read_text(path)
    _refuse_nul(text, path)
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return _read_jsonl(text, path)
    reader = csv.reader(text.splitlines(), skipinitialspace=True)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError("INPUT", f"{path} is empty") from None
    rows = []
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(
                f"{path.name} line {line}", f"{len(row)} values for {len(header)} columns"
            )
        rows.append(row)
    return header, rows, 2


def _read_jsonl(text: str, path: Path) -> tuple[list[str], list[list[str]], int]:
    header: list[str] | None = None
    rows = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        # within the input limits: 5,000-digit numbers and 100,000-deep nesting were
        # tracebacks (ValueError past Python's digit limit, RecursionError)
        obj = parse_json_text(raw, f"{path.name} line {line}")
        if not isinstance(obj, dict):
            raise InputError(f"{path.name} line {line}", "each line must hold one JSON object")
        if header is None:
            header = list(obj)
        elif set(obj) != set(header):
            diff = sorted(set(header) ^ set(obj))
            raise InputError(f"{path.name} line {line}", f"columns differ from line 1: {diff}")
        row = [_jsonl_value(obj[h]) for h in header]
        if any("\x00" in v for v in row):
            raise InputError(f"{path.name} line {line}", "holds a NUL character (\\u0000)")
        rows.append(row)
    if header is None:
        raise InputError("INPUT", f"{path} is empty")
    return header, rows, 1


def _jsonl_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, dict | list):
        return json.dumps(v)[:40]  # not a cell value: refused where it is read
    return str(v)


def _fits(text: str) -> bool:
    """An integer of at most 18 digits (always within int64)."""
    s = text.strip()
    digits = s[1:] if s[:1] in ("+", "-") else s
    return digits.isdigit() and len(digits) <= 18


def _int_column(values: np.ndarray, name: str, path: Path, first_line: int) -> np.ndarray:
    bad = next((i for i, v in enumerate(values) if not _fits(str(v))), None)
    if bad is not None:
        raise InputError(
            f"{path.name} line {first_line + bad}",
            f"column {quote(name)}: {str(values[bad])[:40]!r} is not an integer of at most "
            "18 digits",
        )
    return np.array([int(v) for v in values], dtype=np.int64)


def read_outcomes(path: str | Path) -> dict:
    """Parse and check a log: ``rounds``, ``positions`` (int ``(R,)``), ``outcomes``
    (int8 ``(R, N)``), ``names``, ``workloads`` (str ``(R,)`` or ``None``)."""
    path = Path(path)
    header, rows, first = read_table(path)
    if "position" not in header:
        raise InputError(
            path.name, f"missing column(s) position (columns: {excerpt(', '.join(header))})"
        )
    if len(set(header)) != len(header):
        raise InputError(path.name, "a column name appears twice")
    names = [h for h in header if h not in RESERVED]
    if not names:
        raise InputError(path.name, "no drafter columns (one 0/1 column per drafter)")
    if not rows:
        raise InputError(path.name, "holds no rows")
    table = np.array(rows, dtype=object)
    col = {h: table[:, i] for i, h in enumerate(header)}
    positions = _int_column(col["position"], "position", path, first)
    outcomes = np.zeros((len(rows), len(names)), np.int8)
    for i, name in enumerate(names):
        v = col[name].astype(str)
        one, zero = v == "1", v == "0"
        bad = np.flatnonzero(~(one | zero))
        if bad.size:
            raise InputError(
                f"{path.name} line {first + bad[0]}",
                f"column {quote(name)}: {quote(str(v[bad[0]]))} is not 0 or 1",
            )
        outcomes[:, i] = one
    if "round" not in header:
        return _unordered(path, first, positions, outcomes, names, col)
    rounds = col["round"].astype(str)
    new_round = np.ones(len(rows), bool)
    new_round[1:] = rounds[1:] != rounds[:-1]
    expected = np.where(new_round, 1, np.concatenate(([1], positions[:-1] + 1)))
    bad = np.flatnonzero(positions != expected)
    if bad.size:
        r = bad[0]
        raise InputError(
            f"{path.name} line {first + r}",
            f"round {quote(str(rounds[r]))}: position {positions[r]} where {expected[r]} was "
            "expected (positions count 1, 2, 3, ... in order within each round)",
        )
    starts = rounds[new_round]
    if np.unique(starts).size != starts.size:
        vals, counts = np.unique(starts, return_counts=True)
        raise InputError(
            path.name,
            f"round {quote(str(vals[counts > 1][0]))} appears in two places (a round's rows "
            "must be contiguous)",
        )
    workloads = None
    if "workload" in header:
        workloads = col["workload"].astype(str)
        if np.any(workloads[~new_round] != np.roll(workloads, 1)[~new_round]):
            r = np.flatnonzero((workloads != np.roll(workloads, 1)) & ~new_round)[0]
            raise InputError(
                f"{path.name} line {first + r}",
                f"round {quote(str(rounds[r]))} changes workload within the round",
            )
    return {
        "rounds": rounds,
        "positions": positions,
        "outcomes": outcomes,
        "names": names,
        "workloads": workloads,
        "new_round": new_round,
    }


def _unordered(path, first, positions, outcomes, names, col) -> dict:
    """A log without rounds: positions from 1, no gaps, any order."""
    low = np.flatnonzero(positions < 1)
    if low.size:
        raise InputError(
            f"{path.name} line {first + low[0]}", f"position {positions[low[0]]} is below 1"
        )
    present = np.unique(positions)
    if present.size != present[-1]:
        gap = int(np.setdiff1d(np.arange(1, present[-1] + 1), present)[0])
        raise InputError(path.name, f"no rows at position {gap} (positions count from 1)")
    return {
        "rounds": None,
        "positions": positions,
        "outcomes": outcomes,
        "names": names,
        "workloads": col["workload"].astype(str) if "workload" in col else None,
        "new_round": positions == 1,
    }


def split_rank_columns(
    names: list[str], outcomes: np.ndarray, path: Path
) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """Separate ``NAME@r`` columns: the drafter names (plain columns, then each ranked
    drafter once), their chain outcomes ``(R, N)`` (``NAME@1`` for a ranked drafter), and
    each ranked drafter's ``(rows, ranks)`` 0/1 matrix."""
    ranked: dict[str, dict[int, int]] = {}
    plain: list[int] = []
    for i, n in enumerate(names):
        m = RANK_COLUMN.match(n)
        if m is None:
            plain.append(i)
        else:
            ranked.setdefault(m["name"], {})[int(m["rank"])] = i
    if not ranked:
        return names, outcomes, {}
    out_names = [names[i] for i in plain]
    cols = [outcomes[:, i] for i in plain]
    matrices: dict[str, np.ndarray] = {}
    for base, by_rank in ranked.items():
        if base in out_names:
            raise InputError(
                path.name,
                f"columns {quote(base)} and {excerpt(base)}@r: give rank columns or one column",
            )
        want = list(range(1, len(by_rank) + 1))
        if sorted(by_rank) != want:
            raise InputError(
                path.name,
                f"rank columns of {quote(base)} are {sorted(by_rank)}; they must be 1..R "
                "without gaps",
            )
        mat = outcomes[:, [by_rank[r] for r in want]]
        many = np.flatnonzero(mat.sum(axis=1) > 1)
        if many.size:
            raise InputError(
                path.name,
                f"data row {many[0] + 1}: {quote(base)} has several ranks correct; at most one "
                "candidate can be the verifier's token",
            )
        matrices[base] = mat
        out_names.append(base)
        cols.append(mat[:, 0])
    return out_names, np.stack(cols, axis=1), matrices


def rank_counts(
    matrix: np.ndarray, positions: np.ndarray, min_trials: int, name: str
) -> RankCounts:
    """Per-depth per-rank counts of one drafter (see the module docstring), trimmed."""
    rows, width = matrix.shape
    before = np.concatenate(
        [np.ones((rows, 1), np.int64), np.cumprod(1 - matrix, axis=1)[:, :-1]], axis=1
    )
    j = int(positions.max())
    idx = positions - 1
    trials = np.zeros((j, width), np.int64)
    succ = np.zeros((j, width), np.int64)
    np.add.at(trials, idx, before)
    np.add.at(succ, idx, before * matrix)
    pooled = trials.sum(axis=0)
    short = np.flatnonzero(pooled < min_trials)
    keep = int(short[0]) if short.size else width
    if keep == 0:
        raise InputError(
            f"drafter {quote(name)}",
            f"only {int(pooled[0])} row(s) for rank 1; at least {min_trials} are needed",
        )
    trials, succ = trials[:, :keep], succ[:, :keep]
    thin = np.flatnonzero((trials < min_trials).any(axis=1))
    depths = int(thin[0]) if thin.size else j
    if depths >= 2:
        return RankCounts(succ[:depths], trials[:depths])
    return RankCounts(succ.sum(axis=0)[None], trials.sum(axis=0)[None])


def _counts(names, outcomes, positions, min_trials) -> list[DrafterCounts]:
    j = int(positions.max())
    idx = positions - 1
    trials = np.bincount(idx, minlength=j)
    out = []
    for i, name in enumerate(names):
        succ = np.bincount(idx, weights=outcomes[:, i], minlength=j).astype(np.int64)
        out.append(DrafterCounts(name, succ, trials).trimmed(min_trials))
    return out


def estimate_outcomes(
    path: str | Path,
    out_path: str | Path,
    errors: str = "empirical",
    min_trials: int = MIN_TRIALS,
    convention: str = "bonus",
) -> Estimate:
    """Per-drafter per-position acceptance, error model and workloads from a log.

    ``errors``: ``empirical`` (points at the log, relative to ``out_path``'s folder),
    ``factor`` (loadings fitted to the latent correlations) or ``independent``.
    """
    if errors not in ERROR_MODELS:
        raise ParameterError("errors", f"{errors!r} is not one of {', '.join(ERROR_MODELS)}")
    path = Path(path)
    if errors == "empirical" and path.suffix.lower() != ".csv":
        raise ParameterError(
            "errors",
            f"the empirical error model reads CSV logs, and {path} is not a .csv file: "
            "convert it to CSV, or choose the factor or independent error model",
        )
    if errors == "empirical":
        # the model reads the log at every logged position, and the file's acceptance
        # must agree with it there: keep every position
        min_trials = 1
    log = read_outcomes(path)
    names, outcomes, ranks = split_rank_columns(log["names"], log["outcomes"], path)
    positions = log["positions"]
    if ranks and errors == "empirical":
        raise ParameterError(
            "errors",
            "the log has per-rank columns (NAME@r), which the empirical error model does not "
            "read: choose --errors independent or factor",
        )
    drafters = _counts(names, outcomes, positions, min_trials)
    for d in drafters:
        if d.name in ranks:
            d.ranks = rank_counts(ranks[d.name], positions, min_trials, d.name)
    fails = 1 - outcomes
    phi = phi_correlations(fails)
    latent = latent_correlations(fails, positions - 1, int(positions.max()))
    n_rounds = int(log["new_round"].sum())
    notes = [
        f"estimated from {len(positions):,} rows ({n_rounds:,} rounds) of {path.name}",
        "acceptance: successes / rows at each position; "
        + (
            "every logged position kept (the empirical model reads the log at each)"
            if errors == "empirical"
            else f"positions with fewer than {min_trials} rows dropped from the end"
        ),
        "acceptance_interval: 95% Jeffreys (Beta posterior) intervals",
    ]
    if ranks:
        notes.append(
            "acceptance_by_rank: at each position, rank r's successes over the rows where "
            "ranks < r all failed (NAME@r columns); 95% Jeffreys intervals"
        )
    if len(names) > 1:
        notes.append(
            "pairwise error correlations (phi = Pearson of error indicators; "
            "latent = Gaussian-copula r):"
        )
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                notes.append(
                    f"  {names[a]} ~ {names[b]}: phi {_fmt(phi[a, b])}, latent {_fmt(latent[a, b])}"
                )
    if errors == "empirical":
        rel = os.path.relpath(path.resolve(), Path(out_path).resolve().parent)
        err_section: dict[str, Any] | None = {
            "model": "empirical",
            "outcomes": Path(rel).as_posix(),
        }
    elif errors == "factor":
        beta = fit_loadings(latent)
        err_section = {
            "model": "factor",
            "loadings": {n: round(float(b), 6) for n, b in zip(names, beta, strict=True)},
        }
        notes.append("factor loadings: least-squares fit of beta_a * beta_b to the latent r")
    else:
        err_section = None
    workloads = []
    if log["workloads"] is not None:
        w = log["workloads"]
        labels, inverse = np.unique(w, return_inverse=True)
        for li, label in enumerate(labels):
            rows = inverse == li
            try:
                counts = _counts(names, outcomes[rows], positions[rows], min_trials)
            except InputError as exc:
                raise InputError(f"workload {quote(str(label))}", exc.message) from None
            workloads.append(WorkloadCounts(str(label), float(rows.mean()), counts))
        notes.append("workload weights: each workload's share of the log's rows")
    return Estimate(
        source="outcomes",
        drafters=drafters,
        convention=convention,
        k_max=None,
        errors=err_section,
        workloads=workloads,
        notes=notes,
        report={
            "rows": int(len(positions)),
            "rounds": n_rounds,
            "phi_correlation": _matrix(phi),
            "latent_correlation": _matrix(latent),
        },
    )


def _fmt(x: float) -> str:
    return "undefined" if not np.isfinite(x) else f"{x:+.4f}"


def _matrix(m: np.ndarray) -> list[list[float | None]]:
    return [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in m]


class OutcomesReader(Reader):
    """``--format outcomes``: joint outcome logs (module docstring)."""

    name = "outcomes"
    reads = "joint outcome logs (CSV or JSONL), one 0/1 column per drafter"
    options = ("errors", "convention")
    names_drafters = True

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        return estimate_outcomes(
            path, options.out, options.errors, options.min_trials, options.convention
        )


__all__ = [
    "OutcomesReader",
    "ERROR_MODELS",
    "RANK_COLUMN",
    "RESERVED",
    "estimate_outcomes",
    "rank_counts",
    "read_outcomes",
    "read_table",
    "split_rank_columns",
]
