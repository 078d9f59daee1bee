"""``allocator calibrate``: fit the step-time model to measured throughput, write ``P2``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .. import api
from ..io.staged import write_atomic
from . import app
from .common import JsonOption, emit_json, handles_input_errors, out, precheck_outputs

MeasuredArg = typer.Argument(
    ...,
    metavar="MEASURED.csv",
    help="Measured rows: drafters (names joined by +, empty for none), k, batch, "
    "tokens_per_s, optional mean_accepted.",
    show_default=False,
)

ProblemOption = typer.Option(
    ..., "--problem", "-p", help="Problem file the rows were measured for.", show_default=False
)
OutOption = typer.Option(
    ...,
    "--out",
    "-o",
    help="Calibrated problem file to write (YAML; never one of the inputs).",
    metavar="P2.yaml",
    show_default=False,
)
HoldoutOption = typer.Option(
    None,
    "--holdout",
    help="Fit on the rest and report the error on this fraction of rows, held out.",
    metavar="FRACTION",
)
SeedOption = typer.Option(0, "--seed", help="Seed of the held-out rows' choice.")


@app.command("calibrate")
@handles_input_errors
def calibrate_command(
    measured: Path = MeasuredArg,
    problem: Path = ProblemOption,
    out_path: str = OutOption,
    json_path: str = JsonOption,
    holdout: float = HoldoutOption,
    seed: int = SeedOption,
) -> None:
    """Fit the step-time model to measured tokens/s and write the problem with `serving`.

    Prints predicted against measured tokens/s with the median and largest absolute
    error (on the held-out rows only under --holdout). Comments of PROBLEM are not kept.
    """
    from ..estimate.calibrate import check_paths

    check_paths(measured, problem, out_path, json_path)
    precheck_outputs(out=out_path, json=json_path)
    report = api.calibrate(measured, problem, out_path, holdout=holdout, seed=seed)
    doc = report.to_dict()
    write_atomic(out_path, report.text(), "--out")
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    out.print(_table(doc))
    out.print(
        f"{doc['evaluated_on']}: median |error| {doc['median_abs_error_pct']:.2f}%, "
        f"largest {doc['max_abs_error_pct']:.2f}%",
        soft_wrap=True,
    )
    for note in report.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f"wrote {out_path}")


def _table(doc: dict) -> Table:
    held = doc["holdout"] is not None
    title = (
        f"predicted against measured tokens/s ({doc['evaluated_on']}; "
        f"{doc['rows_fitted']} row(s) fitted)"
    )
    t = Table(title=title, title_justify="left")
    for col in ("drafters", "k", "batch", "E", "measured tok/s", "predicted tok/s", "error %"):
        t.add_column(col, justify="left" if col == "drafters" else "right")
    for r in doc["rows"]:
        if held and not r["held_out"]:
            continue
        t.add_row(
            "+".join(r["drafters"]) or "-",
            str(r["k"]),
            str(r["batch"]),
            f"{r['expected_accepted']:.3f}",
            f"{r['measured_tokens_per_s']:.2f}",
            f"{r['predicted_tokens_per_s']:.2f}",
            f"{r['error_pct']:+.2f}",
        )
    return t


__all__ = [
    "HoldoutOption",
    "MeasuredArg",
    "OutOption",
    "ProblemOption",
    "SeedOption",
    "calibrate_command",
]
