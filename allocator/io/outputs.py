"""Machine output at the edge: the JSON documents of docs/design.md §6 and atomic file writes.

Nothing is written half-way: every file goes to a temporary name in the same folder
and is renamed into place once complete.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, SerializeAsAny

from ..core.result import SolveResult
from ..exceptions import InputError
from .inputs import is_input


class PointOut(BaseModel):
    """One configuration and its metrics (a front point, or ``evaluate``'s answer)."""

    drafters: list[str]
    m: int
    k: int
    throughput: float
    cost: float
    expected_accepted: float
    pooled_acceptance: float
    round_time: float
    draft_cost_per_round: float
    draft_cost_per_token: float
    hosting_cost: float


class ServingPointOut(PointOut):
    """A point under load (``evaluate --batch``, ``solve --batch``): the model's fields
    and, at ``batch`` concurrent sequences, the step wall time (ms), ``tokens_per_step``
    (E in the bonus convention), ``tokens_per_s`` (whole batch),
    ``tokens_per_s_per_seq``, ``itl_ms``, ``speedup`` over no speculation and
    ``cost_per_mtok`` ($ per million tokens; null without a GPU price)."""

    batch: int
    step_ms: float
    tokens_per_step: float
    tokens_per_s: float
    tokens_per_s_per_seq: float
    itl_ms: float
    speedup: float
    cost_per_mtok: float | None


def point_out(point: dict) -> PointOut:
    """The output model of a point: with serving fields when it has them."""
    return ServingPointOut(**point) if "tokens_per_s" in point else PointOut(**point)


class SolveOut(BaseModel):
    """``solve --json``: one object, ``front`` sorted by cost ascending."""

    problem: str
    strategy: str
    exact: bool
    cost_metric: str
    evaluated: int
    seconds: float
    front: list[SerializeAsAny[PointOut]]
    notes: list[str] = []


def solve_document(result: SolveResult) -> dict:
    return SolveOut(
        problem=result.problem,
        strategy=result.strategy,
        exact=result.exact,
        cost_metric=result.cost_metric,
        evaluated=result.evaluated,
        seconds=round(result.seconds, 6),
        front=[point_out(p) for p in result.points()],
        notes=result.notes,
    ).model_dump()


def point_document(point: dict) -> dict:
    return point_out(point).model_dump()


def to_json(doc) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


CSV_COLUMNS = list(PointOut.model_fields)
SERVING_CSV_COLUMNS = list(ServingPointOut.model_fields)


def front_csv(points: list[dict]) -> str:
    buf = io.StringIO()
    serving = bool(points) and "tokens_per_s" in points[0]
    columns = SERVING_CSV_COLUMNS if serving else CSV_COLUMNS
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow({**p, "drafters": "+".join(p["drafters"])})
    return buf.getvalue()


def check_writable(path: str | Path, option: str) -> None:
    """Fail early (before any work) when ``path`` cannot be written or is an input."""
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise InputError(option, f"folder does not exist: {parent}")
    if Path(path).is_dir():
        raise InputError(option, f"is a directory: {path}")
    if not os.access(parent, os.W_OK) and not Path(path).exists():
        raise InputError(option, f"folder is not writable: {parent}")
    _refuse_input(path, option)


def _refuse_input(path: str | Path, option: str) -> None:
    if is_input(path):
        raise InputError(option, f"{path} is an input of this command; it would be overwritten")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass
class _Staged:
    path: Path | None  # None: stdout
    option: str
    tmp: str | None  # a prepared temporary file, or None for a device / pipe
    data: str | bytes


#: Outputs prepared but not yet in place, inside :func:`staged_outputs`.
_STAGE: ContextVar[list[_Staged] | None] = ContextVar("allocator_outputs", default=None)


@contextlib.contextmanager
def staged_outputs() -> Iterator[None]:
    """Within: :func:`write_atomic` only prepares each file (written in full under a
    temporary name). When the block ends without an exception, every file is put in
    place; when it raises, none is and the temporary files are removed. So a command
    whose second output fails leaves no first output behind."""
    stage: list[_Staged] = []
    token = _STAGE.set(stage)
    try:
        yield
    except BaseException:
        _discard(stage)
        raise
    finally:
        _STAGE.reset(token)
    _commit(stage)


def _discard(stage: list[_Staged]) -> None:
    for s in stage:
        if s.tmp is not None:
            Path(s.tmp).unlink(missing_ok=True)


def _commit(stage: list[_Staged]) -> None:
    """Put every prepared output in place: checks first, then devices, then renames."""
    try:
        for s in stage:
            if s.path is not None:
                _refuse_input(s.path, s.option)
        for s in stage:
            if s.tmp is None and s.path is not None:
                _write_direct(s.path, s.data, s.option)
        for s in stage:
            if s.tmp is not None and s.path is not None:
                try:
                    os.replace(s.tmp, s.path)
                except OSError as exc:
                    raise _cannot_write(s.path, s.option, exc) from None
                s.tmp = None
    finally:
        _discard(stage)
    for s in stage:
        if s.path is None:
            _to_stdout(s.data)


def _to_stdout(data: str | bytes) -> None:
    if isinstance(data, bytes):
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data)
    sys.stdout.flush()


def stage_stdout(data: str | bytes) -> None:
    """Write ``data`` to stdout; inside :func:`staged_outputs`, once the files are in place."""
    stage = _STAGE.get()
    if stage is None:
        _to_stdout(data)
    else:
        stage.append(_Staged(None, "stdout", None, data))


def _cannot_write(path: Path, option: str, exc: OSError) -> InputError:
    return InputError(option, f"cannot write {path}: {exc.strerror or exc}")


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _write_direct(path: Path, data: str | bytes, option: str) -> None:
    try:
        with open(path, "wb") as f:
            f.write(_bytes(data))
    except OSError as exc:
        raise _cannot_write(path, option, exc) from None


def _prepare(p: Path, data: str | bytes, option: str) -> str:
    """``data`` written in full to a temporary file beside ``p``; its name."""
    try:
        fd, tmp = tempfile.mkstemp(dir=p.resolve().parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(p, option, exc) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        with os.fdopen(fd, "wb") as f:
            f.write(_bytes(data))
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _cannot_write(p, option, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: str | Path, text: str | bytes, option: str = "output") -> None:
    """Write ``text`` to ``path`` whole or not at all.

    A regular file is written under a temporary name and renamed into place; a path
    that exists but is not a regular file (``/dev/stdout``, ``/dev/null``, a pipe) is
    written directly, never replaced. Inside :func:`staged_outputs` the file is only
    prepared, and put in place when the block ends. A file read as input by the same
    command is never overwritten. Failures (a full disk, no permission) are an
    :class:`InputError` naming ``option``.
    """
    check_writable(path, option)
    p = Path(path)
    stage = _STAGE.get()
    direct = p.exists() and not p.is_file()
    if stage is not None:
        for other in stage:
            if other.path is not None and other.path.resolve() == p.resolve() and not direct:
                raise InputError(option, f"{path} is also the {other.option} output")
        tmp = None if direct else _prepare(p, text, option)
        stage.append(_Staged(p, option, tmp, text))
        return
    if direct:
        _write_direct(p, text, option)
        return
    tmp = _prepare(p, text, option)
    try:
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _cannot_write(p, option, exc) from None


class UncertainPointOut(BaseModel):
    """A front point under sampling uncertainty (``solve --samples``): same order as ``front``."""

    drafters: list[str]
    k: int
    optimal_share: float
    throughput_p05: float
    throughput_p50: float
    throughput_p95: float
    throughput_mean: float
    throughput_quantile: float | None = None


class OtherOptimumOut(BaseModel):
    """A configuration off the front that was the optimum in some draws."""

    drafters: list[str]
    k: int
    optimal_share: float


class UncertaintyOut(BaseModel):
    """``solve --samples N [--robust Q]``: the ``uncertainty`` object of ``solve --json``."""

    samples: int
    seed: int
    robust_quantile: float | None
    resampled: list[str]
    points: list[UncertainPointOut]
    other_optima: list[OtherOptimumOut]


def uncertainty_document(report, names: tuple[str, ...]) -> dict:
    """The ``uncertainty`` object of an
    :class:`allocator.analysis.uncertainty.UncertaintyReport`."""
    f = report.front
    points = []
    for i in range(len(f)):
        row = {key: float(v[i]) for key, v in report.percentiles.items()}
        points.append(
            UncertainPointOut(
                drafters=[n for n, on in zip(names, f.members[i], strict=True) if on],
                k=int(f.k[i]),
                optimal_share=float(report.optimal_share[i]),
                throughput_quantile=None
                if report.quantile_throughput is None
                else float(report.quantile_throughput[i]),
                **row,
            )
        )
    return UncertaintyOut(
        samples=report.samples,
        seed=report.seed,
        robust_quantile=report.quantile,
        resampled=report.resampled,
        points=points,
        other_optima=[OtherOptimumOut(**o) for o in report.other_optima],
    ).model_dump()
