"""Memory caps the batch: the largest number of sequences one replica can hold, for
each configuration of a problem (docs/design.md §8.11; the entity is
:class:`allocator.core.memory.MemoryModel`, ``problem.memory``).

Two sources, in this order:

1. ``serving.memory`` (what the engine reported at start-up): ``kv_cache_gb`` and one
   sequence's ``kv_per_seq_gb`` at the traffic's context length, fixed: a context given
   to a command does not rescale it (the commands say so);
2. otherwise, with ``serving.hardware`` and ``serving.model``, the specs
   (:func:`spec_max_batch`): at ``context`` tokens in each sequence's KV cache,

       max_batch(S, C) = ⌊(M · u − W − Σ_{i∈S} W_i) / ((κ + Σ_{i∈S} κ_i) · C)⌋

   with ``M`` the replica's memory (the GPU table times ``count``), ``u`` vLLM's default
   ``gpu_memory_utilization`` (:data:`UTILISATION`), ``W`` the verifier's weights, ``W_i``
   a hosted drafter's (its ``architecture``'s weights, else its ``memory_gb``; none for an
   n-gram drafter), ``κ`` and ``κ_i`` KV bytes per token (a draft model keeps its own KV
   cache). The engine's activations and CUDA graphs are not counted, so this is an upper
   bound on what the engine admits. At context 0 (none given) it caps nothing. A model
   with sliding windows holds ``min(C, window)`` tokens on those layers
   (:meth:`~allocator.core.model_spec.ModelSpec.kv_bytes_at`), and a replica of several
   GPUs stores KV replicated where tensor parallelism replicates it
   (:meth:`~allocator.core.model_spec.ModelSpec.tp_kv_factor`).

Without either nothing caps the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.memory import FIT_SLACK, UNCAPPED, MemoryModel
from ..core.model_spec import UTILISATION
from ..exceptions import InputError
from ..validate import finite, whole

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..core.serving import Serving


def memory_model(problem: Problem) -> MemoryModel | None:
    """The memory model of ``problem`` (``None`` without ``serving.memory``)."""
    return problem.memory


def has_spec_memory(problem: Problem) -> bool:
    """The cap can come from the specs: no ``serving.memory``, but ``serving.hardware``
    and ``serving.model``."""
    s = problem.serving
    return problem.memory is None and s is not None and s.has_roofline


def spec_room(serving: Serving, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes left for KV after the weights, and KV bytes per token, of each row of
    ``members (B, N)``: ``((B,), (B,))`` (module docstring)."""
    assert serving.hardware is not None and serving.model is not None
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    n = members.shape[1]
    models = serving.drafter_models or (None,) * n
    gb = serving.drafter_memory_gb or (0.0,) * n
    weights = np.array(
        [m.weight_bytes if m is not None else 1e9 * g for m, g in zip(models, gb, strict=True)]
    )
    tp = serving.hardware.count
    kv = np.array(
        [m.kv_bytes_per_token * m.tp_kv_factor(tp) if m is not None else 0.0 for m in models]
    )
    room = serving.hardware.memory_bytes * UTILISATION - serving.model.weight_bytes
    own = serving.model.kv_bytes_per_token * serving.model.tp_kv_factor(tp)
    return room - members.astype(float) @ weights, own + (members.astype(float) @ kv)


def _windowed_seq_bytes(serving: Serving, members: np.ndarray, context: float) -> np.ndarray:
    """KV bytes one sequence of ``context`` tokens holds on the replica, each row of
    ``members``, when a model has sliding windows (:meth:`ModelSpec.kv_bytes_at`)."""
    assert serving.hardware is not None and serving.model is not None
    tp = serving.hardware.count
    models = serving.drafter_models or (None,) * members.shape[1]
    kv = np.array(
        [m.kv_bytes_at(context) * m.tp_kv_factor(tp) if m is not None else 0.0 for m in models]
    )
    own = serving.model.kv_bytes_at(context) * serving.model.tp_kv_factor(tp)
    return own + members.astype(float) @ kv


def spec_max_batch(serving: Serving, members: np.ndarray, context: float) -> np.ndarray:
    """The specs' cap (module docstring) of each row of ``members (B, N)`` at ``context``
    tokens per sequence: ``(B,)`` int64, 0 where the weights leave no room;
    :data:`UNCAPPED` at context 0."""
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    finite(context, "context", lo=0, unit="tokens", error=InputError)
    if context == 0:
        return np.full(members.shape[0], UNCAPPED, dtype=np.int64)
    room, per_token = spec_room(serving, members)
    per_seq = per_token * context
    assert serving.model is not None
    if serving.model.windows or any(m is not None and m.windows for m in serving.drafter_models):
        per_seq = _windowed_seq_bytes(serving, members, context)
    fits = np.floor(room / per_seq * (1.0 + FIT_SLACK) + FIT_SLACK)
    return np.maximum(fits, 0.0).astype(np.int64)


def max_batch(problem: Problem, members: np.ndarray, context: float = 0.0) -> np.ndarray:
    """Largest batch of each row of ``members (B, N)``: ``(B,)`` int64 (module docstring:
    ``serving.memory``, else the specs at ``context`` tokens per sequence),
    :data:`UNCAPPED` when neither caps it."""
    model = memory_model(problem)
    if model is not None:
        return model.max_batch(members)
    if has_spec_memory(problem) and context > 0:
        assert problem.serving is not None
        return spec_max_batch(problem.serving, members, context)
    return np.full(np.asarray(members).shape[0], UNCAPPED, dtype=np.int64)


def memory_notes(problem: Problem, contexts: list[float] | tuple[float, ...]) -> list[str]:
    """What the memory cap rests on, for commands planning at ``contexts`` (tokens per
    sequence; ``[0]`` when none was given): a note when ``serving.memory`` is not rescaled
    by a context given, when the specs cap the batch, and when they could but no context
    was given."""
    given = [c for c in contexts if c > 0]
    if problem.memory is not None:
        if given:
            return [
                "memory cap from serving.memory (kv_per_seq_gb at the traffic's context "
                "length), not rescaled by the context asked for"
            ]
        return []
    if not has_spec_memory(problem):
        return []
    if not given:
        return [
            "no memory cap: serving.model gives the KV bytes per token but no context was "
            "given (--context, --contexts), so the batch is not capped"
        ]
    note = (
        f"memory cap from the specs: {UTILISATION:g} of the replica's memory (vLLM's default "
        "gpu_memory_utilization) less the weights, over the KV bytes per token times the "
        "context; the engine's activations are not counted, so the cap is an upper bound"
    )
    s = problem.serving
    if s is not None and s.model is not None and s.model.windows:
        note += " (a sliding-window layer holds at most its window of tokens)"
    return [note]


def hosting_room(problem: Problem, batch: int, option: str = "batch") -> tuple[np.ndarray, float]:
    """What hosting may take so that a replica still holds ``batch`` sequences: each
    drafter's memory ``(N,)`` GB and the cap ``kv_cache_gb - batch · kv_per_seq_gb`` GB on
    the hosted set's total. Raises :class:`InputError` (field ``option``) without
    ``serving.memory`` or when ``batch`` sequences do not fit even with nothing hosted."""
    model = memory_model(problem)
    if model is None:
        raise InputError(option, "needs serving.memory (kv_cache_gb, kv_per_seq_gb)")
    whole(batch, option, lo=1, error=InputError)
    room = model.kv_cache_gb - batch * model.kv_per_seq_gb
    if room < -FIT_SLACK * model.kv_cache_gb:
        most = int(model.max_batch(np.zeros((1, model.drafter_gb.size), bool))[0])
        raise InputError(
            option,
            f"a replica holds at most {most} sequences (serving.memory) even with no "
            f"drafter hosted; {batch} do not fit",
        )
    return model.drafter_gb, max(room, 0.0) + FIT_SLACK * model.kv_cache_gb


__all__ = [
    "UTILISATION",
    "has_spec_memory",
    "hosting_room",
    "max_batch",
    "memory_model",
    "memory_notes",
    "spec_max_batch",
    "spec_room",
]
