"""``allocator calibrate``: fit the step-time model to measured throughput, write ``P2``."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from rich.table import Table

from .. import api
from ..exceptions import InputError
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


def _same(a: str | Path, b: str | Path) -> bool:
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return pa.samefile(pb)
    return pa.resolve() == pb.resolve()


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
    from ..estimate.calibrate import calibrate, calibrated_problem_data, read_measured

    if Path(out_path).suffix.lower() not in (".yaml", ".yml"):
        raise InputError("--out", "write the calibrated problem as .yaml or .yml")
    for name, path_ in (("--problem", problem), ("MEASURED.csv", measured)):
        if _same(out_path, path_):
            raise InputError(
                "--out", f"is the same file as {name} ({path_}); inputs are never overwritten"
            )
    if json_path not in (None, "-"):
        for name, other in (
            ("--problem", str(problem)),
            ("MEASURED.csv", str(measured)),
            ("--out", out_path),
        ):
            if _same(json_path, other):
                raise InputError("--json", f"is the same file as {name} ({other})")
    precheck_outputs(out=out_path, json=json_path)
    prob = api.load(problem)
    data = read_measured(measured, prob)
    cal = calibrate(prob, data, holdout=holdout, seed=seed)
    p2, file_notes = calibrated_problem_data(prob, cal, out_path, problem)
    header = (
        f"# {p2['name']}: calibrated by `allocator calibrate` from {Path(measured).name}\n"
        f"# and {Path(problem).name}; the comments of {Path(problem).name} are not kept.\n"
    )
    notes = cal.notes + file_notes
    doc = _document(prob.names, cal, str(problem), str(measured), out_path, holdout, seed, notes)
    write_atomic(
        out_path, header + yaml.safe_dump(p2, sort_keys=False, allow_unicode=True), "--out"
    )
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
    for note in notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f"wrote {out_path}")


def _document(names, cal, problem: str, measured, out_path, holdout, seed, notes) -> dict:
    m = cal.model
    rows = []
    for r in range(len(cal.data)):
        rows.append(
            {
                "drafters": [n for n, on in zip(names, cal.data.members[r], strict=True) if on],
                "k": int(cal.data.k[r]),
                "batch": int(cal.data.batch[r]),
                "expected_accepted": float(cal.expected[r]),
                "measured_tokens_per_s": float(cal.data.tokens_per_s[r]),
                "predicted_tokens_per_s": float(cal.predicted_tps[r]),
                "error_pct": float(cal.error_pct[r]),
                "measured_step_ms": float(cal.measured_step[r]),
                "predicted_step_ms": float(cal.predicted_step[r]),
                "held_out": bool(cal.held_out[r]),
            }
        )
    held = bool(cal.held_out.any())
    return {
        "problem": problem,
        "measured": measured,
        "out": out_path,
        "model": {
            "verify": "max(verify_fixed_ms + verify_per_seq_ms * batch, "
            "compute_ms_per_token * batch * tokens)",
            "step": "verify(batch, m*k + 1) + k * draft(batch) + overhead_ms (k > 0)",
            "verify_fixed_ms": m.verify_fixed,
            "verify_per_seq_ms": m.verify_per_seq,
            "compute_ms_per_token": m.compute_per_token,
            "overhead_ms": m.overhead,
            "drafting": m.drafting,
            "drafters": {
                names[i]: {
                    "fixed_ms": float(m.draft_fixed[i]),
                    "per_seq_ms": float(m.draft_per_seq[i]),
                }
                for i in range(len(names))
                if m.fitted[i]
            },
        },
        "rows_fitted": int((~cal.held_out).sum()),
        "holdout": {"fraction": holdout, "seed": seed, "rows": int(cal.held_out.sum())}
        if held
        else None,
        "evaluated_on": "held-out rows" if held else "fitted rows (in-sample)",
        "median_abs_error_pct": cal.median_abs_error_pct,
        "max_abs_error_pct": cal.max_abs_error_pct,
        "rows": rows,
        "notes": notes,
    }


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
