"""``allocator plan``: which drafters to host, and which configuration each workload runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import typer
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis.plan import MAX_CANDIDATES, Plan, PlanSweep
from ..engines import TARGETS
from ..exceptions import InputError
from ..io.ranges import parse_hosting_range
from .common import (
    BudgetOption,
    EngineOption,
    JsonOption,
    PooledOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    parse_budget,
    precheck_outputs,
)
from .group import app

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

# ----------------------------------------------------------------- option parsing


def _parse_sweep(text: str) -> np.ndarray | None:
    """``hosting_cost=LO:HI:STEPS`` into caps, or ``hosting_cost`` alone into ``None``."""
    name, sep, rng = text.partition("=")
    if name.strip() != "hosting_cost":
        raise InputError("--sweep", "only hosting_cost can be swept: hosting_cost=LO:HI:STEPS")
    if not sep:
        return None
    return parse_hosting_range(rng, text)


# ----------------------------------------------------------------- tables


def _fmt(x: float | None, spec: str = ".6f") -> str:
    return "—" if x is None else format(x, spec)


def _plan_table(doc: dict) -> Table:
    gain = doc["routing_gain"]
    single = doc["single"]
    title = (
        f"{doc['problem']}: host {', '.join(doc['hosted'])} (hosting cost "
        f"{doc['hosting_cost']:g}); overall throughput {doc['throughput']:.6f}\n"
        + (
            f"one configuration for all traffic ({', '.join(single['drafters'])}, "
            f"k={single['k']}): {single['throughput']:.6f}, routing gains {gain:+.2%}\n"
            if single
            else "no single configuration meets every cap\n"
        )
        + f"{doc['status']}, {'exact' if doc['exact'] else 'not proven optimal'}, "
        f"gap {_fmt(doc['gap'], '.3g')}, {doc['seconds']:.3g} s"
    )
    t = Table(title=title, title_justify="left")
    for col in ("workload", "weight", "drafters", "k", "throughput", "single config"):
        t.add_column(col, justify="left" if col in ("workload", "drafters") else "right")
    for w in doc["workloads"]:
        t.add_row(
            w["name"],
            f"{w['weight']:.3g}",
            ", ".join(w["drafters"]),
            str(w["k"]),
            f"{w['throughput']:.6f}",
            _fmt(w["single_throughput"]),
        )
    return t


def _sweep_table(doc: dict) -> Table:
    title = (
        f"{doc['problem']}: throughput against hosting cost, {len(doc['front'])} point(s)"
        f" ({'every distinct hosting cost' if doc['auto'] else str(len(doc['steps'])) + ' caps'}, "
        f"{'exact' if doc['exact'] else 'not proven optimal'}, {doc['seconds']:.3g} s)"
    )
    t = Table(title=title, title_justify="left")
    for col in ("hosting cost", "throughput", "single config", "hosted", "per workload"):
        t.add_column(col, justify="right" if col != "hosted" and col != "per workload" else "left")
    for p in doc["front"]:
        t.add_row(
            f"{p['hosting_cost']:g}",
            f"{p['throughput']:.6f}",
            _fmt(p["single_throughput"]),
            ", ".join(p["hosted"]),
            "; ".join(f"{w['name']}: {'+'.join(w['drafters'])} k={w['k']}" for w in p["workloads"]),
        )
    return t


# ----------------------------------------------------------------- command


@app.command()
@handles_input_errors
def plan(
    ctx: typer.Context,
    problem: Path = ProblemArg,
    json_path: str = JsonOption,
    budget: list[str] = BudgetOption,
    sweep: str = typer.Option(
        None,
        "--sweep",
        help="hosting_cost=LO:HI:STEPS: the front of plans over STEPS hosting caps; "
        "hosting_cost alone: over every distinct achievable hosting cost.",
        metavar="hosting_cost[=LO:HI:STEPS]",
    ),
    max_candidates: int = typer.Option(
        MAX_CANDIDATES,
        "--max-candidates",
        min=1,
        help="Candidate configurations kept per workload after pruning; fewer than the "
        "pruned count makes the plan unproven (exact: false).",
    ),
    time_limit: float = typer.Option(
        None, "--time-limit", min=0.0, help="Seconds the MILP solver may take per plan."
    ),
    batch: int = typer.Option(
        None,
        "--batch",
        help="Sequences each replica must hold: the hosted drafters' memory_gb may take "
        "only what serving.memory's KV cache has left after B sequences.",
        metavar="B",
    ),
    export: str = typer.Option(
        None,
        "--export",
        help="Print the plan as serving settings (vllm or sglang): one config per workload "
        "route and the hosted set, as one JSON document.",
        metavar="vllm|sglang",
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="With --sweep: draw throughput against hosting cost (beside one configuration "
        "for all traffic) to PATH (.png or .svg).",
        metavar="PATH",
    ),
    engine: str = EngineOption,
    pooled: bool = PooledOption,
) -> None:
    """Choose the drafters to host and each workload's route, a drafter and k (exact, by
    MILP), among what --engine serves (one drafter per server; --pooled: also pooled
    subsets, the upper bound no engine serves).

    Beside each workload: its throughput under the best single configuration for all traffic.
    """
    if engine not in TARGETS:
        raise InputError("--engine", f"{engine!r} is not one of {', '.join(TARGETS)}")
    if export is not None:
        if export not in TARGETS:
            raise InputError("--export", f"{export!r} is not one of {', '.join(TARGETS)}")
        source = ctx.get_parameter_source("engine")
        if source is not None and source.name != "DEFAULT" and engine != export:
            raise InputError(
                "--engine",
                f"{engine} where --export {export} exports for {export}: give one engine "
                "(--export alone is enough)",
            )
        engine = export
        if pooled:
            raise InputError(
                "--pooled",
                "an export serves one drafter per server; pooled configurations are an upper "
                "bound no engine serves (leave out --pooled)",
            )
        if sweep is not None:
            raise InputError("--export", "exports one plan; it does not apply with --sweep")
        if json_path == "-":
            raise InputError("--export", "prints to stdout, which --json - already uses")
    precheck_outputs(json=json_path)
    if plot_path:
        if sweep is None:
            raise InputError("--plot", "draws the front of --sweep: give --sweep hosting_cost")
        plots.check_plot_path(plot_path, "--plot")
    caps = parse_budget(budget)
    levels = _parse_sweep(sweep) if sweep is not None else False
    prob = api.load(problem)
    result: Plan | PlanSweep
    if levels is False:
        result = api.plan(
            prob,
            caps,
            max_candidates=max_candidates,
            time_limit=time_limit,
            batch=batch,
            engine=engine,
            pooled=pooled,
        )
        table = _plan_table
    else:
        if batch is not None:
            raise InputError("--batch", "applies to one plan, not to --sweep")
        result = api.sweep_hosting(
            prob,
            levels,
            caps,
            max_candidates=max_candidates,
            time_limit=time_limit,
            engine=engine,
            pooled=pooled,
        )
        table = _sweep_table
    doc = result.to_dict()
    if export is not None:
        assert isinstance(result, Plan)  # --export is refused with --sweep
        settings, notes = api.export_plan(prob, result, export, batch)
        emit_json(doc, json_path)
        for message in [*doc["notes"], *notes]:
            note(message)
        emit_json(settings, "-")
        return
    if levels is not False and plot_path:
        plots.plot_sweep(doc, plot_path)
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in doc["notes"]:
        note(message)
    out.print(table(doc))


__all__ = [
    "plan",
]
