"""Deployments for the serving front (:mod:`allocator.analysis.front`, docs/design.md
§8.15): a problem on GPUs of the bundled table at tensor-parallel degrees.

**A deployment** (:class:`Deployment`) is one GPU of the bundled table
(:data:`allocator.core.hardware.GPUS`) at one tensor-parallel degree: the problem file
re-targeted (:func:`retarget`), its step times then the roofline's on that hardware
(:mod:`allocator.model.steptime.roofline`, ``serving.hardware`` and ``serving.model``). The
file's own hardware is the file as written; another GPU or TP changes, in the file's data,

* ``serving.hardware`` to ``{gpu, count: TP}`` (the file's ``interconnect`` kept on its own
  GPU, else the new GPU's default link) and ``serving.gpus_per_replica`` to TP;
* ``serving.scheduler.kv_cache_tokens`` and ``serving.memory`` are dropped: both describe
  the file's replica, and without them the KV cache follows the new replica's memory
  (:func:`allocator.analysis.replica.kv_cache_tokens`: its memory at vLLM's
  ``gpu_memory_utilization`` less the weights, over the KV bytes per token, from
  :func:`allocator.model.memory_fit.spec_room`);
* ``serving.gpu_cost_per_hour`` to the GPU's price per GPU-hour times TP (``gpu_cost``, or
  the file's price over its ``gpus_per_replica`` on the file's own GPU), dropped when the
  GPU has no price.

Measured step times (``serving.step_ms``, ``serving.verify_ms``, ``serving.prefill_ms``)
describe the file's hardware alone: a file holding one is not re-targeted (refused naming
``gpus`` or ``tp``). What else the file measured on its hardware carries over unchanged,
and a note says so: a drafter's ``draft_ms`` and ``serving.roofline``'s fitted factors and
fixed times.

**Refused** (:class:`~allocator.exceptions.ParameterError`, one line): a GPU the table does
not know (the known ones listed); a TP outside ``1..``:data:`MAX_TP` (one node: the
8-GPU platforms the table's default links are those of) or one that does not divide the
verifier's attention heads (vLLM 0.33.0, ``vllm/config/model.py``,
``verify_with_parallel_config``: "Total number of attention heads ... must be divisible by
tensor parallel size"); every deployment asked unable to hold the model and one request
(weights over the replica's memory at vLLM's utilisation, or a KV cache smaller than the
longest request), one that cannot being left out with a note when others can.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.defaults import PER_GPU
from ..core.hardware import gpu as table_gpu
from ..core.hardware import known_gpus
from ..exceptions import InputError, ParameterError
from ..io.build import problem_from_spec
from ..io.spec import parse_problem
from ..model.memory_fit import has_spec_memory, spec_room
from .replica import Configuration, kv_cache_tokens

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .request_source import RequestSource

#: Largest tensor-parallel degree: one node, the 8-GPU platforms of the table's links.
MAX_TP = 8
#: Measured step-time fields that describe the file's own hardware only.
MEASURED_TIMES = ("step_ms", "verify_ms", "prefill_ms")


@dataclass(frozen=True, eq=False)
class Deployment:
    """One GPU at one tensor-parallel degree: ``gpu`` (a table key, ``None``: the file's
    own replica, which names none), ``tp``, the ``problem`` built for it, ``own`` (the file
    as written), ``price_per_gpu_hour`` ($/h, NaN: none), ``data`` (the re-targeted problem
    data, ``None`` when ``own``) and its ``file_name`` (``None`` when ``own``)."""

    gpu: str | None
    tp: int
    problem: Problem
    own: bool
    price_per_gpu_hour: float
    data: dict | None = None
    file_name: str | None = None

    def label(self) -> str:
        return f"{self.gpu or 'own replica'} TP{self.tp}"


def gpu_name(name: str, parameter: str) -> str:
    """The table's key of GPU ``name``; a :class:`ParameterError` naming ``parameter`` and
    listing the known GPUs otherwise."""
    try:
        return table_gpu(name, parameter).name
    except InputError as exc:
        raise ParameterError(parameter, exc.message) from None


def own_hardware(problem: Problem) -> tuple[str | None, int]:
    """The file's own GPU (``None`` without ``serving.hardware``) and TP (its
    ``gpus_per_replica`` without one)."""
    serving = problem.serving
    if serving is None:
        return None, 1
    if serving.hardware is not None:
        return serving.hardware.gpu.name, int(serving.hardware.count)
    return None, int(serving.gpus_per_replica)


def gpu_prices(
    problem: Problem, gpus: Sequence[str | None], gpu_cost: Mapping[str, float] | None
) -> tuple[dict[str | None, float], list[str]]:
    """$/GPU-hour of each GPU: ``gpu_cost``'s, else (the file's own GPU) the file's
    ``serving.gpu_cost_per_hour`` over its ``gpus_per_replica``; NaN without either, and a
    note saying where each price came from."""
    own, _ = own_hardware(problem)
    serving = problem.serving
    assert serving is not None
    given: dict[str, float] = {}
    for name, value in (gpu_cost or {}).items():
        key = gpu_name(name, "gpu_cost")
        v = float(value)
        if not (math.isfinite(v) and v > 0):
            raise ParameterError("gpu_cost", f"{name}: a price must be a positive $/GPU-hour")
        given[key] = v
    out: dict[str | None, float] = {}
    said: list[str] = []
    for g in gpus:
        if g is not None and g in given:
            out[g] = given[g]
            said.append(f"{g} ${given[g]:g}/GPU-hour (gpu_cost)")
        elif g == own and math.isfinite(float(serving.gpu_cost_per_hour)):
            per = float(serving.gpu_cost_per_hour) / int(serving.gpus_per_replica)
            out[g] = per
            said.append(
                f"{g or 'the replica'} ${per:g}/GPU-hour (serving.gpu_cost_per_hour "
                f"{float(serving.gpu_cost_per_hour):g} over {serving.gpus_per_replica} GPU(s))"
            )
        else:
            out[g] = math.nan
    notes = ["price per GPU-hour: " + "; ".join(said)] if said else []
    missing = [str(g) for g in gpus if math.isnan(out[g])]
    if missing:
        notes.append(
            f"no price for {', '.join(missing)}: cost_per_mtok is null there (give gpu_cost, "
            "--gpu-cost GPU=$/h)"
        )
    for key in given:
        if key not in out:
            notes.append(f"gpu_cost names {key}, which no deployment asked for runs on")
    return out, notes


def retarget(data: dict, gpu: str, tp: int, price_per_gpu_hour: float) -> dict:
    """The problem ``data`` (a problem file's dict) on ``tp`` GPUs ``gpu`` (module
    docstring); ``data`` is left unchanged."""
    out = copy.deepcopy(data)
    serving = out["serving"]
    old = serving.get("hardware") or {}
    hardware: dict[str, Any] = {"gpu": gpu, "count": int(tp)}
    if old.get("interconnect") is not None and str(old.get("gpu", "")).lower() == gpu:
        hardware["interconnect"] = old["interconnect"]
    serving["hardware"] = hardware
    serving["gpus_per_replica"] = int(tp)
    if isinstance(serving.get("scheduler"), dict):
        serving["scheduler"].pop("kv_cache_tokens", None)
    serving.pop("memory", None)
    if math.isfinite(price_per_gpu_hour):
        serving["gpu_cost_per_hour"] = float(price_per_gpu_hour) * int(tp)
    else:
        serving.pop("gpu_cost_per_hour", None)
    return out


def _check_tp(tp: int) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int | np.integer) or not 1 <= tp <= MAX_TP:
        raise ParameterError(
            "tp",
            f"{tp!r}: a tensor-parallel degree is an integer from 1 to {MAX_TP} (one node; "
            "the bundled GPUs' platforms hold 8)",
        )
    return int(tp)


def _check_heads(problem: Problem, tp: int) -> None:
    """``tp`` must divide the verifier's (and each drafter architecture's) heads."""
    serving = problem.serving
    assert serving is not None
    for model in (serving.model, *serving.drafter_models):
        if model is None:
            continue
        try:
            model.tp_kv_factor(tp, "tp")
        except InputError as exc:
            raise ParameterError("tp", exc.message) from None


def _holds(problem: Problem, source: RequestSource) -> str | None:
    """Why the replica cannot hold the model and the longest request (``None``: it can)."""
    serving = problem.serving
    assert serving is not None
    if has_spec_memory(problem):
        room, _ = spec_room(serving, np.zeros((1, problem.n), bool))
        if float(room[0]) <= 0:
            assert serving.hardware is not None and serving.model is not None
            return (
                f"{serving.hardware.name}: {serving.model.weight_bytes / 1e9:,.1f} GB of weights "
                f"against {serving.hardware.memory_bytes / 1e9:,.0f} GB"
            )
    tokens = kv_cache_tokens(problem, Configuration.off(problem.names))
    need = int((source.prompt_tokens + source.output_tokens).max())
    if tokens < need:
        return f"a KV cache of {tokens:,} tokens, less than the longest request ({need:,})"
    return None


def deployments(
    problem: Problem,
    data: dict | None,
    base_dir: str | Path | None,
    source: RequestSource,
    *,
    gpus: Sequence[str] | None = None,
    tp: Sequence[int] | None = None,
    gpu_cost: Mapping[str, float] | None = None,
    stem: str = "problem",
) -> tuple[list[Deployment], list[str]]:
    """Every deployment asked (module docstring), and notes. ``problem`` is the file as
    built, ``data`` its dict (``None``: a built problem, which cannot be re-targeted),
    ``base_dir`` where its relative paths are read from, ``stem`` the name the re-targeted
    files are given (``STEM.GPU-tpN.json``)."""
    own_gpu, own_tp = own_hardware(problem)
    names: list[str | None]
    key: str | None
    if gpus is None:
        names = [own_gpu]
    else:
        names = []
        for g in gpus:
            key = gpu_name(str(g), "gpus") if g is not None else None
            if key not in names:
                names.append(key)
        if not names:
            raise ParameterError(
                "gpus", f"give at least one GPU (known: {', '.join(known_gpus())})"
            )
    degrees = [own_tp] if tp is None else sorted({_check_tp(t) for t in tp})
    if not degrees:
        raise ParameterError("tp", "give at least one tensor-parallel degree")
    prices, notes = gpu_prices(problem, names, gpu_cost)
    serving = problem.serving
    assert serving is not None
    out: list[Deployment] = []
    unheld: list[str] = []
    retargeted = False
    for name in names:
        for t in degrees:
            if name == own_gpu and t == own_tp:
                _check_heads(problem, t)
                out.append(Deployment(name, t, problem, True, prices[name]))
                continue
            flag = "gpus" if name != own_gpu else "tp"
            if name is None or not serving.has_roofline:
                raise ParameterError(
                    flag,
                    "the problem's step times are not the roofline's (no serving.hardware and "
                    "serving.model): it describes its own replica only; ask for its own GPU "
                    "and TP alone",
                )
            if data is None:
                raise ParameterError(
                    flag,
                    "a built Problem cannot be re-targeted: give the problem file or its data",
                )
            measured = [f for f in MEASURED_TIMES if (data.get("serving") or {}).get(f)]
            if measured:
                raise ParameterError(
                    flag,
                    f"serving.{measured[0]} was measured on the file's own replica: step times "
                    "cannot follow another GPU or TP (the roofline's, serving.hardware and "
                    "serving.model, can)",
                )
            retargeted = True
            moved = retarget(data, name, t, prices[name])
            built = problem_from_spec(parse_problem(moved), base_dir, check_search=False)
            _check_heads(built, t)
            why = _holds(built, source)
            if why is not None:
                unheld.append(f"{name} TP{t} ({why})")
                continue
            out.append(
                Deployment(name, t, built, False, prices[name], moved, f"{stem}.{name}-tp{t}.json")
            )
    if unheld and not out:
        raise ParameterError(
            "tp", "no deployment asked holds the model and one request: " + "; ".join(unheld)
        )
    if unheld:
        notes.append(
            "left out, the replica cannot hold the model and one request: " + "; ".join(unheld)
        )
    if retargeted:
        notes += _carried_notes(problem, data)
    notes += _default_notes(sorted({d.gpu for d in out if d.gpu is not None}), data)
    return out, notes


def _default_notes(gpus: Sequence[str], data: dict | None) -> list[str]:
    """Which GPUs' roofline runs at efficiencies fitted to public runs
    (:data:`allocator.core.defaults.PER_GPU`) and which at the vendor's peaks, when the file
    gives none of its own: a front over both compares a measured speed with an upper bound."""
    roof = (((data or {}).get("serving") or {}).get("roofline")) or {}
    if "mem_eff" in roof and "compute_eff" in roof:
        return []
    fitted = [g for g in gpus if g in PER_GPU]
    peaks = [g for g in gpus if g not in PER_GPU]
    if not fitted or not peaks:
        return []
    return [
        f"default efficiencies: {', '.join(fitted)} at those fitted to public serving runs "
        f"(allocator/core/defaults.py), {', '.join(peaks)} at the vendor's peaks (no runs to "
        "fit): the latter are upper bounds on speed, so the GPUs are not compared like for "
        "like (give serving.roofline.mem_eff and compute_eff to set them)"
    ]


def _carried_notes(problem: Problem, data: dict | None) -> list[str]:
    """What a re-targeted file keeps from its own hardware (module docstring)."""
    notes = [
        "on another GPU or TP than the file's: step times from the roofline on that replica, "
        "its KV cache from its memory (serving.scheduler.kv_cache_tokens and serving.memory "
        "dropped: they describe the file's replica)"
    ]
    serving = (data or {}).get("serving") or {}
    kept = []
    if any(d.get("draft_ms") for d in (data or {}).get("drafters") or []):
        kept.append("the drafters' draft_ms")
    roof = serving.get("roofline") or {}
    if any(k in roof for k in ("mem_eff", "compute_eff", "comm_eff", "fixed_ms", "seq_ms",
                                "overhead_ms", "drafters")):  # fmt: skip
        kept.append("serving.roofline's factors and fixed times")
    if kept:
        notes.append(
            f"{' and '.join(kept)} carry over unchanged from the file's own hardware "
            f"({own_hardware(problem)[0]} TP{own_hardware(problem)[1]}): measured or fitted "
            "there, not on the others"
        )
    return notes


__all__ = [
    "MAX_TP",
    "MEASURED_TIMES",
    "Deployment",
    "deployments",
    "gpu_name",
    "gpu_prices",
    "own_hardware",
    "retarget",
]
