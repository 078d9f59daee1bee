"""The front: throughput against the cost metric, every point labelled with its drafters
and ``k``, each drafter's own front (computed by the caller) drawn faintly behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import (
    COST_LABELS,
    THROUGHPUT_LABEL,
    check_plot_path,
    draw_front,
    figure,
    frame_points,
    literal_text,
    palette,
    save,
)
from .labels import MAX_LABELS, place_labels


def point_label(drafters: list[str] | tuple[str, ...], k: int) -> str:
    """``a+b, k=5``: the drafters of a configuration and its draft length."""
    return f"{'+'.join(drafters)}, k={k}"


@literal_text
def plot_front(
    result,
    path: str | Path,
    *,
    singles: dict | None = None,
    budget: float | None = None,
    title: str | None = None,
    option: str = "plot",
    throughput_label: str | None = None,
) -> dict:
    """Draw the front of ``result`` (a :class:`~allocator.core.result.SolveResult`):
    throughput against its cost metric, each point labelled with its drafters and
    ``k``; the fronts in ``singles`` (``{name: SolveResult}``, e.g. from
    :func:`allocator.analysis.fronts.single_drafter_fronts`) drawn faintly behind;
    ``budget``, the problem's cap on the cost metric (same unit as the axis), as a dashed
    vertical line (widening the axis to show it when it lies at most twice the axis'
    width to the right; further out, the legend gives its value).

    Every point is labelled where a label fits without overlapping another label, a
    point or the front's line (on a front of a few dozen points, all of them); the
    title says when some are left out.

    Returns the plotted data, read back from the figure: ``cost`` and ``throughput``
    ``(P,)`` of the front line, ``labels`` (L texts) of the points ``labelled`` (L,),
    their ``label_boxes`` ``(L, 4)`` and the ``axes_box`` ``(4,)`` in pixels,
    ``leaders`` (L bools), ``singles`` ``{name: (cost (Q,), throughput (Q,))}``,
    ``budget`` (the cap's x as drawn, or ``None`` when not drawn on the axis),
    ``legend`` (its texts), ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    points = result.points()
    n = len(points)
    fig = figure(11.0, min(14.0, max(6.0, 3.0 + 0.2 * n)))
    fig.subplots_adjust(left=0.09, right=0.76, bottom=0.1, top=0.92)
    ax = fig.add_subplot()
    singles = singles or {}
    many = len(singles) > 10  # one legend entry for all, in one colour
    cmap = ["0.55"] * len(singles) if many else palette(len(singles))
    cost = np.array([p["cost"] for p in points], float)
    thr = np.array([p["throughput"] for p in points], float)
    drawn_singles = {}
    hidden = []
    for j, ((name, res), color) in enumerate(zip(singles.items(), cmap, strict=True)):
        under = _under_the_front(np.asarray(res.front.cost), np.asarray(res.front.throughput),
                                 cost, thr)  # fmt: skip
        if under:
            hidden.append(name)
        (line,) = ax.plot(
            res.front.cost,
            res.front.throughput,
            "o-",
            color=color,
            alpha=0.35,
            lw=1.2,
            ms=3,
            drawstyle="steps-post",
            # a line drawn wholly under the front has no legend entry of its own
            label=(f"each drafter alone ({len(singles)})" if j == 0 else None)
            if many
            else (None if under else f"{name} alone"),
            zorder=1,
        )
        drawn_singles[name] = tuple(np.asarray(a, float) for a in line.get_data())
    if hidden and not many:
        ax.plot([], [], " ", label=f"{', '.join(hidden)} alone: on the front itself")
    front_line = draw_front(ax, cost, thr, "front: best at each cost")
    metric = result.cost_metric
    ax.set_xlabel(COST_LABELS.get(metric, metric))
    ax.set_ylabel(throughput_label or THROUGHPUT_LABEL)
    kind = "complete front" if result.exact else "heuristic front, not proven complete"
    ax.set_title(
        title or f"{result.problem}: {n} point(s), strategy {result.strategy} ({kind})",
        loc="left",
        fontsize=11,
    )
    ax.grid(True, lw=0.4, alpha=0.5)
    frame_points(ax)
    budget_x = None
    if budget is not None:
        lo, hi = ax.get_xlim()
        text = f"budget: {metric} ≤ {budget:g}"
        if budget <= hi + 2.0 * (hi - lo):
            if budget > hi:
                ax.set_xlim(lo, budget + 0.05 * (budget - lo))
            (cap_line,) = ax.plot(
                [budget, budget], [0, 1], ls="--", color="C3", lw=1.2, label=text, zorder=2
            )
            cap_line.set_transform(ax.get_xaxis_transform())
            budget_x = float(cap_line.get_xdata()[0])
        else:  # far to the right: say it rather than squash the front
            ax.plot([], [], ls="--", color="C3", lw=1.2, label=text + " (off the axis)")
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    labels = [point_label(p["drafters"], p["k"]) for p in points]
    others = [(xs, ys, "steps") for xs, ys in drawn_singles.values()]
    placed = place_labels(ax, cost, thr, labels, avoid=others)
    if len(placed) < n:
        why = "the others would overlap" if n <= MAX_LABELS else "spread along the front"
        ax.set_title(
            f"{ax.get_title(loc='left')}\nlabels on {len(placed)} of {n:,} points "
            f"({why}; the JSON or CSV lists every point)",
            loc="left",
            fontsize=11,
        )
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    save(fig, path, fmt, option)
    xs, ys = front_line.get_data()
    return {
        "cost": np.asarray(xs, float),
        "throughput": np.asarray(ys, float),
        "labels": [p.text for p in placed],
        "labelled": np.array([p.index for p in placed], dtype=np.int64),
        "axes_box": np.array([frame.x0, frame.y0, frame.x1, frame.y1]),
        "label_boxes": np.array([p.box for p in placed]).reshape(-1, 4),
        "leaders": [p.leader for p in placed],
        "singles": drawn_singles,
        "budget": budget_x,
        "legend": [t.get_text() for t in legend.get_texts()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


def _under_the_front(c: np.ndarray, t: np.ndarray, cost: np.ndarray, thr: np.ndarray) -> bool:
    """Whether the staircase through ``(c, t)`` is drawn wholly under the front's
    staircase through ``(cost, thr)``: its points are consecutive points of the front."""
    if c.size == 0 or cost.size == 0:
        return False
    idx = []
    for x, y in zip(c, t, strict=True):
        hit = np.flatnonzero(
            np.isclose(cost, x, rtol=1e-12, atol=0) & np.isclose(thr, y, rtol=1e-12)
        )
        if hit.size == 0:
            return False
        idx.append(int(hit[0]))
    return all(b == a + 1 for a, b in zip(idx, idx[1:], strict=False))


__all__ = [
    "plot_front",
    "point_label",
]
