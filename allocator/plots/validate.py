"""``validate --plot``: each run's predicted metrics against its measured ones, one panel
per metric family (TTFT, TPOT, ITL, E2EL, throughput), on log axes, with the line
``y = x`` and a band of ±10% about it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from .bench import plain_number
from .common import check_plot_path, figure, literal_text, save

if TYPE_CHECKING:
    import matplotlib.ticker as mticker
else:
    mticker = lazy_module("matplotlib.ticker")

#: Half-width of the band drawn about ``y = x``, relative.
BAND = 0.10
#: Axis names of the panels.
UNITS = {
    "TTFT": "TTFT (ms)",
    "TPOT": "TPOT (ms)",
    "ITL": "ITL (ms)",
    "E2EL": "E2EL (ms)",
    "throughput": "throughput (requests/s, tokens/s)",
}
#: Marker and colour by statistic (``p50`` is ``median``'s value and is not drawn again).
_STYLE = {
    "mean": ("o", "C0"),
    "median": ("s", "C1"),
    "p90": ("v", "C2"),
    "p95": ("<", "C4"),
    "p99": ("^", "C3"),
    "request": ("o", "C0"),
    "output": ("s", "C1"),
    "total": ("D", "C2"),
}
_OTHER = ("x", "C7")


def _statistic(key: str) -> str:
    """``mean``, ``median``, ``pNN`` of a latency key, or the throughput's first word."""
    return key.split("_")[0]


def points(
    doc: Mapping, family: Callable[[str], str | None], families: Sequence[str]
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``{family: {statistic: (measured, predicted)}}`` of every metric of ``validate``'s
    document with a positive measured and predicted value (a log axis shows no other),
    ``p50`` left out (it is the median). ``family(key)`` names a metric's panel (``None``:
    not drawn), the panels in the order of ``families`` (the analysis's own rule, passed
    in: the plots compute nothing)."""
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for run in doc["runs"]:
        for key, m in run["metrics"].items():
            fam = family(key)
            meas, pred = m["measured"], m["predicted"]
            stat = _statistic(key)
            if fam is None or stat == "p50" or pred is None or not meas > 0 or not pred > 0:
                continue
            xs, ys = out.setdefault(fam, {}).setdefault(stat, ([], []))
            xs.append(float(meas))
            ys.append(float(pred))
    order = list(_STYLE)
    return {
        fam: {
            s: (np.array(x), np.array(y))
            for s, (x, y) in sorted(
                stats.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])
            )
        }
        for fam, stats in sorted(out.items(), key=lambda kv: list(families).index(kv[0]))
    }


def _plain(x: float, _pos: int = 0) -> str:
    return plain_number(x)


@literal_text
def plot_validation(
    doc: Mapping,
    path: str | Path,
    *,
    family: Callable[[str], str | None],
    families: Sequence[str],
    title: str = "",
    option: str = "--plot",
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Draw ``validate``'s document (``ValidationReport.to_dict()``) to ``path``: a grid of
    square log-log panels, one per family with points; return the points drawn, by family
    and statistic, read back from the axes."""
    fmt = check_plot_path(path, option)
    data = points(doc, family, families)
    panels = list(data) or ["TTFT"]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = figure(4.0 * cols, 4.0 * rows + (0.5 if title else 0.0))
    drawn: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for i, fam in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        stats = data.get(fam, {})
        values = np.concatenate([np.r_[x, y] for x, y in stats.values()] or [np.ones(1)])
        lo, hi = float(values.min()) / 1.25, float(values.max()) * 1.25
        line = np.geomspace(lo, hi, 50)
        ax.fill_between(
            line, line * (1 - BAND), line * (1 + BAND), color="0.88", label=f"±{BAND:.0%}"
        )
        ax.plot(line, line, color="0.35", linewidth=1.0, label="y = x")
        drawn[fam] = {}
        for stat, (x, y) in stats.items():
            marker, color = _STYLE.get(stat, _OTHER)
            artist = ax.scatter(x, y, s=24, marker=marker, color=color, label=stat, zorder=3)
            offsets = np.asarray(artist.get_offsets(), dtype=float)
            drawn[fam][stat] = (offsets[:, 0].copy(), offsets[:, 1].copy())
        ax.set_xscale("log")
        ax.set_yscale("log")
        subs = (1.0,) if hi / lo > 300 else (1.0, 2.0, 5.0)  # three decades: decades only
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(mticker.LogLocator(base=10, subs=subs))
            axis.set_major_formatter(mticker.FuncFormatter(_plain))
            axis.set_minor_formatter(mticker.NullFormatter())
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel(f"measured {UNITS[fam]}", fontsize="small")
        ax.set_ylabel(f"predicted {UNITS[fam]}", fontsize="small")
        ax.tick_params(labelsize="small")
        ax.set_title(fam)
        ax.legend(loc="upper left", fontsize="x-small", frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save(fig, path, fmt, option)
    return drawn


__all__ = ["BAND", "UNITS", "plot_validation", "points"]
