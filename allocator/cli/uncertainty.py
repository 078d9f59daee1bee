"""``solve --samples/--robust/--export``: the command-line side of uncertainty and export."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ..analysis.uncertainty import analyse
from ..engines import TARGETS, convention_warning, pick_point
from ..engines import export_point as engine_settings
from ..exceptions import InputError, ParameterError
from ..io.outputs import uncertainty_document
from .progress import search_progress

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Draws used by ``--robust`` when ``--samples`` is not given.
DEFAULT_SAMPLES = 200
#: Most posterior draws ``--samples`` takes (each draw re-solves the problem).
MAX_SAMPLES = 100_000


def check_options(samples, robust, export, pick, json_path) -> None:
    """Refuse option combinations that make no sense, before any work."""
    if samples is not None and not 1 <= samples <= MAX_SAMPLES:
        raise InputError("--samples", f"must be in 1..{MAX_SAMPLES:,}")
    if robust is not None and not 0.0 < robust < 1.0:
        raise InputError("--robust", f"{robust} is not a quantile strictly between 0 and 1")
    if export is not None and export not in TARGETS:
        raise InputError("--export", f"{export!r} is not one of {', '.join(TARGETS)}")
    if pick is not None and export is None:
        raise InputError("--pick", "only applies with --export")
    if export is not None and json_path == "-":
        raise InputError("--export", "prints to stdout, which --json - already uses")


def apply_uncertainty(
    prob: Problem, result, samples, seed, robust, show_progress: bool = True
) -> dict | None:
    """Run the sampling analysis when asked; with ``robust`` the result's front is replaced.

    ``show_progress``: draw a progress bar on stderr (only on a terminal) of the
    evaluations (configuration x draw) done. Returns the ``uncertainty`` JSON object, or
    ``None`` when not asked.
    """
    if samples is None and robust is None:
        return None
    n = samples if samples is not None else DEFAULT_SAMPLES
    try:
        with search_progress(f"sampling {n:,} draws", enabled=show_progress) as progress:
            report = analyse(
                prob, result.front, n, seed=seed or 0, quantile=robust, progress=progress
            )
    except InputError as exc:  # name the option the user gave, not the one implied
        if samples is None and exc.field == "samples":
            raise ParameterError("robust", exc.message) from None
        raise
    if robust is not None:
        result.front = report.front
        result.exact = False
        result.notes.append(
            f"robust: front of cost against the {robust:g}-quantile of throughput over "
            f"{n} posterior draws (throughput shown at the point estimate)"
        )
    return uncertainty_document(report, prob.names)


def uncertainty_table(doc: dict) -> Table:
    q = doc["robust_quantile"]
    t = Table(
        title=f"over {doc['samples']} posterior draws (seed {doc['seed']}) of "
        + ", ".join(doc["resampled"]),
        title_justify="left",
    )
    for col in ("#", "drafters", "k", "optimal", "p05", "p50", "p95"):
        t.add_column(col, justify="left" if col == "drafters" else "right")
    if q is not None:
        t.add_column(f"q{q:g}", justify="right")
    for i, p in enumerate(doc["points"], 1):
        row = [
            str(i),
            ", ".join(p["drafters"]),
            str(p["k"]),
            f"{p['optimal_share']:.1%}",
            f"{p['throughput_p05']:.6f}",
            f"{p['throughput_p50']:.6f}",
            f"{p['throughput_p95']:.6f}",
        ]
        if q is not None:
            row.append(f"{p['throughput_quantile']:.6f}")
        t.add_row(*row)
    for o in doc["other_optima"]:
        t.add_row(
            "—", ", ".join(o["drafters"]), str(o["k"]), f"{o['optimal_share']:.1%}", "", "", ""
        )
    return t


def export_settings(prob: Problem, points: list[dict], target: str, pick: int | None):
    """The chosen point as ``target``'s settings and the notes for stderr; raises
    :class:`InputError` before anything is printed or written."""
    point = pick_point(points, pick)
    drafters = prob.drafter_map
    text, notes = engine_settings(target, point, drafters)
    note = convention_warning(prob.convention)
    return text, [*notes, *([note] if note else [])]


def print_export(exported: tuple[str, list[str]]) -> None:
    """Print settings on stdout (only them) and their notes on stderr."""
    import sys

    from .common import note

    text, notes = exported
    for line in notes:
        note(line)
    sys.stdout.write(text)
    sys.stdout.flush()
