"""Where the cheaper side changes along a capacity sweep: the one finder of crossings for
the load sweep (:mod:`.by_load`) and the request-rate sweep (:mod:`.by_rate`)."""

from __future__ import annotations

import numpy as np

#: The side a crossing names by the sign of ``without - with_spec``.
CHEAPER = {1.0: "speculation", -1.0: "no speculation", 0.0: "equal"}


def crossings(
    xs: np.ndarray, with_spec: np.ndarray, without: np.ndarray, axis: str = "tokens_per_s"
) -> list[dict]:
    """Where the cheaper side changes along a sweep.

    ``xs (L,)`` ascending (loads in tokens/s, or request rates); ``with_spec``, ``without``
    ``(L,)`` $/h (NaN: no fleet). Each entry: ``{"from_<axis>", "to_<axis>", "cheaper"}``
    — between those two consecutive points the comparison changes, and from the second
    on ``cheaper`` is ``"speculation"``, ``"no speculation"`` or ``"equal"``. Points where
    a side has no fleet are skipped.
    """
    xs = np.asarray(xs, dtype=float)
    with_spec = np.asarray(with_spec, dtype=float)
    without = np.asarray(without, dtype=float)
    idx = np.flatnonzero(np.isfinite(with_spec) & np.isfinite(without))
    sign = np.sign(without[idx] - with_spec[idx])  # +1: speculation cheaper
    return [
        {
            f"from_{axis}": float(xs[idx[a]]),
            f"to_{axis}": float(xs[idx[a + 1]]),
            "cheaper": CHEAPER[float(sign[a + 1])],
        }
        for a in np.flatnonzero(np.diff(sign) != 0)
    ]


__all__ = ["CHEAPER", "crossings"]
