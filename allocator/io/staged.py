"""Output files at the edge: every file a command writes, whole or not at all.

Every file goes to a temporary name in the same folder and is renamed into place once
complete; inside :func:`staged_outputs` (every command runs in one) no file is put in
place until the command has succeeded. :func:`to_json` is the one JSON text of a
document (the dict a result's ``to_dict()`` returns), :func:`front_csv` the CSV of a
front's points.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.documents import POINT_FIELDS, SERVING_FIELDS
from ..exceptions import InputError
from .inputs import is_input


def to_json(doc: Any) -> str:
    """A document as JSON text: indented, NaN refused (documents write it as ``null``)."""
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


#: Columns of a front's CSV (``solve --csv``), and under load (``solve --batch --csv``).
CSV_COLUMNS: list[str] = list(POINT_FIELDS)
SERVING_CSV_COLUMNS: list[str] = [*POINT_FIELDS, *SERVING_FIELDS]


def front_csv(points: Sequence[Mapping[str, Any]]) -> str:
    """A front's points (the ``front`` of a solve document) as CSV, one point per row,
    drafters joined by ``+``; the serving columns when the points have them."""
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


__all__ = [
    "CSV_COLUMNS",
    "SERVING_CSV_COLUMNS",
    "check_writable",
    "front_csv",
    "stage_stdout",
    "staged_outputs",
    "to_json",
    "write_atomic",
]
