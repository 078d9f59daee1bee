"""``allocator profile-plan``: the benchmark runs that determine every roofline parameter,
as commands to run."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from .common import (
    EngineOption,
    JsonOption,
    ProblemArg,
    emit_json,
    emit_text,
    handles_input_errors,
    note,
    precheck_outputs,
)
from .group import app
from .progress import total_progress


@app.command("profile-plan")
@handles_input_errors
def profile_plan(
    problem: Path = ProblemArg,
    engine: str = EngineOption,
    contexts: str = typer.Option(
        None,
        "--contexts",
        help="Tokens in each sequence's KV cache to plan runs at (default 1024,8192).",
        metavar="C1,C2,...",
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="The verifier's name or path for the commands (default: its architecture's).",
        metavar="NAME",
    ),
    json_path: str = JsonOption,
) -> None:
    """The fewest benchmark runs that determine every roofline parameter, as commands.

    Runs at a concurrency, k and context (and with speculation off), printed as the
    engine's server and benchmark commands, the acceptance fixed by the engine's testing
    options so that step time is measured apart from acceptance. Needs serving.hardware
    and serving.model. Feed the result files to allocator calibrate.
    """
    precheck_outputs(json=json_path)
    buckets = None if contexts is None else api.parse_contexts(contexts)
    n = len(buckets) if buckets is not None else 2
    why = (
        f"{n} contexts: each round weighs every candidate run (a run per context, "
        "concurrency, drafter and k) against those picked, so the work grows with the "
        "contexts; the estimate below is an upper bound (at most 24 rounds)"
    )
    with total_progress(
        "planning runs", "run sets weighed", enabled=json_path != "-", why=why
    ) as progress:
        plan = api.profile_plan(
            problem, engine=engine, contexts=buckets, model=model, progress=progress
        )
    doc = plan.to_dict()
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in plan.notes:
        note(f"note: {message}")
    emit_text(plan.commands())


__all__ = ["profile_plan"]
