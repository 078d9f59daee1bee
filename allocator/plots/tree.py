"""``tree --plot``: ``E`` and throughput of the optimal tree against its size."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, literal_text, save


@literal_text
def plot_tree_front(
    nodes,
    expected,
    throughput,
    path: str | Path,
    *,
    best: int | None = None,
    title: str | None = None,
    option: str = "plot",
) -> dict:
    """Draw ``E`` (left axis) and throughput (right axis) of the optimal tree against its
    size. ``nodes``, ``expected``, ``throughput``: ``(n,)``; ``best``: the size to mark.
    Returns the drawn ``expected`` and ``throughput`` read back, the ``legend`` texts,
    the ``title`` and the axis labels."""
    fmt = check_plot_path(path, option)
    fig = figure(8.5, 5.2)
    fig.subplots_adjust(left=0.1, right=0.88, bottom=0.2, top=0.9)
    ax = fig.add_subplot()
    (le,) = ax.plot(nodes, expected, "-", color="C0", label="E (tokens per step)")
    ax.set_xlabel("speculated nodes in the tree, n (tokens)")
    ax.set_ylabel("expected tokens per step, E (tokens)")
    ax2 = ax.twinx()
    (lt,) = ax2.plot(nodes, throughput, "-", color="C3", label="throughput")
    ax2.set_ylabel("throughput (tokens per verifier-unit of time)")
    handles = [le, lt]
    if best is not None:
        handles.append(
            ax2.axvline(best, color="C3", ls=":", lw=1, label=f"best throughput: {best} nodes")
        )
    ax.set_title(title or "Optimal tree: E and throughput against size", loc="left")
    ax.grid(True, lw=0.4, alpha=0.5)
    # below the axes: inside, it would cover the curves or the best size's line
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )
    save(fig, path, fmt, option)
    return {
        "legend": [t.get_text() for t in ax.get_legend().get_texts()],
        "title": ax.get_title(loc="left"),
        "expected": np.asarray(le.get_ydata(), float),
        "throughput": np.asarray(lt.get_ydata(), float),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "plot_tree_front",
]
