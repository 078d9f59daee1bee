"""``allocator solve``: the Pareto front of a problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import typer

from .. import api
from ..core.problem import Problem
from ..core.result import SolveResult
from ..exceptions import InputError, NotModelledError
from ..io.outputs import front_csv, solve_document, write_atomic
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
    export_settings,
    print_export,
    uncertainty_table,
)

#: The best point's ``k + 1`` is evaluated (to say whether a longer draft pays) only up to
#: this draft length: beyond it one evaluation would allocate ``k``-long position arrays.
LIMIT_PROBE_K = 100_000


def limit_notes(problem: Problem, result: SolveResult) -> list[str]:
    """Notes when the front's best-throughput point sits at a limit of the search.

    The limits are ``search.k.max``, ``search.m.max`` (and ``budget.drafters``) and any
    budget cap that the same drafters one unit further (``k + 1``) would break. The
    same drafters at ``k + 1`` are evaluated by the model (one configuration) and the
    note gives their throughput (accepted units per verifier-unit of time) when higher:
    the search stopped at a limit while a longer draft would still pay. Returns the
    notes (possibly none).
    """
    from ..core.budget import budget_limit
    from ..model.evaluate import evaluate_configs

    front = result.front
    if len(front) == 0:
        return []
    i = int(np.argmax(front.throughput))
    members, k, best = front.members[i], int(front.k[i]), float(front.throughput[i])
    label = f"{'+'.join(n for n, on in zip(problem.names, members, strict=True) if on)}, k={k}"
    notes = []
    longer: dict[str, float] = {}
    if k + 1 <= LIMIT_PROBE_K:
        try:
            met = evaluate_configs(problem, members[None, :], np.array([k + 1]))
            longer = {name: float(v[0]) for name, v in met.items()}
        except NotModelledError:  # the model cannot evaluate k + 1 here
            longer = {}
    pays = bool(longer) and longer["throughput"] > best
    broken = [n for n, cap in problem.budget.items() if pays and longer[n] > budget_limit(cap)]
    detail = (
        f"the same drafters at k={k + 1} give throughput {longer['throughput']:.6f} "
        f"({longer['throughput'] / best - 1:+.2%})"
        if pays
        else ""
    )
    if k == problem.k_max:
        text = f"the best point ({label}) sits at search.k.max = {k}: a longer draft may pay"
        if pays:
            text += f"; {detail}" + (f", over budget.{broken[0]}" if broken else "")
        notes.append(text + "; raise search.k.max to search further")
    elif broken:
        cap = problem.budget[broken[0]]
        notes.append(
            f"budget.{broken[0]} = {cap:g} binds at the best point ({label}): {detail} at "
            f"{broken[0]} {longer[broken[0]]:.6g} (a larger cap may pay)"
        )
    m = int(members.sum())
    n_free = int((~np.asarray(problem.excluded, bool)).sum())
    m_max = int(problem.m_max if problem.m_max is not None else problem.n)
    m_cap = min(m_max, int(problem.budget.get("drafters", m_max)))
    if m == m_cap and m < n_free:
        which = "search.m.max" if m == m_max else "budget.drafters"
        notes.append(
            f"the best point ({label}) pools m = {m} = {which} drafters: pooling more may "
            f"pay; raise {which} to search further"
        )
    return notes


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
        None, "--export", help="Print a point as serving settings: vllm or sglang."
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
        "time are left out).",
        metavar="B",
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
    if batch is not None:
        _check_batch_options(strategy, samples, robust, export, storage, study, trials, timeout)
        result = api.solve_at_batch(prob, batch)
        doc = solve_document(result)
        label = f"tokens/s at batch {batch}"
        if _write_outputs(prob, result, doc, json_path, csv_path, plot_path, label=label):
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
    result.notes.extend(limit_notes(prob, result))
    udoc = apply_uncertainty(prob, result, samples, seed, robust, show_progress=json_path != "-")
    doc = solve_document(result)
    if udoc is not None:
        doc["uncertainty"] = udoc
    # refused exports fail here, before any output is written or note printed
    exported = export_settings(prob, doc["front"], export, pick) if export is not None else None
    if not _write_outputs(prob, result, doc, json_path, csv_path, plot_path, singles=True):
        return
    if exported is not None:
        print_export(exported)
        return
    out.print(front_table(result))
    if udoc is not None:
        out.print(uncertainty_table(udoc))


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
        from ..plots import plot_front, single_drafter_fronts

        plot_front(
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
