"""``allocator estimate``: a problem file from outcome logs, vLLM metrics/logs or SGLang
responses/logs."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..estimate import FORMATS, MIN_TRIALS, check_options
from ..estimate.counts import position_ranges
from ..exceptions import InputError
from ..io.staged import write_atomic
from .common import JsonOption, emit_json, handles_input_errors, note, out, precheck_outputs
from .group import app

InputArg = typer.Argument(..., metavar="INPUT", help="Log or metrics file.", show_default=False)
UnitCostOption = typer.Option(
    None, "--unit-cost", help="Draft cost per unit, NAME=VALUE (repeatable).", metavar="N=V"
)
CostsOption = typer.Option(
    None, "--costs", help="YAML with unit_cost/hosting_cost maps and verifier costs."
)
ModelOption = typer.Option(
    None,
    "--model",
    help="Serving model name/path of a drafter, NAME=PATH (repeatable).",
    metavar="N=PATH",
)


MethodOption = typer.Option(
    None,
    "--method",
    help="Serving method of a drafter (eagle3, ngram, ...; see allocator schema), NAME=METHOD "
    "(repeatable).",
    metavar="N=METHOD",
)


RenameOption = typer.Option(
    None,
    "--rename",
    help="Write drafter OLD as NEW, OLD=NEW (repeatable; any format, e.g. vllm-metrics, "
    "whose drafters are the verifier's model_name).",
    metavar="OLD=NEW",
)


def _steps(text: str | None) -> list[int] | None:
    """``--adaptive-steps S,S,...`` as whole numbers >= 0."""
    if text is None:
        return None
    steps = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 6:
            raise InputError(
                "--adaptive-steps",
                f"{part!r} is not a whole number of steps (S,S,..., each 0..999999)",
            )
        steps.append(int(part))
    return steps


@app.command("estimate")
@handles_input_errors
def estimate_command(
    input_path: Path = InputArg,
    fmt: str = typer.Option(
        "outcomes",
        "--format",
        "-f",
        help=" | ".join(FORMATS) + ".",
    ),
    out_path: str = typer.Option(
        ..., "--out", "-o", help="Problem file to write (YAML).", metavar="PROBLEM.yaml"
    ),
    unit_cost: list[str] = UnitCostOption,
    costs_path: Path = CostsOption,
    model: list[str] = ModelOption,
    method: list[str] = MethodOption,
    errors: str = typer.Option(
        None, "--errors", help="outcomes only: empirical (default) | factor | independent."
    ),
    name: str = typer.Option(None, "--name", help="Problem name (default: the output's stem)."),
    drafter: str = typer.Option(
        None,
        "--drafter",
        help="The drafter's name (default: draft; outcomes and vllm-metrics name their "
        "drafters: the new name of the input's one drafter, else use --rename).",
    ),
    rename: list[str] = RenameOption,
    k: int = typer.Option(
        None,
        "--k",
        help="sglang-requests, sglang-log: tokens drafted per round (--speculative-num-steps; "
        "a tree's depth); required by sglang-log.",
    ),
    topk: int = typer.Option(
        None,
        "--topk",
        min=1,
        help="sglang-requests: the run's --speculative-eagle-topk (above 1: a token tree, "
        "whose proposed count is its nodes, not its depth).",
    ),
    adaptive: bool = typer.Option(
        None,
        "--adaptive/--no-adaptive",
        help="sglang-requests: the run used --speculative-adaptive (default: tell from the "
        "responses).",
        show_default=False,
    ),
    adaptive_steps: str = typer.Option(
        None,
        "--adaptive-steps",
        help="sglang-requests: the adaptive config's candidate steps (default SGLang's: "
        "0,1,3,5,7).",
        metavar="S,S,...",
    ),
    min_count: int = typer.Option(
        MIN_TRIALS,
        "--min-count",
        help="Fewest rounds reaching a position to keep it (errors: empirical keeps all).",
    ),
    convention: str = typer.Option(
        None, "--convention", help="outcomes only: bonus (default; vLLM, SGLang) or paper."
    ),
    json_path: str = JsonOption,
) -> None:
    """Estimate drafter acceptance (with 95% intervals) and write a problem file.

    Costs are not in any log: give them with --unit-cost or --costs, or fill in the
    unit_cost fields the output marks FILL IN (the file does not validate until then).
    """
    steps = _steps(adaptive_steps)
    check_options(
        fmt,
        out_path,
        errors=errors,
        convention=convention,
        drafter=drafter,
        k=k,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=steps,
    )
    precheck_outputs(out=out_path, json=json_path)
    report = api.estimate(
        input_path,
        out_path,
        fmt,
        unit_cost=unit_cost or [],
        costs=costs_path,
        models=model or [],
        methods=method or [],
        errors=errors,
        name=name,
        drafter=drafter,
        k=k,
        min_count=min_count,
        convention=convention,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=steps,
        rename=rename or [],
    )
    write_atomic(out_path, report.text, "--out")
    doc = report.to_dict()
    missing = report.missing
    if missing:
        note(
            f"costs must be filled in: unit_cost of {', '.join(missing)} is marked FILL IN in "
            f"{out_path} (or pass --unit-cost NAME=VALUE / --costs FILE)"
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for d in doc["drafters"]:
        acc = d["acceptance"] if isinstance(d["acceptance"], list) else [d["acceptance"]]
        bounded = d["bounded_positions"]
        out.print(
            f"{d['name']}: {d['positions']} position(s), acceptance "
            + ", ".join(f"{a:.4f}" for a in acc[:8])
            + (" ..." if len(acc) > 8 else "")
            + (f" (positions {_ranges(bounded)} only bounded)" if bounded else ""),
            soft_wrap=True,
        )
    for message in doc["notes"]:
        if "only bounded" in message or "renamed" in message or "keeps the first" in message:
            note(f"note: {message}")
    out.print(f"wrote {out_path}")


def _ranges(positions: list[int]) -> str:
    return position_ranges(positions)


__all__ = [
    "CostsOption",
    "RenameOption",
    "InputArg",
    "MethodOption",
    "ModelOption",
    "UnitCostOption",
    "estimate_command",
]
