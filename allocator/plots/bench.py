"""``bench --plot``: the distributions of TTFT, TPOT and ITL of one simulated run; and
``capacity --request-rate --sweep-rate --plot``: the fleet's $/h against the request rate,
with and without speculation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import check_plot_path, figure, literal_text, save

#: Percentiles marked on each distribution.
MARKED = (50.0, 90.0, 99.0)


@literal_text
def plot_bench(
    ttft_ms,
    tpot_ms,
    itl_ms,
    path: str | Path,
    *,
    title: str | None = None,
    option: str = "plot",
) -> dict:
    """Draw the empirical distribution (share of values at most ``x``) of each latency of a
    run in its own panel: time to first token per request, time per output token per
    request, and the gap between streamed chunks (ITL, pooled over requests), each in ms
    on a log axis, with the p50, p90 and p99 marked.

    ``ttft_ms (N,)``, ``tpot_ms (M,)`` (NaN entries, one-token requests, left out),
    ``itl_ms (G,)``. Returns, per latency name (``ttft``, ``tpot``, ``itl``), ``{"x",
    "share"}`` read back from the drawn curve and ``"marks"`` (the marked percentiles'
    values, ms); ``xlabels``, ``ylabel``, ``format``.
    """
    fmt = check_plot_path(path, option)
    data = {
        "ttft": np.asarray(ttft_ms, float),
        "tpot": np.asarray(tpot_ms, float),
        "itl": np.asarray(itl_ms, float),
    }
    names = {
        "ttft": "TTFT, time to first token (ms)",
        "tpot": "TPOT, time per output token after the first (ms)",
        "itl": "ITL, gap between streamed chunks (ms)",
    }
    fig = figure(14.0, 4.8)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.16, top=0.84, wspace=0.22)
    out: dict = {"xlabels": [], "format": fmt}
    axes = fig.subplots(1, 3)
    for ax, (key, values) in zip(axes, data.items(), strict=True):
        v = np.sort(values[np.isfinite(values)])
        ax.set_xlabel(names[key])
        out["xlabels"].append(names[key])
        if v.size == 0:
            ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
            out[key] = {"x": np.zeros(0), "share": np.zeros(0), "marks": {}}
            continue
        share = np.arange(1, v.size + 1) / v.size
        (line,) = ax.plot(v, share, drawstyle="steps-post", color="C0", lw=1.4)
        marks = {}
        for p, color in zip(MARKED, ("C2", "C1", "C3"), strict=True):
            x = float(np.percentile(v, p))
            marks[f"p{p:g}"] = x
            ax.axvline(x, color=color, ls="--", lw=1, label=f"p{p:g} {x:,.4g} ms")
        if v[0] > 0 and v[-1] > v[0] * 1.5:
            ax.set_xscale("log")
        ax.set_ylim(0.0, 1.02)
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
        out[key] = {
            "x": np.asarray(line.get_xdata(), float),
            "share": np.asarray(line.get_ydata(), float),
            "marks": marks,
        }
    axes[0].set_ylabel("share of values at most x (fraction)")
    out["ylabel"] = axes[0].get_ylabel()
    fig.suptitle(title or "Latencies of a simulated run", x=0.05, ha="left")
    save(fig, path, fmt, option)
    return out


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
    fmt = check_plot_path(path, option)
    x = np.asarray(rates, float)
    a = np.asarray(with_speculation, float)
    b = np.asarray(without_speculation, float)
    fig = figure(10.0, 5.4)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.88)
    ax = fig.add_subplot()
    (la,) = ax.plot(x, a, "o-", drawstyle="steps-post", color="C0", lw=1.6, ms=4,
                    label="with speculation")  # fmt: skip
    (lb,) = ax.plot(x, b, "s--", drawstyle="steps-post", color="C3", lw=1.4, ms=4,
                    label="without speculation")  # fmt: skip
    marked = []
    for c in crossings or []:
        at = float(c["to_request_rate"])
        marked.append(at)
        ax.axvline(at, color="grey", ls=":", lw=1)
        ax.annotate(
            f"from {at:g} req/s: {c['cheaper']}",
            (at, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color="grey",
        )
    ax.set_xlabel("request rate of the whole fleet (requests/s)")
    ax.set_ylabel("fleet cost ($/h)")
    ax.set_title(
        title or ("Cheapest fleet under " + (slos or "the SLOs") + ", by request rate"),
        loc="left",
    )
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(loc="upper left", fontsize=9, frameon=False)
    save(fig, path, fmt, option)
    return {
        "rates": np.asarray(la.get_xdata(), float),
        "with_speculation": np.asarray(la.get_ydata(), float),
        "without_speculation": np.asarray(lb.get_ydata(), float),
        "crossings": marked,
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "format": fmt,
    }


__all__ = [
    "MARKED",
    "plot_bench",
    "plot_rate_sweep",
]
