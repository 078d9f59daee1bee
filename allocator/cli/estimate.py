"""``allocator estimate``: a problem file from outcome logs, vLLM metrics/logs or SGLang
responses/logs."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.methods import METHODS
from ..estimate import FORMATS, MIN_TRIALS, estimate, problem_text, read_costs
from ..estimate.problem_file import parse_assignments
from ..exceptions import InputError
from ..io.staged import write_atomic
from ..model.acceptance import CONVENTIONS
from . import app
from .common import JsonOption, emit_json, handles_input_errors, note, out, precheck_outputs

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


@app.command("estimate")
@handles_input_errors
def estimate_command(
    input_path: Path = InputArg,
    fmt: str = typer.Option(
        "outcomes",
        "--format",
        "-f",
        help="outcomes | vllm-metrics | vllm-log | sglang-requests | sglang-log.",
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
        help="vllm-log, sglang-requests, sglang-log: the drafter's name (default: draft).",
    ),
    k: int = typer.Option(
        None,
        "--k",
        help="sglang-requests, sglang-log: tokens drafted per round (--speculative-num-steps); "
        "required by sglang-log.",
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
    if fmt not in FORMATS:
        raise InputError("--format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    only = {
        "--errors": (errors, ("outcomes",)),
        "--convention": (convention, ("outcomes",)),
        "--drafter": (drafter, ("vllm-log", "sglang-requests", "sglang-log")),
        "--k": (k, ("sglang-requests", "sglang-log")),
    }
    for option, (value, applies) in only.items():
        if value is not None and fmt not in applies:
            raise InputError(option, f"applies to --format {' or '.join(applies)} only")
    errors = errors or "empirical"
    convention = convention or "bonus"
    drafter = drafter or "draft"
    if convention not in CONVENTIONS:
        raise InputError("--convention", f"{convention!r} is not one of {', '.join(CONVENTIONS)}")
    if Path(out_path).suffix.lower() not in (".yaml", ".yml"):
        raise InputError("--out", "write the problem as .yaml or .yml")
    precheck_outputs(out=out_path, json=json_path)
    costs = read_costs(costs_path, unit_cost or [])
    models = parse_assignments(model or [], "--model")
    methods = parse_assignments(method or [], "--method")
    for n, m in methods.items():
        if m not in METHODS:
            raise InputError("--method", f"{n}: {m!r} is not one of {', '.join(METHODS)}")
    est = estimate(
        input_path,
        fmt,
        out_path,
        errors=errors,
        min_trials=min_count,
        drafter_name=drafter,
        convention=convention,
        k=k,
    )
    text, data, missing = problem_text(est, name or Path(out_path).stem, costs, models, methods)
    write_atomic(out_path, text, "--out")
    doc = {
        "problem": data["name"],
        "out": str(out_path),
        "format": fmt,
        "drafters": [
            {
                "name": d["name"],
                "acceptance": d["acceptance"],
                "acceptance_interval": d["acceptance_interval"],
                "positions": c.positions,
                "trials": c.trials.tolist(),
                # drafts shorter than k: the rounds reaching each position lie in
                # [trials_low, trials] (null when known exactly)
                "trials_low": None if c.trials_low is None else c.trials_low.tolist(),
                "successes": c.successes.tolist(),
                **(
                    {}
                    if c.ranks is None
                    else {
                        "acceptance_by_rank": d["acceptance_by_rank"],
                        "acceptance_by_rank_interval": d["acceptance_by_rank_interval"],
                        "rank_trials": c.ranks.trials.tolist(),
                        "rank_successes": c.ranks.successes.tolist(),
                    }
                ),
            }
            for d, c in zip(data["drafters"], est.drafters, strict=True)
        ],
        "errors": data.get("errors"),
        "workloads": data.get("workloads", []),
        "missing_costs": missing,
        "report": est.report,
    }
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
        out.print(
            f"{d['name']}: {d['positions']} position(s), acceptance "
            + ", ".join(f"{a:.4f}" for a in acc[:8])
            + (" ..." if len(acc) > 8 else ""),
            soft_wrap=True,
        )
    out.print(f"wrote {out_path}")
