"""The serving engines at the edge: what vLLM and SGLang take (exported settings) and
what they name things. Nothing inside the model or the solvers imports from here.

- :mod:`.base`: the :class:`Engine` contract (which methods an engine serves, chain
  settings for (drafter, ``k``), tree settings, a ``k`` schedule by batch size, the
  refusals);
- :mod:`.vllm`: ``--speculative-config`` JSON (chains, the schedule by batch size);
  :mod:`.sglang`: ``launch_server`` flags (chains, EAGLE trees) and how SGLang builds
  its EAGLE trees;
- :mod:`.disagg`: a prefill/decode disaggregated fleet (every replica's command, the router
  pairing the pools); :mod:`.routers`: the router in front of a fleet as llm-d, vLLM
  production-stack, vllm-router and sglang-router configure it;
- this module: the registry :data:`ENGINES` and the exports the command line and the
  analyses use: a front point (``solve --export``), a plan (``plan --export``), a
  schedule (``schedule --export``), a tree (``tree --export``). Every export serves one
  draft model per server: configurations pooling several drafters are refused, never
  exported silently. The method table is :mod:`allocator.core.methods`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..core.methods import resolve_method
from ..exceptions import InfeasibleError, ParameterError
from ..io.quoting import shell_join
from ..validate import whole
from .base import DrafterLike, Engine
from .disagg_exports import Command, FleetExport, Pool, sglang_disagg, vllm_disagg
from .routers import ROUTER_NAMES, llm_d_config, production_stack_command
from .sglang import SGLang
from .vllm import VLLM

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..model.token_tree import Tree

#: Every engine by its ``--export`` name.
ENGINES: dict[str, Engine] = {"vllm": VLLM(), "sglang": SGLang()}
#: The ``--export`` names, in registry order.
TARGETS: tuple[str, ...] = tuple(ENGINES)


def get_engine(target: str) -> Engine:
    """The engine named ``target``; a :class:`ParameterError` naming ``export`` otherwise."""
    if target not in ENGINES:
        raise ParameterError("export", f"{target!r} is not one of {', '.join(TARGETS)}")
    return ENGINES[target]


#: What a pooled answer is, said wherever one is printed.
POOLED_BOUND = (
    "pooled configurations (several drafters, any-correct or longest-chain pooling) are an "
    "upper bound: no engine serves them (vLLM and SGLang run one draft model per server)"
)


def servable(
    problem: Problem, engine: str = "vllm", pooled: bool = False
) -> tuple[Problem, list[str]]:
    """``problem`` restricted to the configurations ``engine`` can run, and notes saying so.

    An engine serves one drafter per server, by a method it knows
    (:meth:`Engine.serves`), so the search space keeps single drafters of served methods
    (``search.m`` becomes ``1..1``); with ``pooled`` the problem is returned as it is and
    the note says that pooled answers are an upper bound (:data:`POOLED_BOUND`). Raises
    :class:`ParameterError` (``engine``) for an unknown engine and
    :class:`~allocator.exceptions.InfeasibleError` when the search space keeps no
    servable configuration (a required pool, ``search.m.min > 1``, no served method).
    """

    if engine not in ENGINES:
        raise ParameterError("engine", f"{engine!r} is not one of {', '.join(TARGETS)}")
    if pooled:
        return problem, [POOLED_BOUND]
    eng = ENGINES[engine]
    names = problem.names
    methods = [resolve_method(n, problem.drafter(i).method)[0] for i, n in enumerate(names)]
    served = np.array([eng.serves(m) for m in methods], dtype=bool)
    notes = [
        f"only what {eng.label} serves: one drafter per server (pass --pooled for the pooled "
        "upper bound)"
    ]
    reasons = [
        f"{n} (method {m}): {_refusal(eng, n, m)}"
        for n, m, ok in zip(names, methods, served, strict=True)
        if not ok
    ]
    if reasons:
        notes.append(f"left out, a method {eng.label} does not serve: {'; '.join(reasons)}")
    if problem.m_min > 1:
        raise InfeasibleError(
            "search.m.min",
            f"{problem.m_min}: {eng.label} serves one drafter per server; lower search.m.min "
            "to 1, or ask for the pooled upper bound (pooled)",
        )
    if int(problem.required.sum()) > 1:
        raise InfeasibleError(
            "search.require",
            f"requires {int(problem.required.sum())} drafters together; {eng.label} serves "
            "one per server (or ask for the pooled upper bound: pooled)",
        )
    excluded = problem.excluded | ~served
    if (problem.required & ~served).any():
        bad = [n for n, r, ok in zip(names, problem.required, served, strict=True) if r and not ok]
        raise InfeasibleError(
            "search.require", f"{bad[0]} is required but {eng.label} does not serve its method"
        )
    if excluded.all():
        raise InfeasibleError(
            "drafters",
            f"no drafter has a method {eng.label} serves"
            + (f": {'; '.join(reasons)}" if reasons else ""),
        )
    if problem.m_max == 1 and not (~problem.excluded & ~served).any():
        return problem, notes
    return problem.replace(m_min=1, m_max=1, excluded=excluded), notes


def _refusal(engine: Engine, name: str, method: str) -> str:
    """Why ``engine`` does not serve ``method`` (the message its export would refuse with)."""
    try:
        engine.method_name(name, method)
    except ParameterError as exc:
        return exc.message.removeprefix(f"drafter {name!r} (method {method}): ").strip()
    return f"method {method}"


def pick_point(points: list[dict], pick: int | None) -> dict:
    """The ``pick``-th point (1-based, as numbered in the table), or the best by throughput."""
    if not points:
        raise ParameterError("export", "the front is empty: nothing to export")
    if pick is None:
        return max(points, key=lambda p: p["throughput"])
    return points[whole(pick, "pick", lo=1, hi=len(points)) - 1]


def settings(
    target: str, drafter: DrafterLike, k: int, batch: int | None = None
) -> tuple[dict | list[str], list[str]]:
    """One drafter at ``k`` as ``target``'s settings (vLLM: a dict; SGLang: argv words);
    ``batch``: the concurrent sequences planned, where the engine's settings depend on it."""
    return get_engine(target).chain_settings(drafter, k, batch=batch)


def export_point(
    target: str, point: dict, drafters: Mapping[str, DrafterLike], batch: int | None = None
) -> tuple[str, list[str]]:
    """What ``solve --export`` prints (vLLM's JSON or SGLang's shell-quoted flags) and notes;
    ``batch``: the concurrent sequences the point was chosen for (``solve --batch``)."""
    engine = get_engine(target)
    drafter = engine.check(list(point["drafters"]), drafters, "the configuration")
    value, notes = engine.chain_settings(drafter, int(point["k"]), batch=batch)
    return engine.text(value), notes


def export_text(target: str, point: dict, drafters: Mapping[str, DrafterLike]) -> str:
    """:func:`export_point` without the notes."""
    return export_point(target, point, drafters)[0]


def export_plan(
    target: str, plan: dict, drafters: Mapping[str, DrafterLike], batch: int | None = None
) -> tuple[dict, list[str]]:
    """A plan (``plan --json``'s document) as one JSON document of ``target`` settings.

    ``hosted``: every drafter some route runs, with its method and model; ``routes``: per
    workload its drafter, ``k`` and the server settings that run it (vLLM:
    ``speculative_config``; SGLang: ``flags`` and ``args``, the same shell-quoted).
    ``batch``: the sequences each replica must hold (``plan --batch``), for the settings
    that depend on it (SGLang's ``--max-running-requests``).
    """
    engine = get_engine(target)
    notes: list[str] = []
    routes = []
    for w in plan["workloads"]:
        drafter = engine.check(list(w["drafters"]), drafters, f"workload {w['name']!r}")
        value, more = engine.chain_settings(drafter, int(w["k"]), batch=batch)
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
            route["args"] = shell_join(value)
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
    target: str,
    drafter: DrafterLike,
    tree: Tree,
    steps: int,
    topk: int,
    tokens: int,
    batch: int | None = None,
) -> tuple[str, list[str]]:
    """What ``tree --export`` prints for SGLang's EAGLE setting ``(steps, topk, tokens)``
    building ``tree`` (:func:`allocator.engines.sglang.sglang_tree`), one line, and notes;
    ``batch``: the concurrent sequences the setting was chosen for."""
    return get_engine(target).tree_export(drafter, tree, steps, topk, tokens, batch=batch)


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
    "POOLED_BOUND",
    "ROUTER_NAMES",
    "Command",
    "FleetExport",
    "Pool",
    "llm_d_config",
    "production_stack_command",
    "sglang_disagg",
    "vllm_disagg",
    "servable",
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
