"""Rich tables for people; the JSON documents are the results' ``to_dict()``
(:mod:`allocator.core.documents`), files and CSV in :mod:`allocator.io.staged`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from rich.table import Table

from ..core.result import SolveResult

T = TypeVar("T")

#: Most rows a table prints: the first and last half of them, with a line saying how many
#: are left out (the JSON and the CSV keep every row). Drawing a 100,000-point front took
#: over two minutes.
MAX_TABLE_ROWS = 60


def shown_rows(items: Sequence[T], limit: int = MAX_TABLE_ROWS) -> Iterator[tuple[int, T | None]]:
    """``(number, item)`` for the rows a table prints, numbered from 1: every item up to
    ``limit``, else the first and last ``limit // 2`` with one ``(left out, None)`` between."""
    n = len(items)
    if n <= limit:
        yield from enumerate(items, 1)
        return
    head = limit // 2
    yield from ((i + 1, items[i]) for i in range(head))
    yield (n - 2 * head, None)
    yield from ((i + 1, items[i]) for i in range(n - head, n))


def add_gap(t: Table, left_out: int, what: str = "points") -> None:
    """The row standing for ``left_out`` rows not printed, and the caption saying so."""
    t.add_row(*["…"] * len(t.columns))
    t.caption = f"{left_out:,} {what} not shown; --json or --csv lists every one"
    t.caption_justify = "left"


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
    for i, p in shown_rows(result.points()):
        if p is None:
            add_gap(t, i)
            continue
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
    for i, p in shown_rows(doc["points"]):
        if p is None:
            add_gap(t, i)
            continue
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
    "MAX_TABLE_ROWS",
    "front_table",
    "add_gap",
    "point_table",
    "shown_rows",
    "uncertainty_table",
]
