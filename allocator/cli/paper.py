"""``allocator paper``: the paper's worked examples, recomputed."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .. import api
from .common import JsonOption, emit_json, handles_input_errors, out, precheck_outputs
from .group import app


@app.command()
@handles_input_errors
def paper(json_path: str = JsonOption) -> None:
    """Recompute every number of the ensemble-drafting paper's §4–§5 beside its printed value.

    'differs' marks a value off by more than half a unit in the paper's last printed
    digit; 'new' marks a value the paper does not print (e.g. S_rel at each
    configuration's own optimal k, which its §3.3 defines but §4.5–4.6 do not use).
    """
    precheck_outputs(json=json_path)
    report = api.paper()
    rows = report.rows
    doc = report.to_dict()
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    t = Table(title="The paper's §4–§5, recomputed", title_justify="left")
    for col in ("case", "§", "quantity", "recomputed", "paper", "status"):
        t.add_column(col, justify="right" if col in ("recomputed", "paper") else "left")
    style = {"ok": "green", "differs": "bold red", "new": "cyan"}
    for r in rows:
        t.add_row(
            r.case,
            r.section,
            r.quantity,
            f"{r.value:.10g}",
            r.paper or "—",
            Text(r.status, style=style[r.status]),
        )
    out.print(t)
    n = doc["differs"]
    out.print(
        f"{n} value(s) differ from the paper beyond its rounding."
        if n
        else "Every printed value agrees to the paper's rounding."
    )


__all__ = [
    "paper",
]
