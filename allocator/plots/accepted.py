"""``simulate --plot``: the histogram of accepted units per round against the model's
distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, literal_text, save


@literal_text
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
    :func:`allocator.model.accepted_pmf.accepted_distribution`); ``u = 0`` (always empty) is not
    drawn. Returns ``units`` ``(U-1,)`` = ``1..U-1``, ``simulated`` (bar heights read
    back from the bars), ``model`` (read back from the markers), ``xlabel``,
    ``ylabel``, ``format``, ``legend_box`` and ``axes_box`` ``(4,)`` in pixels (the
    legend sits right of the axes, clear of the bars and lines).
    """
    fmt = check_plot_path(path, option)
    # u = 0 never happens (the first unit is always kept): start at 1; and end at the
    # most units a round gave or may give (the paper convention keeps at most k)
    sim = np.asarray(simulated, float)[1:]
    mod = np.asarray(model, float)[1:]
    seen = np.flatnonzero((sim > 0) | (mod > 0))
    top = int(seen[-1]) + 1 if seen.size else sim.size
    sim, mod = sim[:top], mod[:top]
    u = np.arange(1, sim.size + 1)
    fig = figure(10.5, 5.2)
    fig.subplots_adjust(left=0.09, right=0.74, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    label = "simulated rounds" + (f" ({rounds:,})" if rounds else "")
    bars = ax.bar(u, sim, width=0.8, color="C0", alpha=0.55, label=label)
    (marks,) = ax.plot(
        u, mod, "o", color="C3", ms=7, label="model P(accepted = u)", zorder=4, clip_on=False
    )
    mean_sim, mean_mod = float(u @ sim), float(u @ mod)
    # the two means are close by design: each line spans its own half of the height, so
    # neither hides the other
    sim_line = ax.axvline(
        mean_sim, 0.0, 0.5, color="navy", ls="-", lw=1.6,
        label=f"simulated mean {mean_sim:.4f} (lower half)",
    )  # fmt: skip
    mod_line = ax.axvline(
        mean_mod, 0.5, 1.0, color="C3", ls="-", lw=1.6,
        label=f"model mean {mean_mod:.4f} (upper half)",
    )  # fmt: skip
    ax.set_xticks(u)
    ax.set_xlim(0.4, u[-1] + 0.6)
    ax.set_ylim(0.0, 1.12 * max(float(sim.max()), float(mod.max()), 1e-12))
    ax.set_xlabel("accepted units in a round, u (units)")
    ax.set_ylabel("share of rounds (fraction)")
    ax.set_title(title or "Accepted units per round: simulation against the model", loc="left")
    ax.grid(True, axis="y", lw=0.4, alpha=0.5)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    renderer = fig.canvas.get_renderer()
    lb, fb = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    save(fig, path, fmt, option)
    return {
        "legend_box": np.array([lb.x0, lb.y0, lb.x1, lb.y1]),
        "axes_box": np.array([fb.x0, fb.y0, fb.x1, fb.y1]),
        "units": u,
        "simulated": np.array([b.get_height() for b in bars]),
        "model": np.asarray(marks.get_ydata(), float),
        "mean_lines": {
            "simulated": (float(sim_line.get_xdata()[0]), tuple(sim_line.get_ydata())),
            "model": (float(mod_line.get_xdata()[0]), tuple(mod_line.get_ydata())),
        },
        "markers_clipped": bool(marks.get_clip_on()),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "plot_accepted",
]
