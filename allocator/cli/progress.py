"""Progress on stderr for long work: a bar of work done and the current front size, a
spinner counting work of unknown total, or a bar of work done of a total with the time
left (a line every few seconds when stderr is not a terminal)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..exceptions import InputError
from ..validate import rate, whole
from .common import err

if TYPE_CHECKING:
    from rich import progress as rich_progress
else:  # a bar is drawn only on a terminal
    rich_progress = lazy_module("rich.progress")


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


#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY_S = 5.0


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


@contextlib.contextmanager
def total_progress(
    label: str,
    unit: str,
    enabled: bool = True,
    every: float = LINE_EVERY_S,
    why: str | None = None,
):
    """Yield a callback ``(done, total)`` for work counted in ``unit`` whose total is
    known (or bounded) as it goes: on a terminal a bar with the count, the time elapsed and
    an estimate of the time left; otherwise (a pipe, a log file) one line at most every
    ``every`` seconds, ``LABEL: DONE/TOTAL UNIT, ELAPSED elapsed, about LEFT left``, and a
    last line when the work ends. The estimate is the mean time per unit so far times the
    units left. ``why``: what makes the work long, said once when it has run ``every``
    seconds (a quick command says nothing more)."""
    if not enabled:
        yield None
        return
    said = threading.Event()

    def say_why() -> None:
        if why and not said.is_set():
            said.set()
            err.print(f"{label}: {why}", markup=False, highlight=False, soft_wrap=True)

    if err.is_terminal:
        columns = (
            rich_progress.TextColumn("{task.description}", markup=False),
            rich_progress.BarColumn(),
            rich_progress.MofNCompleteColumn(),
            rich_progress.TextColumn(unit, markup=False),
            rich_progress.TimeElapsedColumn(),
            rich_progress.TextColumn("left", markup=False),
            rich_progress.TimeRemainingColumn(),
        )
        with rich_progress.Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(label, total=None)

            start = time.monotonic()

            def update_bar(done: int, total: int) -> None:
                if time.monotonic() - start >= every:
                    say_why()
                bar.update(task, completed=done, total=total)

            yield update_bar
        return
    start = time.monotonic()
    state = [0, 0]  # done, total
    stop = threading.Event()

    def line() -> None:
        done, total = state
        elapsed = time.monotonic() - start
        of = f"/{total:,}" if total else ""
        left = f", about {_clock(elapsed / done * (total - done))} left" if done else ""
        err.print(
            f"{label}: {done:,}{of} {unit}, {_clock(elapsed)} elapsed{left}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    def tick() -> None:
        while not stop.wait(every):
            say_why()
            line()

    def update(done: int, total: int) -> None:
        state[:] = [done, total]

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield update
    finally:
        stop.set()
        ticker.join()
    if state[0]:
        line()


__all__ = [
    "LINE_EVERY_S",
    "check_search_options",
    "search_progress",
    "total_progress",
]
