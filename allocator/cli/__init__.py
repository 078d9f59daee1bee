"""The ``allocator`` command line (typer). One module per command; tables, output files
and the ``--plot`` pictures (drawn by :mod:`allocator.plots`) are made here, never in
the solvers.

Start-up: a command imports only its own module (and what it needs); ``app``, read as an
attribute of this package, is the group with every command registered (the tests and
``--help`` use it)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence

from .group import ClickException, Command, OneLineErrors, UsageError, reflow, usage_error_line
from .group import app as _app

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


def __getattr__(name: str):
    if name == "app":
        load_commands()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _summaries_only() -> None:
    """Register each command as its summary alone (no options, never run): what the
    group's ``--help`` lists, without importing the commands behind it."""
    for module in COMMANDS:
        _app.command(module.replace("_", "-"), help=SUMMARIES[module])(lambda: None)


def main() -> None:
    args = sys.argv[1:]
    module = requested_module(args)
    if module is not None:
        load_commands([module])
    elif any(not a.startswith("-") for a in args):
        load_commands()  # an unknown command: the group names the known ones
    else:
        _summaries_only()  # the group's --help (or --version)
    _app()


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
    "usage_error_line",
]
