"""``allocator capacity``: replicas, batch size, drafters and k that carry a load under a
latency target at the lowest $/h (fleet sizing, docs/design.md §8.11; ``plan --sweep`` is
about hosting)."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from .. import api
from ..analysis.fleet import CapacityResult, LoadSweep
from ..exceptions import InputError
from ..io.ranges import parse_load_range
from . import app
from .common import (
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)


def _fmt(x: float | None, spec: str = ".4g") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _row(t: Table, label: str, f: dict | None) -> None:
    if f is None:
        t.add_row(label, *["—"] * 8)
        return
    t.add_row(
        label,
        str(f["replicas"]),
        str(f["batch"]),
        ", ".join(f["drafters"]) or "—",
        str(f["k"]),
        _fmt(f["itl_ms"]),
        _fmt(f["tokens_per_s_per_replica"], ",.1f"),
        _fmt(f["cost_per_hour"], ",.2f"),
        _fmt(f["cost_per_mtok"]),
    )


def capacity_table(result: CapacityResult, doc: dict) -> Table:
    target = result.itl_target_ms
    saving = doc["saving"]
    title = (
        f"{result.problem}: {result.tokens_per_s:,.6g} tokens/s"
        + (f", itl_ms <= {target:g}" if math.isfinite(target) else ", no latency target")
        + (f"; speculation saves {saving:.2%} of $/h" if saving is not None else "")
    )
    t = Table(title=title, title_justify="left")
    for col in (
        "fleet",
        "replicas",
        "batch",
        "drafters",
        "k",
        "itl ms",
        "tokens/s per replica",
        "$/h",
        "$/Mtok",
    ):
        t.add_column(col, justify="left" if col in ("fleet", "drafters") else "right")
    _row(t, "cheapest", doc)
    _row(t, "without speculation", doc["without_speculation"])
    return t


def sweep_table(sweep: LoadSweep) -> Table:
    t = Table(title="$/h against load", title_justify="left")
    for col in ("tokens/s", "with speculation $/h", "", "without $/h", ""):
        t.add_column(col, justify="right")
    for x, (a, b) in zip(sweep.loads, sweep.fleets, strict=True):
        t.add_row(
            f"{x:,.6g}",
            _fmt(None if a is None else a.cost_per_hour, ",.2f"),
            "" if a is None else f"{a.replicas}× b={a.batch} k={a.k}",
            _fmt(None if b is None else b.cost_per_hour, ",.2f"),
            "" if b is None else f"{b.replicas}× b={b.batch}",
        )
    return t


@app.command("capacity")
@handles_input_errors
def capacity_command(
    problem: Path = ProblemArg,
    tokens_per_s: float = typer.Option(
        ...,
        "--tokens-per-s",
        help="Load to carry: generated tokens per second over the whole fleet.",
        show_default=False,
    ),
    itl_ms: float = typer.Option(
        None,
        "--itl-ms",
        help="Inter-token latency target, ms per token of one sequence (default: none).",
    ),
    json_path: str = JsonOption,
    sweep: str = typer.Option(
        None,
        "--sweep-load",
        help="LO:HI:STEPS: also $/h at STEPS loads from LO to HI tokens/s, with and "
        "without speculation, and where the cheaper side changes.",
        metavar="LO:HI:STEPS",
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw $/h against load, with and without speculation, to PATH (.png or .svg); "
        "needs --sweep-load.",
        metavar="PATH",
    ),
) -> None:
    """Size a fleet: replicas, batch size, drafters and k carrying a load at the lowest $/h.

    Every configuration with a measured or modelled step time at each batch size of
    `serving` (and k = 0) is a candidate when its inter-token latency meets --itl-ms and
    its drafters leave KV-cache memory for the batch; replicas = ceil(load / tokens/s of
    one replica), $/h = replicas × serving.gpu_cost_per_hour. Beside it: the cheapest
    fleet without speculation.
    """
    precheck_outputs(json=json_path)
    loads = parse_load_range(sweep) if sweep is not None else None
    if plot_path:
        from ..plots import check_plot_path

        if loads is None:
            raise InputError("--plot", "draws the load sweep: give --sweep-load LO:HI:STEPS")
        check_plot_path(plot_path, "--plot")
    result = api.size_fleet(problem, tokens_per_s, itl_ms, sweep_load=loads)
    doc = result.to_dict()
    swept = result.sweep
    if swept is not None and plot_path:
        from ..plots import plot_capacity_sweep

        plot_capacity_sweep(
            swept.loads,
            swept.with_speculation,
            swept.without_speculation,
            plot_path,
            crossings=swept.crossings,
            itl_ms=result.itl_target_ms,
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in result.notes:
        note(message)
    out.print(capacity_table(result, doc))
    if swept is not None:
        out.print(sweep_table(swept))
        for c in swept.crossings:
            out.print(
                f"between {c['from_tokens_per_s']:,.6g} and {c['to_tokens_per_s']:,.6g} tokens/s "
                f"the cheaper side becomes: {c['cheaper']}"
            )


__all__ = [
    "capacity_command",
    "capacity_table",
    "sweep_table",
]
