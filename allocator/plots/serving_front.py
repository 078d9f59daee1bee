"""The serving front (``front --plot``): output tokens/s per GPU against output tokens/s
per user, speculation on and off as two fronts, dominated points faint, points missing an
SLO marked, disaggregated points as triangles."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, frame_points, literal_text, save

#: Colours of the two sides: speculation on, speculation off.
ON_COLOR = "C1"
OFF_COLOR = "C0"
#: Markers of aggregated and of prefill/decode disaggregated points.
AGG_MARKER = "o"
DISAGG_MARKER = "^"


def _staircase(ax, u: np.ndarray, g: np.ndarray, color: str, label: str):
    """A front of two maximised values as steps through its points, ``(Q,)`` each: at a
    per-user throughput between two points, the faster one's per-GPU throughput is the best
    reached. Returns the line."""
    order = np.lexsort((-g, u))
    (line,) = ax.plot(
        u[order], g[order], "o-", drawstyle="steps-pre", color=color, lw=1.8, ms=4,
        label=label, zorder=3,
    )  # fmt: skip
    return line


@literal_text
def plot_serving_front(
    per_user,
    per_gpu,
    speculative,
    dominated,
    meets_slo,
    front_on,
    front_off,
    path: str | Path,
    *,
    title: str | None = None,
    slos: str = "",
    option: str = "plot",
    disaggregated=None,
) -> dict:
    """Draw the serving front: every point at its output tokens/s per user (x) and per GPU
    (y), ``(P,)`` each (NaN: not drawn); ``speculative``, ``dominated``, ``meets_slo``,
    ``front_on`` and ``front_off`` ``(P,)`` bools (the last two: the points on the
    speculation-on front and on the speculation-off front, computed by the caller). Each
    side's front is a staircase in its colour, so the gain of speculation shows at every
    per-user throughput; dominated points are faint; points missing an SLO (``slos``, its
    text) are marked with a red cross; ``disaggregated`` (``(P,)`` bools, ``None``: none)
    points are drawn as triangles, the others as circles (the staircases run through both).

    Returns, read back from the figure: ``on`` and ``off`` (``(x (Q,), y (Q,))`` of each
    staircase), ``faint`` (how many points drawn faint), ``marked`` (how many crossed),
    ``legend`` (its texts), ``xlabel``, ``ylabel``, ``format``, ``triangles`` (how many points
    drawn as triangles).
    """
    fmt = check_plot_path(path, option)
    u = np.asarray(per_user, float)
    g = np.asarray(per_gpu, float)
    spec = np.asarray(speculative, bool)
    dom = np.asarray(dominated, bool)
    ok = np.asarray(meets_slo, bool)
    on = np.asarray(front_on, bool)
    off = np.asarray(front_off, bool)
    shown = np.isfinite(u) & np.isfinite(g)
    dis = np.zeros(u.size, bool) if disaggregated is None else np.asarray(disaggregated, bool)
    fig = figure(10.5, 6.5)
    fig.subplots_adjust(left=0.1, right=0.72, bottom=0.1, top=0.9)
    ax = fig.add_subplot()
    faint = 0
    triangles = 0
    for side, color, name in ((spec, ON_COLOR, "speculation on"), (~spec, OFF_COLOR, "off")):
        for kind, marker, what in ((~dis, AGG_MARKER, ""), (dis, DISAGG_MARKER, " P:D")):
            weak = shown & side & dom & kind
            strong = shown & side & ~dom & kind
            faint += int(weak.sum())
            if marker == DISAGG_MARKER:
                triangles += int((weak | strong).sum())
            ax.scatter(u[weak], g[weak], s=14, color=color, alpha=0.22, lw=0, zorder=2,
                       marker=marker)  # fmt: skip
            ax.scatter(
                u[strong], g[strong], s=30, color=color, edgecolors="black", lw=0.6, zorder=4,
                marker=marker,
                label=f"{name}{what}: non-dominated overall" if strong.any() else None,
            )  # fmt: skip
    lines = {}
    for key, mask, color, name in (
        ("on", on & shown, ON_COLOR, "front with speculation"),
        ("off", off & shown, OFF_COLOR, "front without speculation"),
    ):
        if mask.any():
            line = _staircase(ax, u[mask], g[mask], color, name)
            xs, ys = line.get_data()
            lines[key] = (np.asarray(xs, float), np.asarray(ys, float))
        else:
            lines[key] = (np.zeros(0), np.zeros(0))
    missed = shown & ~ok
    if missed.any():
        ax.scatter(
            u[missed], g[missed], s=40, marker="x", color="C3", lw=1.1, zorder=5,
            label=f"misses {slos or 'an SLO'}",
        )  # fmt: skip
    ax.scatter([], [], s=14, color="0.5", alpha=0.22, lw=0, label="dominated (faint)")
    if dis.any():
        ax.scatter([], [], s=30, color="0.5", marker=DISAGG_MARKER, lw=0,
                   label="prefill/decode disaggregated (P:D)")  # fmt: skip
    ax.set_xlabel("output tokens/s per user  (1000 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU  (output throughput / GPUs)")
    ax.set_title(title or "The serving front", loc="left", fontsize=11)
    ax.grid(True, lw=0.4, alpha=0.5)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    frame_points(ax)
    save(fig, path, fmt, option)
    return {
        "on": lines["on"],
        "off": lines["off"],
        "faint": faint,
        "marked": int(missed.sum()),
        "legend": [t.get_text() for t in legend.get_texts()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
        "triangles": triangles,
    }


__all__ = ["plot_serving_front"]
