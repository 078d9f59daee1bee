"""Labels beside points that overlap nothing: no other label, no point, not the line
through the points, nothing outside the axes (:func:`place_labels`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..io.quoting import escape_text

if TYPE_CHECKING:
    import matplotlib.transforms as mtransforms
else:
    mtransforms = lazy_module("matplotlib.transforms")

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
#: Most points one picture tries to label: evenly spread along the points given (a
#: 2,000-point front took 100 s to label, and more labels than this cannot be read).
MAX_LABELS = 80


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


def label_candidates(n: int, most: int = MAX_LABELS) -> np.ndarray:
    """Indices of the points to try labelling: all ``n``, or ``most`` spread evenly from
    the first to the last."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, most)).astype(np.int64))


def _line_obstacles(pts: np.ndarray, line: str | None, marker: float) -> np.ndarray:
    """Boxes ``(B, 4)`` covering the markers at ``pts`` ``(P, 2)`` (pixels) and the line
    through them (``"steps"``, ``"straight"`` or ``None``)."""
    obstacles = np.column_stack([pts - marker, pts + marker]).reshape(-1, 4)
    if line == "steps" and len(pts) > 1:
        corners = np.column_stack([pts[1:, 0], pts[:-1, 1]])  # (x_{i+1}, y_i)
        path = np.empty((2 * len(pts) - 1, 2))
        path[0::2], path[1::2] = pts, corners
        obstacles = np.concatenate([obstacles, _polyline_boxes(path, 1.0)])
    elif line == "straight":
        obstacles = np.concatenate([obstacles, _polyline_boxes(pts, 1.0)])
    return obstacles


def place_labels(
    ax,
    x,
    y,
    texts,
    *,
    fontsize: float = 7.5,
    pad: float = 1.5,
    line: str | None = "steps",
    most: int = MAX_LABELS,
    avoid: list[tuple] | None = None,
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
    Of more than ``most`` points only ``most``, spread evenly, are tried
    (:func:`label_candidates`). ``avoid``: other lines drawn on the axes, each
    ``(x, y, line)`` in data coordinates (``line`` as above), whose points and segments
    no label may cover either (a label touching another line reads as that line's).
    The axes limits must be final before this is called.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)]))
    marker = 3.5 * fig.dpi / 72.0
    obstacles = _line_obstacles(pts, line, marker)
    for ox, oy, oline in avoid or []:
        other = np.column_stack([np.asarray(ox, float), np.asarray(oy, float)])
        other = ax.transData.transform(other[np.all(np.isfinite(other), axis=1)])
        obstacles = np.concatenate([obstacles, _line_obstacles(other, oline, marker)])
    # boxes that land on the same pixels once (thousands of points drawn close together)
    obstacles = np.unique(np.round(obstacles), axis=0)
    frame = ax.get_window_extent(renderer)
    placed: list[PlacedLabel] = []
    # measured as drawn: control characters shown escaped (``\x1b``), as ``save`` shows them
    texts = [escape_text(t, keep="\n") for t in texts]
    for i in label_candidates(len(texts), most):
        i, text = int(i), texts[i]
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
        leader = r > _RADII[1]  # further than beside the point: a thin line to it
        ax.annotate(
            text,
            (x[i], y[i]),
            xytext=off,
            textcoords="offset points",
            fontsize=fontsize,
            ha=ha,
            va=va,
            arrowprops=(
                {"arrowstyle": "-", "lw": 0.7, "color": "0.35", "shrinkA": 1, "shrinkB": 3}
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
    return mtransforms.offset_copy(ax.transData, fig=ax.figure, x=off[0], y=off[1], units="points")


__all__ = [
    "MAX_LABELS",
    "PlacedLabel",
    "boxes_overlap",
    "label_candidates",
    "place_labels",
]
