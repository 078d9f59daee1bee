"""``allocator breakeven``: the error correlation that erases an ensemble's gain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from ..analysis.breakeven import breakeven
from ..problem import Problem
from . import app
from .common import JsonOption, ProblemArg, emit_json, handles_input_errors, out, precheck_outputs
from .evaluate import split_names


@app.command("breakeven")
@handles_input_errors
def breakeven_command(
    problem: Path = ProblemArg,
    ensemble: str = typer.Option(
        ..., "--ensemble", "-e", help="Comma-separated drafters pooled.", show_default=False
    ),
    baseline: str = typer.Option(
        ..., "--baseline", "-b", help="Comma-separated drafters to beat.", show_default=False
    ),
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the gain against the latent error correlation, break-even marked, to "
        "PATH (.png or .svg).",
        metavar="PATH",
    ),
) -> None:
    """Find the correlation at which the ensemble's gain over the baseline vanishes.

    The ensemble's and the baseline's best throughputs (each at its own best k) are
    compared under exchangeable errors (latent Gaussian copula).
    """
    precheck_outputs(json=json_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    prob = Problem.from_file(problem)
    doc = breakeven(prob, split_names(ensemble), split_names(baseline)).document()
    if plot_path:
        from ..analysis.breakeven import gain_curve
        from ..plots import plot_breakeven

        grid = np.linspace(0.0, 1.0, 201)
        plot_breakeven(
            grid,
            gain_curve(prob, doc["ensemble"], doc["baseline"], grid),
            plot_path,
            breakeven=None if doc["note"] else doc["latent_correlation"],
            breakeven_error_correlation=None if doc["note"] else doc["error_correlation"],
            ensemble=" + ".join(doc["ensemble"]),
            baseline=" + ".join(doc["baseline"]),
            note=doc["note"],
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    ens, base = " + ".join(doc["ensemble"]), " + ".join(doc["baseline"])
    out.print(
        f"{ens} against {base}: gain {doc['gain_at_independence']:+.4%} with independent "
        f"errors, {doc['gain_at_identical']:+.4%} with identical errors."
    )
    if doc["never"]:
        out.print("No correlation in [0, 1] erases the gain.")
    elif doc["note"]:
        out.print(doc["note"].capitalize() + ".")
    else:
        out.print(
            f"The gain vanishes at latent correlation {doc['latent_correlation']:.6f}, "
            f"an error correlation of {doc['error_correlation']:.6f} between "
            f"{doc['ensemble'][0]} and {doc['ensemble'][1]}."
        )
