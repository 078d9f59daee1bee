"""``breakeven --plot``: the ensemble's gain against the latent error correlation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, literal_text, save


@literal_text
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
    level, or ``None``), ``legend_box`` (pixels) and ``breakeven_px`` (the break-even
    line's x in pixels, or ``None``), ``xlabel``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    r = np.asarray(correlation, float)
    g = 100.0 * np.asarray(gain, float)
    fig = figure(8.5, 5.2)
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
    # below the zero line on the left: the curve falls from upper left to lower right
    legend = ax.legend(loc="lower left", fontsize=8)
    renderer = fig.canvas.get_renderer()
    lb = legend.get_window_extent(renderer)
    mark_px = None if breakeven is None else float(ax.transData.transform((breakeven, 0.0))[0])
    save(fig, path, fmt, option)
    xs, ys = line.get_data()
    return {
        "correlation": np.asarray(xs, float),
        "gain_percent": np.asarray(ys, float),
        "breakeven": breakeven,
        "file_point": file_point,
        "legend_box": np.array([lb.x0, lb.y0, lb.x1, lb.y1]),
        "breakeven_px": mark_px,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "plot_breakeven",
]
