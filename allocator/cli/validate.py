"""``allocator validate``: measured benchmark runs beside the same runs simulated on the
problem's replica (:mod:`allocator.analysis.validation`)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis import validation
from .common import (
    MAX_SEED,
    JsonOption,
    ProblemArg,
    emit_json,
    err,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .group import app

if TYPE_CHECKING:
    from .. import plots
    from ..plots import validate as plot_validation
else:  # only --plot draws
    plots = lazy_module("allocator.plots")
    plot_validation = lazy_module("allocator.plots.validate")

#: Keys of the table, per run (the JSON has every key both documents share).
TABLE_KEYS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "spec_decode_acceptance_length",
)


def _num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def validate_table(doc: dict) -> Table:
    """One row per run and metric: measured, predicted, error; then the summary."""
    t = Table(title=f"{doc['problem']}: measured against simulated", title_justify="left")
    for name, justify in (
        ("run", "left"),
        ("metric", "left"),
        ("measured", "right"),
        ("predicted", "right"),
        ("error", "right"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for run in doc["runs"]:
        first = True
        for key in TABLE_KEYS:
            m = run["metrics"].get(key)
            if m is None:
                continue
            t.add_row(
                run["source"] if first else "",
                key,
                _num(m["measured"]),
                _num(m["predicted"]),
                _pct(m["error_pct"]),
            )
            first = False
        t.add_section()
    return t


def summary_table(doc: dict) -> Table:
    """Per metric of the table: the mean and median |error| over the runs."""
    t = Table(title="|error| over the runs", title_justify="left")
    for name, justify in (("metric", "left"), ("mean", "right"), ("median", "right")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    t.add_column("runs", justify="right")
    for key in TABLE_KEYS:
        s = doc["summary"].get(key)
        if s is None:
            continue
        t.add_row(
            key,
            f"{s['mean_abs_error_pct']:.1f}%",
            f"{s['median_abs_error_pct']:.1f}%",
            str(s["runs"]),
        )
    return t


@contextlib.contextmanager
def run_progress(files: int):
    """A bar of runs replayed, on a terminal when several files are given (else ``None``)."""
    if files < 2 or not err.is_terminal:
        yield None
        return
    columns = (
        TextColumn("replaying runs", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("runs", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


#: The measured files, one or more.
FilesArg = typer.Argument(
    ...,
    help="Measured runs: vllm bench serve --save-result JSON, SGLang bench_serving "
    "--output-file JSONL, or allocator bench --json documents.",
    show_default=False,
    metavar="FILE...",
)


@app.command("validate")
@handles_input_errors
def validate_command(
    problem: Path = ProblemArg,
    files: list[Path] = FilesArg,
    drafters: str = typer.Option(
        None,
        "--drafters",
        "-d",
        help="The drafter the speculative runs served (default: the problem's only one).",
        metavar="NAME",
    ),
    max_num_seqs: int = typer.Option(
        None,
        "--max-num-seqs",
        help="The server's max_num_seqs (default: an allocator bench document's own, else "
        "serving.scheduler.max_num_seqs).",
        metavar="S",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Seed of every draw."),
    sweep: bool = typer.Option(
        False,
        "--sweep",
        help="The files are consecutive runs on one server with prefix caching, in the order "
        "given, of vLLM's random dataset at range ratio 0 and one seed: replayed as one "
        "simulation, each run after its warm-up request, prompt i of every run the same "
        "tokens, so cached prompts hit.",
    ),
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw predicted against measured, one panel per metric family, to PATH "
        "(.png or .svg).",
        metavar="PATH",
    ),
) -> None:
    """Replay each measured benchmark run (its rate or concurrency, prompts and lengths) on
    the problem's simulated replica and report every metric beside the measured one, with
    its error: check the model on your own runs before trusting capacity."""
    precheck_outputs(json=json_path, plot=plot_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    with run_progress(len(files)) as progress:
        report = api.validate_runs(
            problem,
            [str(f) for f in files],
            drafters=drafters,
            max_num_seqs=max_num_seqs,
            seed=seed,
            progress=progress,
            sweep=sweep,
        )
    doc = report.to_dict()
    if plot_path:
        plot_validation.plot_validation(
            doc,
            plot_path,
            family=validation.family,
            families=validation.FAMILIES,
            title=f"{report.problem}: predicted against measured",
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in report.notes:
        note(message)
    common = (
        set.intersection(*(set(r.notes) for r in report.runs)) if len(report.runs) > 1 else set()
    )
    for message in report.runs[0].notes if common else ():
        if message in common:
            note(f"every run: {message}")
    for run in report.runs:
        for message in run.notes:
            if message not in common:
                note(f"{run.source}: {message}")
    out.print(validate_table(doc))
    out.print(summary_table(doc))


__all__ = [
    "TABLE_KEYS",
    "FilesArg",
    "run_progress",
    "summary_table",
    "validate_command",
    "validate_table",
]
