"""Workloads that share tokens: a common system prompt, and multi-turn sessions.

Both describe each request's tokens as segments (:class:`~allocator.sim.requests.
TokenContent`) from which prefix caching's block hashes follow
(:mod:`allocator.sim.prefix_cache`).

* **A shared prefix** (:func:`shared_prefix`): every prompt starts with the same ``N``
  tokens (segment id 0), the rest of each request (prompt and output) its own. This is
  vLLM's ``prefix_repetition`` dataset with one prefix (``vllm/benchmarks/datasets.py``,
  ``PrefixRepetitionRandomDataset``: ``--prefix-repetition-prefix-len``, a prompt = a
  prefix + a random suffix) and inference-perf's shared system prompt.
* **Sessions** (:func:`sessions`): ``num_prompts`` requests in sessions of ``turns``
  consecutive requests; turn 0's prompt is ``input_len`` tokens (the shared prefix first,
  when there is one), and turn ``t + 1``'s prompt is turn ``t``'s prompt, then its answer
  (``output_len`` tokens), then a new message of ``input_len`` tokens:
  ``prompt_t = t · (input_len + output_len) + input_len``. Turn ``t + 1`` is released by
  turn ``t``'s finish and sent ``think_s`` later (closed loop,
  :class:`~allocator.sim.client.Client`). The last session is shorter when ``turns`` does
  not divide ``num_prompts``.

Segment ids: 0 the shared prefix; request ``i``'s new message ``2 i + 1``, its answer
``2 i + 2``. Memory: request ``i`` of turn ``t`` has ``2 t + 2`` segments (one more with a
shared prefix): ``16 · N · (turns + 2)`` bytes at most.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import ParameterError
from ..validate import whole
from .requests import MAX_TOKENS, TokenContent

#: Most turns one session may have.
MAX_TURNS = 10_000


def shared_prefix(prompt: np.ndarray, output: np.ndarray, length: int) -> TokenContent:
    """Every prompt of ``prompt`` ``(N,)`` starting with the same ``length`` tokens, the
    rest of each request (``output`` ``(N,)`` included) its own. ``ParameterError`` on
    ``shared_prefix_len`` when a prompt is shorter than ``length``."""
    p = np.asarray(prompt, dtype=np.int64)
    o = np.asarray(output, dtype=np.int64)
    n = whole(length, "shared_prefix_len", lo=0, hi=MAX_TOKENS)
    short = np.flatnonzero(p < n)
    if short.size:
        i = int(short[0])
        raise ParameterError(
            "shared_prefix_len",
            f"{n} tokens is longer than request {i}'s prompt of {int(p[i])} tokens",
        )
    N = p.size
    rest = p + o - n
    if n == 0:
        return TokenContent(2 * np.arange(N) + 1, rest, np.arange(N + 1))
    ids = np.empty(2 * N, dtype=np.int64)
    lengths = np.empty(2 * N, dtype=np.int64)
    ids[0::2] = 0
    lengths[0::2] = n
    ids[1::2] = 2 * np.arange(N) + 1
    lengths[1::2] = rest
    keep = lengths > 0  # (a prompt that is all prefix still has its output)
    counts = keep.reshape(N, 2).sum(axis=1)
    return TokenContent(ids[keep], lengths[keep], np.concatenate(([0], np.cumsum(counts))))


def sessions(
    num_prompts: int,
    turns: int,
    input_len: int,
    output_len: int,
    think_s: float = 0.0,
    shared_prefix_len: int = 0,
) -> tuple[np.ndarray, np.ndarray, TokenContent, np.ndarray, np.ndarray]:
    """``num_prompts`` requests in sessions of ``turns`` (see the module docstring):
    ``(prompt, output, content, after, think)``, each ``(N,)`` but ``content``; ``after[i]``
    the previous turn (``-1`` for a first turn), ``think`` its think time, s.

    ``ParameterError`` on ``turns`` (below 1, or a last turn's prompt past
    :data:`~allocator.sim.requests.MAX_TOKENS`), ``shared_prefix_len`` (longer than
    ``input_len``) and ``think_time`` (negative or not finite)."""
    N = whole(num_prompts, "num_prompts", lo=1)
    T = whole(turns, "turns", lo=1, hi=MAX_TURNS)
    I = whole(input_len, "input_len", lo=1, hi=MAX_TOKENS)  # noqa: E741
    O = whole(output_len, "output_len", lo=1, hi=MAX_TOKENS)  # noqa: E741
    S = whole(shared_prefix_len, "shared_prefix_len", lo=0, hi=MAX_TOKENS)
    try:
        think = float(think_s)
    except (TypeError, ValueError):
        raise ParameterError(
            "think_time", f"must be a number of seconds, got {think_s!r}"
        ) from None
    if not (think >= 0.0 and np.isfinite(think)):
        raise ParameterError("think_time", f"must be finite and >= 0 s, got {think_s!r}")
    if S > I:
        raise ParameterError(
            "shared_prefix_len", f"{S} tokens is longer than the prompt (input_len {I})"
        )
    T_used = min(T, N)
    if (T_used - 1) * (I + O) + I > MAX_TOKENS:
        raise ParameterError(
            "turns",
            f"{T} turns of {I} + {O} tokens make a last prompt of "
            f"{(T_used - 1) * (I + O) + I:,} tokens, more than {MAX_TOKENS:,}",
        )
    i = np.arange(N)
    t = i % T
    prompt = t * (I + O) + I
    output = np.full(N, O, dtype=np.int64)
    after = np.where(t > 0, i - 1, -1)
    # segments of request i (session start s0 = i - t): [prefix], then for each turn u <= t
    # of its session the message of request s0 + u and, but for u = t... its answer; the
    # answer of the request itself closes its sequence (its output)
    first = I - S  # turn 0's message after the shared prefix (may be 0 tokens)
    per = 2 * (t + 1) + (1 if S else 0) - (1 if first == 0 else 0)
    starts = np.concatenate(([0], np.cumsum(per)))
    total = int(starts[-1])
    ids = np.empty(total, dtype=np.int64)
    lengths = np.empty(total, dtype=np.int64)
    pos = 0
    for r in range(N):  # (one pass, O(segments); sessions are short)
        s0 = r - int(t[r])
        if S:
            ids[pos], lengths[pos] = 0, S
            pos += 1
        for u in range(int(t[r]) + 1):
            q = s0 + u
            n_msg = first if u == 0 else I
            if n_msg:
                ids[pos], lengths[pos] = 2 * q + 1, n_msg
                pos += 1
            ids[pos], lengths[pos] = 2 * q + 2, O
            pos += 1
    content = TokenContent(ids, lengths, starts)
    return prompt.astype(np.int64), output, content, after, np.full(N, think)


def session_starts(after: np.ndarray) -> np.ndarray:
    """The requests that start a session (``after == -1``), ``(S,)`` indices."""
    return np.flatnonzero(np.asarray(after) < 0)


def session_ids(after: np.ndarray) -> np.ndarray:
    """Each request's session, ``(N,)`` int64: sessions numbered ``0, 1, ...`` in the order
    of their first turns, a later turn in the session of the request it follows
    (``after[i] < i``, as :class:`~allocator.sim.requests.Requests` holds it)."""
    a = np.asarray(after, dtype=np.int64)
    out = np.empty(a.size, dtype=np.int64)
    start = a < 0
    out[start] = np.arange(int(start.sum()))
    for i in np.flatnonzero(~start).tolist():  # in order: after[i] is already numbered
        out[i] = out[a[i]]
    return out


__all__ = ["MAX_TURNS", "session_ids", "session_starts", "sessions", "shared_prefix"]
