"""Outcome logs named by a problem file's ``errors.outcomes``, read into the empirical
error model (docs/design.md §3.5).

The log is a CSV with one row per verified position and one 0/1 column per
drafter, named as the drafter (1: its unit was correct, 0: it failed), plus
optional ``position`` (1-based) and ``workload`` columns. Errors name
``errors.outcomes``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from ..model.errors.empirical import FIELD, MAX_DRAFTERS, EmpiricalErrors
from .inputs import MAX_LOG_BYTES, check_regular_file
from .quoting import excerpt, mask_secrets


def load_empirical(spec, names, base_dir=None) -> tuple[EmpiricalErrors, dict]:
    """The empirical model over the whole log, and one per value of its ``workload``
    column (empty dict without one)."""
    path = Path(spec.outcomes)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    data = read_outcomes(path, tuple(names))
    fail, position, workload = data["fail"], data["position"], data["workload"]
    whole = EmpiricalErrors.from_failures(fail, position)
    parts = {}
    if workload is not None:
        for w in np.unique(workload):
            rows = workload == w
            pos = None if position is None else position[rows]
            if pos is not None and np.unique(pos).size != pos.max():
                raise InputError(
                    "errors.outcomes", f"workload {excerpt(str(w))} skips a position in the log"
                )
            parts[str(w)] = EmpiricalErrors.from_failures(fail[rows], pos)
    return whole, parts


def read_outcomes(path: Path, names: tuple[str, ...]) -> dict:
    """Read an outcome CSV.

    Returns ``{"fail": (R, N) bool, "position": (R,) int | None, "workload": (R,) str | None}``.
    Every problem drafter needs a column; other columns (beyond ``position`` and
    ``workload``) are ignored. Errors name :data:`FIELD`.
    """
    if len(names) > MAX_DRAFTERS:
        raise InputError(FIELD, f"at most {MAX_DRAFTERS} drafters are supported with a log")
    check_regular_file(path, FIELD, MAX_LOG_BYTES)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(FIELD, f"cannot read {path}: {exc}") from None
    at = raw.find(b"\x00")
    if at >= 0:
        line = raw.count(b"\n", 0, at) + 1
        raise InputError(FIELD, f"{path.name} line {line} holds a NUL byte (\\x00): not a text log")
    fast = read_fast(path, names)
    return fast if fast is not None else read_careful(path, names)


def read_careful(path: Path, names: tuple[str, ...]) -> dict:
    """Row by row, naming the first problem found."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # a BOM is not a column name
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            body = [row for row in reader if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(FIELD, f"cannot read {path}: {mask_secrets(str(exc))}") from None
    missing = [n for n in names if n not in header]
    if missing:
        raise InputError(FIELD, f"{path.name} has no column for drafter(s) {', '.join(missing)}")
    if not body:
        raise InputError(FIELD, f"{path.name} holds no rows")
    width = len(header)
    for i, row in enumerate(body):
        if len(row) != width:
            raise InputError(
                FIELD, f"row {i + 2} of {path.name} has {len(row)} fields, not {width}"
            )
    cols = {h: [row[c].strip() for row in body] for c, h in enumerate(header)}
    fail = np.empty((len(body), len(names)), bool)
    for j, n in enumerate(names):
        v = np.asarray(cols[n])
        ok = (v == "0") | (v == "1")
        if not ok.all():
            bad = int(np.argmin(ok))
            raise InputError(
                FIELD,
                f"column {n!r} of {path.name} must hold 0 or 1; row {bad + 2} has "
                f"{excerpt(str(v[bad]))}",
            )
        fail[:, j] = v == "0"
    position = None
    if "position" in cols:
        try:
            position = np.asarray(cols["position"], dtype=np.int64)
        except (ValueError, OverflowError):
            raise InputError(
                FIELD, f"column 'position' of {path.name} must hold integers"
            ) from None
        if position.min() < 1:
            raise InputError(FIELD, f"column 'position' of {path.name} must be 1 or more")
        present = np.unique(position)
        if present.size != present[-1]:
            gap = int(np.setdiff1d(np.arange(1, present[-1] + 1), present)[0])
            raise InputError(FIELD, f"{path.name} has no rows for position {gap}")
    workload = np.asarray(cols["workload"]) if "workload" in cols else None
    return {"fail": fail, "position": position, "workload": workload}


def read_fast(path: Path, names: tuple[str, ...]) -> dict | None:
    """A well-formed log through numpy's C parser; ``None`` when anything is off (the
    careful reader then finds and names the problem)."""
    try:
        with path.open(encoding="utf-8-sig") as f:  # a BOM is not a column name
            header = [h.strip() for h in f.readline().rstrip("\r\n").split(",")]
        if any(n not in header for n in names) or len(set(header)) != len(header):
            return None
        use = [header.index(n) for n in names]
        has_pos = "position" in header
        if has_pos:
            use.append(header.index("position"))
        data = np.loadtxt(path, delimiter=",", skiprows=1, usecols=use, dtype=np.int64, ndmin=2)
        workload = None
        if "workload" in header:
            workload = np.loadtxt(
                path,
                delimiter=",",
                skiprows=1,
                usecols=header.index("workload"),
                dtype=str,
                ndmin=1,
            )
            workload = np.char.strip(workload)
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return None
    if data.shape[0] == 0:
        return None
    outcome = data[:, : len(names)]
    if not np.all((outcome == 0) | (outcome == 1)):
        return None
    position = data[:, -1] if has_pos else None
    if position is not None:
        present = np.unique(position)
        if present[0] < 1 or present.size != present[-1]:
            return None
    return {"fail": outcome == 0, "position": position, "workload": workload}


__all__ = ["load_empirical", "read_outcomes"]
