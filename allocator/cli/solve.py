"""``allocator solve``: the Pareto front of a problem."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..exceptions import InputError
from ..outputs import front_csv, solve_document, write_atomic
from . import app
from .common import (
    MAX_SEED,
    JsonOption,
    ProblemArg,
    emit_json,
    emit_text,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .progress import check_search_options, search_progress
from .render import front_table
from .uncertainty import (
    MAX_SAMPLES,
    apply_uncertainty,
    check_options,
    export_point,
    uncertainty_table,
)


@app.command()
@handles_input_errors
def solve(
    problem: Path = ProblemArg,
    strategy: str = typer.Option(
        "auto",
        "--strategy",
        "-s",
        help="auto, exact, knapsack or optuna (auto says which and why).",
    ),
    storage: str = typer.Option(
        None,
        "--storage",
        help="Optuna storage URL: sqlite:///file.db (resumable) or postgresql://... "
        "(shared by several workers). Default: in memory.",
        metavar="URL",
    ),
    study: str = typer.Option(
        None, "--study", help="Optuna study name (default allocator-<problem name>); resumes."
    ),
    trials: int = typer.Option(None, "--trials", help="Optuna trials this run adds to the study."),
    timeout: float = typer.Option(
        None, "--timeout", help="Stop the Optuna search after S seconds.", metavar="S"
    ),
    json_path: str = JsonOption,
    csv_path: str = typer.Option(
        None,
        "--csv",
        help="Write the front as CSV to PATH, or to stdout with '-' (stdout then holds "
        "only the CSV).",
        metavar="PATH|-",
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the front (each single drafter's own front faintly behind) to PATH "
        "(.png or .svg).",
        metavar="PATH",
    ),
    samples: int = typer.Option(
        None,
        "--samples",
        min=1,
        max=MAX_SAMPLES,
        help="Re-solve on N posterior draws of the acceptance intervals.",
    ),
    robust: float = typer.Option(
        None, "--robust", help="Build the front from the Q-quantile of throughput over draws."
    ),
    seed: int = typer.Option(
        None, "--seed", min=0, max=MAX_SEED, help="Seed of every random path (default 0)."
    ),
    export: str = typer.Option(
        None, "--export", help="Print a point as serving settings: vllm or sglang."
    ),
    pick: int = typer.Option(
        None, "--pick", help="With --export: the N-th front point (default: best throughput)."
    ),
) -> None:
    """Search drafters, k and m; print the front of throughput against the cost metric.

    Each point is a configuration (which drafters, k) that no other beats on both
    throughput and cost within the problem's budget.
    """
    precheck_outputs(json=json_path, csv=csv_path)
    if json_path == "-" and csv_path == "-":
        raise InputError("--csv", "stdout ('-') is already taken by --json -")
    check_options(samples, robust, export, pick, json_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    check_search_options(trials, timeout)
    prob = api.load(problem)
    with search_progress(f"solving {prob.name}", enabled=json_path != "-") as progress:
        result = api.solve(
            prob,
            strategy=strategy,
            seed=0 if seed is None else seed,
            storage=storage,
            study=study,
            trials=trials,
            timeout=timeout,
            progress=progress,
        )
    udoc = apply_uncertainty(prob, result, samples, seed, robust)
    doc = solve_document(result)
    if udoc is not None:
        doc["uncertainty"] = udoc
    if csv_path and csv_path != "-":
        write_atomic(csv_path, front_csv(doc["front"]), "--csv")
    if plot_path:
        from ..plots import plot_front, single_drafter_fronts

        plot_front(result, plot_path, singles=single_drafter_fronts(prob))
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    if csv_path == "-":
        emit_text(front_csv(doc["front"]))
        return
    for message in result.notes:
        note(message)
    if export is not None:
        export_point(prob, doc["front"], export, pick)
        return
    out.print(front_table(result))
    if udoc is not None:
        out.print(uncertainty_table(udoc))
