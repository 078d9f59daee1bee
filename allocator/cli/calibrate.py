"""``allocator calibrate``: fit the step-time predictor to measured throughput, write ``P2``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .. import api
from ..analysis.rate_fit import has_rate_runs
from ..calibration import check_paths
from ..io.staged import write_atomic
from .common import JsonOption, emit_json, handles_input_errors, out, precheck_outputs
from .group import app
from .progress import total_progress

MeasuredArg = typer.Argument(
    ...,
    metavar="FILE...",
    help="Measured rows: CSV files (drafters joined by +, empty for none; k; batch; "
    "tokens_per_s; optional mean_accepted and context) and the engines' benchmark files "
    "(vllm bench serve --save-result JSON, SGLang bench_serving output), in any mix.",
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
    help="Report errors on rows held out: a FRACTION of them (the rest fitted), or by-k / "
    "by-batch (each k or batch size predicted by the fit of the others).",
    metavar="by-k|by-batch|FRACTION",
)
SeedOption = typer.Option(0, "--seed", help="Seed of the held-out rows' choice (0..2^63-1).")
DraftersOption = typer.Option(
    None,
    "--drafters",
    "-d",
    help="The drafter the speculative benchmark runs served (default: the problem's only one).",
    metavar="NAME",
)


@app.command("calibrate")
@handles_input_errors
def calibrate_command(
    measured: list[Path] = MeasuredArg,
    problem: Path = ProblemOption,
    out_path: str = OutOption,
    json_path: str = JsonOption,
    holdout: str = HoldoutOption,
    seed: int = SeedOption,
    drafters: str = DraftersOption,
) -> None:
    """Fit the step times to measured tokens/s and write the problem with `serving`.

    Today's form, or the roofline's factors where the problem gives serving.hardware
    and serving.model. Benchmark runs at a request rate are replayed on the simulated
    replica and mem_eff, compute_eff, prefill_eff and ttft_overhead_ms fitted to their
    TTFT, TPOT, ITL and E2EL (with a progress bar). Prints predicted against measured
    tokens/s with the median and largest absolute error (on the held-out rows only under
    --holdout), and every parameter with its 95% interval. Comments of PROBLEM are not kept.
    """
    check_paths(measured, problem, out_path, json_path)
    precheck_outputs(out=out_path, json=json_path)
    with total_progress(
        "calibrate",
        "evaluations",
        enabled=has_rate_runs(measured),
        why="each evaluation replays every run at a request rate",
    ) as progress:
        report = api.calibrate(
            measured,
            problem,
            out_path,
            holdout=holdout,
            seed=seed,
            drafters=drafters,
            progress=progress,
        )
    doc = report.to_dict()
    write_atomic(out_path, report.text(), "--out")
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    if doc.get("form") == "request-rate":
        out.print(_rate_table(doc))
        _summary(doc)
        out.print(_parameters(doc))
        for note in report.notes:
            out.print(f"note: {note}", soft_wrap=True)
        out.print(f"wrote {out_path}")
        return
    out.print(_table(doc))
    shown = _shown_rows(doc)
    if len(shown) > TABLE_ROWS:
        out.print(f"({len(shown) - TABLE_ROWS:,} more rows in --json)")
    median, largest = doc["median_abs_error_pct"], doc["max_abs_error_pct"]
    if median is None:
        out.print(f"{doc['evaluated_on']}: no row could be predicted", soft_wrap=True)
    else:
        out.print(
            f"{doc['evaluated_on']}: median |error| {median:.2f}%, largest {largest:.2f}%",
            soft_wrap=True,
        )
    out.print(_parameters(doc))
    for note in report.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f"wrote {out_path}")


#: Rows the terminal table shows at most (every row is in --json).
TABLE_ROWS = 50
#: The statistics a request-rate fit's table shows per run (every one is in --json).
RATE_KEYS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")


def _summary(doc: dict) -> None:
    median, largest = doc["median_abs_error_pct"], doc["max_abs_error_pct"]
    if median is not None:
        out.print(
            f"{doc['evaluated_on']}: median |error| {median:.2f}%, largest {largest:.2f}%",
            soft_wrap=True,
        )


def _rate_table(doc: dict) -> Table:
    t = Table(
        title="request-rate runs: error % of the written file's replay against measured",
        title_justify="left",
    )
    t.add_column("run", justify="left")
    t.add_column("rate", justify="right")
    for key in RATE_KEYS:
        t.add_column(key.removesuffix("_ms").replace("_", " "), justify="right")
    for r in doc["runs"][:TABLE_ROWS]:
        cells = []
        for key in RATE_KEYS:
            m = r["metrics"].get(key)
            e = None if m is None else m["error_pct"]
            cells.append("-" if e is None else f"{e:+.1f}")
        t.add_row(r["source"], f"{r['request_rate']:g}", *cells)
    return t


def _shown_rows(doc: dict) -> list[dict]:
    held = doc["holdout"] is not None
    return [r for r in doc["rows"] if not held or r["held_out"]]


def _table(doc: dict) -> Table:
    title = (
        f"predicted against measured tokens/s ({doc['evaluated_on']}; "
        f"{doc['rows_fitted']} row(s) fitted)"
    )
    t = Table(title=title, title_justify="left")
    for col in ("drafters", "k", "batch", "E", "measured tok/s", "predicted tok/s", "error %"):
        t.add_column(col, justify="left" if col == "drafters" else "right")
    for r in _shown_rows(doc)[:TABLE_ROWS]:
        pred = r["predicted_tokens_per_s"]
        t.add_row(
            "+".join(r["drafters"]) or "-",
            str(r["k"]),
            str(r["batch"]) if isinstance(r["batch"], int) else f"{r['batch']:.4g}",
            f"{r['expected_accepted']:.3f}",
            f"{r['measured_tokens_per_s']:.2f}",
            "-" if pred is None else f"{pred:.2f}",
            "-" if r["error_pct"] is None else f"{r['error_pct']:+.2f}",
        )
    return t


def _parameters(doc: dict) -> Table:
    t = Table(title="parameters (95% intervals from the fit's Jacobian)", title_justify="left")
    for col in ("parameter", "value", "95% interval"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for p in doc["parameters"]:
        if p["value"] is None:
            if p.get("written") is None:
                t.add_row(p["name"], "undetermined", p["undetermined"])
                continue
            combo = p.get("determined_combination")
            t.add_row(
                p["name"],
                f"{p['written']:.6g} (written)",
                "not separately determined" + (f"; determined: {combo}" if combo else ""),
            )
            continue
        iv = p["interval_95"]
        t.add_row(
            p["name"],
            f"{p['value']:.6g}",
            "-" if iv is None else f"{iv[0]:.4g} .. {iv[1]:.4g}",
        )
    return t


__all__ = [
    "DraftersOption",
    "HoldoutOption",
    "MeasuredArg",
    "OutOption",
    "ProblemOption",
    "SeedOption",
    "calibrate_command",
]
