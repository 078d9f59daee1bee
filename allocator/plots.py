"""Pictures of results: the front, the gain against error correlation, and the
distribution of accepted units.

Every function takes plain data (a :class:`~allocator.core.result.SolveResult` or numpy
arrays) and an output path, draws on a private :class:`matplotlib.figure.Figure`
with the Agg canvas (no pyplot, no global backend change, nothing happens on
``import allocator``), writes PNG or SVG by the path's extension (atomically: a
file is written whole or not at all) and returns the data it plotted, read back
from the drawn artists, so that callers and tests can check the picture.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import numpy as np

from .exceptions import InfeasibleError, InputError, NotModelledError
from .io.staged import check_writable, write_atomic

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from .core.problem import Problem

#: Output formats by file extension.
FORMATS = {".png": "png", ".svg": "svg"}

THROUGHPUT_LABEL = "throughput S = E_k / T  (accepted units per verifier-unit of time)"

#: Axis names (with units) of the cost metrics of docs/design.md §2.5.
COST_LABELS = {
    "draft_cost_per_round": "draft cost per round, k·Σρ  (verifier-units of time)",
    "draft_cost_per_token": "draft cost per accepted unit, k·Σρ / E_k  (verifier-units of time)",
    "hosting_cost": "hosting cost, Σh  (the problem's hosting unit: GPUs, GiB, $/h, …)",
    "drafters": "drafters pooled, m  (count)",
    "cost_per_mtok": "$ per million tokens at the batch size, from serving.gpu_cost_per_hour",
}

#: Candidate label directions, in order of preference. On a front that rises with
#: cost, up-left and down-right keep a label off the curve.
_DIRECTIONS = tuple(
    (np.cos(t), np.sin(t))
    for t in np.deg2rad(
        [135, -45, 90, 0, -90, 180, 45, -135, 112, 158, -22, -68, 68, 22, -112, 202]
    )
)
#: Candidate distances from the point, typographic points.
_RADII = (6, 12, 20, 30, 42, 56, 72, 90, 110, 135, 165, 200)


def check_plot_path(path: str | Path, option: str = "plot") -> str:
    """The matplotlib format of ``path`` (by extension); an ``InputError`` otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(option, f"unknown image format {suffix or '(none)'!r}: use .png or .svg")
    check_writable(path, option)
    return FORMATS[suffix]


def _literal_text(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a plotting function with mathtext off: names and labels from a problem file
    (``$x^$``) are drawn as written, never parsed as TeX."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from matplotlib import rc_context

        with rc_context({"text.parse_math": False}):
            return fn(*args, **kwargs)

    return wrapper


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path, fmt: str, option: str) -> None:
    """Write ``fig`` to ``path`` in ``fmt`` (from :func:`check_plot_path`), atomically."""
    from matplotlib import rc_context
    from matplotlib.text import Text

    for text in fig.findobj(Text):  # drawn as written, whoever made the figure
        text.set_parse_math(False)
    buf = io.BytesIO()
    meta = {"Software": None} if fmt == "png" else {"Date": None}
    # SVG text stays text (searchable, selectable); hashsalt makes SVG ids reproducible
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "allocator"}):
        fig.savefig(buf, format=fmt, dpi=100, metadata=meta)
    write_atomic(path, buf.getvalue(), option)


def _front_line(ax, cost: np.ndarray, thr: np.ndarray, label: str):
    """Draw a front as black steps through its points, ``cost`` and ``thr`` ``(P,)``:
    within a budget between two points, the cheaper point is the best there is.
    Returns the line (its data are what was drawn)."""
    (line,) = ax.plot(
        cost,
        thr,
        "o-",
        drawstyle="steps-post",
        color="black",
        lw=1.6,
        ms=4.5,
        label=label,
        zorder=3,
    )
    return line


def _frame_points(ax) -> None:
    """Leave room around the drawn points for their labels, then fix the axis limits so
    that what is drawn or placed later does not move them."""
    ax.margins(x=0.18, y=0.14)
    ax.autoscale_view()
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())


# ---------------------------------------------------------------- label placement
@dataclass(frozen=True)
class PlacedLabel:
    """One label: the index of the point it names, its text, the point (data), its
    offset (typographic points) and its box on the canvas ``(x0, y0, x1, y1)`` in pixels."""

    index: int
    text: str
    x: float
    y: float
    offset: tuple[float, float]
    box: tuple[float, float, float, float]
    leader: bool


def boxes_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether box ``a`` ``(4,)`` overlaps each of the boxes ``b`` ``(B, 4)``
    (``x0, y0, x1, y1``); touching edges do not count."""
    b = np.atleast_2d(b)
    return (a[0] < b[:, 2]) & (b[:, 0] < a[2]) & (a[1] < b[:, 3]) & (b[:, 1] < a[3])


def _overlap_area(a: np.ndarray, b: np.ndarray) -> float:
    if b.size == 0:
        return 0.0
    w = np.clip(np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]), 0, None)
    h = np.clip(np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]), 0, None)
    return float((w * h).sum())


def _polyline_boxes(pts: np.ndarray, half: float, step: float = 4.0) -> np.ndarray:
    """Small boxes ``(B, 4)`` covering the polyline through ``pts`` ``(P, 2)`` pixels."""
    if len(pts) < 2:
        return np.zeros((0, 4))
    seg = np.diff(pts, axis=0)
    n = np.maximum(1, np.ceil(np.hypot(seg[:, 0], seg[:, 1]) / step)).astype(int)
    t = np.concatenate([np.arange(c) / c for c in n])
    start = np.repeat(pts[:-1], n, axis=0)
    along = start + np.repeat(seg, n, axis=0) * t[:, None]
    return np.column_stack([along - half, along + half])


def place_labels(
    ax, x, y, texts, *, fontsize: float = 7.5, pad: float = 1.5, line: str | None = "steps"
) -> list[PlacedLabel]:
    """Label the points ``(x[i], y[i])`` (data coordinates) so that no two labels
    overlap, no label covers a point or the line through the points (``line``:
    ``"steps"`` for matplotlib's ``steps-post``, ``"straight"``, or ``None``) and every
    label stays inside the axes.

    Greedy: each label in turn tries the directions of ``_DIRECTIONS`` at growing
    distances ``_RADII`` and takes the first spot free of every obstacle and every
    label already placed (boxes measured by the renderer, padded by ``pad`` pixels);
    labels set further out get a thin leader line. A label with no free spot is left
    out rather than drawn over another (the returned list names the points labelled).
    The axes limits must be final before this is called.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)]))
    marker = 3.5 * fig.dpi / 72.0
    obstacles = np.column_stack([pts - marker, pts + marker])
    if line == "steps" and len(pts) > 1:
        corners = np.column_stack([pts[1:, 0], pts[:-1, 1]])  # (x_{i+1}, y_i)
        path = np.empty((2 * len(pts) - 1, 2))
        path[0::2], path[1::2] = pts, corners
        obstacles = np.concatenate([obstacles, _polyline_boxes(path, 1.0)])
    elif line == "straight":
        obstacles = np.concatenate([obstacles, _polyline_boxes(pts, 1.0)])
    frame = ax.get_window_extent(renderer)
    placed: list[PlacedLabel] = []
    for i, text in enumerate(texts):
        best = None  # (penalty, offset, ha, va, box, radius)
        probe = ax.text(0, 0, text, fontsize=fontsize)
        for r in _RADII:
            for dx, dy in _DIRECTIONS:
                off = (r * dx, r * dy)
                ha = "right" if dx < -0.3 else "left" if dx > 0.3 else "center"
                va = "top" if dy < -0.3 else "bottom" if dy > 0.3 else "center"
                probe.set(ha=ha, va=va, transform=_offset(ax, off), x=x[i], y=y[i])
                bb = probe.get_window_extent(renderer)
                box = np.array([bb.x0 - pad, bb.y0 - pad, bb.x1 + pad, bb.y1 + pad])
                inside = (
                    box[0] >= frame.x0
                    and box[2] <= frame.x1
                    and box[1] >= frame.y0
                    and box[3] <= frame.y1
                )
                penalty = _overlap_area(box, obstacles) + (0.0 if inside else 1e9)
                if best is None or penalty < best[0]:
                    best = (penalty, off, ha, va, box, r)
                if penalty == 0.0:
                    break
            if best[0] == 0.0:  # type: ignore[index]
                break
        probe.remove()
        penalty, off, ha, va, box, r = best  # type: ignore[misc]
        if penalty > 0.0:
            continue
        leader = r > _RADII[2]
        ax.annotate(
            text,
            (x[i], y[i]),
            xytext=off,
            textcoords="offset points",
            fontsize=fontsize,
            ha=ha,
            va=va,
            arrowprops=(
                {"arrowstyle": "-", "lw": 0.5, "color": "0.5", "shrinkA": 1, "shrinkB": 3}
                if leader
                else None
            ),
            zorder=4,
        )
        obstacles = np.concatenate([obstacles, box[None, :]])
        placed.append(PlacedLabel(i, text, float(x[i]), float(y[i]), off, tuple(box), leader))
    return placed


def _offset(ax, off: tuple[float, float]):
    """Data coordinates shifted by ``off`` typographic points."""
    from matplotlib.transforms import offset_copy

    return offset_copy(ax.transData, fig=ax.figure, x=off[0], y=off[1], units="points")


# ---------------------------------------------------------------- the front
def point_label(drafters: list[str] | tuple[str, ...], k: int) -> str:
    """``a+b, k=5``: the drafters of a configuration and its draft length."""
    return f"{'+'.join(drafters)}, k={k}"


def single_drafter_fronts(problem: Problem) -> dict:
    """Each drafter's own front: ``problem`` restricted to that drafter alone.

    Solved with the public API (``m = 1``, every other drafter excluded, the same
    budget, cost metric and ``k`` range). Drafters excluded by the problem, or
    whose every configuration breaks the budget, are left out. Returns
    ``{name: SolveResult}``.
    """
    from .api import solve

    out = {}
    for i, name in enumerate(problem.names):
        if problem.excluded[i]:
            continue
        alone = np.zeros(problem.n, bool)
        alone[i] = True
        sub = problem.replace(
            name=f"{problem.name}/{name}", required=alone, excluded=~alone, m_min=1, m_max=1
        )
        try:
            out[name] = solve(sub, strategy="exact")
        except (InfeasibleError, NotModelledError):
            continue
    return out


@_literal_text
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
    :func:`single_drafter_fronts`) drawn faintly behind; ``budget``, the problem's cap
    on the cost metric (same unit as the axis), as a dashed vertical line (widening the
    axis to show it when it lies at most twice the axis' width to the right; further
    out, the legend gives its value).

    Every point is labelled where a label fits without overlapping another label, a
    point or the front's line (on a front of a few dozen points, all of them); the
    title says when some are left out.

    Returns the plotted data, read back from the figure: ``cost`` and ``throughput``
    ``(P,)`` of the front line, ``labels`` (L texts) of the points ``labelled`` (L,),
    their ``label_boxes`` ``(L, 4)`` and the ``axes_box`` ``(4,)`` in pixels,
    ``leaders`` (L bools), ``singles`` ``{name: (cost (Q,), throughput (Q,))}``,
    ``budget`` (the cap's x as drawn, or ``None`` when not drawn on the axis),
    ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    points = result.points()
    n = len(points)
    fig = _figure(11.0, min(14.0, max(6.0, 3.0 + 0.2 * n)))
    fig.subplots_adjust(left=0.09, right=0.76, bottom=0.1, top=0.92)
    ax = fig.add_subplot()
    singles = singles or {}
    many = len(singles) > 10  # one legend entry for all, in one colour
    cmap = ["0.55"] * len(singles) if many else _colors(len(singles))
    drawn_singles = {}
    for j, ((name, res), color) in enumerate(zip(singles.items(), cmap, strict=True)):
        (line,) = ax.plot(
            res.front.cost,
            res.front.throughput,
            "o-",
            color=color,
            alpha=0.35,
            lw=1.2,
            ms=3,
            drawstyle="steps-post",
            label=(f"each drafter alone ({len(singles)})" if j == 0 else None)
            if many
            else f"{name} alone",
            zorder=1,
        )
        drawn_singles[name] = tuple(np.asarray(a, float) for a in line.get_data())
    cost = np.array([p["cost"] for p in points], float)
    thr = np.array([p["throughput"] for p in points], float)
    front_line = _front_line(ax, cost, thr, "front: best at each cost")
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
    _frame_points(ax)
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
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    labels = [point_label(p["drafters"], p["k"]) for p in points]
    placed = place_labels(ax, cost, thr, labels)
    if len(placed) < n:
        ax.set_title(
            f"{ax.get_title(loc='left')}\nlabels on {len(placed)} of {n} points "
            "(the others would overlap; the JSON or CSV lists every point)",
            loc="left",
            fontsize=11,
        )
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    _save(fig, path, fmt, option)
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
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# ---------------------------------------------------------------- break-even
@_literal_text
def plot_breakeven(
    correlation,
    gain,
    path: str | Path,
    *,
    breakeven: float | None = None,
    breakeven_error_correlation: float | None = None,
    ensemble: str = "ensemble",
    baseline: str = "baseline",
    note: str = "",
    file_gain: float | None = None,
    file_correlation: float | None = None,
    file_errors: str = "",
    option: str = "plot",
) -> dict:
    """Draw the ensemble's relative gain against the latent error correlation.

    ``correlation`` ``(R,)`` latent correlations in [0, 1]; ``gain`` ``(R,)``
    ``S_ens(r) / S_base - 1`` (each at its own best ``k``), drawn in percent. The
    break-even ``breakeven`` (latent) is marked where the gain crosses zero, with
    the error (Pearson) correlation it corresponds to in its label; without one,
    ``note`` says why (e.g. the ensemble stays ahead even with identical errors).
    ``file_gain`` (a fraction), the gain under the problem file's own error model
    ``file_errors``, is marked at ``file_correlation`` (latent, its first two drafters),
    or drawn as a dotted level when that model has no latent correlation (a log).

    Returns ``correlation``, ``gain_percent`` (read back from the line),
    ``breakeven``, ``file_point`` (``(r, gain %)`` as marked, ``(None, gain %)`` as a
    level, or ``None``), ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    r = np.asarray(correlation, float)
    g = 100.0 * np.asarray(gain, float)
    fig = _figure(8.5, 5.2)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    (line,) = ax.plot(r, g, "-", color="C0", lw=2, label=f"{ensemble} against {baseline}")
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.fill_between(r, g, 0, where=g > 0, color="C2", alpha=0.12, lw=0, label="ensemble ahead")
    ax.fill_between(r, g, 0, where=g < 0, color="C3", alpha=0.12, lw=0, label="ensemble behind")
    if breakeven is not None:
        text = f"break-even: latent r* = {breakeven:.4f}"
        if breakeven_error_correlation is not None:
            text += f"\n(error correlation {breakeven_error_correlation:.4f})"
        ax.axvline(breakeven, color="C3", ls="--", lw=1)
        ax.plot([breakeven], [0.0], "o", color="C3", ms=7, zorder=5)
        ax.annotate(
            text,
            (breakeven, 0.0),
            xytext=(12, 28),
            textcoords="offset points",
            fontsize=9,
            color="C3",
            arrowprops={"arrowstyle": "-", "color": "C3", "lw": 0.8},
        )
    elif note:
        ax.text(0.02, 0.04, note, transform=ax.transAxes, fontsize=9, color="C3")
    file_point: tuple[float | None, float] | None = None
    if file_gain is not None:
        text = f"this file ({file_errors or 'its errors'}): gain {100.0 * file_gain:+.2f}%"
        if file_correlation is not None:
            text += f" at latent r = {file_correlation:.4f}"
            (mark,) = ax.plot(
                [file_correlation],
                [100.0 * file_gain],
                "D",
                color="C1",
                ms=8,
                zorder=6,
                label=text,
            )
            file_point = (float(mark.get_xdata()[0]), float(mark.get_ydata()[0]))
        else:
            level = ax.axhline(100.0 * file_gain, color="C1", ls=":", lw=1.4, label=text)
            file_point = (None, float(level.get_ydata()[0]))
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("latent error correlation r between drafters (exchangeable model, 0 to 1)")
    ax.set_ylabel("gain in throughput over the baseline (%), each at its own best k")
    ax.set_title(f"Which error correlation erases the gain of {ensemble}?", loc="left")
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(loc="upper right", fontsize=8)
    _save(fig, path, fmt, option)
    xs, ys = line.get_data()
    return {
        "correlation": np.asarray(xs, float),
        "gain_percent": np.asarray(ys, float),
        "breakeven": breakeven,
        "file_point": file_point,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


# ---------------------------------------------------------------- accepted units
@_literal_text
def plot_accepted(
    simulated,
    model,
    path: str | Path,
    *,
    rounds: int | None = None,
    title: str | None = None,
    option: str = "plot",
) -> dict:
    """Draw the histogram of accepted units per round against the model's distribution.

    ``simulated`` and ``model`` are ``(U,)`` shares of rounds with ``u = 0..U-1``
    accepted units (``Simulation.accepted_shares`` and
    :func:`allocator.analysis.simulate.accepted_distribution`); ``u = 0`` (always empty) is not
    drawn. Returns ``units`` ``(U-1,)`` = ``1..U-1``, ``simulated`` (bar heights read
    back from the bars), ``model`` (read back from the markers), ``xlabel``,
    ``ylabel``, ``format``, ``legend_box`` and ``axes_box`` ``(4,)`` in pixels (the
    legend sits right of the axes, clear of the bars and lines).
    """
    fmt = check_plot_path(path, option)
    # u = 0 never happens (the first unit is always kept): start at 1
    sim = np.asarray(simulated, float)[1:]
    mod = np.asarray(model, float)[1:]
    u = np.arange(1, sim.size + 1)
    fig = _figure(10.5, 5.2)
    fig.subplots_adjust(left=0.09, right=0.74, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    label = "simulated rounds" + (f" ({rounds:,})" if rounds else "")
    bars = ax.bar(u, sim, width=0.8, color="C0", alpha=0.55, label=label)
    (marks,) = ax.plot(u, mod, "o", color="C3", ms=7, label="model P(accepted = u)", zorder=4)
    mean_sim, mean_mod = float(u @ sim), float(u @ mod)
    ax.axvline(mean_sim, color="C0", ls="--", lw=1, label=f"simulated mean {mean_sim:.4f}")
    ax.axvline(mean_mod, color="C3", ls=":", lw=1.2, label=f"model mean {mean_mod:.4f}")
    ax.set_xticks(u)
    ax.set_ylim(0.0, 1.1 * max(float(sim.max()), float(mod.max()), 1e-12))
    ax.set_xlabel("accepted units in a round, u (units)")
    ax.set_ylabel("share of rounds (fraction)")
    ax.set_title(title or "Accepted units per round: simulation against the model", loc="left")
    ax.grid(True, axis="y", lw=0.4, alpha=0.5)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    renderer = fig.canvas.get_renderer()
    lb, fb = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    _save(fig, path, fmt, option)
    return {
        "legend_box": np.array([lb.x0, lb.y0, lb.x1, lb.y1]),
        "axes_box": np.array([fb.x0, fb.y0, fb.x1, fb.y1]),
        "units": u,
        "simulated": np.array([b.get_height() for b in bars]),
        "model": np.asarray(marks.get_ydata(), float),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


# ---------------------------------------------------------------- plan --sweep
@_literal_text
def plot_sweep(
    doc: dict, path: str | Path, *, title: str | None = None, option: str = "plot"
) -> dict:
    """Draw ``plan --sweep``'s front: overall throughput against hosting cost.

    ``doc`` is the sweep's JSON document (``front``: points with ``hosting_cost``,
    ``throughput``, ``hosted`` and ``single_throughput``). The front is a black
    staircase (a cap between two points buys the cheaper plan), each point labelled with
    the drafters hosted; the best *single* configuration for all traffic within the same
    hosting cost is drawn faintly beside it, so the value of routing each workload shows.
    Throughput in accepted units per verifier-unit of time; hosting cost in the problem's
    own unit.

    Returns ``cost``, ``throughput`` ``(P,)`` (read back from the front line),
    ``single`` ``(cost (Q,), throughput (Q,))`` of the points that have one, ``labels``,
    ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    points = doc["front"]
    n = len(points)
    cost = np.array([p["hosting_cost"] for p in points], float)
    thr = np.array([p["throughput"] for p in points], float)
    fig = _figure(11.0, min(12.0, max(6.0, 3.0 + 0.2 * n)))
    fig.subplots_adjust(left=0.09, right=0.76, bottom=0.1, top=0.92)
    ax = fig.add_subplot()
    has = [i for i, p in enumerate(points) if p["single_throughput"] is not None]
    (single_line,) = ax.plot(
        cost[has],
        [points[i]["single_throughput"] for i in has],
        "s--",
        color="C0",
        alpha=0.5,
        lw=1.2,
        ms=4,
        drawstyle="steps-post",
        label="one config for all traffic",
        zorder=2,
    )
    front_line = _front_line(ax, cost, thr, "plan: routing per workload")
    ax.set_xlabel(COST_LABELS["hosting_cost"])
    ax.set_ylabel("overall throughput 1 / Σ_w p_w / S_w  (accepted units per verifier-unit)")
    ax.set_title(
        title
        or f"{doc.get('problem', '')}: {n} plan(s) on the front of throughput against hosting cost",
        loc="left",
        fontsize=11,
    )
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    _frame_points(ax)
    placed = place_labels(ax, cost, thr, ["+".join(p["hosted"]) or "(none)" for p in points])
    _save(fig, path, fmt, option)
    xs, ys = front_line.get_data()
    sx, sy = single_line.get_data()
    return {
        "cost": np.asarray(xs, float),
        "throughput": np.asarray(ys, float),
        "single": (np.asarray(sx, float), np.asarray(sy, float)),
        "labels": [p.text for p in placed],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


# ---------------------------------------------------------------- capacity
@_literal_text
def plot_capacity_sweep(
    loads,
    with_speculation,
    without_speculation,
    path: str | Path,
    *,
    crossings: list[dict] | None = None,
    itl_ms: float = float("inf"),
    option: str = "plot",
) -> dict:
    """Draw the fleet's $/h against the load, with and without speculation.

    ``loads`` ``(L,)`` tokens/s ascending; ``with_speculation``, ``without_speculation``
    ``(L,)`` $/h of the cheapest fleet of each side (NaN where none meets the latency
    target: a gap in that line). Both are step functions of the load (whole replicas),
    drawn as steps. ``crossings`` (from :func:`allocator.analysis.fleet.crossings`)
    are marked where the cheaper side changes.

    Returns ``loads``, ``with_speculation``, ``without_speculation`` (read back from the
    lines), ``crossings`` (the marked loads), ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    x = np.asarray(loads, float)
    a = np.asarray(with_speculation, float)
    b = np.asarray(without_speculation, float)
    fig = _figure(8.5, 5.2)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    (la,) = ax.step(x, a, where="post", color="C0", lw=2, label="with speculation")
    (lb,) = ax.step(x, b, where="post", color="C1", lw=2, ls="--", label="without speculation")
    marked = []
    for c in crossings or []:
        at = float(c["to_tokens_per_s"])
        marked.append(at)
        ax.axvline(at, color="C3", ls=":", lw=1)
        ax.annotate(
            f"{c['cheaper']} cheaper\nfrom {at:,.6g} tokens/s",
            (at, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(4, -28),
            textcoords="offset points",
            fontsize=8,
            color="C3",
        )
    ax.set_xlabel("load, generated tokens/s over the fleet")
    ax.set_ylabel("cost of the cheapest fleet, $/h")
    target = f"itl ≤ {itl_ms:g} ms" if np.isfinite(itl_ms) else "no latency target"
    ax.set_title(f"Fleet cost against load ({target})", loc="left")
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(loc="upper left", fontsize=8)
    _save(fig, path, fmt, option)
    return {
        "loads": np.asarray(la.get_xdata(), float),
        "with_speculation": np.asarray(la.get_ydata(), float),
        "without_speculation": np.asarray(lb.get_ydata(), float),
        "crossings": marked,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


# ---------------------------------------------------------------- serving schedule
@_literal_text
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
    fig = _figure(10.0, 6.0)
    fig.subplots_adjust(left=0.1, right=0.8, bottom=0.11, top=0.9)
    ax = fig.add_subplot()
    colors = _colors(len(sched.ks))
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
    _save(fig, path, fmt, option)
    xs, ys = envelope.get_data()
    return {
        "batch": np.asarray(xs, float),
        "envelope": np.asarray(ys, float),
        "lines": lines,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


@_literal_text
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
    Returns the drawn ``expected`` and ``throughput`` read back, and the axis labels."""
    fmt = check_plot_path(path, option)
    fig = _figure(8.5, 5.2)
    fig.subplots_adjust(left=0.1, right=0.88, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    (le,) = ax.plot(nodes, expected, "-", color="C0", label="E (tokens per step)")
    ax.set_xlabel("speculated nodes in the tree, n (tokens)")
    ax.set_ylabel("expected tokens per step, E (tokens)")
    ax2 = ax.twinx()
    (lt,) = ax2.plot(nodes, throughput, "-", color="C3", label="throughput")
    ax2.set_ylabel("throughput (tokens per verifier-unit of time)")
    if best is not None:
        ax2.axvline(best, color="C3", ls=":", lw=1)
    ax.set_title(title or "Optimal tree: E and throughput against size", loc="left")
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(handles=[le, lt], loc="lower right", fontsize=8)
    _save(fig, path, fmt, option)
    return {
        "expected": np.asarray(le.get_ydata(), float),
        "throughput": np.asarray(lt.get_ydata(), float),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }
