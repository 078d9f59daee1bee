"""Progress on stderr for long work: a bar of work done and the current front size, or a
spinner counting work of unknown total."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..exceptions import InputError
from .common import err

if TYPE_CHECKING:
    from rich import progress as rich_progress
else:  # a bar is drawn only on a terminal
    rich_progress = lazy_module("rich.progress")


def check_search_options(trials: int | None, timeout: float | None) -> None:
    """``--trials`` and ``--timeout`` must be positive when given."""
    if trials is not None and trials < 1:
        raise InputError("--trials", f"must be at least 1, got {trials}")
    if timeout is not None and not timeout > 0:
        raise InputError("--timeout", f"must be a positive number of seconds, got {timeout:g}")


@contextlib.contextmanager
def search_progress(label: str, enabled: bool = True):
    """Yield a callback ``(done, total, front_size)`` driving a rich bar (or a no-op).

    The bar is drawn only on a terminal and disappears when the search ends.
    """
    if not enabled or not err.is_terminal:
        yield None
        return
    columns = (
        rich_progress.TextColumn("{task.description}", markup=False),
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TextColumn("front {task.fields[front]}", markup=False),
        rich_progress.TimeElapsedColumn(),
    )
    with rich_progress.Progress(*columns, console=err, transient=True) as bar:
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
        rich_progress.SpinnerColumn(),
        rich_progress.TextColumn("{task.description}", markup=False),
        rich_progress.TextColumn("{task.completed:,.0f} " + unit, markup=False),
        rich_progress.TimeElapsedColumn(),
    )
    with rich_progress.Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int) -> None:
            bar.update(task, completed=done)

        yield update


__all__ = [
    "check_search_options",
    "count_progress",
    "search_progress",
]
