"""``allocator solve``: the Pareto front of a problem."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .. import api
from .._lazy import lazy_module
from ..analysis.fronts import single_drafter_fronts
from ..api import DEFAULT_SAMPLES, MAX_SAMPLES
from ..core.problem import Problem
from ..core.result import SolveResult
from ..engines import TARGETS
from ..exceptions import InputError
from ..io.staged import front_csv, write_atomic
from ..validate import probability, whole
from .common import (
    MAX_SEED,
    BudgetOption,
    EngineOption,
    JsonOption,
    PooledOption,
    ProblemArg,
    emit_json,
    emit_text,
    handles_input_errors,
    note,
    out,
    parse_budget,
    precheck_outputs,
)
from .group import app
from .progress import check_search_options, search_progress
from .render import front_table, uncertainty_table

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")


@app.command()
@handles_input_errors
def solve(
    ctx: typer.Context,
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
    trials: int = typer.Option(
        None,
        "--trials",
        help="Optuna trials this run adds to the study (at least the seed trials of a new one).",
    ),
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
        None,
        "--export",
        help="Print a point as serving settings: vllm or sglang (the front then holds only "
        "what that engine serves).",
    ),
    pick: int = typer.Option(
        None, "--pick", help="With --export: the N-th front point (default: best throughput)."
    ),
    batch: int = typer.Option(
        None,
        "--batch",
        "-b",
        min=1,
        help="Serve B >= 1 concurrent sequences: the front's throughput is tokens/s from the "
        "problem's serving step times (exhaustive search; configurations without a step "
        "time are left out), of what --engine serves.",
        metavar="B",
    ),
    context: float = typer.Option(
        None,
        "--context",
        min=0,
        max=1e9,
        help="With --batch: tokens in each sequence's KV cache (the roofline reads it; "
        "measured tables hold at their own).",
        metavar="C",
    ),
    engine: str = EngineOption,
    pooled: bool = PooledOption,
    budget: list[str] = BudgetOption,
) -> None:
    """Search drafters, k and m; print the front of throughput against the cost metric.

    Each point is a configuration (which drafters, k) that no other beats on both
    throughput and cost within the problem's budget. In verifier-units the question is
    the model's and pooled configurations stay (labelled as the upper bound no engine
    serves); with --batch or --export, or --engine given, only what the engine serves.
    """
    precheck_outputs(json=json_path, csv=csv_path)
    if json_path == "-" and csv_path == "-":
        raise InputError("--csv", "stdout ('-') is already taken by --json -")
    _check_options(samples, robust, export, pick, json_path)
    serve = _serving_engine(ctx, engine, pooled, export)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    check_search_options(trials, timeout)
    caps = parse_budget(budget)
    prob = api.load(problem)
    if batch is None and context is not None:
        raise InputError("--context", "needs --batch (the step time under load)")
    if caps:
        prob = prob.replace(budget={**prob.budget, **caps})
    if batch is not None:
        _check_batch_options(strategy, samples, robust, storage, study, trials, timeout)
        result = api.solve_at_batch(
            prob, batch, context=context, engine=serve or "vllm", pooled=pooled
        )
        doc = result.to_dict()
        exported = (
            api.export_point(prob, result, export, pick, batch) if export is not None else None
        )
        label = f"tokens/s at batch {batch}" + ("" if context is None else f", context {context:g}")
        if not _write_outputs(prob, result, doc, json_path, csv_path, plot_path, label=label):
            return
        if exported is not None:
            _print_export(exported)
            return
        out.print(front_table(result))
        return
    with search_progress(f"solving {prob.name}", enabled=json_path != "-") as progress:
        result = api.solve(
            prob,
            strategy=strategy,
            engine=serve,
            pooled=pooled,
            seed=0 if seed is None else seed,
            storage=storage,
            study=study,
            trials=trials,
            timeout=timeout,
            progress=progress,
        )
    if samples is not None or robust is not None:
        draws = DEFAULT_SAMPLES if samples is None else samples
        with search_progress(f"sampling {draws:,} draws", enabled=json_path != "-") as progress:
            result = api.sample_uncertainty(
                prob, result, samples, robust, seed=seed or 0, progress=progress
            )
    doc = result.to_dict()
    # refused exports fail here, before any output is written or note printed
    exported = api.export_point(prob, result, export, pick) if export is not None else None
    if not _write_outputs(prob, result, doc, json_path, csv_path, plot_path, singles=True):
        return
    if exported is not None:
        _print_export(exported)
        return
    out.print(front_table(result))
    if "uncertainty" in doc:
        out.print(uncertainty_table(doc["uncertainty"]))


def _check_options(samples, robust, export, pick, json_path) -> None:
    """Refuse option combinations that make no sense, before any work."""

    if samples is not None:
        whole(samples, "--samples", lo=1, hi=MAX_SAMPLES, error=InputError)
    if robust is not None:
        probability(robust, "--robust", zero=False, one=False, error=InputError)
    if export is not None and export not in TARGETS:
        raise InputError("--export", f"{export!r} is not one of {', '.join(TARGETS)}")
    if pick is not None and export is None:
        raise InputError("--pick", "only applies with --export")
    if export is not None and json_path == "-":
        raise InputError("--export", "prints to stdout, which --json - already uses")


def _serving_engine(
    ctx: typer.Context, engine: str, pooled: bool, export: str | None
) -> str | None:
    """The engine whose servable configurations the front keeps: ``--export``'s, else
    ``--engine``'s when given (``None``: plain ``solve``, the model's question, keeps
    pooled configurations). Refuses an unknown engine, an ``--engine`` that is not
    ``--export``'s, and ``--pooled`` with ``--export`` (an export serves one drafter)."""
    given = ctx.get_parameter_source("engine")
    engine_given = given is not None and given.name != "DEFAULT"
    if engine not in TARGETS:
        raise InputError("--engine", f"{engine!r} is not one of {', '.join(TARGETS)}")
    if export is not None:
        if engine_given and engine != export:
            raise InputError(
                "--engine",
                f"{engine} where --export {export} exports for {export}: give one engine "
                "(--export alone is enough)",
            )
        if pooled:
            raise InputError(
                "--pooled",
                "an export serves one drafter per server; pooled configurations are an upper "
                "bound no engine serves (leave out --pooled)",
            )
        return export
    return engine if engine_given else None


def _print_export(exported: tuple[str, list[str]]) -> None:
    """Print settings on stdout (only them) and their notes on stderr."""
    text, notes = exported
    for line in notes:
        note(line)
    emit_text(text)


def _write_outputs(
    prob: Problem,
    result: SolveResult,
    doc: dict[str, Any],
    json_path: str | None,
    csv_path: str | None,
    plot_path: str | None,
    *,
    label: str | None = None,
    singles: bool = False,
) -> bool:
    """Write ``--csv`` (a file), ``--plot`` and ``--json``; then print on stdout the JSON or
    CSV asked for there (``-``), else the notes.

    ``label`` names the plot's throughput axis (default: the model's unit); ``singles``
    draws each single drafter's own front faintly behind. Returns whether stdout is still
    free for the human-readable tables.
    """
    if csv_path and csv_path != "-":
        write_atomic(csv_path, front_csv(doc["front"]), "--csv")
    if plot_path:
        plots.plot_front(
            result,
            plot_path,
            singles=single_drafter_fronts(prob) if singles else None,
            budget=prob.budget.get(result.cost_metric),
            throughput_label=label,
        )
    if json_path == "-":
        emit_json(doc, "-")
        return False
    emit_json(doc, json_path)
    if csv_path == "-":
        emit_text(front_csv(doc["front"]))
        return False
    for message in result.notes:
        note(message)
    return True


def _check_batch_options(strategy, samples, robust, storage, study, trials, timeout) -> None:
    """``--batch`` searches exhaustively, on the nominal acceptance only."""
    if strategy not in ("auto", "exact"):
        raise InputError("--strategy", "--batch searches exhaustively (auto or exact)")
    given = {
        "--samples": samples,
        "--robust": robust,
        "--storage": storage,
        "--study": study,
        "--trials": trials,
        "--timeout": timeout,
    }
    for option, value in given.items():
        if value is not None:
            raise InputError(option, "does not apply with --batch")


__all__ = [
    "solve",
]
