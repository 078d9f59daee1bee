"""``allocator breakeven``: the error correlation that erases an ensemble's gain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from ..analysis.breakeven import breakeven
from ..core.problem import Problem
from ..io.build import problem_from_file
from ..model.evaluate import evaluate_subsets
from . import app
from .common import JsonOption, ProblemArg, emit_json, handles_input_errors, out, precheck_outputs
from .evaluate import split_names


def file_latent_correlation(problem: Problem, pair: list[str]) -> float | None:
    """The latent correlation between the two drafters ``pair`` under the problem's own
    error model, at position 1: 0 for ``independent``, ``r`` (or ``error_correlation``
    converted) for ``exchangeable``, ``β_i β_j`` for ``factor``, the matrix entry for
    ``gaussian``; ``None`` for ``empirical`` (a log has no latent scale)."""
    from ..model.errors import ExchangeableErrors, FactorErrors, GaussianErrors

    i, j = (problem.names.index(n) for n in pair)
    model = problem.errors
    if model.name == "independent":
        return 0.0
    if isinstance(model, ExchangeableErrors):
        kind, plan = model.latent(1.0 - problem.acceptance)
        if kind in ("independent", "comonotone"):
            return 0.0 if kind == "independent" else 1.0
        if kind == "factor":
            return float(plan[i, 0] * plan[j, 0])
        return float(plan[0, i, j])
    if isinstance(model, FactorErrors):
        beta = np.asarray(model.loadings, dtype=np.float64)
        return float(beta[i] * beta[j])
    if isinstance(model, GaussianErrors):
        return float(np.asarray(model.matrix, dtype=np.float64)[i, j])
    return None


def file_gain(problem: Problem, ensemble: list[str], baseline: list[str]) -> float:
    """``S_ens / S_base - 1`` under the problem's own error model (and its measured
    ``ensembles``), each at its own best ``k`` in the search range: a fraction."""
    both = np.stack([problem.mask(ensemble, "--ensemble"), problem.mask(baseline, "--baseline")])
    best = evaluate_subsets(problem, both)["throughput"].max(axis=1)
    return float(best[0] / best[1] - 1.0)


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
    prob = problem_from_file(problem)
    doc = breakeven(prob, split_names(ensemble), split_names(baseline)).document()
    doc["file_errors"] = prob.errors.name
    doc["file_latent_correlation"] = file_latent_correlation(prob, doc["ensemble"][:2])
    doc["gain_at_file_errors"] = file_gain(prob, doc["ensemble"], doc["baseline"])
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
