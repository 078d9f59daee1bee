"""What every picture shares: the output path check, a private Agg figure, saving PNG or
SVG by extension, literal text (``$`` in a name is a dollar sign), the axis names, the
front's staircase and the colours.

matplotlib is named at the top through :mod:`allocator._lazy` and imported on first use,
so importing this module (or :mod:`allocator.cli`) loads no matplotlib.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import numpy as np

from .._lazy import lazy_module
from ..exceptions import InputError
from ..io.quoting import UNSAFE, escape_text
from ..io.staged import check_writable, write_atomic

if TYPE_CHECKING:
    import matplotlib
    import matplotlib.axis as maxis
    import matplotlib.figure as mfigure
    import matplotlib.text as mtext
    from matplotlib.backends import backend_agg
else:
    matplotlib = lazy_module("matplotlib")
    maxis = lazy_module("matplotlib.axis")
    mfigure = lazy_module("matplotlib.figure")
    mtext = lazy_module("matplotlib.text")
    backend_agg = lazy_module("matplotlib.backends.backend_agg")

_P = ParamSpec("_P")
_R = TypeVar("_R")

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


def check_plot_path(path: str | Path, option: str = "plot") -> str:
    """The matplotlib format of ``path`` (by extension); an ``InputError`` otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(option, f"unknown image format {suffix or '(none)'!r}: use .png or .svg")
    check_writable(path, option)
    return FORMATS[suffix]


def literal_text(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a plotting function with mathtext off: names and labels from a problem file
    (``$x^$``) are drawn as written, never parsed as TeX."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with matplotlib.rc_context({"text.parse_math": False}), warnings.catch_warnings():
            # a name's characters the font lacks are drawn as boxes; matplotlib's warning
            # would print each (a control character raw) and a line of this package
            warnings.filterwarnings("ignore", message="Glyph .* missing from")
            return fn(*args, **kwargs)

    return wrapper


def figure(width: float, height: float):
    """A new figure ``width`` × ``height`` inches at 100 dpi on its own Agg canvas (no
    pyplot, no global backend change)."""
    fig = mfigure.Figure(figsize=(width, height), dpi=100)
    backend_agg.FigureCanvasAgg(fig)
    return fig


def _axis_texts(fig) -> set[int]:
    """The ids of the texts matplotlib writes itself: tick labels and axis offsets."""
    own: set[int] = set()
    for axis in fig.findobj(maxis.Axis):
        for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
            own.update((id(tick.label1), id(tick.label2)))
        own.add(id(axis.offsetText))
    return own


def save(fig, path: str | Path, fmt: str, option: str) -> None:
    """Write ``fig`` to ``path`` in ``fmt`` (from :func:`check_plot_path`), atomically.

    Every text of the figure is drawn as written (``$x^$`` in a name is not TeX), but
    matplotlib's own tick labels and offsets keep their mathtext: a log axis writes
    ``$\\mathdefault{2^{3}}$``, to be drawn as 2³ (turning mathtext off for every text
    printed that markup raw). Control characters of every text are shown escaped
    (:func:`allocator.io.quoting.escape_text`)."""
    own = _axis_texts(fig)
    for text in fig.findobj(mtext.Text):  # drawn as written, whoever made the figure
        text.set_parse_math(id(text) in own)
        # a control character of a name is shown escaped (\x1b), never drawn as a box
        shown = text.get_text()
        if isinstance(shown, str) and UNSAFE.search(shown):
            text.set_text(escape_text(shown, keep="\n"))
    buf = io.BytesIO()
    meta = {"Software": None} if fmt == "png" else {"Date": None}
    # SVG text stays text (searchable, selectable); hashsalt makes SVG ids reproducible;
    # ticks made while drawing are matplotlib's own: mathtext on for them
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "allocator", "text.parse_math": True}
    ):
        fig.savefig(buf, format=fmt, dpi=100, metadata=meta)
    write_atomic(path, buf.getvalue(), option)


def draw_front(ax, cost: np.ndarray, thr: np.ndarray, label: str):
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


def frame_points(ax) -> None:
    """Leave room around the drawn points for their labels, then fix the axis limits so
    that what is drawn or placed later does not move them."""
    ax.margins(x=0.18, y=0.14)
    ax.autoscale_view()
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())


def palette(n: int):
    """``n`` distinct colours: tab10 for up to ten, tab20 (cycled) beyond."""
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def line_colors(n: int):
    """``n`` colours for lines beside black and grey ones (``k = 0``, a band): tab10 and
    then tab20 without their greys, cycled."""
    if n <= 9:
        cmap = matplotlib.colormaps["tab10"]
        return [cmap(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)[:n]]
    cmap = matplotlib.colormaps["tab20"]
    keep = [i for i in range(20) if i not in (14, 15)]
    return [cmap(keep[i % len(keep)]) for i in range(n)]


__all__ = [
    "COST_LABELS",
    "FORMATS",
    "THROUGHPUT_LABEL",
    "check_plot_path",
    "draw_front",
    "figure",
    "frame_points",
    "line_colors",
    "literal_text",
    "palette",
    "save",
]
