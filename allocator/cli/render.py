"""Rich tables for people; the JSON documents are the results' ``to_dict()``
(:mod:`allocator.core.documents`), files and CSV in :mod:`allocator.io.staged`."""

from __future__ import annotations

from rich.table import Table

from ..core.result import SolveResult


def front_table(result: SolveResult) -> Table:
    title = (
        f"{result.problem}: {len(result.front)} point(s) on the front of throughput against "
        f"{result.cost_metric}\nstrategy {result.strategy}, "
        f"{'exact' if result.exact else 'heuristic (not proven complete)'}, "
        f"{result.evaluated:,} configurations covered in {result.seconds:.3g} s"
    )
    t = Table(title=title, title_justify="left")
    for col, just in (
        ("#", "right"),
        ("drafters", "left"),
        ("m", "right"),
        ("k", "right"),
        ("throughput", "right"),
        ("cost", "right"),
        ("E[accepted]", "right"),
        ("pooled α", "right"),
        ("round time", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for i, p in enumerate(result.points(), 1):
        t.add_row(
            str(i),
            ", ".join(p["drafters"]),
            str(p["m"]),
            str(p["k"]),
            f"{p['throughput']:.6f}",
            f"{p['cost']:.6g}",
            f"{p['expected_accepted']:.6f}",
            f"{p['pooled_acceptance']:.6f}",
            f"{p['round_time']:.6g}",
        )
    return t


def point_table(point: dict) -> Table:
    who = ", ".join(point["drafters"]) or "no speculation"
    where = f", batch {point['batch']}" if "batch" in point else ""
    t = Table(
        show_header=False,
        title=f"{who} at k={point['k']}{where}",
        title_justify="left",
    )
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key, v in point.items():
        if key in ("drafters", "cost"):
            continue
        t.add_row(key, f"{v:.9g}" if isinstance(v, float) else ("-" if v is None else str(v)))
    return t


def uncertainty_table(doc: dict) -> Table:
    """``solve --samples``: the ``uncertainty`` object of the solve document as a table."""
    q = doc["robust_quantile"]
    t = Table(
        title=f"over {doc['samples']} posterior draws (seed {doc['seed']}) of "
        + ", ".join(doc["resampled"]),
        title_justify="left",
    )
    for col in ("#", "drafters", "k", "optimal", "p05", "p50", "p95"):
        t.add_column(col, justify="left" if col == "drafters" else "right")
    if q is not None:
        t.add_column(f"q{q:g}", justify="right")
    for i, p in enumerate(doc["points"], 1):
        row = [
            str(i),
            ", ".join(p["drafters"]),
            str(p["k"]),
            f"{p['optimal_share']:.1%}",
            f"{p['throughput_p05']:.6f}",
            f"{p['throughput_p50']:.6f}",
            f"{p['throughput_p95']:.6f}",
        ]
        if q is not None:
            row.append(f"{p['throughput_quantile']:.6f}")
        t.add_row(*row)
    for o in doc["other_optima"]:
        t.add_row(
            "—", ", ".join(o["drafters"]), str(o["k"]), f"{o['optimal_share']:.1%}", "", "", ""
        )
    return t


__all__ = [
    "front_table",
    "point_table",
    "uncertainty_table",
]
