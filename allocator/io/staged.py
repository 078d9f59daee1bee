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
import errno
import fcntl
import io
import json
import os
import stat
import sys
import tempfile
import time
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


#: How long a FIFO output waits for its reader to open it, seconds; then it is refused.
FIFO_READER_WAIT_S = 1.0


def check_writable(path: str | Path, option: str) -> None:
    """Fail early (before any work) when ``path`` cannot be written or is an input.

    An empty path is refused (it names no file). Nothing is opened: a FIFO's reader
    would take the open for the whole output and see its end at once."""
    if not str(path).strip():
        raise InputError(option, "is empty: give a file name")
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
    """Put every prepared output in place: checks first, then devices, then renames;
    stdout last, so that what it shows means every file is in place."""
    try:
        for s in stage:
            if s.path is not None:
                _refuse_input(s.path, s.option)
            elif sys.stdout is None:
                raise closed_stdout()
        for s in stage:
            if s.tmp is None and s.path is not None:
                _write_direct(s.path, s.data, s.option)
        for s in stage:
            if s.tmp is not None and s.path is not None:
                try:
                    os.replace(s.tmp, _destination(s.path))
                except OSError as exc:
                    raise _cannot_write(s.path, s.option, exc) from None
                s.tmp = None
    finally:
        _discard(stage)
    for s in stage:
        if s.path is None:
            write_stdout(s.data)


def closed_stdout() -> InputError:
    """The error for output to a closed stdout (``allocator schema >&-``)."""
    return InputError(
        "stdout", "is closed: nothing can be shown (write to a file with --json PATH)"
    )


def write_stdout(data: str | bytes) -> None:
    """Write ``data`` to stdout at once. A closed stdout, or one that cannot take it (a
    full disk, an I/O error), is an :class:`InputError` naming ``stdout``; a reader that
    closed its pipe (``| head``) is :class:`BrokenPipeError`, left to the caller (the
    command line ends quietly)."""
    stream = sys.stdout
    if stream is None:
        raise closed_stdout()
    try:
        if isinstance(data, bytes):
            stream.buffer.write(data)
        else:
            stream.write(data)
        stream.flush()
    except BrokenPipeError:
        silence_stdout()
        raise
    except OSError as exc:
        silence_stdout()
        raise InputError("stdout", f"cannot write: {exc.strerror or exc}") from None


def silence_stdout() -> None:
    """Point stdout's descriptor at ``/dev/null`` after a failed write, so that what is
    still buffered does not fail again (a second message) when the interpreter exits."""
    try:
        fd = sys.stdout.fileno() if sys.stdout is not None else -1
    except (OSError, ValueError, AttributeError):
        return
    if fd < 0:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def stage_stdout(data: str | bytes) -> None:
    """Write ``data`` to stdout; inside :func:`staged_outputs`, once the files are in place."""
    stage = _STAGE.get()
    if stage is None:
        write_stdout(data)
    else:
        stage.append(_Staged(None, "stdout", None, data))


def _cannot_write(path: Path, option: str, exc: OSError) -> InputError:
    return InputError(option, f"cannot write {path}: {exc.strerror or exc}")


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _destination(path: Path) -> Path:
    """Where a regular file's content goes: the file a symbolic link names (the link is
    kept, and the temporary file sits beside the target, on its file system), else
    ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _is_direct(path: Path) -> bool:
    """Whether ``path`` is written in place rather than replaced: it exists and is not a
    regular file (a device, a FIFO, a pipe), or it is one of the process's own streams
    (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``), whatever they point to."""
    if str(path).startswith(("/dev/", "/proc/")):
        return path.exists()
    return path.exists() and not path.is_file()


def _open_direct(path: Path) -> int:
    """A descriptor open for writing on ``path``, in blocking mode once open.

    A FIFO (or socket) is opened without blocking: with no reader the open fails at once
    (ENXIO) instead of waiting forever; it is retried for :data:`FIFO_READER_WAIT_S`
    seconds (a reader started just after the command), then refused. Appending: a
    regular file reached through ``/dev/stdout`` loses nothing written to it before."""
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


def _write_direct(path: Path, data: str | bytes, option: str) -> None:
    try:
        fd = _open_direct(path)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            kind = "FIFO" if _is_fifo(path) else "socket or device"
            raise InputError(
                option,
                f"{path} is a {kind} no process is reading: start its reader first, or "
                "write to a file",
            ) from None
        raise _cannot_write(path, option, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_bytes(data))
    except OSError as exc:
        raise _cannot_write(path, option, exc) from None


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _prepare(p: Path, data: str | bytes, option: str) -> str:
    """``data`` written in full to a temporary file beside ``p`` (beside the file a
    symbolic link ``p`` names, so that the rename stays on one file system); its name."""
    dest = _destination(p)
    try:
        fd, tmp = tempfile.mkstemp(
            dir=dest.resolve().parent, prefix=f".{dest.name}.", suffix=".tmp"
        )
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

    A regular file is written under a temporary name and renamed into place (through a
    symbolic link: the file it names is replaced, the link kept); a path that exists but
    is not a regular file (``/dev/stdout``, ``/dev/null``, a pipe) is written directly,
    never replaced, and a FIFO no process reads is refused rather than waited on.
    Inside :func:`staged_outputs` the file is only prepared, and put in place when the
    block ends. A file read as input by the same command is never overwritten. Failures
    (a full disk, no permission) are an :class:`InputError` naming ``option``.
    """
    check_writable(path, option)
    p = Path(path)
    stage = _STAGE.get()
    direct = _is_direct(p)
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
        os.replace(tmp, _destination(p))
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _cannot_write(p, option, exc) from None


__all__ = [
    "CSV_COLUMNS",
    "FIFO_READER_WAIT_S",
    "SERVING_CSV_COLUMNS",
    "check_writable",
    "closed_stdout",
    "front_csv",
    "silence_stdout",
    "stage_stdout",
    "staged_outputs",
    "to_json",
    "write_atomic",
    "write_stdout",
]
