"""``schedule --plot``: tokens/s against batch size, one line per ``k``, the schedule's
envelope over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, literal_text, palette, save


@literal_text
def plot_schedule(sched, path: str | Path, *, option: str = "plot") -> dict:
    """Tokens/s against batch size: one line per ``k`` (the best configuration within
    the budget at that ``k``; ``k = 0`` is no speculation), the schedule's envelope
    (the best over every ``k``) drawn over them and labelled with its ``k``.

    ``sched`` is an :class:`allocator.analysis.schedule.Schedule`. Returns ``batch``
    ``(S,)``, ``envelope`` ``(S,)`` tokens/s read back from the figure, ``lines``
    ``{k: (S,) tokens/s}`` (NaN where no configuration has that ``k``), ``xlabel``,
    ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    batch = np.asarray(sched.batch, float)
    fig = figure(10.0, 6.0)
    fig.subplots_adjust(left=0.1, right=0.8, bottom=0.11, top=0.9)
    ax = fig.add_subplot()
    colors = palette(len(sched.ks))
    lines = {}
    for j, k in enumerate(sched.ks):
        y = sched.by_k[:, j]
        if np.all(np.isnan(y)):
            continue
        style = {"color": "0.35", "ls": "--"} if k == 0 else {"color": colors[j], "ls": "-"}
        ax.plot(batch, y, marker="o", lw=1.0, ms=3, alpha=0.75, label=f"k = {int(k)}", **style)
        lines[int(k)] = np.asarray(y, float)
    env = np.asarray(sched.metrics["tokens_per_s"], float)
    (envelope,) = ax.plot(
        batch, env, "-", color="black", lw=2.4, alpha=0.6, label="schedule (best k)", zorder=4
    )
    for b, y, k in zip(batch, env, sched.k, strict=True):
        ax.annotate(
            f"k={int(k)}",
            (b, y),
            xytext=(0, 7),
            textcoords="offset points",
            fontsize=8,
            ha="center",
        )
    if sched.speculation_off_from is not None:
        ax.axvline(sched.speculation_off_from, color="C3", ls=":", lw=1)
        ax.text(
            sched.speculation_off_from,
            ax.get_ylim()[0],
            " speculation off from here",
            color="C3",
            fontsize=8,
            va="bottom",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (concurrent sequences)")
    ax.set_ylabel("tokens/s, whole batch")
    ax.set_title(f"{sched.problem}: tokens/s by batch size and k", loc="left", fontsize=11)
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    save(fig, path, fmt, option)
    xs, ys = envelope.get_data()
    return {
        "batch": np.asarray(xs, float),
        "envelope": np.asarray(ys, float),
        "lines": lines,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "plot_schedule",
]
