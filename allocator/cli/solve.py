"""``allocator solve``: the Pareto front of a problem."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..outputs import front_csv, solve_document, write_atomic
from . import app
from .common import (
    JsonOption,
    ProblemArg,
    emit_json,
    err,
    handles_input_errors,
    out,
    precheck_outputs,
)
from .render import front_table


@app.command()
@handles_input_errors
def solve(
    problem: Path = ProblemArg,
    strategy: str = typer.Option(
        "auto", "--strategy", "-s", help="auto, or a named strategy (exact)."
    ),
    json_path: str = JsonOption,
    csv_path: str = typer.Option(
        None, "--csv", help="Write the front as CSV to PATH.", metavar="PATH"
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the front (each single drafter's own front faintly behind) to PATH "
        "(.png or .svg).",
        metavar="PATH",
    ),
) -> None:
    """Search drafters, k and m; print the front of throughput against the cost metric.

    Each point is a configuration (which drafters, k) that no other beats on both
    throughput and cost within the problem's budget.
    """
    precheck_outputs(json=json_path, csv=csv_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    prob = api.load(problem)
    result = api.solve(prob, strategy=strategy)
    doc = solve_document(result)
    if csv_path:
        write_atomic(csv_path, front_csv(doc["front"]), "--csv")
    if plot_path:
        from ..plots import plot_front, single_drafter_fronts

        plot_front(result, plot_path, singles=single_drafter_fronts(prob))
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for note in result.notes:
        err.print(note)
    out.print(front_table(result))
