"""The argument checks every package repeats: whole numbers, seeds, rates, probabilities and
finite numbers, each written once.

Each check returns the value as the Python number it holds (``int`` or ``float``) or
raises ``error`` (:class:`ParameterError` by default; the readers of files pass
:class:`InputError`) on ``field``, the parameter's name or the field's dotted path, with
one message shape::

    must be <what>, got <value>

``<what>`` names the kind and the range (``an integer in 1..200,000``, ``an integer >= 0``,
``a number > 0 requests/s (or inf)``, ``a finite number >= 0``, ``a number in (0, 1)``);
``<value>`` is the ``repr`` of what was given (:func:`shown`: a numpy scalar as the Python
number it holds; text only when short and shaped like nothing secret; other objects by
their type). What is a number: an ``int``, ``float`` or numpy number, never
a ``bool`` (``True`` is not 1 here) and never a string (``"5"`` is text, not a count).

Path checks are not here: the files the package reads and writes are checked in one
place already (:mod:`allocator.io.inputs`, the staged outputs of :mod:`allocator.io`).

This module imports only the standard library, numpy and :mod:`allocator.exceptions`, so
that every package, the entities of :mod:`allocator.core` included, may use it.
"""

from __future__ import annotations

import math

import numpy as np

from .exceptions import InputError, ParameterError

#: Largest seed: seeds are non-negative 63-bit integers (numpy's ``SeedSequence`` takes
#: any, and ``0 .. 2**63 - 1`` is what an ``int64`` column or a JSON reader keeps exactly).
MAX_SEED = 2**63 - 1

#: Longest ``repr`` of refused text shown in a message.
SHOWN = 40


def shown(value: object) -> str:
    """``value`` as a message shows it. A number (a numpy scalar as the Python number it
    holds), ``None`` or a bool: its ``repr``. Text: its ``repr`` when short (at most
    :data:`SHOWN` characters) and shaped like nothing secret (no ``=`` as in ``KEY=VALUE``,
    no ``@`` as in ``user:password@host``: a value read from an input may be anything,
    ``/proc/self/environ`` included), else only its length. Anything else: its type."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and value.bit_length() > 128:  # repr fails past 4,300 digits
        return f"an integer of {value.bit_length():,} bits"
    if value is None or isinstance(value, bool | int | float | complex):
        return repr(value)
    if isinstance(value, str):
        text = repr(value)  # control characters, bidi overrides, U+2028 escaped
        if len(text) <= SHOWN and "=" not in value and "@" not in value:
            return text
        return f"text of {len(value):,} characters (not shown)"
    return f"a {type(value).__name__}"


def refuse(
    field: str, what: str, value: object, error: type[InputError] = ParameterError
) -> InputError:
    """The one message shape: ``error(field, "must be <what>, got <value>")`` (raised by the
    caller: ``raise refuse(...)``)."""
    return error(field, f"must be {what}, got {shown(value)}")


def _is_integer(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _whole_text(n: int) -> str:
    """``n`` as a message writes it: ``2**53`` and ``2**63 - 1`` for the powers of two that
    bound counts and seeds, digits grouped by thousands otherwise."""
    for k in range(33, 129):
        if n == 2**k:
            return f"2**{k}"
        if n == 2**k - 1:
            return f"2**{k} - 1"
    return f"{n:,}"


def _range(lo: float | None, hi: float | None, integer: bool) -> str:
    def num(v: float) -> str:
        return _whole_text(int(v)) if integer else f"{v:g}"

    if lo is not None and hi is not None:
        return f" in {num(lo)}..{num(hi)}" if integer else f" in [{num(lo)}, {num(hi)}]"
    if lo is not None:
        return f" >= {num(lo)}"
    if hi is not None:
        return f" <= {num(hi)}"
    return ""


def whole(
    value: object,
    field: str,
    *,
    lo: int | None = None,
    hi: int | None = None,
    floats: bool = False,
    error: type[InputError] = ParameterError,
) -> int:
    """``value`` as an ``int`` in ``lo..hi`` (either bound may be left open).

    An ``int`` or numpy integer; with ``floats`` (JSON numbers, YAML fields) also a float
    holding a whole number (``3.0``, ``-0.0``)."""
    ok = _is_integer(value) or (
        floats
        and isinstance(value, float | np.floating)
        and math.isfinite(value)
        and float(value).is_integer()
    )
    if ok:
        n = int(value)  # type: ignore[call-overload]
        if (lo is None or n >= lo) and (hi is None or n <= hi):
            return n
    raise refuse(field, "an integer" + _range(lo, hi, True), value, error)


def seed(value: object, field: str = "seed", *, error: type[InputError] = ParameterError) -> int:
    """``value`` as a seed: an integer in ``0..``:data:`MAX_SEED`."""
    return whole(value, field, lo=0, hi=MAX_SEED, error=error)


def rate(
    value: object,
    field: str,
    *,
    inf: bool = False,
    unit: str = "",
    error: type[InputError] = ParameterError,
) -> float:
    """``value`` as a positive, finite ``float``; with ``inf`` also infinity (a request rate
    of ``inf``: every request at once). ``unit`` is named in the message."""
    if _is_number(value):
        v = float(value)  # type: ignore[arg-type]
        if v > 0 and (math.isfinite(v) or (inf and v == math.inf)):
            return v
    what = ("a number > 0" if inf else "a finite number > 0") + (f" {unit}" if unit else "")
    raise refuse(field, what + (" (or inf)" if inf else ""), value, error)


def probability(
    value: object,
    field: str,
    *,
    zero: bool = True,
    one: bool = True,
    error: type[InputError] = ParameterError,
) -> float:
    """``value`` as a ``float`` in ``[0, 1]``; ``zero=False`` or ``one=False`` leave that
    end out (a quantile is in ``(0, 1)``)."""
    if _is_number(value):
        v = float(value)  # type: ignore[arg-type]
        if (v >= 0 if zero else v > 0) and (v <= 1 if one else v < 1):
            return v + 0.0  # -0.0 as 0.0
    span = ("[" if zero else "(") + "0, 1" + ("]" if one else ")")
    raise refuse(field, f"a number in {span}", value, error)


def finite(
    value: object,
    field: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    unit: str = "",
    error: type[InputError] = ParameterError,
) -> float:
    """``value`` as a finite ``float`` in ``[lo, hi]`` (either bound may be left open).
    ``unit`` is named in the message."""
    if _is_number(value):
        v = float(value)  # type: ignore[arg-type]
        if math.isfinite(v) and (lo is None or v >= lo) and (hi is None or v <= hi):
            return v + 0.0  # -0.0 as 0.0
    what = "a finite number" + _range(lo, hi, False) + (f" {unit}" if unit else "")
    raise refuse(field, what, value, error)


__all__ = [
    "MAX_SEED",
    "SHOWN",
    "finite",
    "probability",
    "rate",
    "refuse",
    "seed",
    "shown",
    "whole",
]
