"""A progress bar on stderr for long searches: work done and the current front size."""

from __future__ import annotations

import contextlib

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..exceptions import InputError
from .common import err


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


__all__ = [
    "check_search_options",
    "search_progress",
]
