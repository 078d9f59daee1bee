"""Shared pieces of the command line: error handling, consoles, output options."""

from __future__ import annotations

import functools
import sys

import typer
from rich.console import Console
from rich.text import Text

from ..exceptions import InputError
from ..outputs import check_writable, to_json, write_atomic

#: Human output (tables) goes to stdout; messages and progress to stderr. Neither
#: interprets rich markup: names and labels from a file (``[bold]``) print as written.
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, highlight=False, markup=False)

JsonOption = typer.Option(
    None,
    "--json",
    help="Write the JSON document to PATH, or to stdout with '-' (stdout then "
    "holds only the JSON).",
    metavar="PATH|-",
)
ProblemArg = typer.Argument(..., help="Problem file (YAML or JSON).", show_default=False)


def fail(message: str) -> typer.Exit:
    err.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    return typer.Exit(2)


def handles_input_errors(fn):
    """Turn :class:`InputError` (and unreadable files) into one line on stderr, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            raise fail(f"{exc.field}: {exc.message}") from None
        except MemoryError:
            raise fail(
                "out of memory: narrow the search space (search.m.max, search.k.max)"
            ) from None

    return wrapper


def precheck_outputs(**paths: str | None) -> None:
    """Check that every output PATH (not '-') can be written, before any work."""
    for option, path in paths.items():
        if path and path != "-":
            check_writable(path, "--" + option.replace("_", "-"))


def emit_json(doc, path: str | None) -> None:
    if path is None:
        return
    text = to_json(doc)
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(path, text, "--json")
