"""The ``LO:HI:STEPS`` ranges of the command line (``plan --sweep``, ``capacity --sweep-load``).

One parser, :func:`parse_range`; each command keeps its own rules through its
arguments: whether ``LO`` may be 0, a largest ``STEPS``, and the words of its messages.
Errors are :class:`~allocator.exceptions.ParameterError` naming the parameter
(``sweep``, ``sweep_load``), which the command line shows as its flag.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import ParameterError

#: Most steps of one range: loads ``--sweep-load`` prices (each one row of the sizing),
#: hosting caps ``plan --sweep`` plans (each one MILP).
MAX_SWEEP_STEPS = 10_000


def parse_range(
    text: str,
    field: str,
    *,
    positive: bool,
    max_steps: int | None = None,
    usage: str = "LO:HI:STEPS",
    given: str | None = None,
) -> np.ndarray:
    """``LO:HI:STEPS`` into ``STEPS`` equally spaced values from ``LO`` to ``HI``
    inclusive (``(STEPS,)``; one step is ``[HI]``).

    ``positive``: ``LO`` must be above 0 (else at least 0); ``max_steps``: the most
    ``STEPS`` (``None``: no bound). ``usage`` is the form the error for a malformed range
    shows, beside ``given`` (default ``text``), the argument as the user wrote it.
    """
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        lo, hi, steps = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        shown = text if given is None else given
        raise ParameterError(field, f"expected {usage}, got {shown!r}") from None
    low_ok = lo > 0 if positive else lo >= 0
    if not (np.isfinite(lo) and np.isfinite(hi)) or not low_ok or hi < lo:
        rule = "0 < LO <= HI" if positive else "0 <= LO <= HI"
        raise ParameterError(field, f"the range {lo:g}:{hi:g} must satisfy {rule}")
    if max_steps is not None and not 1 <= steps <= max_steps:
        raise ParameterError(field, f"STEPS must be 1..{max_steps:,} (got {steps:,})")
    if steps < 1:
        raise ParameterError(field, f"STEPS must be at least 1 (got {steps})")
    return np.array([float(hi)]) if steps == 1 else np.linspace(lo, hi, steps)


def parse_load_range(text: str) -> np.ndarray:
    """``capacity --sweep-load LO:HI:STEPS``: loads in tokens/s, ``0 < LO <= HI``, at most
    :data:`MAX_SWEEP_STEPS` steps."""
    return parse_range(text, "sweep_load", positive=True, max_steps=MAX_SWEEP_STEPS)


def parse_hosting_range(rng: str, given: str) -> np.ndarray:
    """``plan --sweep hosting_cost=LO:HI:STEPS`` (``rng`` the part after ``=``, ``given``
    the whole argument): hosting caps, ``0 <= LO <= HI``, at most :data:`MAX_SWEEP_STEPS`
    steps (as ``capacity --sweep-load``)."""
    return parse_range(
        rng,
        "sweep",
        positive=False,
        max_steps=MAX_SWEEP_STEPS,
        usage="hosting_cost=LO:HI:STEPS",
        given=given,
    )


__all__ = ["MAX_SWEEP_STEPS", "parse_hosting_range", "parse_load_range", "parse_range"]
