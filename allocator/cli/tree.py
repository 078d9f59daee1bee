"""``allocator tree``: the optimal draft tree of one drafter (Sequoia's programme), the front
of tree size against throughput, and the trees SGLang's EAGLE builds, with their export
(docs/design.md §8.10)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import typer

from ..core.problem import Problem
from ..exceptions import InputError
from ..io.build import problem_from_file
from ..model.tree import (
    MAX_DEPTH,
    MAX_NODES,
    Tree,
    TreeProgramme,
    round_time,
    tree_serving,
    tree_step_ms,
)
from . import app
from .common import (
    JsonOption,
    ProblemArg,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .evaluate import split_names

#: Tree sizes of the front when --nodes is not given.
FRONT_NODES = 64
#: Two-sided level of the simulation's interval.
LEVEL = 0.99


def _drafter(prob: Problem, names: str) -> tuple[int, np.ndarray]:
    chosen = split_names(names)
    if len(chosen) != 1:
        raise InputError(
            "--drafters", f"name one drafter (one model drafts a tree); got {len(chosen)}"
        )
    index = int(np.flatnonzero(prob.mask(chosen, "--drafters"))[0])
    d = prob.drafter(index)
    if d.acceptance_by_rank is None:
        raise InputError(
            "--drafters",
            f"drafter {chosen[0]!r} has no acceptance_by_rank (the acceptance of its rank-r "
            "candidate; `allocator estimate` writes it from per-rank columns NAME@r)",
        )
    return index, d.acceptance_by_rank


def _rank_one_note(prob: Problem, index: int, p: np.ndarray) -> str | None:
    """A note when ``acceptance`` and ``acceptance_by_rank``'s rank 1 disagree (by more
    than 0.005 at some depth, the last entry of each repeating): the chain commands read
    the first, trees the second, so their answers would not be of one drafter."""
    chain = np.asarray(prob.acceptance[index], dtype=float)
    rank1 = p[:, 0]
    n = max(chain.size, rank1.size)
    a = chain[np.minimum(np.arange(n), chain.size - 1)]
    b = rank1[np.minimum(np.arange(n), rank1.size - 1)]
    j = int(np.argmax(np.abs(a - b)))
    if abs(a[j] - b[j]) <= 0.005:
        return None
    return (
        f"drafters.{index}.acceptance gives {a[j]:.4g} at position {j + 1} where "
        f"acceptance_by_rank's rank 1 gives {b[j]:.4g}: chains (solve, evaluate, capacity) "
        "read acceptance, trees acceptance_by_rank; make rank 1 the chain's acceptance"
    )


def _check(nodes: int | None, depth: int, width: int | None, max_nodes: int) -> None:
    for option, value, top in (
        ("--nodes", nodes, MAX_NODES),
        ("--max-nodes", max_nodes, MAX_NODES),
    ):
        if value is not None and not 1 <= value <= top:
            raise InputError(option, f"{value} is outside 1..{top} (speculated nodes)")
    if not 1 <= depth <= MAX_DEPTH:
        raise InputError("--depth", f"{depth} is outside 1..{MAX_DEPTH}")
    if width is not None and width < 1:
        raise InputError("--width", f"{width} is below 1")


def _times(prob: Problem, index: int, nodes, depth) -> np.ndarray:
    return round_time(
        nodes,
        depth,
        float(prob.unit_cost[index]),
        prob.pass_cost,
        prob.token_cost,
        prob.pass_cost_curve,
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


def _simulation(tree: Tree, p: np.ndarray, rounds: int, seed: int) -> dict:
    from ..analysis.simulate import simulate_tree

    return simulate_tree(tree, p, rounds, seed).to_dict()


#: Largest ``topk`` of one ``--eagle`` setting (SGLang's own defaults stay below 10).
MAX_TOPK = 64

#: Largest ``topk`` ``--engine`` searches without ``--width``: the search drafts
#: ``topk + (steps - 1)·topk²`` candidates per setting, so a drafter with hundreds of
#: measured ranks would take minutes; SGLang's own defaults stay below 10.
ENGINE_TOPK = 16


def _parse_eagle(text: str) -> tuple[int, int, int]:
    parts = split_names(text)
    try:
        steps, topk, tokens = (int(x) for x in parts)
    except ValueError:
        raise InputError("--eagle", f"{text!r} is not STEPS,TOPK,TOKENS (three integers)") from None
    # the same caps as the optimal tree's (--depth, --nodes); topk by MAX_TOPK, so the
    # topk + (steps - 1)·topk² candidates SGLang drafts stay countable
    for what, value, top in (
        ("num_steps", steps, MAX_DEPTH),
        ("topk", topk, MAX_TOPK),
        ("num_draft_tokens", tokens, MAX_NODES + 1),
    ):
        if value > top:
            raise InputError("--eagle", f"{what} {value} is above {top}, the most planned")
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
    engine: bool = typer.Option(
        False,
        "--engine",
        help="Evaluate SGLang's EAGLE trees (num_steps <= --depth, topk <= --width or by "
        f"default the measured ranks up to {ENGINE_TOPK}, num_draft_tokens - 1 <= --nodes) "
        "and pick the best.",
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
    seed: int = typer.Option(0, "--seed", help="Random seed of --rounds."),
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
    q_s), allocator.model.tree.from_unconditional.

    Without --nodes: the front of E and throughput against tree size (the verifier's cost
    of checking n tokens plus one drafting step per level), and per batch size with a
    serving section. --engine / --eagle: SGLang's EAGLE trees from (num_steps, topk,
    num_draft_tokens) under the same model.
    """
    _check(nodes, depth, width, max_nodes)
    if export is not None and export not in ("sglang", "vllm"):
        raise InputError("--export", f"{export!r} is not one of sglang, vllm")
    if export is not None and json_path == "-":
        raise InputError("--export", "prints to stdout, which --json - already uses")
    if engine and eagle is not None:
        raise InputError(
            "--eagle",
            "evaluates the one setting given while --engine searches for the best: "
            "give one of them",
        )
    use_engine = engine or eagle is not None or export is not None
    if rounds is not None and nodes is None and not use_engine:
        # --engine (and --export) pick one setting, which is then the tree simulated
        raise InputError("--rounds", "simulates one tree: give --nodes, --eagle or --engine")
    if plot_path and (nodes is not None or use_engine):
        raise InputError("--plot", "draws the front: leave out --nodes and the engine options")
    precheck_outputs(json=json_path)
    if plot_path:
        from ..plots import check_plot_path

        check_plot_path(plot_path, "--plot")
    prob = problem_from_file(problem)
    index, p = _drafter(prob, drafters)
    name = prob.names[index]
    if use_engine:
        doc = _engine(prob, index, p, nodes or FRONT_NODES, depth, width, eagle, rounds, seed)
    elif nodes is not None:
        prog = TreeProgramme(p, nodes, depth, width)
        tree = prog.best()
        t = float(_times(prob, index, tree.nodes, tree.depth))
        doc = {"drafter": name, **tree.to_dict(), "max_nodes": nodes, "max_depth": depth}
        doc.update(round_time=t, throughput=tree.expected_accepted / t)
        if rounds is not None:
            doc["simulation"] = _simulation(tree, p, rounds, seed)
    else:
        doc = _front(prob, index, p, max_nodes, depth, width)
    doc["drafter"] = name
    mismatch = _rank_one_note(prob, index, p)
    if mismatch is not None:
        doc["notes"] = [*doc.get("notes", []), mismatch]
    for message in doc.get("notes", []):
        note(f"note: {message}")
    if plot_path:
        from ..plots import plot_tree_front

        rows = doc["front"]
        plot_tree_front(
            [r["nodes"] for r in rows],
            [r["expected_accepted"] for r in rows],
            [r["throughput"] for r in rows],
            plot_path,
            best=doc["best"]["nodes"],
            title=f"{name}: optimal tree against size (depth <= {depth})",
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    if export is not None:
        _export(prob, index, p, doc, export)
        return
    _report(doc, p)


def _front(
    prob: Problem, index: int, p: np.ndarray, n_max: int, depth: int, width: int | None
) -> dict:
    """E of the best tree per size and depth; throughput is maximised over the depth."""
    prog = TreeProgramme(p, n_max, depth, width)
    e = prog.values()[:, 1:]  # (depth, n_max): sizes 1..n_max
    n = np.arange(1, n_max + 1)
    d = np.arange(1, depth + 1)[:, None]
    thr = e / _times(prob, index, n[None, :], d)
    thr = np.where(np.isfinite(e), thr, -np.inf)
    best_d = thr.argmax(axis=0)
    e_best = np.max(e, axis=0)
    rows = []
    for i, size in enumerate(n):
        if not np.isfinite(e_best[i]):
            continue
        dd = int(best_d[i]) + 1
        rows.append(
            {
                "nodes": int(size),
                "expected_accepted": float(e[dd - 1, i]),
                "depth": dd,
                "expected_accepted_any_depth": float(e_best[i]),
                "round_time": float(_times(prob, index, size, dd)),
                "throughput": float(thr[dd - 1, i]),
            }
        )
    best = max(rows, key=lambda r: r["throughput"])
    doc: dict = {"max_nodes": n_max, "max_depth": depth, "front": rows, "best": best}
    per_batch = _per_batch(prob, index, e, n[None, :], d)
    if per_batch is not None:
        doc["serving"] = [
            {"batch": b, "nodes": int(n[i % n.size]), "depth": int(i // n.size) + 1, **m}
            for b, i, m in per_batch[0]
        ]
        if per_batch[1]:
            doc["notes"] = per_batch[1]
    return doc


def _per_batch(
    prob: Problem, index: int, e: np.ndarray, nodes: np.ndarray, depth: np.ndarray
) -> tuple[list[tuple[int, int, dict]], list[str]] | None:
    """Per ``serving`` batch size, the tree with the most tokens/s among candidates with
    ``e`` tokens per step, ``nodes`` speculated nodes and ``depth`` drafting passes (arrays
    broadcasting together, NaN/-inf ``e`` for no tree): ``([(batch, flat index, serving
    metrics)], notes)``, or ``None`` without ``serving``.

    Step times are :func:`~allocator.model.tree.tree_step_ms` (the serving component
    model, never extrapolated: a batch size where no candidate is inside the tables is an
    error naming ``serving``). With ``serving.memory``, a batch size the drafter's
    ``memory_gb`` leaves no room for is left out with a note, as ``schedule`` and
    ``capacity`` leave it out.
    """
    from ..model.memory import max_batch
    from ..model.serving import baseline_ms, metrics_from

    serving = tree_serving(prob, index)
    if serving is None:
        return None
    e, nodes, depth = (a.ravel() for a in np.broadcast_arrays(e, nodes, depth))
    hosted = np.zeros((1, prob.n), bool)
    hosted[0, index] = True
    room = int(max_batch(prob, hosted)[0])
    rows: list[tuple[int, int, dict]] = []
    notes: list[str] = []
    for b in serving.batch_sizes:
        if b > room:
            notes.append(
                f"batch {int(b)} left out: hosting {prob.names[index]!r} (drafters[].memory_gb) "
                f"leaves KV-cache room for {room} sequences (serving.memory)"
            )
            continue
        ms = tree_step_ms(serving, index, float(b), nodes, depth)
        rate = np.where(np.isfinite(e) & np.isfinite(ms), e / ms, -np.inf)
        if not np.isfinite(rate).any():
            raise InputError(
                "serving",
                f"batch {int(b)}: no tree lies inside the verify_ms table and "
                f"{prob.names[index]}'s draft_ms; step times are never extrapolated",
            )
        i = int(np.argmax(rate))
        base = baseline_ms(serving, float(b))
        met = metrics_from(e[i], ms[i], np.asarray(base), float(b), serving.gpu_cost_per_hour)
        doc = {key: float(v) if np.isfinite(v) else None for key, v in met.items()}
        rows.append((int(b), i, doc))
    return rows, notes


def _engine(
    prob: Problem,
    index: int,
    p: np.ndarray,
    n_max: int,
    depth: int,
    width: int | None,
    eagle: str | None,
    rounds: int | None,
    seed: int,
) -> dict:
    from ..engines.sglang import check_triple, sglang_tree, sglang_triples

    doc: dict = {}
    if eagle is not None:
        steps, topk, tokens = _parse_eagle(eagle)
        check_triple(steps, topk, tokens)
        if topk > p.shape[1]:
            doc["notes"] = [
                f"topk {topk} is beyond the {p.shape[1]} measured ranks of "
                f"{prob.names[index]}'s acceptance_by_rank: candidates of rank "
                f"{p.shape[1] + 1}..{topk} are scored 0 (never accepted), so E counts "
                "nothing for them; measure those ranks to evaluate them"
            ]
    else:
        topk_max = min(width or ENGINE_TOPK, p.shape[1])
        if width is None and p.shape[1] > ENGINE_TOPK:
            doc["notes"] = [
                f"topk searched up to {ENGINE_TOPK} of the {p.shape[1]} measured ranks "
                "(the default cap of --engine); give --width to search wider"
            ]
        tri = sglang_triples(p, depth, topk_max, n_max)
        t = _times(prob, index, tri.tokens - 1, tri.steps)
        thr = tri.expected_accepted / t
        i = int(np.argmax(thr))
        steps, topk, tokens = int(tri.steps[i]), int(tri.topk[i]), int(tri.tokens[i])
        j = int(np.argmax(tri.expected_accepted))
        doc["searched"] = int(tri.steps.size)
        doc["best_expected"] = {
            "num_steps": int(tri.steps[j]),
            "topk": int(tri.topk[j]),
            "num_draft_tokens": int(tri.tokens[j]),
            "expected_accepted": float(tri.expected_accepted[j]),
        }
        per_batch = _per_batch(prob, index, tri.expected_accepted, tri.tokens - 1, tri.steps)
        if per_batch is not None:
            doc["serving"] = [
                {
                    "batch": b,
                    "num_steps": int(tri.steps[i]),
                    "topk": int(tri.topk[i]),
                    "num_draft_tokens": int(tri.tokens[i]),
                    **m,
                }
                for b, i, m in per_batch[0]
            ]
            if per_batch[1]:
                doc["notes"] = [*doc.get("notes", []), *per_batch[1]]
    tree = sglang_tree(p, steps, topk, tokens)
    t_step = float(_times(prob, index, tree.nodes, steps))
    same = TreeProgramme(p, tree.nodes, steps, width).values()[-1]
    optimal = float(np.max(same[np.isfinite(same)]))  # at most as many nodes, as deep
    doc.update(
        {
            "engine": "sglang",
            "num_steps": steps,
            "topk": topk,
            "num_draft_tokens": tokens,
            **tree.to_dict(),
            "round_time": t_step,
            "throughput": tree.expected_accepted / t_step,
            "optimal_same_size": optimal,
        }
    )
    if rounds is not None:
        doc["simulation"] = _simulation(tree, p, rounds, seed)
    return doc


def _export(prob: Problem, index: int, p: np.ndarray, doc: dict, target: str) -> None:
    from ..engines import export_tree
    from ..engines.sglang import sglang_tree

    steps, topk, tokens = doc["num_steps"], doc["topk"], doc["num_draft_tokens"]
    tree = sglang_tree(p, steps, topk, tokens)
    text, notes = export_tree(target, prob.drafter(index), tree, steps, topk, tokens)
    sys.stdout.write(text)
    for message in notes:
        note(message)


def _report(doc: dict, p: np.ndarray) -> None:
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
    tree = Tree(
        np.array(doc["parents"]),
        np.array(doc["ranks"]),
        np.array(doc["path_probability"]),
        doc["expected_accepted"],
    )
    _print_tree(tree)
    if "simulation" in doc:
        s = doc["simulation"]
        out.print(
            f"simulated {s['rounds']:,} steps (seed {s['seed']}): mean {s['mean_accepted']:.5f}, "
            f"{s['level']:.0%} interval {s['ci_low']:.5f} - {s['ci_high']:.5f}; "
            f"model {s['model_accepted']:.5f}"
        )


def simulate_tree_command(
    problem: Path,
    drafters: str,
    nodes: int,
    depth: int,
    rounds: int,
    seed: int,
    json_path: str | None,
) -> None:
    """``allocator simulate --nodes``: play the optimal tree of at most ``nodes`` nodes."""
    _check(nodes, depth, None, FRONT_NODES)
    precheck_outputs(json=json_path)
    prob = problem_from_file(problem)
    index, p = _drafter(prob, drafters)
    tree = TreeProgramme(p, nodes, depth).best()
    t = float(_times(prob, index, tree.nodes, tree.depth))
    sim = _simulation(tree, p, rounds, seed)
    doc = {
        "drafters": [prob.names[index]],
        "tree": tree.to_dict(),
        **sim,
        "throughput": sim["mean_accepted"] / t,
        "model_throughput": tree.expected_accepted / t,
        "round_time": t,
    }
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    out.print(
        f"{prob.names[index]}, optimal tree of {tree.nodes} nodes (depth {tree.depth}): "
        f"{rounds:,} steps, seed {seed}: mean {sim['mean_accepted']:.6f} tokens per step, "
        f"{LEVEL:.0%} interval {sim['ci_low']:.6f} - {sim['ci_high']:.6f}; "
        f"model {tree.expected_accepted:.6f}",
        soft_wrap=True,
    )
