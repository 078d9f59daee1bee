"""``schedule --plot``: tokens/s against batch size, one line per ``k``, the schedule's
envelope over them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from .common import check_plot_path, figure, frame_points, line_colors, literal_text, save
from .labels import place_labels

if TYPE_CHECKING:
    import matplotlib.ticker as mticker
else:
    mticker = lazy_module("matplotlib.ticker")


@literal_text
def plot_schedule(sched, path: str | Path, *, option: str = "plot") -> dict:
    """Tokens/s against batch size: one line per ``k`` (the best configuration within
    the budget at that ``k``; ``k = 0``, no speculation, dashed), the schedule (the best
    over every ``k``) as a wide band under them, each of its points labelled with its
    ``k`` where the label touches no line. The batch axis is logarithmic with a tick at
    each planned batch size, written as a number.

    ``sched`` is an :class:`allocator.analysis.schedule.Schedule`. Returns ``batch``
    ``(S,)``, ``envelope`` ``(S,)`` tokens/s read back from the figure, ``lines``
    ``{k: (S,) tokens/s}`` (NaN where no configuration has that ``k``), ``labels`` (the
    texts placed), ``xticks``, ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    batch = np.asarray(sched.batch, float)
    fig = figure(10.0, 6.0)
    fig.subplots_adjust(left=0.1, right=0.8, bottom=0.11, top=0.9)
    ax = fig.add_subplot()
    speculative = [int(k) for k in sched.ks if int(k) > 0]
    colors = dict(zip(speculative, line_colors(len(speculative)), strict=True))
    lines = {}
    drawn = []
    env = np.asarray(sched.metrics["tokens_per_s"], float)
    # the schedule first, as a band the lines run over: the line it follows stays visible
    (envelope,) = ax.plot(
        batch, env, "-", color="black", lw=7, alpha=0.18, solid_capstyle="round",
        label="schedule (best k)", zorder=1,
    )  # fmt: skip
    for j, k in enumerate(sched.ks):
        y = sched.by_k[:, j]
        if np.all(np.isnan(y)):
            continue
        k = int(k)
        style = {"color": "black", "ls": "--"} if k == 0 else {"color": colors[k], "ls": "-"}
        label = "k = 0 (no speculation)" if k == 0 else f"k = {k}"
        ax.plot(batch, y, marker="o", lw=1.2, ms=3.5, label=label, zorder=3, **style)
        lines[k] = np.asarray(y, float)
        drawn.append((batch, y, "straight"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch)
    ax.set_xticklabels([f"{int(b):,}" for b in batch])
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    ax.set_xlabel("batch size (concurrent sequences, log scale)")
    ax.set_ylabel("tokens/s, whole batch")
    ax.set_title(f"{sched.problem}: tokens/s by batch size and k", loc="left", fontsize=11)
    ax.grid(True, lw=0.4, alpha=0.5)
    frame_points(ax)
    ax.set_ylim(0.0, ax.get_ylim()[1])  # tokens/s: from 0
    off = sched.speculation_off_from
    if off is not None:
        ax.axvline(off, color="C3", ls=":", lw=1, label=f"speculation off from batch {off:,}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    placed = place_labels(
        ax,
        batch,
        env,
        [f"best k={int(k)}" for k in sched.k],
        line="straight",
        avoid=drawn,
    )
    save(fig, path, fmt, option)
    xs, ys = envelope.get_data()
    return {
        "batch": np.asarray(xs, float),
        "envelope": np.asarray(ys, float),
        "lines": lines,
        "labels": [p.text for p in placed],
        "xticks": [t.get_text() for t in ax.get_xticklabels()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "plot_schedule",
]
