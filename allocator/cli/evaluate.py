"""``allocator evaluate``: every metric of one configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..core.problem import MAX_K
from .common import (
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .group import app
from .render import point_table


def split_names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


@app.command()
@handles_input_errors
def evaluate(
    problem: Path = ProblemArg,
    drafters: str = typer.Option(
        None,
        "--drafters",
        "-d",
        help="Comma-separated drafter names (not needed for k = 0).",
        show_default=False,
    ),
    k: int = typer.Option(
        ...,
        "--k",
        "-k",
        min=0,
        max=MAX_K,
        help="Draft length, >= 0 (0, no speculation, only with --batch).",
        show_default=False,
    ),
    batch: int = typer.Option(
        None,
        "--batch",
        "-b",
        min=1,
        help="Also give tokens/s, inter-token latency, speedup and $/Mtok at B >= 1 concurrent "
        "sequences (needs the problem's serving section).",
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
    json_path: str = JsonOption,
) -> None:
    """Evaluate one configuration (drafters and k), ignoring the search space and budget."""
    precheck_outputs(json=json_path)
    prob = api.load(problem, check_search=False)  # the search section does not apply
    names = split_names(drafters or "")
    if k == 0 and batch is not None:
        if names:
            note("note: --drafters ignored at k = 0 (no speculation)")
        names = []
    point = api.evaluate(prob, names, k, field="--drafters", batch=batch, context=context).to_dict()
    if json_path == "-":
        emit_json(point, "-")
        return
    emit_json(point, json_path)
    for message in point.get("notes", []):
        note(f"note: {message}")
    out.print(point_table({key: v for key, v in point.items() if key != "notes"}))


__all__ = [
    "evaluate",
    "split_names",
]
