"""Rich tables for people; the JSON documents are the results' ``to_dict()``
(:mod:`allocator.core.documents`), files and CSV in :mod:`allocator.io.staged`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from rich import box
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
    gap = f"{left_out:,} {what} not shown; --json or --csv lists every one"
    t.caption = f"{t.caption}\n{gap}" if t.caption else gap
    t.caption_justify = "left"


#: The unit of each cost metric, as table headers write it.
COST_UNITS = {
    "draft_cost_per_round": "vu",
    "draft_cost_per_token": "vu / unit",
    "hosting_cost": "file's unit",
    "drafters": "count",
    "cost_per_mtok": "$ / Mtok",
}
#: What ``vu`` in a header stands for.
VU = "vu: verifier-units of time (one verification pass = 1)"


#: Narrowest the first column (the rows' labels) of :func:`narrow_table` gets before it
#: folds a word.
NAME_WIDTH = 11


def narrow_table(title: str, columns: Sequence[str], left: Sequence[str] = ()) -> Table:
    """A table that fits an 80-column terminal: no vertical rules, one space between
    columns, headers broken at spaces onto lines of their own, numbers on one line, and
    names that wrap and fold rather than end in an ellipsis (an answer's names are never
    cut). ``columns``: header texts; those in ``left`` are left-aligned (and may wrap), the
    rest right-aligned."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=0)
    for i, col in enumerate(columns):
        words = col.split()
        t.add_column(
            "\n".join(words),
            justify="left" if col in left else "right",
            overflow="fold",
            # numbers keep their line; names wrap at spaces, then fold
            no_wrap=col not in left,
            min_width=max([len(w) for w in words] + [NAME_WIDTH if i == 0 else 0]),
        )
    return t


def front_table(result: SolveResult) -> Table:
    """The front as a table. Each column states its unit, and one table never mixes the
    model's verifier-units with the serving metrics: under load (``solve --batch``) the
    columns are tokens/s, latency and price, and the cost axis says its unit."""
    points = result.points()
    serving = bool(points) and "tokens_per_s" in points[0]
    metric = result.cost_metric
    title = (
        f"{result.problem}: {len(result.front)} point(s) on the front of "
        f"{'tokens/s' if serving else 'throughput'} against {metric}\nstrategy "
        f"{result.strategy}, {'exact' if result.exact else 'heuristic (not proven complete)'}, "
        f"{result.evaluated:,} configurations covered in {result.seconds:.3g} s"
    )
    t = Table(title=title, title_justify="left")
    cost = f"cost\n({COST_UNITS.get(metric, metric)})"
    if serving:
        columns = [
            ("#", "right"),
            ("drafters", "left"),
            ("m", "right"),
            ("k", "right"),
            ("tokens/s\n(whole batch)", "right"),
            ("tokens/s\nper sequence", "right"),
            ("TPOT\n(ms)", "right"),
            ("speedup\n(× k = 0)", "right"),
            ("$/Mtok", "right"),
            (cost, "right"),
            ("tokens\nper step", "right"),
        ]
    else:
        columns = [
            ("#", "right"),
            ("drafters", "left"),
            ("m", "right"),
            ("k", "right"),
            ("throughput\n(units / vu)", "right"),
            (cost, "right"),
            ("E[accepted]\n(units)", "right"),
            ("pooled α", "right"),
            ("round time\n(vu)", "right"),
        ]
    for col, just in columns:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    if not serving or "vu" in cost:
        t.caption, t.caption_justify = VU, "left"
    for i, p in shown_rows(points):
        if p is None:
            add_gap(t, i)
            continue
        head = [str(i), ", ".join(p["drafters"]), str(p["m"]), str(p["k"])]
        if serving:
            price = p["cost_per_mtok"]
            t.add_row(
                *head,
                f"{p['tokens_per_s']:,.6g}",
                f"{p['tokens_per_s_per_seq']:,.6g}",
                f"{p['tpot_ms']:.4g}",
                f"{p['speedup']:.4f}",
                "-" if price is None else f"{price:.4g}",
                _num(p["cost"]),
                f"{p['tokens_per_step']:.6f}",
            )
        else:
            t.add_row(
                *head,
                _num(p["throughput"], ".6f"),
                _num(p["cost"]),
                f"{p['expected_accepted']:.6f}",
                f"{p['pooled_acceptance']:.6f}",
                _num(p["round_time"]),
            )
    return t


def _num(v: float | None, fmt: str = ".6g") -> str:
    return "-" if v is None else format(v, fmt)


#: The unit of each field of a point (``evaluate``), as its table writes it.
POINT_UNITS = {
    "m": "drafters",
    "k": "units drafted per round",
    "throughput": "accepted units per verifier-unit of time",
    "expected_accepted": "units per round",
    "pooled_acceptance": "probability",
    "round_time": "verifier-units",
    "draft_cost_per_round": "verifier-units",
    "draft_cost_per_token": "verifier-units per accepted unit",
    "hosting_cost": "the file's hosting unit",
    "batch": "concurrent sequences",
    "step_ms": "ms per step",
    "tokens_per_step": "tokens per sequence per step",
    "tokens_per_s": "tokens/s, whole batch",
    "tokens_per_s_per_seq": "tokens/s per sequence",
    "tpot_ms": "ms per output token of one sequence (TPOT: step_ms / E)",
    "speedup": "× speculation off (k = 0)",
    "cost_per_mtok": "$ per million tokens",
}

#: A point's fields measured under load, shown apart from the model's verifier-units.
_SERVING_FIELDS = ("batch", "step_ms", "tokens_per_step", "tokens_per_s",
                   "tokens_per_s_per_seq", "tpot_ms", "speedup", "cost_per_mtok")  # fmt: skip


def point_table(point: dict) -> Table:
    """One configuration's metrics, each with its unit; under load the serving metrics
    come first, apart from the model's (verifier-units)."""
    who = ", ".join(point["drafters"]) or "no speculation"
    where = f", batch {point['batch']}" if "batch" in point else ""
    t = Table(
        show_header=False,
        title=f"{who} at k={point['k']}{where}",
        title_justify="left",
    )
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("unit")
    keys = [k for k in point if k not in ("drafters", "cost")]
    serving = [k for k in keys if k in _SERVING_FIELDS]
    model = [k for k in keys if k not in _SERVING_FIELDS]
    for n, group in enumerate((serving, model) if serving else (model,)):
        if n and group:
            t.add_section()
            t.add_row("the model, in verifier-units", "", "")
        for key in group:
            v = point[key]
            shown = f"{v:.9g}" if isinstance(v, float) else ("-" if v is None else str(v))
            t.add_row(key, shown, POINT_UNITS.get(key, ""))
    return t


def uncertainty_table(doc: dict) -> Table:
    """``solve --samples``: the ``uncertainty`` object of the solve document as a table."""
    q = doc["robust_quantile"]
    t = Table(
        title=f"over {doc['samples']} posterior draws (seed {doc['seed']}) of "
        + ", ".join(doc["resampled"]),
        title_justify="left",
    )
    t.caption = f"p05, p50, p95: quantiles of throughput (units / vu) over the draws; {VU}"
    t.caption_justify = "left"
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
    "NAME_WIDTH",
    "narrow_table",
    "COST_UNITS",
    "MAX_TABLE_ROWS",
    "POINT_UNITS",
    "VU",
    "front_table",
    "add_gap",
    "point_table",
    "shown_rows",
    "uncertainty_table",
]
