"""``allocator schedule``: the best configuration at each batch size, and where
speculation stops paying."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis.schedule import check_export
from ..exceptions import InputError
from ..io.staged import to_json, write_atomic
from .common import (
    EngineOption,
    JsonOption,
    PooledOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .group import app

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")


@app.command()
@handles_input_errors
def schedule(
    problem: Path = ProblemArg,
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw tokens/s against batch size, one line per k and the schedule over "
        "them, to PATH (.png or .svg).",
        metavar="PATH",
    ),
    export: str = typer.Option(
        None,
        "--export",
        help="Print the k table as the serving engine takes it: vllm "
        "(--speculative-config with num_speculative_tokens_per_batch_size).",
        metavar="vllm",
    ),
    contexts: str = typer.Option(
        None,
        "--contexts",
        help="Plan k by batch size and context bucket: tokens in each sequence's KV cache, "
        "e.g. 1024,8192,32768 (rows gain context).",
        metavar="C1,C2,...",
    ),
    engine: str = EngineOption,
    pooled: bool = PooledOption,
) -> None:
    """For each of serving.batch_sizes, the configuration (drafters, k) of highest
    tokens/s within the budget that the engine serves, k = 0 (no speculation) always a
    candidate.

    speculation_off_from is the smallest planned batch size from which the schedule
    has k = 0 at every larger planned batch size (null when the largest one still
    speculates).
    """
    precheck_outputs(json=json_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    if export is not None:
        check_export(export)
        if json_path == "-":
            raise InputError("--export", "prints to stdout, which --json - already uses")
    buckets = None if contexts is None else api.parse_contexts(contexts)
    if plot_path and buckets is not None and len(buckets) > 1:
        raise InputError("--plot", "draws one context: give one value of --contexts")
    sched = api.schedule(problem, export=export, contexts=buckets, engine=engine, pooled=pooled)
    if plot_path:
        plots.plot_schedule(getattr(sched, "schedules", [sched])[0], plot_path)
    doc = sched.to_dict()
    if json_path == "-":
        emit_json(doc, "-")
        return
    if json_path:
        write_atomic(json_path, _json(doc), "--json")
    for message in sched.notes:
        note(f"note: {message}")
    for message in [] if sched.export is None else sched.export.notes:
        note(message if message.startswith("note:") else f"note: {message}")
    if sched.export is not None:
        out.print(sched.export.text, end="", soft_wrap=True, markup=False)
        return
    if buckets is None:
        out.print(schedule_table(sched.problem, doc, sched.extrapolated))
        return
    for s, off in zip(getattr(sched, "schedules", []), doc["speculation_off_from"], strict=True):
        sub = {"rows": s.rows(), "speculation_off_from": off["speculation_off_from"]}
        out.print(schedule_table(f"{sched.problem} at context {s.context:g}", sub, s.extrapolated))


def _json(doc: dict) -> str:
    return to_json(doc)


def schedule_table(name: str, doc: dict, extrapolated: bool = False) -> Table:
    off = doc["speculation_off_from"]
    caveat = " (extrapolated: see the notes)" if extrapolated else ""
    title = f"{name}: the best configuration at each batch size\n" + (
        f"speculation stops paying from batch {off} on{caveat}"
        if off is not None
        else f"speculation still pays at the largest batch size planned{caveat}"
    )
    t = Table(title=title, title_justify="left")
    for col in (
        "batch",
        "drafters",
        "k",
        "tokens/s",
        "tokens/s/seq",
        "TPOT ms",
        "speedup",
        "$/Mtok",
    ):
        t.add_column(col, justify="left" if col == "drafters" else "right")
    for r in doc["rows"]:
        cost = r["cost_per_mtok"]
        t.add_row(
            str(r["batch"]),
            "+".join(r["drafters"]) or "(none)",
            str(r["k"]),
            f"{r['tokens_per_s']:.6g}",
            f"{r['tokens_per_s_per_seq']:.6g}",
            f"{r['tpot_ms']:.4g}",
            f"{r['speedup']:.4f}",
            "-" if cost is None else f"{cost:.4g}",
        )
    return t


__all__ = [
    "schedule",
    "schedule_table",
]
