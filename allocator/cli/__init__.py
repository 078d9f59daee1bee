"""The ``allocator`` command line (typer). One module per command; tables, output files
and the ``--plot`` pictures (drawn by :mod:`allocator.plots`) are made here, never in
the solvers."""

from __future__ import annotations

import importlib

import typer

from .. import __version__

app = typer.Typer(
    name="allocator",
    help="Plan draft-then-verify inference: the Pareto front of throughput against cost "
    "over draft length k, drafter count m and which drafters to pool.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"allocator {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    pass


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
