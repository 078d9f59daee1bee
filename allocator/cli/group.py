"""The command group: the typer app every command module registers on, its one-line
usage errors, and the reflowed help of every command."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__
from .._lazy import lazy_module

if TYPE_CHECKING:
    from ..io import staged
    from . import common
else:  # rich and PyYAML: not for the group's --help, only when a command fails
    staged = lazy_module("allocator.io.staged")
    common = lazy_module("allocator.cli.common")


def _click_class(name: str) -> type[Exception]:
    """One of click's documented exception bases of the public ``typer.BadParameter``.

    typer raises click's exceptions: click's own up to typer 0.25 (which depends on click),
    a copy inside typer from 0.26 on (typer no longer depends on click, and the copy is a
    private module). ``typer.BadParameter`` is public in both, and click documents it as a
    ``UsageError``, itself a ``ClickException``: the classes are found there, so the same
    code catches what either typer raises.
    """
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name and issubclass(cls, Exception):
            return cls
    raise ImportError(f"typer.BadParameter is no longer a click {name}")  # pragma: no cover


#: click's base of every error it shows the user (``exit_code``, ``format_message()``, ``show()``)
ClickException = _click_class("ClickException")
#: click's command-line usage errors (exit status 2)
UsageError = _click_class("UsageError")


def _is_help_request(exc: Exception) -> bool:
    """click's ``NoArgsIsHelpError`` (click >= 8.2: a group run without arguments shows
    its help). It has no public name in typer and no attribute of its own, so it is told
    by its class name; older click shows the help and exits without an error."""
    return any(cls.__name__ == "NoArgsIsHelpError" for cls in type(exc).__mro__)


def usage_error_line(exc: Exception) -> str:
    """A command-line usage error (one of click's, :data:`ClickException`) as
    ``<option>: <what is wrong>`` (one line).

    The kind is told by click's documented attributes: ``NoSuchOption`` carries
    ``option_name`` and ``possibilities``, ``BadOptionUsage`` ``option_name``,
    ``BadParameter`` (public as ``typer.BadParameter``) ``param``, and its subclass
    ``MissingParameter`` ``param_type``.
    """
    field = "usage"
    message = getattr(exc, "format_message", lambda: str(exc))()
    option_name = getattr(exc, "option_name", None)
    if isinstance(exc, typer.BadParameter):
        param = exc.param
        if param is not None:
            opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
            name = getattr(param, "human_readable_name", None) or getattr(param, "name", None)
            field = opts[0] if opts else (name or "usage")
        if hasattr(exc, "param_type"):  # MissingParameter
            message = "missing (required)"
        else:
            message = exc.message
    elif isinstance(option_name, str) and hasattr(exc, "possibilities"):  # NoSuchOption
        possibilities = getattr(exc, "possibilities", None)
        field, message = option_name, "no such option"
        if possibilities:
            message += f" (did you mean {', '.join(sorted(possibilities))}?)"
    elif isinstance(option_name, str):  # BadOptionUsage
        field, message = option_name, getattr(exc, "message", message)
    message = " ".join(str(message).split()).rstrip(".")
    return f"{field}: {message[:1].lower() + message[1:]} (see --help)"


_LIST_ITEM = re.compile(r"^([-*•]|\d+[.)])\s")


def reflow(text: str | None) -> str | None:
    """A docstring as ``--help`` and the README show it: each paragraph one line (the
    terminal wraps it; the docstring's own line breaks would break it mid-sentence),
    list items (``- ...``, ``1. ...``) kept on lines of their own, paragraphs marked
    ``\\b`` (click's "do not rewrap") as written."""
    if not text:
        return text
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):
            out.append(para)
            continue
        lines: list[str] = []
        for line in para.splitlines():
            line = line.strip()
            if lines and not _LIST_ITEM.match(line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _no_flag_types(params: Sequence[Any]) -> None:
    """An on/off flag takes no value: show no ``<bool>`` type beside it in ``--help``."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""


class Command(TyperCommand):
    """Every ``allocator`` command: its help reflowed (:func:`reflow`) and no type shown
    for flags (``--help``, ``--engine``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(*args, **kwargs)
        _no_flag_types(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            _no_flag_types([option])
        return option


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
        except ClickException as exc:
            if not standalone_mode:
                raise
            exit_code = int(getattr(exc, "exit_code", 1))
            if _is_help_request(exc):
                getattr(exc, "show")()  # noqa: B009  (click's interface, not typed here)
                sys.exit(exit_code)

            code = common.fail(usage_error_line(exc)).exit_code
            sys.exit(code if isinstance(exc, UsageError) else exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise

            common.fail("interrupted: aborted")
            sys.exit(1)
        except BrokenPipeError:  # the reader of stdout went away (``| head``): quietly
            if not standalone_mode:
                raise

            staged.silence_stdout()
            sys.exit(1)
        except OSError as exc:  # a write the commands' own checks did not see (stdout)
            if not standalone_mode:
                raise

            staged.silence_stdout()
            sys.exit(common.fail(f"output: cannot write ({exc.strerror or exc})").exit_code)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(*args, **kwargs)
        _no_flag_types(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            _no_flag_types([option])
        return option


class _Typer(typer.Typer):
    """``typer.Typer`` whose commands are :class:`Command` unless they say otherwise."""

    def command(self, *args: Any, cls: type | None = None, **kwargs: Any) -> Callable:
        return super().command(*args, cls=cls or Command, **kwargs)


app = _Typer(
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


__all__ = [
    "ClickException",
    "Command",
    "OneLineErrors",
    "UsageError",
    "app",
    "reflow",
    "usage_error_line",
]
