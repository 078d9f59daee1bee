"""``allocator tree``: the optimal draft tree of one drafter (Sequoia's programme), the front
of tree size against throughput, and the trees SGLang's EAGLE builds, with their export
(docs/design.md §8.10). The analysis is :mod:`allocator.analysis.trees`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .. import api
from .._lazy import lazy_module
from ..analysis.trees import (
    ENGINE_TOPK,
    FRONT_NODES,
    MAX_DEPTH,
    MAX_NODES,
    BestTree,
    EngineTree,
    TreeFront,
    check_tree_options,
    tree_drafter,
)
from ..engines import ENGINES, TARGETS, export_tree
from ..exceptions import InputError
from ..model.token_tree import Tree
from .common import (
    MAX_SEED,
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .evaluate import split_names
from .group import app

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

#: The engines ``--export`` prints a tree's settings for.
TREE_TARGETS = tuple(sorted(name for name, e in ENGINES.items() if e.has_trees))
#: The engines whose own token trees ``--engine`` searches (vLLM 0.33.0 drafts chains only).
SEARCH_ENGINES = ("sglang",)


def _engine_name(value: str | None) -> str | None:
    """``--engine NAME``: the engine whose trees to search. It was a bare switch once;
    that spelling (``--engine`` followed by another option) gets a one-line pointer."""
    if value is None:
        return None
    if value.startswith("-"):
        raise typer.BadParameter(
            f"takes the engine's name now: --engine sglang (SGLang's EAGLE trees); got {value}"
        )
    if value == "vllm":
        raise typer.BadParameter(
            "vLLM 0.33.0 drafts chains only (no token-tree setting): --engine sglang "
            "searches SGLang's EAGLE trees; `solve --engine vllm` answers for vLLM's chains"
        )
    if value not in SEARCH_ENGINES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(TARGETS)}")
    return value


def _parse_eagle(text: str) -> tuple[int, int, int]:
    parts = split_names(text)
    try:
        steps, topk, tokens = (int(x) for x in parts)
    except ValueError:
        raise InputError("--eagle", f"{text!r} is not STEPS,TOPK,TOKENS (three integers)") from None
    return steps, topk, tokens


@app.command("tree")
@handles_input_errors
def tree_command(
    problem: Path = ProblemArg,
    drafters: str = typer.Option(
        ..., "--drafters", "-d", help="The drafter (one name).", show_default=False
    ),
    nodes: int = typer.Option(
        None,
        "--nodes",
        "-n",
        help=f"Most speculated nodes in the tree (1..{MAX_NODES}).",
        show_default=False,
    ),
    depth: int = typer.Option(16, "--depth", help=f"Deepest depth (1..{MAX_DEPTH})."),
    width: int = typer.Option(
        None,
        "--width",
        help="Most children per node (default: every measured rank; with --engine, the "
        f"measured ranks up to {ENGINE_TOPK}).",
    ),
    max_nodes: int = typer.Option(
        FRONT_NODES, "--max-nodes", help="Without --nodes: the front runs over sizes 1..this."
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        help="sglang: search SGLang's EAGLE trees (num_steps <= --depth, topk <= --width or "
        f"by default the measured ranks up to {ENGINE_TOPK}, num_draft_tokens - 1 <= "
        "--nodes) and pick the best (vLLM drafts no token trees).",
        metavar="sglang",
        callback=_engine_name,
    ),
    batch: int = typer.Option(
        None,
        "--batch",
        min=1,
        help="With --engine or --export: pick the setting of most tokens/s at B concurrent "
        "sequences (one of serving.batch_sizes) instead of the verifier-unit optimum, and "
        "export it for B.",
        metavar="B",
    ),
    eagle: str = typer.Option(
        None,
        "--eagle",
        help="Evaluate one SGLang setting STEPS,TOPK,TOKENS (at most 64, 64, 513).",
        metavar="S,K,T",
    ),
    export: str = typer.Option(
        None, "--export", help="Print the engine tree's settings: sglang or vllm."
    ),
    rounds: int = typer.Option(
        None,
        "--rounds",
        help="Simulate this many steps of the tree (with --nodes, --eagle, or --engine: "
        "the setting it picks).",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Random seed of --rounds."),
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Without --nodes: draw E and throughput against size (.png/.svg).",
        metavar="PATH",
    ),
) -> None:
    """The tree of at most NODES nodes and depth <= DEPTH with the most expected tokens per
    step (Sequoia's dynamic programme, exact), from the drafter's acceptance_by_rank.

    acceptance_by_rank is conditional: p_r, rank r accepted once ranks < r at that node
    were rejected. Sequoia's acceptance-rate vector is unconditional (q_r, the share of
    steps whose accepted child had rank r): convert it with p_r = q_r / (1 - sum_{s<r}
    q_s), allocator.model.token_tree.from_unconditional.

    Without --nodes: the front of E and throughput against tree size (the verifier's cost
    of checking n tokens plus one drafting step per level), and per batch size with a
    serving section. --engine / --eagle: SGLang's EAGLE trees from (num_steps, topk,
    num_draft_tokens) under the same model.
    """
    check_tree_options(nodes=nodes, max_nodes=max_nodes, depth=depth, width=width)
    if export is not None and export not in TREE_TARGETS:
        raise InputError("--export", f"{export!r} is not one of {', '.join(TREE_TARGETS)}")
    if export is not None and json_path == "-":
        raise InputError("--export", "prints to stdout, which --json - already uses")
    if engine is not None and eagle is not None:
        raise InputError(
            "--eagle",
            "evaluates the one setting given while --engine searches for the best: "
            "give one of them",
        )
    if batch is not None and eagle is not None:
        raise InputError(
            "--batch", "picks the setting of most tokens/s at B; --eagle names one setting"
        )
    use_engine = engine is not None or eagle is not None or export is not None
    if batch is not None and not use_engine:
        raise InputError("--batch", "applies to --engine sglang and --export")
    if rounds is not None and nodes is None and not use_engine:
        # --engine (and --export) pick one setting, which is then the tree simulated
        raise InputError("--rounds", "simulates one tree: give --nodes, --eagle or --engine")
    if plot_path and (nodes is not None or use_engine):
        raise InputError("--plot", "draws the front: leave out --nodes and the engine options")
    precheck_outputs(json=json_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    prob = api.load(problem)
    names = split_names(drafters)
    result: BestTree | TreeFront | EngineTree
    if use_engine:
        setting = None
        if eagle is not None:
            tree_drafter(prob, names)  # a bad drafter is reported before a malformed --eagle
            setting = _parse_eagle(eagle)
        result = api.engine_tree(
            prob, names, nodes, depth, width, eagle=setting, rounds=rounds, seed=seed, batch=batch
        )
    elif nodes is not None:
        result = api.best_tree(prob, names, nodes, depth, width, rounds=rounds, seed=seed)
    else:
        result = api.tree_front(prob, names, max_nodes, depth, width)
    doc = result.to_dict()
    name = result.drafter
    for message in doc.get("notes", []):
        note(f"note: {message}")
    if plot_path:
        rows = doc["front"]
        plots.plot_tree_front(
            [r["nodes"] for r in rows],
            [r["expected_accepted"] for r in rows],
            [r["throughput"] for r in rows],
            plot_path,
            best=doc["best"]["nodes"],
            title=f"{name}: optimal tree against size (depth ≤ {depth})",
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    if export is not None:
        assert isinstance(result, EngineTree)
        text, notes = export_tree(
            export,
            prob.drafter_map[name],
            result.tree,
            result.num_steps,
            result.topk,
            result.num_draft_tokens,
            batch,
        )
        sys.stdout.write(text)
        for message in notes:
            note(message)
        return
    _report(doc, None if isinstance(result, TreeFront) else result.tree)


def _report(doc: dict, tree: Tree | None) -> None:
    if "front" in doc:
        out.print(
            f"{doc['drafter']}: per size, the tree and depth (<= {doc['max_depth']}) with the "
            "most throughput (tokens per verifier-unit of time); E max: the most tokens per "
            "step at any depth"
        )
        out.print(f"{'nodes':>6} {'E':>9} {'depth':>6} {'time':>9} {'throughput':>11} {'E max':>9}")
        best = doc["best"]["nodes"]
        for r in doc["front"]:
            n = r["nodes"]
            if n <= 8 or n % 8 == 0 or n == best:
                mark = "  <- best throughput" if n == best else ""
                out.print(
                    f"{n:6d} {r['expected_accepted']:9.4f} {r['depth']:6d} "
                    f"{r['round_time']:9.4f} {r['throughput']:11.5f} "
                    f"{r['expected_accepted_any_depth']:9.4f}{mark}"
                )
        for r in doc.get("serving", []):
            out.print(
                f"batch {r['batch']}: {r['nodes']} nodes, depth {r['depth']}, "
                f"E {r['expected_accepted']:.4f}, {r['step_ms']:.3f} ms/step, "
                f"{r['tokens_per_s']:.1f} tokens/s"
            )
        return
    if "engine" in doc:
        out.print(
            f"SGLang EAGLE --speculative-num-steps {doc['num_steps']} "
            f"--speculative-eagle-topk {doc['topk']} "
            f"--speculative-num-draft-tokens {doc['num_draft_tokens']}: "
            f"E {doc['expected_accepted']:.4f} (the optimal tree of {doc['nodes']} nodes and "
            f"depth <= {doc['num_steps']}: {doc['optimal_same_size']:.4f}), throughput "
            f"{doc['throughput']:.5f}",
            soft_wrap=True,
        )
        if "best_expected" in doc:
            b = doc["best_expected"]
            out.print(
                f"most tokens per step within the budget: ({b['num_steps']}, {b['topk']}, "
                f"{b['num_draft_tokens']}) with E {b['expected_accepted']:.4f}; "
                f"{doc['searched']} settings searched"
            )
        for r in doc.get("serving", []):
            out.print(
                f"batch {r['batch']}: ({r['num_steps']}, {r['topk']}, {r['num_draft_tokens']}) "
                f"E {r['expected_accepted']:.4f}, {r['step_ms']:.3f} ms/step, "
                f"{r['tokens_per_s']:.1f} tokens/s"
            )
    else:
        out.print(
            f"{doc['drafter']}: optimal tree of {doc['nodes']} nodes (at most "
            f"{doc['max_nodes']}), depth {doc['depth']}: E = {doc['expected_accepted']:.6f} "
            f"tokens per step, throughput {doc['throughput']:.5f}",
            soft_wrap=True,
        )
    assert tree is not None
    _print_tree(tree)
    if "simulation" in doc:
        s = doc["simulation"]
        out.print(
            f"simulated {s['rounds']:,} steps (seed {s['seed']}): mean {s['mean_accepted']:.5f}, "
            f"{s['level']:.0%} interval {s['ci_low']:.5f} - {s['ci_high']:.5f}; "
            f"model {s['model_accepted']:.5f}"
        )


def _print_tree(tree: Tree) -> None:
    children: dict[int, list[int]] = {}
    for v in range(1, tree.parents.size):
        children.setdefault(int(tree.parents[v]), []).append(v)
    lines = ["node 0  root (the last verified token)"]
    stack = [(c, 1) for c in reversed(children.get(0, []))]
    while stack:
        v, level = stack.pop()
        lines.append(
            f"{'  ' * level}node {v}  rank {int(tree.ranks[v])}  "
            f"path probability {tree.path_probability[v]:.4f}"
        )
        stack.extend((c, level + 1) for c in reversed(children.get(v, [])))
    out.print("\n".join(lines), soft_wrap=True, markup=False)


__all__ = [
    "SEARCH_ENGINES",
    "TREE_TARGETS",
    "tree_command",
]
