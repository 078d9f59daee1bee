"""Options of a run that edit the problem's scheduler before it is simulated: vLLM's
asynchronous scheduling and prefix caching turned on or off over the file's; a fleet behind
a router runs the same scheduling as one replica."""

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


__all__ = ["with_async_scheduling", "with_prefix_caching"]
