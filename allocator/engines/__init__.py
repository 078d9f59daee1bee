"""The serving engines at the edge: what vLLM and SGLang take (exported settings) and
what they name things. Nothing inside the model or the solvers imports from here.

- :mod:`.methods`: the one table of drafter methods and each engine's name for them.
- :mod:`.vllm`: ``--speculative-config`` JSON; :mod:`.sglang`: ``launch_server`` flags.
- this module: a front point (``solve --export``) or a plan (``plan --export``) as one
  engine's settings. Every export serves one draft model per server: configurations
  pooling several drafters are refused, never exported silently.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from ..core.methods import resolve_method
from ..exceptions import ParameterError
from .sglang import launch_flags
from .vllm import DrafterLike, speculative_config

TARGETS = ("vllm", "sglang")


def pick_point(points: list[dict], pick: int | None) -> dict:
    """The ``pick``-th point (1-based, as numbered in the table), or the best by throughput."""
    if not points:
        raise ParameterError("export", "the front is empty: nothing to export")
    if pick is None:
        return max(points, key=lambda p: p["throughput"])
    if not 1 <= pick <= len(points):
        raise ParameterError("pick", f"{pick} is not a point of the front (1..{len(points)})")
    return points[pick - 1]


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ParameterError("export", f"{target!r} is not one of {', '.join(TARGETS)}")


def _single(names: list[str], drafters: Mapping[str, DrafterLike], target: str, what: str):
    engine = {"vllm": "vLLM", "sglang": "SGLang"}[target]
    if len(names) != 1:
        raise ParameterError(
            "export",
            f"{what} pools {len(names)} drafters ({', '.join(names)}); {engine} runs one "
            "draft model, so it cannot serve this ensemble (choose single-drafter "
            "configurations, e.g. search.m.max: 1)",
        )
    return drafters[names[0]]


def settings(target: str, drafter: DrafterLike, k: int) -> tuple[dict | list[str], list[str]]:
    """One drafter at ``k`` as ``target``'s settings (vLLM: a dict; SGLang: argv words)."""
    _check_target(target)
    if target == "vllm":
        return speculative_config(drafter, k)
    return launch_flags(drafter, k)


def export_point(
    target: str, point: dict, drafters: Mapping[str, DrafterLike]
) -> tuple[str, list[str]]:
    """What ``solve --export`` prints (vLLM's JSON or SGLang's shell-quoted flags) and notes."""
    _check_target(target)
    drafter = _single(list(point["drafters"]), drafters, target, "the configuration")
    value, notes = settings(target, drafter, int(point["k"]))
    if isinstance(value, dict):
        return json.dumps(value) + "\n", notes
    return shlex.join(value) + "\n", notes


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
    _check_target(target)
    notes: list[str] = []
    routes = []
    for w in plan["workloads"]:
        drafter = _single(list(w["drafters"]), drafters, target, f"workload {w['name']!r}")
        value, more = settings(target, drafter, int(w["k"]))
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
    "TARGETS",
    "convention_warning",
    "export_plan",
    "export_point",
    "export_text",
    "pick_point",
    "settings",
]
