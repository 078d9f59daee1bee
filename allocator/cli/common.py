"""Shared pieces of the command line: error handling, consoles, output options."""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar, cast

import typer
from rich.console import Console
from rich.text import Text

from ..core.problem import COST_METRICS
from ..exceptions import InputError, ParameterError, SolverError
from ..io.inputs import recording_inputs
from ..io.quoting import escape_text
from ..io.staged import (
    check_writable,
    stage_stdout,
    staged_outputs,
    to_json,
    write_atomic,
    write_stdout,
)
from ..validate import MAX_SEED

P = ParamSpec("P")
R = TypeVar("R")


def escape_controls(text: str) -> str:
    r"""``text`` with every control character but newline written as ``\xNN`` (``\t``
    for a tab; :func:`allocator.io.quoting.escape_text`): C0, DEL, C1, line separators and
    bidirectional overrides. An ESC in a drafter's name (``ESC [2J``) is text, never a
    terminal command; names hold no newline (they are one line)."""
    return escape_text(text, keep="\n")


class SafeConsole(Console):
    """A rich console that prints every string it is given (table cells, titles,
    messages) with its control characters escaped (:func:`escape_controls`); its own
    styling still reaches a terminal. Widths are measured on the escaped text, so
    tables stay aligned."""

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(escape_controls(text), **kwargs)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return False


class _Stdout(io.TextIOBase):
    """What ``out`` writes to: the current ``sys.stdout`` (tests swap it), through
    :func:`~allocator.io.staged.write_stdout` (a closed or full stdout is one error line),
    and never touched by an empty write (rich writes ``""`` when a capture ends, and
    ``/dev/full`` refuses even that)."""

    def write(self, text: str) -> int:
        if text:
            write_stdout(text)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return _is_terminal(sys.stdout)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(sys.stdout, "encoding", None) or "utf-8"


#: Human output (tables) goes to stdout; messages and progress to stderr. Neither
#: interprets rich markup: names and labels from a file (``[bold]``) print as written,
#: and control characters in them are shown escaped (:class:`SafeConsole`).
out = SafeConsole(
    file=cast(IO[str], _Stdout()),
    highlight=False,
    markup=False,
    width=None if _is_terminal(sys.stdout) else 120,
)
err = SafeConsole(stderr=True, highlight=False, markup=False)

JsonOption = typer.Option(
    None,
    "--json",
    help="Write the JSON document to PATH, or to stdout with '-' (stdout then "
    "holds only the JSON).",
    metavar="PATH|-",
)


ProblemArg = typer.Argument(
    ..., help="Problem file (YAML or JSON).", show_default=False, metavar="PROBLEM"
)

#: ``--budget METRIC=VALUE`` (repeatable), read by :func:`parse_budget`.
BudgetOption = typer.Option(
    None,
    "--budget",
    help="METRIC=VALUE, replacing the problem's cap on METRIC (repeatable), e.g. hosting_cost=8.",
    metavar="METRIC=VALUE",
)
#: ``--engine vllm|sglang``: answer only with what that engine serves.
EngineOption = typer.Option(
    "vllm",
    "--engine",
    help="Answer with what this engine serves: vllm or sglang (one drafter per server).",
    metavar="vllm|sglang",
)
#: ``--pooled``: also pooled configurations, labelled as the upper bound no engine serves.
PooledOption = typer.Option(
    False,
    "--pooled",
    help="Also pool several drafters (any-correct): an upper bound no engine serves, labelled so.",
)
#: The routers ``--router`` takes, as :data:`allocator.sim.routers.ROUTERS` names them
#: (written out, so that no command loads the simulator to print its help; a test holds
#: the two equal).
ROUTER_NAMES = ("round-robin", "least-requests", "least-kv", "prefix-affinity", "session-affinity")
#: ``--router``: the rule a fleet's router routes by (:mod:`allocator.sim.routers`).
RouterOption = typer.Option(
    None,
    "--router",
    help="The router in front of the replicas: " + ", ".join(ROUTER_NAMES) + " (default "
    "round-robin past one replica).",
    metavar="NAME",
)

#: ``--[no-]async-scheduling``: the scheduler `bench` and `capacity --request-rate` simulate.
AsyncSchedulingOption = typer.Option(
    False,
    "--async-scheduling",
    help="Schedule each step while the one before it runs, as vLLM's default does, over a "
    "file whose serving.scheduler.async_scheduling is false.",
    show_default=False,
)
NoAsyncSchedulingOption = typer.Option(
    False,
    "--no-async-scheduling",
    help="vLLM's synchronous scheduler (vllm serve --no-async-scheduling): each step "
    "scheduled after the one before it is processed. Default: "
    "serving.scheduler.async_scheduling (true, as vLLM).",
    show_default=False,
)


def async_choice(on: bool, off: bool) -> bool | None:
    """``--async-scheduling`` / ``--no-async-scheduling`` as the API's ``async_scheduling``
    (``None``: neither given, the file's); both given is refused on the second. (Two flags,
    not typer's ``--x/--no-x`` pair, whose second name takes a column of its own in the
    help and truncates every other option's name.)"""
    if on and off:
        raise InputError(
            "--no-async-scheduling", "give --async-scheduling or --no-async-scheduling, not both"
        )
    return True if on else False if off else None


# The requests of `bench` and `capacity --request-rate`, named as vLLM's benchmark names them.
BurstinessOption = typer.Option(
    1.0,
    "--burstiness",
    help="Shape of the gamma gaps between arrivals: 1 is Poisson, larger is steadier.",
    metavar="B",
)
InputLenOption = typer.Option(
    None,
    "--input-len",
    help="Prompt tokens of every request (fixed lengths; not with the --random-* options).",
    metavar="I",
)
OutputLenOption = typer.Option(
    None,
    "--output-len",
    help="Output tokens of every request. Every request runs to its output length, as "
    "vllm bench serve --ignore-eos (no stop token is simulated).",
    metavar="O",
)
RandomInputLenOption = typer.Option(
    None,
    "--random-input-len",
    help="vLLM's random dataset: prompt tokens drawn uniformly around I (default 1024 when "
    "any --random-* option is given), as vllm bench serve --dataset-name random draws them "
    "with --seed.",
    metavar="I",
)
RandomOutputLenOption = typer.Option(
    None,
    "--random-output-len",
    help="vLLM's random dataset: output tokens drawn uniformly around O (default 128); each "
    "request runs to its drawn length (vLLM sets --ignore-eos for this dataset).",
    metavar="O",
)
RandomRangeRatioOption = typer.Option(
    None,
    "--random-range-ratio",
    help="vLLM's random dataset: each length L drawn uniformly from the integers "
    'floor(L(1-R)) to ceil(L(1+R)), R in [0, 1) (default 0), or {"input": A, "output": B} '
    "for each.",
    metavar="R",
)
LengthsFromOption = typer.Option(
    None,
    "--lengths-from",
    help="Prompt and output lengths drawn with replacement (seeded) from every row of a CSV "
    "with the Azure trace's ContextTokens and GeneratedTokens (no TIMESTAMP needed), at "
    "generated arrivals.",
    metavar="PATH",
)
SharedPrefixLenOption = typer.Option(
    0,
    "--shared-prefix-len",
    help="Every prompt starts with the same N tokens (a system prompt, as vLLM's "
    "prefix-repetition dataset); at most the prompt length.",
    metavar="N",
)
TurnsOption = typer.Option(
    1,
    "--turns",
    help="Multi-turn sessions of N requests: each turn's prompt is the previous prompt, its "
    "answer and a new message of --input-len tokens; a turn is sent --think-time after the "
    "previous one finishes (closed loop). Sessions start at the request rate / N.",
    metavar="N",
)
ThinkTimeOption = typer.Option(
    0.0,
    "--think-time",
    help="Seconds between a turn's last token and the next turn's send (with --turns).",
    metavar="S",
)
NoPrefixCachingOption = typer.Option(
    False,
    "--no-prefix-caching",
    help="Turn vLLM's automatic prefix caching off (default: the file's "
    "serving.scheduler.enable_prefix_caching, on unless it says false).",
)
#: ``--stages``: staged load (bench's own definition stays in cli/bench.py for now; front
#: takes this one).
StagesOption = typer.Option(
    None,
    "--stages",
    help="Staged load RATE:SECONDS[,RATE:SECONDS...] (as inference-perf's load stages): "
    "each stage Poisson arrivals (gamma with --burstiness) at RATE requests/s for SECONDS, "
    "one after another; the arrivals drawn set the number of requests (no --num-prompts, "
    "no --request-rate).",
    metavar="R:S,...",
)
#: ``--slo KEY=MS`` (repeatable), read by
#: :func:`allocator.analysis.capacity.slo.parse_slos`; what the command does with it is in
#: the command's own help.
SloOption = typer.Option(
    None,
    "--slo",
    help="KEY=MS: a latency ceiling as capacity takes it, mean|median|pN of "
    "ttft|tpot|itl|e2el, e.g. p99_ttft_ms=500 (repeatable).",
    metavar="KEY=MS",
)
TraceOption = typer.Option(
    None,
    "--trace",
    help="Arrival times and lengths from a CSV in the Azure LLM inference trace format "
    "(TIMESTAMP,ContextTokens,GeneratedTokens), read as is.",
    metavar="PATH",
)


def parse_budget(items: list[str] | None) -> dict[str, float]:
    """``--budget METRIC=VALUE`` items as caps by metric (one of the model's cost metrics;
    ``drafters`` a whole number); :class:`InputError` naming ``--budget`` otherwise."""
    caps: dict[str, float] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in COST_METRICS:
            raise InputError(
                "--budget", f"expected METRIC=VALUE with METRIC one of {', '.join(COST_METRICS)}"
            )
        try:
            v = float(value)
        except ValueError:
            raise InputError("--budget", f"{name}: {value!r} is not a number") from None
        least = 1 if name == "drafters" else 0
        if not math.isfinite(v) or v < least:
            raise InputError("--budget", f"{name}: {value!r} must be a finite number >= {least}")
        if name == "drafters" and not v.is_integer():
            raise InputError("--budget", f"drafters: {value!r} is not a whole number of drafters")
        caps[name] = v
    return caps


def fail(message: str) -> typer.Exit:
    """Print ``error: <message>`` as one line on stderr; the exit (status 2) to raise.
    Control characters (a newline, an ESC or a C1 CSI in a drafter's name), line
    separators and bidirectional overrides are shown escaped: the error stays one line
    and acts on no terminal (:func:`allocator.io.quoting.escape_text`)."""
    line = escape_text(message)
    err.print(Text.assemble(("error:", "bold red"), " ", line), soft_wrap=True)
    return typer.Exit(2)


#: Notes of the running command, printed only once it has succeeded.
_NOTES: ContextVar[list[str] | None] = ContextVar("allocator_notes", default=None)


def note(message: str) -> None:
    """A message for stderr, held until the command succeeds: a failing command prints
    its one ``error:`` line and nothing before it."""
    pending = _NOTES.get()
    if pending is None:
        err.print(message, soft_wrap=True)
    else:
        pending.append(message)


#: Options that name an output file: an empty value names none and is refused.
OUTPUT_FLAGS = frozenset({"--json", "--csv", "--plot", "--out", "--per-request"})

#: Top-level fields of the problem file whose names are also parameter names
#: (``--drafters``, ``--budget``, ``--errors``): an error naming one is the file's unless it
#: is a :class:`~allocator.exceptions.ParameterError`.
_FILE_FIELDS = frozenset({"drafters", "budget", "errors"})
_HEAD = re.compile(r"[a-z][a-z0-9_]*")


def option_flags(fn: Callable) -> dict[str, str]:
    """The command's options by parameter name: ``{"tpot_ms": "--tpot-ms", "json_path":
    "--json", ...}``, read from the typer options of ``fn``'s signature; each long flag is
    also listed under its own name in snake case (``--tokens-per-s`` as ``tokens_per_s``),
    the name the library gives the same parameter."""
    flags: dict[str, str] = {}
    for name, param in inspect.signature(fn).parameters.items():
        decls = [
            d.split("/")[0]  # "--adaptive/--no-adaptive": the flag is --adaptive
            for d in getattr(param.default, "param_decls", None) or ()
            if d.startswith("--")
        ]
        if decls:
            flags.setdefault(decls[0][2:].replace("-", "_"), decls[0])
            flags[name] = decls[0]
    return flags


def flag_field(exc: InputError, flags: dict[str, str]) -> str:
    """``exc.field`` as the user gave it: a library parameter name (``tpot_ms``, ``costs:
    unit_cost``) becomes the command's flag (``--itl-ms``, ``--costs: unit_cost``); a
    problem-file field (``drafters.1.acceptance``) stays as it is. The one place where
    parameter names are mapped to flags."""
    field = exc.field
    m = _HEAD.match(field)
    if m is None or m.group(0) not in flags:
        return field
    if m.group(0) in _FILE_FIELDS and not isinstance(exc, ParameterError):
        return field
    return flags[m.group(0)] + field[m.end() :]


_NAMED_PARAMETER = re.compile(r"\(([a-z][a-z0-9_]*)\)")


def flag_message(exc: InputError, flags: dict[str, str]) -> str:
    """``exc.message`` as the user gave the command: in a
    :class:`~allocator.exceptions.ParameterError`'s message, another parameter named in
    parentheses (``give local workers or a Ray cluster (ray), not both``) becomes its flag
    (``(--ray)``)."""
    if not isinstance(exc, ParameterError):
        return exc.message
    return _NAMED_PARAMETER.sub(
        lambda m: f"({flags[m.group(1)]})" if m.group(1) in flags else m.group(), exc.message
    )


#: The exit status of a command ended by ``SIGTERM`` (128 + the signal, as a shell reports).
TERMINATED = 128 + signal.SIGTERM


#: Seconds after which a swallowed ``SIGTERM`` is sent again (:func:`_redeliver`).
REDELIVER_S = 0.01


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(TERMINATED)


def _redeliver(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """A ``sys.unraisablehook`` that sends ``SIGTERM`` again when the ``SystemExit`` of
    :func:`_terminated` was raised where Python cannot propagate it (an ``os.fork``
    hook such as logging's lock release, a ``__del__``), from a timer thread after
    :data:`REDELIVER_S`, so that it arrives in ordinary code and ends the command there.
    Anything else goes to ``hook``."""

    def unraisable(info: Any) -> None:
        exc = info.exc_value
        if isinstance(exc, SystemExit) and exc.code == TERMINATED:
            # not from here: a handler run inside this hook would be swallowed again
            again = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGTERM))
            again.daemon = True
            again.start()
            return
        hook(info)

    return unraisable


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """Within (in the main thread): ``SIGTERM`` raises ``SystemExit(143)`` instead of
    ending the process where it stands, so that what a ``with`` block holds is released
    as for Ctrl-C (``SIGINT``, Python's ``KeyboardInterrupt``): staged output files
    are removed (:func:`~allocator.io.staged.staged_outputs`), local worker processes
    terminated (:class:`~allocator.analysis.capacity.workers.Workers`). Where the exit is
    raised inside code that swallows exceptions (it printed "Exception ignored" and the
    command ran on to exit 0), the signal is sent again (:func:`_redeliver`). The handler
    and ``sys.unraisablehook`` before are restored on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _terminated)
    hook = sys.unraisablehook
    sys.unraisablehook = _redeliver(hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
        sys.unraisablehook = hook


def handles_input_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a command so that bad input ends in one line on stderr and exit status 2.

    :class:`InputError` becomes ``error: <field>: <message>``, the field a flag where it
    names a parameter (:func:`flag_field`); a :class:`~allocator.exceptions.SolverError`
    becomes the same one line with exit status 1. Inside, every output file
    is only prepared and put in place once the whole command has succeeded
    (:func:`~allocator.io.staged.staged_outputs`), no output may overwrite a file the
    command read, and tables (``out``) and notes (:func:`note`) wait for success.
    ``SIGTERM`` ends it as ``SystemExit(143)`` (:func:`terminate_as_exit`), leaving no
    temporary file and no worker process behind.
    """

    flags = option_flags(fn)
    outputs = {name: flag for name, flag in flags.items() if flag in OUTPUT_FLAGS}

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        pending: list[str] = []
        token = _NOTES.set(pending)
        try:
            with terminate_as_exit(), recording_inputs(), staged_outputs():
                for name, flag in outputs.items():
                    value = kwargs.get(name)
                    if isinstance(value, str) and not value.strip():
                        raise InputError(flag, "is empty: give a file name")
                # tables wait too: a command that fails after drawing one shows only its
                # error; they reach stdout after every output file is in place
                with out.capture() as shown:
                    result = fn(*args, **kwargs)
                table = shown.get()
                if table:
                    stage_stdout(table)
        except InputError as exc:
            raise fail(f"{flag_field(exc, flags)}: {flag_message(exc, flags)}") from None
        except SolverError as exc:
            fail(f"{flag_field(InputError(exc.field, exc.message), flags)}: {exc.message}")
            raise typer.Exit(1) from None
        except MemoryError:
            raise fail(
                "memory: out of memory (narrow the search space with search.m.max or "
                "search.k.max, or lower --samples)"
            ) from None
        finally:
            _NOTES.reset(token)
        for message in pending:
            err.print(message, soft_wrap=True)
        return result

    return wrapper


def precheck_outputs(**paths: str | None) -> None:
    """Check that every output PATH (not '-') can be written, before any work."""
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path and path != "-":
            name = "--" + option.replace("_", "-")
            if path.endswith(("/", os.sep)):
                raise InputError(name, f"{path} ends in a slash: give a file name, not a folder")
            check_writable(path, name)
            where = Path(path).resolve()
            if where in seen and not (where.exists() and not where.is_file()):
                raise InputError(name, f"{path} is also the {seen[where]} output")
            seen[where] = name


def emit_text(text: str) -> None:
    """``text`` on stdout: at once, or inside a command once its output files are in place."""
    stage_stdout(text)


def emit_json(doc: object, path: str | None) -> None:
    if path is None:
        return
    text = to_json(doc)
    if path == "-":
        emit_text(text)
    else:
        write_atomic(path, text, "--json")


__all__ = [
    "AsyncSchedulingOption",
    "NoAsyncSchedulingOption",
    "async_choice",
    "BurstinessOption",
    "InputLenOption",
    "LengthsFromOption",
    "OutputLenOption",
    "RandomInputLenOption",
    "RandomOutputLenOption",
    "RandomRangeRatioOption",
    "SloOption",
    "StagesOption",
    "TraceOption",
    "MAX_SEED",
    "OUTPUT_FLAGS",
    "BudgetOption",
    "EngineOption",
    "JsonOption",
    "PooledOption",
    "ROUTER_NAMES",
    "RouterOption",
    "ProblemArg",
    "SafeConsole",
    "emit_json",
    "emit_text",
    "err",
    "escape_controls",
    "fail",
    "flag_field",
    "flag_message",
    "handles_input_errors",
    "terminate_as_exit",
    "note",
    "option_flags",
    "out",
    "parse_budget",
    "precheck_outputs",
]
