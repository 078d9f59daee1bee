"""The ``allocator`` command line (typer). One module per command; tables, output files
and the ``--plot`` pictures (drawn by :mod:`allocator.plots`) are made here, never in
the solvers.

Start-up: a command imports only its own module (and what it needs); ``app``, read as an
attribute of this package, is the group with every command registered (the tests and
``--help`` use it)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module

if TYPE_CHECKING:
    from . import group
    from .group import ClickException, Command, OneLineErrors, UsageError, reflow, usage_error_line
else:  # typer: imported by main() with the commands (uncollected_imports)
    group = lazy_module("allocator.cli.group")

#: The group's names this package re-exports, read from :mod:`.group` on first use.
_GROUP_NAMES = (
    "ClickException",
    "Command",
    "OneLineErrors",
    "UsageError",
    "reflow",
    "usage_error_line",
)

#: The command modules, in the order of ``--help``; each registers itself on import.
COMMANDS = (
    "solve",
    "evaluate",
    "schedule",
    "plan",
    "capacity",
    "front",
    "bench",
    "validate",
    "estimate",
    "calibrate",
    "profile_plan",
    "simulate",
    "tree",
    "breakeven",
    "paper",
    "schema",
)


#: Each command's first help paragraph, for the group's --help without importing every
#: command (tests/cli/test_help.py holds them equal to the commands' own).
SUMMARIES = {
    "solve": ("Search drafters, k and m; print the front of throughput against the cost metric."),
    "evaluate": (
        "Evaluate one configuration (drafters and k), ignoring the search space and budget."
    ),
    "schedule": (
        "For each of serving.batch_sizes, the configuration (drafters, k) of highest tokens/s"
        " within the budget that the engine serves, k = 0 (no speculation) always a "
        "candidate."
    ),
    "plan": (
        "Choose the drafters to host and each workload's route, a drafter and k (exact, by "
        "MILP), among what --engine serves (one drafter per server; --pooled: also pooled "
        "subsets, the upper bound no engine serves)."
    ),
    "capacity": (
        "Size a fleet: the cheapest replicas and configuration for a load, beside the "
        "cheapest without speculation."
    ),
    "front": (
        "The serving Pareto front: output tokens/s per GPU against output tokens/s per user "
        "(1000 / mean TPOT), each point a simulated deployment (GPU, TP, max_num_seqs or "
        "client concurrency, drafter and k, k by batch size or speculation off), speculation "
        "inside the simulation."
    ),
    "bench": (
        "Simulate `vllm bench serve` on one replica: requests arrive, are scheduled step by "
        "step as vLLM's V1 scheduler does (continuous batching, chunked prefill, KV blocks, "
        "preemption), each decoding sequence's tokens drawn from the configuration's "
        "acceptance; the JSON has vLLM's --save-result keys, so a measurement can be diffed "
        "against it."
    ),
    "validate": (
        "Replay each measured benchmark run (its rate or concurrency, prompts and lengths) on "
        "the problem's simulated replica and report every metric beside the measured one, "
        "with its error: check the model on your own runs before trusting capacity."
    ),
    "estimate": ("Estimate drafter acceptance (with 95% intervals) and write a problem file."),
    "calibrate": ("Fit the step times to measured tokens/s and write the problem with `serving`."),
    "profile_plan": (
        "The fewest benchmark runs that determine every roofline parameter, as commands."
    ),
    "simulate": ("Play ROUNDS rounds with outcomes drawn from the problem's error model itself."),
    "tree": (
        "The tree of at most NODES nodes and depth <= DEPTH with the most expected tokens per"
        " step (Sequoia's dynamic programme, exact), from the drafter's acceptance_by_rank."
    ),
    "breakeven": ("Find the correlation at which the ensemble's gain over the baseline vanishes."),
    "paper": (
        "Recompute every number of the ensemble-drafting paper's §4–§5 beside its printed value."
    ),
    "schema": ("Print the JSON Schema of the problem file (YAML or JSON)."),
}


def load_commands(modules: Iterable[str] = COMMANDS) -> None:
    """Import the command ``modules`` (registering them on the app), in the order given."""
    for module in modules:
        importlib.import_module(f"{__name__}.{module}")


def requested_module(args: Sequence[str]) -> str | None:
    """The command module the arguments run (``profile-plan`` is ``profile_plan``), or
    ``None``: no command (the group's help or version), or one not known (the group then
    says so, with its suggestions)."""
    for arg in args:
        if arg.startswith("-"):
            continue
        module = arg.replace("-", "_")
        return module if module in COMMANDS else None
    return None


def __getattr__(name: str) -> Any:
    if name == "app":
        load_commands()
        return group.app
    if name in _GROUP_NAMES:
        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _summaries_only() -> None:
    """Register each command as its summary alone (no options, never run): what the
    group's ``--help`` lists, without importing the commands behind it."""
    for module in COMMANDS:
        group.app.command(module.replace("_", "-"), help=SUMMARIES[module])(lambda: None)


@contextlib.contextmanager
def uncollected_imports() -> Iterator[None]:
    """Import without the cyclic garbage collector, then freeze what was imported.

    A command's imports (numpy's, pydantic's and typer's modules, the problem-file
    models) leave some 70,000 objects tracked by the collector, most as long-lived as the
    process; the collector's passes over them during start-up free almost nothing and
    cost about a tenth of it (docs/design.md §9). ``gc.freeze`` then moves them to the
    permanent generation, so the command's own collections skip them too. A reference
    cycle made and dropped while importing is never freed: bounded by what importing
    allocates. The collector is enabled again afterwards if it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def main() -> None:
    args = sys.argv[1:]
    module = requested_module(args)
    with uncollected_imports():
        app = group.app  # typer and the group: imported here, uncollected
        if module is not None:
            load_commands([module])
        elif any(not a.startswith("-") for a in args):
            load_commands()  # an unknown command: the group names the known ones
        else:
            _summaries_only()  # the group's --help (or --version)
    app()


__all__ = [
    "COMMANDS",
    "SUMMARIES",
    "ClickException",
    "Command",
    "OneLineErrors",
    "UsageError",
    "app",
    "load_commands",
    "main",
    "reflow",
    "requested_module",
    "uncollected_imports",
    "usage_error_line",
]
