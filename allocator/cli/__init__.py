"""The ``allocator`` command line (typer). One module per command; tables, output files
and the ``--plot`` pictures (drawn by :mod:`allocator.plots`) are made here, never in
the solvers."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="allocator",
    help="Plan draft-then-verify inference: the Pareto front of throughput against cost "
    "over draft length k, drafter count m and which drafters to pool.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# Each command module registers itself on import; this order is the order of --help.
COMMANDS = (
    "solve",
    "evaluate",
    "schedule",
    "plan",
    "capacity",
    "estimate",
    "calibrate",
    "simulate",
    "tree",
    "breakeven",
    "paper",
    "schema",
)
for _command in COMMANDS:
    importlib.import_module(f"{__name__}.{_command}")


def main() -> None:
    app()


__all__ = ["app", "main"]
