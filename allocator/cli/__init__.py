"""The ``allocator`` command line (typer). One module per command; plots, tables and
files live here, never in the solvers."""

from __future__ import annotations

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

from . import breakeven as _breakeven  # noqa: E402,F401
from . import estimate as _estimate  # noqa: E402,F401
from . import evaluate as _evaluate  # noqa: E402,F401  (registers commands)
from . import paper as _paper  # noqa: E402,F401
from . import plan as _plan  # noqa: E402,F401
from . import schema as _schema  # noqa: E402,F401
from . import simulate as _simulate  # noqa: E402,F401
from . import solve as _solve  # noqa: E402,F401


def main() -> None:
    app()


__all__ = ["app", "main"]
