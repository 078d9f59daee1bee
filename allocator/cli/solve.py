"""``allocator solve``: the Pareto front of a problem."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..exceptions import InputError
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
from .progress import check_search_options, search_progress
from .render import front_table
from .uncertainty import (
    apply_uncertainty,
    check_options,
    export_settings,
    print_export,
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
        None, "--csv", help="Write the front as CSV to PATH.", metavar="PATH"
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the front (each single drafter's own front faintly behind) to PATH "
        "(.png or .svg).",
        metavar="PATH",
    ),
    samples: int = typer.Option(
        None, "--samples", help="Re-solve on N posterior draws of the acceptance intervals."
    ),
    robust: float = typer.Option(
        None, "--robust", help="Build the front from the Q-quantile of throughput over draws."
    ),
    seed: int = typer.Option(None, "--seed", help="Seed of every random path (default 0)."),
    export: str = typer.Option(
        None, "--export", help="Print a point as serving settings: vllm or sglang."
    ),
    pick: int = typer.Option(
        None, "--pick", help="With --export: the N-th front point (default: best throughput)."
    ),
    batch: int = typer.Option(
        None,
        "--batch",
        "-b",
        help="Serve B >= 1 concurrent sequences: the front's throughput is tokens/s from the "
        "problem's serving step times (exhaustive search; configurations without a step "
        "time are left out).",
        metavar="B",
    ),
) -> None:
    """Search drafters, k and m; print the front of throughput against the cost metric.

    Each point is a configuration (which drafters, k) that no other beats on both
    throughput and cost within the problem's budget.
    """
    precheck_outputs(json=json_path, csv=csv_path)
    if batch is not None and batch < 1:  # checked here: typer's own check prints a box
        raise InputError("--batch", f"must be at least 1, got {batch}")
    check_options(samples, robust, export, pick, json_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    check_search_options(trials, timeout)
    prob = api.load(problem)
    if batch is not None:
        _check_batch_options(strategy, samples, robust, export, storage, study, trials, timeout)
        result = api.solve_at_batch(prob, batch)
        doc = solve_document(result)
        if csv_path:
            write_atomic(csv_path, front_csv(doc["front"]), "--csv")
        if plot_path:
            from ..plots import plot_front

            plot_front(result, plot_path, throughput_label=f"tokens/s at batch {batch}")
        if json_path == "-":
            emit_json(doc, "-")
            return
        emit_json(doc, json_path)
        for note in result.notes:
            err.print(note)
        out.print(front_table(result))
        return
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
    # refused exports fail here, before any output is written or note printed
    exported = export_settings(prob, doc["front"], export, pick) if export is not None else None
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
    if exported is not None:
        print_export(exported)
        return
    out.print(front_table(result))
    if udoc is not None:
        out.print(uncertainty_table(udoc))


def _check_batch_options(
    strategy, samples, robust, export, storage, study, trials, timeout
) -> None:
    """``--batch`` searches exhaustively, on the nominal acceptance only."""
    if strategy not in ("auto", "exact"):
        raise InputError("--strategy", "--batch searches exhaustively (auto or exact)")
    given = {
        "--samples": samples,
        "--robust": robust,
        "--export": export,
        "--storage": storage,
        "--study": study,
        "--trials": trials,
        "--timeout": timeout,
    }
    for option, value in given.items():
        if value is not None:
            raise InputError(option, "does not apply with --batch")
