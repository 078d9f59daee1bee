"""``allocator evaluate``: every metric of one configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..outputs import point_document
from ..spec import MAX_K
from . import app
from .common import JsonOption, ProblemArg, emit_json, handles_input_errors, out, precheck_outputs
from .render import point_table


def split_names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


@app.command()
@handles_input_errors
def evaluate(
    problem: Path = ProblemArg,
    drafters: str = typer.Option(
        ..., "--drafters", "-d", help="Comma-separated drafter names.", show_default=False
    ),
    k: int = typer.Option(
        ..., "--k", "-k", min=1, max=MAX_K, help="Draft length.", show_default=False
    ),
    json_path: str = JsonOption,
) -> None:
    """Evaluate one configuration (drafters and k), ignoring the search space and budget."""
    precheck_outputs(json=json_path)
    prob = api.load(problem, check_search=False)  # the search section does not apply
    point = point_document(api.evaluate(prob, split_names(drafters), k, field="--drafters"))
    if json_path == "-":
        emit_json(point, "-")
        return
    emit_json(point, json_path)
    out.print(point_table(point))
