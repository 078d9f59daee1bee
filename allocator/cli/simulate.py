"""``allocator simulate``: Monte Carlo rounds of one configuration beside the closed form."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import typer
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis.rounds import LEVEL
from ..analysis.trees import DEFAULT_DEPTH, SimulatedTree, check_tree_options
from ..core.problem import MAX_K
from ..exceptions import InputError
from ..io.build import problem_from_file
from ..model.accepted_pmf import accepted_distribution
from .common import (
    MAX_SEED,
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    out,
    precheck_outputs,
)
from .evaluate import split_names
from .group import app

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

#: Deepest depth of the tree ``--nodes`` plays when ``--depth`` is not given.
TREE_DEPTH = DEFAULT_DEPTH


@app.command("simulate")
@handles_input_errors
def simulate_command(
    problem: Path = ProblemArg,
    drafters: str = typer.Option(
        ..., "--drafters", "-d", help="Comma-separated drafter names.", show_default=False
    ),
    k: int = typer.Option(
        None, "--k", "-k", min=1, max=MAX_K, help="Draft length.", show_default=False
    ),
    rounds: int = typer.Option(..., "--rounds", help="Rounds to play.", show_default=False),
    seed: int = typer.Option(
        0, "--seed", min=0, max=MAX_SEED, help="Random seed (results are reproducible)."
    ),
    nodes: int = typer.Option(
        None,
        "--nodes",
        help="Instead of --k: play the optimal token tree of at most this many nodes "
        "(one drafter with acceptance_by_rank; see `allocator tree`).",
        show_default=False,
    ),
    depth: int = typer.Option(
        None,
        "--depth",
        help=f"With --nodes: the tree's deepest depth (default {TREE_DEPTH}); a chain's "
        "depth is --k.",
        show_default=False,
    ),
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the histogram of accepted units per round against the model's "
        "distribution to PATH (.png or .svg).",
        metavar="PATH",
    ),
) -> None:
    """Play ROUNDS rounds with outcomes drawn from the problem's error model itself.

    Reports the mean accepted units per round with a 99% interval beside the closed
    form (model_accepted), and the throughputs they imply.
    """
    if nodes is not None:
        if k is not None:
            raise InputError("--k", "give --k for a chain or --nodes for a tree, not both")
        if plot_path:
            raise InputError("--plot", "draws chains only; leave it out with --nodes")
        depth = TREE_DEPTH if depth is None else depth
        check_tree_options(nodes=nodes, depth=depth)
        precheck_outputs(json=json_path)
        prob = api.load(problem)
        played = api.simulate(
            prob, split_names(drafters), rounds=rounds, seed=seed, nodes=nodes, depth=depth
        )
        assert isinstance(played, SimulatedTree)
        _tree_report(played, json_path)
        return
    if k is None:
        raise InputError("--k", "give the draft length (or --nodes to play a token tree)")
    if depth is not None:
        raise InputError(
            "--depth", "bounds a token tree (--nodes); a chain's depth is its draft length --k"
        )
    precheck_outputs(json=json_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    prob = problem_from_file(problem, simulation=True)
    doc = api.simulate(prob, split_names(drafters), k, rounds=rounds, seed=seed).to_dict()
    if plot_path:
        model = accepted_distribution(prob, prob.mask(doc["drafters"]), k)
        plots.plot_accepted(
            np.array(doc["accepted_shares"]),
            model,
            plot_path,
            rounds=rounds,
            title=f"{' + '.join(doc['drafters'])} at k={k}: accepted units per round",
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    t = Table(
        title=f"{', '.join(doc['drafters'])} at k={k}: {rounds:,} rounds, seed {seed}",
        title_justify="left",
    )
    for col in ("", "simulated", f"{LEVEL:.0%} interval", "model"):
        t.add_column(col, justify="right")

    def fmt(v):
        return "—" if v is None else f"{v:.6f}"

    t.add_row(
        "accepted / round",
        fmt(doc["mean_accepted"]),
        f"{doc['ci_low']:.6f} – {doc['ci_high']:.6f}",
        fmt(doc["model_accepted"]),
    )
    t.add_row(
        "throughput",
        fmt(doc["throughput"]),
        f"{doc['throughput_ci_low']:.6f} – {doc['throughput_ci_high']:.6f}",
        fmt(doc["model_throughput"]),
    )
    out.print(t)


def _tree_report(played: SimulatedTree, json_path: str | None) -> None:
    """``simulate --nodes``: the JSON document and the one line of the table."""
    doc = played.to_dict()
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    tree, sim = played.tree, played.simulation
    out.print(
        f"{played.drafters[0]}, optimal tree of {tree.nodes} nodes (depth {tree.depth}): "
        f"{sim.rounds:,} steps, seed {sim.seed}: mean {sim.mean_accepted:.6f} tokens per step, "
        f"{LEVEL:.0%} interval {sim.ci_low:.6f} - {sim.ci_high:.6f}; "
        f"model {tree.expected_accepted:.6f}",
        soft_wrap=True,
    )


__all__ = [
    "TREE_DEPTH",
    "simulate_command",
]
