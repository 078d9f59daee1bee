"""Sweeps: ``plan --sweep``'s throughput against hosting cost, and ``capacity
--sweep-load``'s fleet cost against the load."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .common import (
    COST_LABELS,
    check_plot_path,
    draw_front,
    figure,
    frame_points,
    literal_text,
    save,
)
from .labels import place_labels


@literal_text
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
    fig = figure(11.0, min(12.0, max(6.0, 3.0 + 0.2 * n)))
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
    front_line = draw_front(ax, cost, thr, "plan: routing per workload")
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
    frame_points(ax)
    placed = place_labels(ax, cost, thr, ["+".join(p["hosted"]) or "(none)" for p in points])
    save(fig, path, fmt, option)
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


@literal_text
def fleet_cost_steps(
    x,
    with_speculation,
    without_speculation,
    path: str | Path,
    *,
    marks: Sequence[tuple[float, str]] = (),
    xlabel: str,
    title: str,
    option: str = "plot",
) -> dict:
    """Draw the cheapest fleet's $/h with and without speculation against ``x`` (``(L,)``
    ascending: a load or a request rate; the two ``(L,)``, NaN where no fleet meets the
    target: a gap), as steps (a fleet is a whole number of replicas), with a dotted line
    and its text at each ``(x, text)`` of ``marks`` (where the cheaper side changes).

    Returns ``x``, ``with_speculation``, ``without_speculation`` read back from the lines,
    ``crossings`` (the ``x`` marked), ``xlabel``, ``ylabel``, ``format``."""
    fmt = check_plot_path(path, option)
    fig = figure(8.5, 5.2)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.9)
    ax = fig.add_subplot()
    xs = np.asarray(x, float)
    (la,) = ax.step(xs, np.asarray(with_speculation, float), where="post", color="C0", lw=2,
                    label="with speculation")  # fmt: skip
    (lb,) = ax.step(xs, np.asarray(without_speculation, float), where="post", color="C1", lw=2,
                    ls="--", label="without speculation")  # fmt: skip
    marked = []
    notes = []
    for at, text in marks:
        marked.append(float(at))
        ax.axvline(at, color="C3", ls=":", lw=1)
        notes.append(
            ax.annotate(
                text,
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(4, -28),
                textcoords="offset points",
                fontsize=8,
                color="C3",
                va="top",
            )
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cost of the cheapest fleet, $/h")
    ax.set_title(title, loc="left")
    ax.grid(True, lw=0.4, alpha=0.5)
    # cost rises with load: the lower right is empty (the crossings are marked up top)
    ax.legend(loc="lower right", fontsize=8)
    boxes = _stack_labels(fig, notes)
    save(fig, path, fmt, option)
    return {
        "x": np.asarray(la.get_xdata(), float),
        "with_speculation": np.asarray(la.get_ydata(), float),
        "without_speculation": np.asarray(lb.get_ydata(), float),
        "crossings": marked,
        "label_boxes": boxes,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


def _stack_labels(fig, notes: list) -> list[tuple[float, float, float, float]]:
    """Move each crossing's label down, below any label drawn before it that it would
    overlap, so that no two overlap (labels of nearby crossings would); returns their
    boxes ``(x0, y0, x1, y1)`` in display pixels."""
    renderer = fig.canvas.get_renderer()
    boxes: list[tuple[float, float, float, float]] = []
    for note in notes:
        dx, dy = note.xyann
        for _ in range(len(boxes) + 1):
            b = note.get_window_extent(renderer)
            hit = [o for o in boxes if b.x0 < o[2] and o[0] < b.x1 and b.y0 < o[3] and o[1] < b.y1]
            if not hit:
                break
            # below the lowest label it meets, in points (72 per inch)
            drop = (b.y1 - min(o[1] for o in hit)) * 72.0 / fig.dpi + 2.0
            dy -= drop
            note.xyann = (dx, dy)
        b = note.get_window_extent(renderer)
        boxes.append((float(b.x0), float(b.y0), float(b.x1), float(b.y1)))
    return boxes


def plot_capacity_sweep(
    loads,
    with_speculation,
    without_speculation,
    path: str | Path,
    *,
    crossings: list[dict] | None = None,
    tpot_ms: float = float("inf"),
    option: str = "plot",
) -> dict:
    """Draw the fleet's $/h against the load, with and without speculation, under a mean
    time per output token (TPOT) target of ``tpot_ms`` (:func:`fleet_cost_steps`).

    ``loads`` ``(L,)`` tokens/s ascending; ``with_speculation``, ``without_speculation``
    ``(L,)`` $/h of the cheapest fleet of each side (NaN where none meets the latency
    target). ``crossings`` (from :func:`allocator.analysis.capacity.crossings.crossings`) are marked
    where the cheaper side changes.

    Returns ``loads``, ``with_speculation``, ``without_speculation`` (read back from the
    lines), ``crossings`` (the marked loads), ``xlabel``, ``ylabel``, ``format``.
    """
    target = f"TPOT ≤ {tpot_ms:g} ms" if np.isfinite(tpot_ms) else "no TPOT target"
    marks = [
        (
            float(c["to_tokens_per_s"]),
            f"{c['cheaper']} cheaper\nfrom {c['to_tokens_per_s']:,.6g} tokens/s",
        )
        for c in crossings or []
    ]
    got = fleet_cost_steps(
        loads, with_speculation, without_speculation, path, marks=marks,
        xlabel="load, generated tokens/s over the fleet",
        title=f"Fleet cost against load ({target})", option=option,
    )  # fmt: skip
    return {"loads": got.pop("x"), **got}


__all__ = [
    "fleet_cost_steps",
    "plot_capacity_sweep",
    "plot_sweep",
]
