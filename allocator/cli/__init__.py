"""The ``allocator`` command line (typer). One module per command; tables, output files
and the ``--plot`` pictures (drawn by :mod:`allocator.plots`) are made here, never in
the solvers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer._click import exceptions as click_errors
from typer.core import TyperGroup

from .. import __version__


def usage_error_line(exc: click_errors.ClickException) -> str:
    """A command-line usage error as ``<option>: <what is wrong>`` (one line)."""
    field = "usage"
    message = exc.format_message()
    if isinstance(exc, click_errors.NoSuchOption):
        field, message = exc.option_name, "no such option"
        if exc.possibilities:
            message += f" (did you mean {', '.join(sorted(exc.possibilities))}?)"
    elif isinstance(exc, click_errors.BadOptionUsage):
        field, message = exc.option_name, exc.message
    elif isinstance(exc, click_errors.BadParameter):
        param = exc.param
        if param is not None:
            opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
            name = getattr(param, "human_readable_name", None) or getattr(param, "name", None)
            field = opts[0] if opts else (name or "usage")
        if isinstance(exc, click_errors.MissingParameter):
            message = "missing (required)"
        else:
            message = exc.message
    message = " ".join(str(message).split()).rstrip(".")
    return f"{field}: {message[:1].lower() + message[1:]} (see --help)"


class OneLineErrors(TyperGroup):
    """The command group: usage errors (an unknown option, a value of the wrong type or
    out of range) end in one ``error: <option>: ...`` line and exit status 2, like bad
    input, instead of a box."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except click_errors.NoArgsIsHelpError as exc:
            if not standalone_mode:
                raise
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            if not standalone_mode:
                raise
            from .common import fail

            code = fail(usage_error_line(exc)).exit_code
            sys.exit(code if isinstance(exc, click_errors.UsageError) else exc.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            from .common import fail

            fail("interrupted: aborted")
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
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
