"""``allocator schedule``: the best configuration at each batch size, and where
speculation stops paying."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .. import api
from ..exceptions import InputError
from ..io.outputs import write_atomic
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

EXPORTS = ("vllm",)


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
    ),
) -> None:
    """For each of serving.batch_sizes, the configuration (drafters, k) of highest
    tokens/s within the budget, k = 0 (no speculation) always a candidate.

    speculation_off_from is the smallest planned batch size from which the schedule
    has k = 0 at every larger planned batch size (null when the largest one still
    speculates).
    """
    precheck_outputs(json=json_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    if export is not None:
        if export not in EXPORTS:
            raise InputError("--export", f"{export!r} is not one of {', '.join(EXPORTS)}")
        if json_path == "-":
            raise InputError("--export", "prints to stdout, which --json - already uses")
    from ..analysis.schedule import schedule as plan_schedule

    prob = api.load(problem)
    sched = plan_schedule(prob)
    rows = sched.rows()
    doc = {"rows": rows, "speculation_off_from": sched.speculation_off_from}
    text = None
    export_notes: list[str] = []
    if export is not None:
        from ..engines import export_schedule

        drafters = prob.drafter_map
        text, export_notes = export_schedule(export, rows, drafters)
    if plot_path:
        from ..plots import plot_schedule

        plot_schedule(sched, plot_path)
    if json_path == "-":
        emit_json(doc, "-")
        return
    if json_path:
        write_atomic(json_path, _json(doc), "--json")
    for message in sched.notes + export_notes:
        note(message)
    if text is not None:
        for message in export_notes:
            note(message)
        out.print(text, end="", soft_wrap=True, markup=False)
        return
    out.print(schedule_table(sched.problem, doc))


def _json(doc: dict) -> str:
    from ..io.outputs import to_json

    return to_json(doc)


def schedule_table(name: str, doc: dict) -> Table:
    off = doc["speculation_off_from"]
    title = f"{name}: the best configuration at each batch size\n" + (
        f"speculation stops paying from batch {off} on"
        if off is not None
        else "speculation still pays at the largest batch size planned"
    )
    t = Table(title=title, title_justify="left")
    for col in (
        "batch",
        "drafters",
        "k",
        "tokens/s",
        "tokens/s/seq",
        "ITL ms",
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
            f"{r['itl_ms']:.4g}",
            f"{r['speedup']:.4f}",
            "-" if cost is None else f"{cost:.4g}",
        )
    return t
