"""``bench --plot``: the distributions of TTFT, TPOT and ITL of one simulated run; and
``capacity --request-rate --sweep-rate --plot``: the fleet's $/h against the request rate,
with and without speculation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from .common import check_plot_path, figure, literal_text, save
from .labels import place_labels
from .sweep import fleet_cost_steps

if TYPE_CHECKING:
    import matplotlib.ticker as mticker

    from ..analysis.capacity.slo import SLO
else:
    mticker = lazy_module("matplotlib.ticker")

#: Percentiles marked on each distribution.
MARKED = (50.0, 90.0, 99.0)
#: Colours of the marked percentiles; a percentile of an SLO beyond them takes the next.
_MARK_COLORS = {50.0: "C2", 90.0: "C1", 99.0: "C3"}
_MORE_COLORS = ("C4", "C5", "C6", "C8", "C9")
#: Dashes of the SLO lines a legend names (their labels found no room beside them).
_LEGEND_STYLES = ((0, (6, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)), (0, (3, 1, 1, 1, 1, 1)))
#: The latencies drawn, each in its panel, with its axis name.
PANELS = {
    "ttft": "TTFT, time to first token (ms)",
    "tpot": "TPOT, time per output token after the first (ms)",
    "itl": "ITL, gap between streamed chunks (ms)",
}
#: Mantissas of the log-axis ticks, sparsest first: the first giving three ticks is used.
_LOG_SUBS = ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0))
#: Top of the share axis: above 1, where every curve ends, a band for labels.
TOP = 1.14
#: Height of the SLO lines' labels, in that band: above the marks' labels.
_SLO_LABEL_Y = TOP - 0.04
#: Most ticks on a log axis (decades are skipped beyond).
_MOST_TICKS = 7


def plain_number(x: float) -> str:
    """A tick value as a plain number, thousands separated, no exponent: ``30``,
    ``1,000``, ``0.25``."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    return f"{float(f'{x:.6g}'):,.12f}".rstrip("0").rstrip(".")


def ms_text(x: float) -> str:
    """A latency in ms to four significant digits, whole ms at least, no exponent:
    ``0.1234``, ``31.93``, ``928.4``, ``11,927``."""
    if x == 0 or not math.isfinite(x):
        return plain_number(x)
    decimals = max(0, 3 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def log_ticks(lo: float, hi: float) -> list[float]:
    """Major ticks of a log axis from ``lo`` to ``hi`` (> 0): the decades if three or more
    fall inside (every second or more when there are many), else 1-3, 1-2-5 or
    1-1.5-2-3-5-7 steps, whichever first gives three; an axis too narrow for any of them
    gets the nice linear steps of its range."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in _LOG_SUBS:
        ticks = [
            m * 10.0**e
            for e in range(first, last + 1)
            for m in subs
            if lo * (1 - 1e-9) <= m * 10.0**e <= hi * (1 + 1e-9)
        ]
        if len(ticks) >= 3:
            stride = math.ceil(len(ticks) / _MOST_TICKS) if subs == (1.0,) else 1
            return ticks[::stride]
    return [float(t) for t in mticker.MaxNLocator(nbins=4).tick_values(lo, hi) if lo <= t <= hi]


def _plain_axis(ax, log: bool) -> None:
    """Write the x axis' ticks as plain numbers (no ``3×10¹``, no mathtext): on a log axis
    major ticks from :func:`log_ticks` and unlabelled minor ticks."""
    fmt = mticker.FuncFormatter(lambda x, _pos: plain_number(x))
    if log:
        lo, hi = ax.get_xlim()
        ax.xaxis.set_major_locator(mticker.FixedLocator(log_ticks(lo, hi)))
    ax.xaxis.set_major_formatter(fmt)
    ax.xaxis.set_minor_formatter(mticker.NullFormatter())


def _thin(ax, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points of a drawn monotone curve at least a pixel apart (its first and last
    kept): what the labels keep off, without a box per sample of a long run."""
    pts = np.round(ax.transData.transform(np.column_stack([x, y])))
    keep = np.ones(len(pts), bool)
    keep[1:] = np.any(np.diff(pts, axis=0) != 0, axis=1)
    keep[-1] = True
    return x[keep], y[keep]


@literal_text
def plot_bench(
    ttft_ms,
    tpot_ms,
    itl_ms,
    path: str | Path,
    *,
    slos: Sequence[SLO] = (),
    title: str | None = None,
    option: str = "plot",
) -> dict:
    """Draw the empirical distribution (share of values at most ``x``) of each latency of a
    run in its own panel: time to first token per request, time per output token per
    request, and the gap between streamed chunks (ITL, pooled over requests), each in ms
    on a log axis (linear when the values reach 0 or span less than a factor 1.5), its
    ticks written as plain numbers.

    The p50, p90 and p99 of each are marked on the curve (a dot, a dashed line down to
    the axis) and labelled with their values, each label beside its dot where it touches
    no line and no other label (one that finds no such spot is listed in a legend
    instead). ``slos`` (:class:`allocator.analysis.capacity.slo.SLO`, as
    :func:`~allocator.analysis.capacity.slo.parse_slos` gives them): each a vertical line at its
    ceiling on its latency's panel, labelled with its key and ceiling in the band above
    the curves, its percentile marked as well; the axis is widened to a ceiling beyond
    the values by up to their own span (on a log axis, their ratio), one further off is
    named in the legend as off the axis; an SLO on ``e2el`` has no panel and is not
    drawn.

    ``ttft_ms (N,)``, ``tpot_ms (M,)`` (NaN entries, one-token requests, left out),
    ``itl_ms (G,)``. Returns, per latency name (``ttft``, ``tpot``, ``itl``), ``{"x",
    "share"}`` read back from the drawn curve, ``"marks"`` (the marked percentiles'
    values, ms, by name, ``p50`` …, read back from the dots), ``"slos"`` (each SLO's
    ceiling by key, read back from its line, ``None`` off the axis), ``"labels"`` (the
    texts placed), ``"legend"`` (its texts), ``"xscale"`` and ``"xticks"`` (the major
    tick labels as drawn); ``xlabels``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    data = {
        "ttft": np.asarray(ttft_ms, float),
        "tpot": np.asarray(tpot_ms, float),
        "itl": np.asarray(itl_ms, float),
    }
    fig = figure(14.0, 4.8)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.16, top=0.84, wspace=0.22)
    out: dict = {"xlabels": [], "format": fmt}
    axes = fig.subplots(1, 3)
    for ax, (key, values) in zip(axes, data.items(), strict=True):
        ax.set_xlabel(PANELS[key])
        out["xlabels"].append(PANELS[key])
        out[key] = _panel(ax, values, [s for s in slos if s.latency == key])
    axes[0].set_ylabel("share of values at most x (fraction)")
    out["ylabel"] = axes[0].get_ylabel()
    fig.suptitle(title or "Latencies of a simulated run", x=0.05, ha="left")
    save(fig, path, fmt, option)
    for ax, key in zip(axes, data, strict=True):  # the ticks as drawn (saving made them)
        out[key]["xticks"] = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    return out


def _limits(lo: float, hi: float, ceilings: list[float], log: bool) -> tuple[float, float]:
    """The x limits: the data's (``lo``, ``hi``), widened to each ceiling within the data's
    span beyond them (their ratio on a log axis), with a margin past the outermost."""
    if log:
        reach = (lo / (hi / lo), hi * (hi / lo))
    else:
        reach = (lo - (hi - lo), hi + (hi - lo))
    shown = [c for c in ceilings if reach[0] <= c <= reach[1]]
    if not shown:
        return lo, hi
    if log:
        return min(lo, min(shown) / 1.06), max(hi, max(shown) * 1.06)
    pad = 0.04 * (max(hi, *shown) - min(lo, *shown))
    return min(lo, min(shown) - pad), max(hi, max(shown) + pad)


def _panel(ax, values: np.ndarray, slos: list[SLO]) -> dict:
    """One latency's panel (see :func:`plot_bench`); the data it drew."""
    v = np.sort(values[np.isfinite(values)])
    ax.set_ylim(0.0, TOP)
    ax.set_yticks(np.linspace(0.0, 1.0, 6))
    ax.grid(True, lw=0.4, alpha=0.5)
    if v.size == 0:
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        _plain_axis(ax, False)
        return {"x": np.zeros(0), "share": np.zeros(0), "marks": {}, "slos": {},
                "labels": [], "legend": [], "xscale": "linear"}  # fmt: skip
    share = np.arange(1, v.size + 1) / v.size
    (curve,) = ax.plot(v, share, drawstyle="steps-post", color="C0", lw=1.4, zorder=2)
    log = bool(v[0] > 0 and v[-1] > v[0] * 1.5)
    if log:
        ax.set_xscale("log")
    ax.autoscale_view()
    lo, hi = ax.get_xlim()
    lo, hi = _limits(lo, hi, [float(s.ceiling_ms) for s in slos], log)
    ax.set_xlim(lo, hi)  # final from here: the labels are placed against it
    _plain_axis(ax, log)
    avoid: list[tuple] = [(*_thin(ax, v, share), "steps")]

    # the marked percentiles, and those the SLOs name
    pcts = sorted(set(MARKED) | {float(s.percentile) for s in slos if s.percentile is not None})
    more = itertools.cycle(_MORE_COLORS)
    dots, drops = {}, {}
    for p in pcts:
        name, x = f"p{p:g}", float(np.percentile(v, p))
        color = _MARK_COLORS.get(p) or next(more)
        (drops[name],) = ax.plot([x, x], [0.0, p / 100], ls="--", color=color, lw=1, zorder=1)
        (dots[name],) = ax.plot([x], [p / 100], "o", color=color, ms=4.5, zorder=3)
        avoid.append(([x, x], [0.0, p / 100], "straight"))
    lines = {}
    for s in slos:
        c = float(s.ceiling_ms)
        if lo <= c <= hi:
            (lines[s.key],) = ax.plot([c, c], [0.0, 1.0], color="black", lw=1.3, zorder=2)
            lines[s.key].set_transform(ax.get_xaxis_transform())  # the axes' full height
            avoid.append(([c, c], [0.0, TOP], "straight"))
        else:
            text = f"{slo_text(s)} (off the axis)"
            (lines[s.key],) = ax.plot([], [], color="black", lw=1.3, label=text)

    # labels: the marks' beside their dots, the highest first (it has the least room,
    # by the top right corner), then the SLO lines' in the band above the curve
    at_x, at_y, texts, owners = [], [], [], []
    for name in sorted(dots, key=lambda n: -float(dots[n].get_ydata()[0])):
        at_x.append(float(dots[name].get_xdata()[0]))
        at_y.append(float(dots[name].get_ydata()[0]))
        texts.append(f"{name} {ms_text(at_x[-1])} ms")
        owners.append(drops[name])
    for s in slos:
        if len(lines[s.key].get_xdata()):
            at_x.append(float(s.ceiling_ms))
            at_y.append(_SLO_LABEL_Y)
            texts.append(slo_text(s))
            owners.append(lines[s.key])
    placed = place_labels(ax, np.array(at_x), np.array(at_y), texts, line=None, avoid=avoid)
    colors = dict(zip(texts, (o.get_color() for o in owners), strict=True))
    for label in ax.texts:  # each label in its line's colour
        if label.get_text() in colors:
            label.set_color(colors[label.get_text()])
    done = {p.index for p in placed}
    styles = itertools.cycle(_LEGEND_STYLES)
    for i, (text, owner) in enumerate(zip(texts, owners, strict=True)):
        if i not in done:  # no free spot beside it: the legend names it
            owner.set_label(text)
            if owner in lines.values():  # told apart from the SLO lines labelled in place
                owner.set_linestyle(next(styles))
    handles = [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    legend = []
    if handles:
        box = ax.legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.9)
        legend = [t.get_text() for t in box.get_texts()]
    return {
        "x": np.asarray(curve.get_xdata(), float),
        "share": np.asarray(curve.get_ydata(), float),
        "marks": {name: float(d.get_xdata()[0]) for name, d in dots.items()},
        "slos": {
            key: float(line.get_xdata()[0]) if len(line.get_xdata()) else None
            for key, line in lines.items()
        },
        "labels": [p.text for p in placed],
        "legend": legend,
        "xscale": ax.get_xscale(),
    }


def slo_text(slo: SLO) -> str:
    """An SLO as its line is labelled: ``SLO p99_ttft_ms ≤ 500 ms``."""
    return f"SLO {slo.key} ≤ {plain_number(float(slo.ceiling_ms))} ms"


@literal_text
def plot_rate_sweep(
    rates,
    with_speculation,
    without_speculation,
    path: str | Path,
    *,
    crossings: list[dict] | None = None,
    slos: str = "",
    title: str | None = None,
    option: str = "plot",
) -> dict:
    """Draw the fleet's $/h against the request rate, the cheapest with speculation and the
    cheapest without (``(L,)`` each, NaN where none meets the SLOs), as steps (a fleet is a
    whole number of replicas), with dotted lines where the cheaper side changes.

    Returns ``rates``, ``with_speculation``, ``without_speculation`` read back from the
    lines, ``crossings`` (the rates marked), ``xlabel``, ``ylabel``, ``format``.
    """
    marks = [
        (
            float(c["to_request_rate"]),
            f"{c['cheaper']} cheaper\nfrom {c['to_request_rate']:g} req/s",
        )
        for c in crossings or []
    ]
    got = fleet_cost_steps(
        rates, with_speculation, without_speculation, path, marks=marks,
        xlabel="request rate of the whole fleet (requests/s)",
        title=title or ("Cheapest fleet under " + (slos or "the SLOs") + ", by request rate"),
        option=option,
    )  # fmt: skip
    return {"rates": got.pop("x"), **got}


__all__ = [
    "MARKED",
    "PANELS",
    "log_ticks",
    "ms_text",
    "plain_number",
    "plot_bench",
    "plot_rate_sweep",
    "slo_text",
]
