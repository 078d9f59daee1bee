"""Options of a run that edit the problem's scheduler before it is simulated: vLLM's
asynchronous scheduling and prefix caching turned on or off over the file's, and the
synchronous steps a fleet behind a router is played with."""

from __future__ import annotations

from dataclasses import replace

from ..core.problem import Problem
from ..exceptions import ParameterError
from ..model.under_load import need_serving
from .replica import scheduler_limits


def with_async_scheduling(problem: Problem, async_scheduling: bool | None) -> Problem:
    """The problem with ``serving.scheduler.async_scheduling`` set to ``async_scheduling``
    (``None``: the file's, the problem as it is). ``ParameterError`` on
    ``async_scheduling`` when it is not a bool; the file needs ``serving.scheduler``."""
    if async_scheduling is None:
        return problem
    if not isinstance(async_scheduling, bool):
        raise ParameterError(
            "async_scheduling", f"must be True, False or None, got {async_scheduling!r}"
        )
    limits = scheduler_limits(problem)
    serving = replace(
        need_serving(problem), scheduler=replace(limits, async_scheduling=async_scheduling)
    )
    return replace(problem, serving=serving)


def fleet_scheduling(
    problem: Problem, replicas: int, async_scheduling: bool | None
) -> tuple[Problem, list[str]]:
    """The problem a fleet of ``replicas`` is simulated with, and the note that says why.

    The fleet (:func:`allocator.sim.simulate_fleet`) plays synchronous scheduling only. One
    replica: the problem as it is. A fleet whose file leaves vLLM's default, asynchronous
    scheduling, on (``async_scheduling`` ``None``): simulated synchronously, with a note;
    asked for explicitly (``True``): ``ParameterError`` on ``async_scheduling``."""
    if replicas <= 1 or not scheduler_limits(problem).async_scheduling:
        return problem, []
    if async_scheduling:
        raise ParameterError(
            "async_scheduling",
            "replicas behind a router are simulated with synchronous scheduling only "
            "(asynchronous scheduling is played for one replica): turn it off",
        )
    note = (
        "replicas behind a router are simulated with synchronous scheduling: vLLM's default, "
        "asynchronous scheduling, is played for one replica only (on one replica it adds "
        "about a step to each request's time to first token: compare --replicas 1 with and "
        "without --no-async-scheduling)"
    )
    return with_async_scheduling(problem, False), [note]


def with_prefix_caching(problem: Problem, on: bool) -> Problem:
    """The problem with ``serving.scheduler.enable_prefix_caching`` set to ``on`` (as it is
    when it already is, or has no scheduler)."""
    serving = problem.serving
    if serving is None or serving.scheduler is None:
        return problem
    if serving.scheduler.enable_prefix_caching == on:
        return problem
    limits = replace(serving.scheduler, enable_prefix_caching=on)
    return replace(problem, serving=replace(serving, scheduler=limits))


__all__ = ["fleet_scheduling", "with_async_scheduling", "with_prefix_caching"]
