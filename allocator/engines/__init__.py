"""The serving engines at the edge: what vLLM and SGLang take (exported settings) and
what they name things. Nothing inside the model or the solvers imports from here.

- :mod:`.base`: the :class:`Engine` contract (which methods an engine serves, chain
  settings for (drafter, ``k``), tree settings, a ``k`` schedule by batch size, the
  refusals);
- :mod:`.vllm`: ``--speculative-config`` JSON (chains, the schedule by batch size);
  :mod:`.sglang`: ``launch_server`` flags (chains, EAGLE trees) and how SGLang builds
  its EAGLE trees;
- this module: the registry :data:`ENGINES` and the exports the command line and the
  analyses use: a front point (``solve --export``), a plan (``plan --export``), a
  schedule (``schedule --export``), a tree (``tree --export``). Every export serves one
  draft model per server: configurations pooling several drafters are refused, never
  exported silently. The method table is :mod:`allocator.core.methods`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.methods import resolve_method
from ..exceptions import ParameterError
from .base import DrafterLike, Engine
from .sglang import SGLang
from .vllm import VLLM

if TYPE_CHECKING:
    from ..model.tree import Tree

#: Every engine by its ``--export`` name.
ENGINES: dict[str, Engine] = {"vllm": VLLM(), "sglang": SGLang()}
#: The ``--export`` names, in registry order.
TARGETS: tuple[str, ...] = tuple(ENGINES)


def get_engine(target: str) -> Engine:
    """The engine named ``target``; a :class:`ParameterError` naming ``export`` otherwise."""
    if target not in ENGINES:
        raise ParameterError("export", f"{target!r} is not one of {', '.join(TARGETS)}")
    return ENGINES[target]


def pick_point(points: list[dict], pick: int | None) -> dict:
    """The ``pick``-th point (1-based, as numbered in the table), or the best by throughput."""
    if not points:
        raise ParameterError("export", "the front is empty: nothing to export")
    if pick is None:
        return max(points, key=lambda p: p["throughput"])
    if not 1 <= pick <= len(points):
        raise ParameterError("pick", f"{pick} is not a point of the front (1..{len(points)})")
    return points[pick - 1]


def settings(target: str, drafter: DrafterLike, k: int) -> tuple[dict | list[str], list[str]]:
    """One drafter at ``k`` as ``target``'s settings (vLLM: a dict; SGLang: argv words)."""
    return get_engine(target).chain_settings(drafter, k)


def export_point(
    target: str, point: dict, drafters: Mapping[str, DrafterLike]
) -> tuple[str, list[str]]:
    """What ``solve --export`` prints (vLLM's JSON or SGLang's shell-quoted flags) and notes."""
    engine = get_engine(target)
    drafter = engine.check(list(point["drafters"]), drafters, "the configuration")
    value, notes = engine.chain_settings(drafter, int(point["k"]))
    return engine.text(value), notes


def export_text(target: str, point: dict, drafters: Mapping[str, DrafterLike]) -> str:
    """:func:`export_point` without the notes."""
    return export_point(target, point, drafters)[0]


def export_plan(
    target: str, plan: dict, drafters: Mapping[str, DrafterLike]
) -> tuple[dict, list[str]]:
    """A plan (``plan --json``'s document) as one JSON document of ``target`` settings.

    ``hosted``: every drafter some route runs, with its method and model; ``routes``: per
    workload its drafter, ``k`` and the server settings that run it (vLLM:
    ``speculative_config``; SGLang: ``flags`` and ``args``, the same shell-quoted).
    """
    engine = get_engine(target)
    notes: list[str] = []
    routes = []
    for w in plan["workloads"]:
        drafter = engine.check(list(w["drafters"]), drafters, f"workload {w['name']!r}")
        value, more = engine.chain_settings(drafter, int(w["k"]))
        notes.extend(n for n in more if n not in notes)
        route: dict = {
            "workload": w["name"],
            "weight": w["weight"],
            "drafter": drafter.name,
            "k": int(w["k"]),
        }
        if isinstance(value, dict):
            route["speculative_config"] = value
        else:
            route["flags"] = value
            route["args"] = shlex.join(value)
        routes.append(route)
    hosted = []
    for name in plan["hosted"]:
        d = drafters[name]
        method, _ = resolve_method(d.name, d.method)
        hosted.append({"name": name, "method": method, "model": d.model})
    doc = {"engine": target, "problem": plan["problem"], "hosted": hosted, "routes": routes}
    return doc, notes


def export_schedule(
    target: str, rows: list[dict], drafters: Mapping[str, DrafterLike]
) -> tuple[str, list[str]]:
    """What ``schedule --export`` prints for a schedule's ``rows`` (``schedule --json``'s
    rows), one line, and notes; refused by an engine without a schedule setting."""
    engine = get_engine(target)
    config, notes = engine.schedule_settings(rows, drafters)
    return engine.text(config), notes


def export_tree(
    target: str, drafter: DrafterLike, tree: Tree, steps: int, topk: int, tokens: int
) -> tuple[str, list[str]]:
    """What ``tree --export`` prints for SGLang's EAGLE setting ``(steps, topk, tokens)``
    building ``tree`` (:func:`allocator.engines.sglang.sglang_tree`), one line, and notes."""
    return get_engine(target).tree_export(drafter, tree, steps, topk, tokens)


def convention_warning(convention: str) -> str | None:
    """A note when ``k`` of the problem does not mean what the serving system means by it."""
    if convention == "paper":
        return (
            "note: this problem uses the paper convention (a round yields at most k units); "
            "vLLM and SGLang draft k tokens plus the verifier's own (convention: bonus), so "
            "re-solve with convention: bonus for a k in their terms"
        )
    return None


__all__ = [
    "ENGINES",
    "TARGETS",
    "DrafterLike",
    "Engine",
    "convention_warning",
    "export_plan",
    "export_point",
    "export_schedule",
    "export_text",
    "export_tree",
    "get_engine",
    "pick_point",
    "settings",
]
