"""``allocator breakeven``: the error correlation that erases an ensemble's gain."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .. import api
from .._lazy import lazy_module
from .common import (
    BudgetOption,
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    out,
    parse_budget,
    precheck_outputs,
)
from .evaluate import split_names
from .group import app

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")


@app.command("breakeven")
@handles_input_errors
def breakeven_command(
    problem: Path = ProblemArg,
    ensemble: str = typer.Option(
        ..., "--ensemble", "-e", help="Comma-separated drafters pooled.", show_default=False
    ),
    baseline: str = typer.Option(
        ..., "--baseline", help="Comma-separated drafters to beat.", show_default=False
    ),
    budget: list[str] = BudgetOption,
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

    The ensemble's and the baseline's best throughputs (each at its own best k within
    the budget) are compared under exchangeable errors (latent Gaussian copula).
    """
    precheck_outputs(json=json_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    caps = parse_budget(budget)
    prob = api.load(problem)
    if caps:
        prob = prob.replace(budget={**prob.budget, **caps})
    report = api.breakeven(
        prob,
        split_names(ensemble),
        split_names(baseline),
        curve_points=201 if plot_path else None,
    )
    doc = report.to_dict()
    if plot_path:
        assert report.curve is not None
        grid, gains = report.curve
        plots.plot_breakeven(
            grid,
            gains,
            plot_path,
            breakeven=None if doc["note"] else doc["latent_correlation"],
            breakeven_error_correlation=None if doc["note"] else doc["error_correlation"],
            ensemble=" + ".join(doc["ensemble"]),
            baseline=" + ".join(doc["baseline"]),
            note=doc["note"],
            file_gain=doc["gain_at_file_errors"],
            file_correlation=doc["file_latent_correlation"],
            file_errors=doc["file_errors"],
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
    r_file = doc["file_latent_correlation"]
    out.print(
        f"Under the file's own errors ({doc['file_errors']}"
        + ("" if r_file is None else f", latent correlation {r_file:.6f} between the first two")
        + f"): gain {doc['gain_at_file_errors']:+.4%}."
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


__all__ = [
    "breakeven_command",
]
