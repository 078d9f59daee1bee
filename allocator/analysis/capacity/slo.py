"""SLOs for capacity at a request rate (docs/design.md §8.14): parsing the targets and
the prompts a run needs to read them.

**SLOs** (:func:`parse_slos`): a latency key of ``bench``'s document and a ceiling in ms,
``KEY=MS``: ``mean``, ``median`` or ``pN`` (any ``N`` in (0, 100)) of ``ttft``, ``tpot``,
``itl`` or ``e2el``, e.g. ``p99_ttft_ms=500``, ``p99.9_itl_ms=120``, ``median_e2el_ms=9000``.

**Prompts per run** (:func:`default_num_prompts`): enough that at least
:data:`MIN_TAIL` requests lie beyond the highest percentile asked (2,000 for p99), at least
:data:`MIN_PROMPTS`: a percentile read from one or two values moves with the seed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...exceptions import ParameterError

if TYPE_CHECKING:
    pass

_KEY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
#: Requests beyond the highest percentile asked, at least (the default --num-prompts).
MIN_TAIL = 20
#: Fewest requests per simulated run by default.
MIN_PROMPTS = 1000
#: Most requests per run chosen by default (a percentile needing more must be asked for
#: with ``num_prompts``).
MAX_DEFAULT_PROMPTS = 20_000
#: Relative tolerance when a latency is compared with its ceiling.
SLACK = 1e-12
#: Units in the last place of a run's clock a latency may be off by, per square root of
#: the steps (:func:`clock_ms`).
CLOCK_ULPS = 8.0


# ---------------------------------------------------------------- SLOs
@dataclass(frozen=True)
class SLO:
    """One latency target: ``key`` (``p99_ttft_ms``), its ceiling in ms, the latency
    (``ttft``, ``tpot``, ``itl``, ``e2el``), the statistic (``mean``, ``median``, ``pN``)
    and its percentile (``None`` for the mean, 50 for the median)."""

    key: str
    ceiling_ms: float
    latency: str
    stat: str
    percentile: float | None

    def met(self, value: float, clock_ms: float = 0.0) -> bool:
        """``value`` (ms) at most the ceiling, within :data:`SLACK` and ``clock_ms``: the
        rounding of the run's clock that measured it (:func:`clock_ms`), so that a
        ceiling equal to the lowest value a run reaches is met."""
        return value <= self.ceiling_ms * (1.0 + SLACK) + clock_ms

    def text(self) -> str:
        return f"{self.key} <= {self.ceiling_ms:g}"


def clock_ms(result: Any) -> float:
    """The rounding a latency of a simulated run may carry, ms: its clock (seconds from
    the start, a sum of step times) holds :data:`CLOCK_ULPS` units in the last place of its
    span per square root of the steps summed. A latency is a difference of two clock
    readings: at a span of 2e5 s (200 requests at 0.001/s) it is off by about 5e-9 ms."""
    span = max(float(result.duration_s), 1.0)
    return 1000.0 * CLOCK_ULPS * float(np.spacing(span)) * math.sqrt(max(int(result.steps), 1))


def parse_slo_key(key: str) -> tuple[str, str, float | None]:
    """``(latency, stat, percentile)`` of an SLO key; :class:`ParameterError` on ``slo``."""
    found = _KEY.match(key.strip())
    if not found:
        raise ParameterError(
            "slo",
            f"unknown SLO {key!r}: expected mean|median|pN _ ttft|tpot|itl|e2el _ms, e.g. "
            "p99_ttft_ms or p99.9_itl_ms",
        )
    stat, pct, latency = found.group(1), found.group(2), found.group(3)
    if pct is not None:
        p = float(pct)
        if not 0 < p < 100:
            raise ParameterError("slo", f"{key}: the percentile must lie in (0, 100), got {pct}")
        return latency, stat, p
    return latency, stat, 50.0 if stat == "median" else None


def parse_slos(items: Sequence[str] | Mapping[str, float]) -> tuple[SLO, ...]:
    """SLOs from ``KEY=MS`` strings (or a mapping of key to ms). Each key once; ceilings
    finite and positive. :class:`ParameterError` on ``slo`` otherwise."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        for item in items:
            if not isinstance(item, str):
                raise ParameterError("slo", f"expected KEY=MS, got {item!r}")
            key, sep, value = item.partition("=")
            if not sep:
                raise ParameterError("slo", f"expected KEY=MS (e.g. p99_ttft_ms=500), got {item!r}")
            pairs.append((key.strip(), value.strip()))
    if not pairs:
        raise ParameterError("slo", "give at least one SLO, KEY=MS (e.g. p99_ttft_ms=500)")
    out: list[SLO] = []
    seen: dict[tuple, str] = {}
    for key, value in pairs:
        latency, stat, pct = parse_slo_key(key)
        # one statistic once, however it is written (p99 and p99.0; median and p50)
        what = (latency, "mean") if pct is None else (latency, pct)
        try:
            ms = float(value)
        except (TypeError, ValueError):
            raise ParameterError("slo", f"{key}: {value!r} is not a number of ms") from None
        if not (math.isfinite(ms) and ms > 0):
            raise ParameterError(
                "slo", f"{key}: the ceiling must be a positive number of ms, got {value}"
            )
        if what in seen:
            same = "" if seen[what] == key else f" (as {seen[what]})"
            raise ParameterError("slo", f"{key} is given twice{same}")
        seen[what] = key
        out.append(SLO(key, ms, latency, stat, pct))
    return tuple(out)


def _top(slos: Sequence[SLO]) -> float | None:
    """The highest tail percentile (above the median) that ``slos`` read, or ``None``."""
    tops = [s.percentile for s in slos if s.percentile is not None and s.percentile > 50]
    return max(tops) if tops else None


def thin_tail(slos: Sequence[SLO], n: int) -> str:
    """``""``, or a clause saying that ``n`` requests leave fewer than :data:`MIN_TAIL`
    beyond the highest percentile ``slos`` read (P99 of 300 requests rests on 3)."""
    top = _top(slos)
    if top is None:
        return ""
    beyond = n * (100.0 - top) / 100.0
    if beyond >= MIN_TAIL:
        return ""
    return (
        f": only about {beyond:.3g} of them lie beyond p{top:g}, fewer than {MIN_TAIL}, so that "
        "percentile rests on few requests (num_prompts unset: enough)"
    )


def default_num_prompts(slos: Sequence[SLO]) -> tuple[int, str]:
    """Requests per run, and why: at least :data:`MIN_TAIL` beyond the highest percentile
    asked, at least :data:`MIN_PROMPTS`, at most :data:`MAX_DEFAULT_PROMPTS`."""
    top = _top(slos)
    need = MIN_PROMPTS
    if top is not None:
        need = max(MIN_PROMPTS, math.ceil(MIN_TAIL * 100.0 / (100.0 - top) - 1e-9))
    n = min(need, MAX_DEFAULT_PROMPTS)
    if top is None:
        why = f"{n:,} requests per run (at least {MIN_PROMPTS:,}: no SLO reads a tail percentile)"
    else:
        why = (
            f"{n:,} requests per run: at least {MIN_TAIL} lie beyond the highest percentile "
            f"asked (p{top:.10g}), so that it is read from a tail of {MIN_TAIL} or more "
            "requests, not one or two, and moves little with the seed"
        )
        if n < need:
            why += (
                f" (capped at {MAX_DEFAULT_PROMPTS:,}; p{top:.10g} would want {need:,}: give "
                "num_prompts for a steadier tail)"
            )
    return n, why


__all__ = [
    "thin_tail",
    "CLOCK_ULPS",
    "MAX_DEFAULT_PROMPTS",
    "MIN_PROMPTS",
    "MIN_TAIL",
    "SLACK",
    "SLO",
    "clock_ms",
    "default_num_prompts",
    "parse_slo_key",
    "parse_slos",
]
