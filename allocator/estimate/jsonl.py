"""JSON documents and JSON Lines of engine outputs, parsed within the input limits.

Engine outputs are not problem files: Python's ``json`` (which SGLang's benchmark and
servers write with) emits ``NaN`` and ``Infinity`` for non-finite floats, and SGLang's
``bench_serving`` writes ``"request_rate": Infinity`` for a closed loop. These readers
therefore accept the two constants and leave every field's range to the caller, but
otherwise hold the limits of :mod:`allocator.inputs`: at most
:data:`~allocator.inputs.MAX_DEPTH` levels of nesting, numbers of at most
:data:`~allocator.inputs.MAX_NUMBER_CHARS` characters, integers within ``|n| < 2**63``
and no key repeated in one object. Every failure is one :class:`InputError` line
naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..exceptions import InputError
from ..io.inputs import INT_LIMIT, MAX_DEPTH, MAX_LOG_BYTES, MAX_NUMBER_CHARS, read_input_text
from ..validate import finite, whole
from .base import quote


class _Bad(Exception):
    """A limit broken while parsing (the message names it)."""


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _Bad(f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})")
        value = kind(text)
        if kind is int and abs(value) >= INT_LIMIT:
            raise _Bad(f"integer out of range (|n| < 2**63): {text[:24]}")
        return value

    return parse


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Bad(f"duplicate key {quote(key)}")
        out[key] = value
    return out


def _depth_ok(value: object) -> bool:
    """Whether ``value`` nests at most :data:`MAX_DEPTH` levels (iterative walk)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth >= MAX_DEPTH:
            return False
        stack.extend((c, depth + 1) for c in children)
    return True


def parse_json_text(text: str, where: str) -> object:
    """One JSON value from ``text`` (module docstring); errors name ``where``."""
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_number(int), parse_float=_number(float)
        )
    except _Bad as exc:
        raise InputError(where, str(exc)) from None
    except RecursionError:
        raise InputError(where, f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise InputError(where, f"not JSON ({exc.msg}, column {exc.colno})") from None
    if not _depth_ok(value):
        raise InputError(where, f"nested deeper than {MAX_DEPTH} levels")
    return value


def read_text(path: Path) -> str:
    """The text of an engine output file (a regular file within the log size limit)."""
    return read_input_text(path, "INPUT", MAX_LOG_BYTES)


def json_lines(path: Path, text: str | None = None) -> Iterator[tuple[str, object]]:
    """``(where, value)`` for every non-blank line of a JSON Lines file, ``where`` being
    ``"NAME line N"``. A Server-Sent-Events prefix ``data: `` is dropped and the stream's
    closing ``data: [DONE]`` skipped, so a saved stream reads as its chunks."""
    if text is None:
        text = read_text(path)
    for number, line in enumerate(text.splitlines(), start=1):
        body = line.strip()
        if body.startswith("data:"):
            body = body[len("data:") :].strip()
            if body == "[DONE]":
                continue
        if not body:
            continue
        yield f"{path.name} line {number}", parse_json_text(body, f"{path.name} line {number}")


#: The largest count taken (exact as a float; far past any server's).
MAX_COUNT = 2**53


def whole_count(value: object, where: str) -> int:
    """``value`` as a count: a whole, finite, non-negative JSON number of at most 2**53.

    (JSON lines may hold ``NaN`` and ``Infinity``: not counts either. Past 2**53 a JSON
    number is no longer an exact count, and sums of such counts overflow the int64 totals.)
    """
    return whole(value, where, lo=0, hi=MAX_COUNT, floats=True, error=InputError)


def finite_number(value: object, where: str) -> float:
    """``value`` as a finite float (a JSON number; not a bool, NaN or infinity)."""
    return finite(value, where, error=InputError)


__all__ = [
    "MAX_COUNT",
    "finite_number",
    "json_lines",
    "parse_json_text",
    "read_text",
    "whole_count",
]
