"""Progress on stderr for long work: a bar of work done and the current front size, or a
spinner counting work of unknown total."""

from __future__ import annotations

import contextlib

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from ..exceptions import InputError
from ..validate import rate, whole
from .common import err


def check_search_options(trials: int | None, timeout: float | None) -> None:
    """``--trials`` and ``--timeout`` must be positive when given."""
    if trials is not None:
        whole(trials, "--trials", lo=1, error=InputError)
    if timeout is not None:
        rate(timeout, "--timeout", inf=True, unit="seconds", error=InputError)


@contextlib.contextmanager
def search_progress(label: str, enabled: bool = True):
    """Yield a callback ``(done, total, front_size)`` driving a rich bar (or a no-op).

    The bar is drawn only on a terminal and disappears when the search ends.
    """
    if not enabled or not err.is_terminal:
        yield None
        return
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("front {task.fields[front]}", markup=False),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=None, front="-")

        def update(done: int, total: int | None, front: int | None) -> None:
            bar.update(task, completed=done, total=total, front="-" if front is None else front)

        yield update


@contextlib.contextmanager
def count_progress(label: str, unit: str, enabled: bool = True):
    """Yield a callback ``(done)`` driving a spinner that counts ``done`` ``unit`` and the
    time elapsed (or ``None``), for work whose total is not known in advance. Drawn only on
    a terminal; it disappears when the work ends."""
    if not enabled or not err.is_terminal:
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TextColumn("{task.completed:,.0f} " + unit, markup=False),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int) -> None:
            bar.update(task, completed=done)

        yield update


__all__ = [
    "check_search_options",
    "count_progress",
    "search_progress",
]
