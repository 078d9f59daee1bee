"""The benchmark client: when each request is sent, and the slots ``max_concurrency`` frees.

vLLM 0.33.0, ``vllm/benchmarks/serve.py``, ``benchmark`` (lines 1001-1019): each request is
sent at its arrival time, or, with ``--max-concurrency C``, once fewer than ``C`` of the
client's requests are in flight (an ``asyncio.Semaphore``, first come first served: the
``s``-th request sent takes the slot the ``(s - C + 1)``-th finish frees). Latencies run
from the send (``output.start_time``, ``vllm/benchmarks/lib/endpoint_request_func.py``
line 249).

Sessions (closed loop, :mod:`allocator.sim.sessions`): a request with ``after[i] >= 0`` is
released when request ``after[i]`` finishes and is ready ``think_s[i]`` later (never before
its ``arrival_s``); requests are sent in the order they are ready (ties: the lower index
first), so not in index order. ``vllm bench serve`` has no such client; it is the
multi-turn client of inference-perf's and vLLM's ``benchmarks/multi_turn`` kind: the next
turn of a conversation is sent a think time after the answer to the previous one ends.
"""

from __future__ import annotations

import heapq
import math

import numpy as np


class Client:
    """Sends ``N`` requests arriving at ``arrival_s`` (``(N,)``, s), at most
    ``max_concurrency`` in flight (``None``: no limit); ``after``, ``think_s`` (``(N,)`` or
    ``None``): sessions, each request released by an earlier one's finish.

    ``sent``: ``(N,)`` send times, s (NaN until sent); ``next``: requests sent so far;
    ``finished``: requests finished so far, their finish times in time order in
    ``finish_order[:finished]``; ``held``: requests not yet released by their predecessor.
    """

    def __init__(
        self,
        arrival_s: np.ndarray,
        max_concurrency: int | None,
        after: np.ndarray | None = None,
        think_s: np.ndarray | None = None,
    ) -> None:
        self.arrival = arrival_s
        self.N = int(arrival_s.size)
        self.C = max_concurrency
        self.sent = np.full(self.N, np.nan)
        self.next = 0
        self.finished = 0
        self.finish_order = np.empty(self.N)
        self.ready: list[tuple[float, int]] | None = None
        self.held = 0
        if after is not None and think_s is not None and bool((after >= 0).any()):
            self.ready = [(float(arrival_s[i]), i) for i in np.flatnonzero(after < 0).tolist()]
            heapq.heapify(self.ready)
            self.held = int((after >= 0).sum())
            # request -> the requests its finish releases
            self.released_by: dict[int, list[int]] = {}
            for i in np.flatnonzero(after >= 0).tolist():
                self.released_by.setdefault(int(after[i]), []).append(i)
            self.think = think_s

    def next_request(self) -> int:
        """The request the client sends next (call only when :meth:`next_send_time` is
        finite)."""
        return self.next if self.ready is None else self.ready[0][1]

    def next_send_time(self) -> float:
        """When the next request is sent, s (``inf``: all sent, or held back by
        ``max_concurrency`` or by a session's earlier turn until a request finishes)."""
        i = self.next
        if i >= self.N:
            return math.inf
        if self.ready is None:
            t = float(self.arrival[i])
        elif not self.ready:
            return math.inf
        else:
            t = self.ready[0][0]
        if self.C is not None and i >= self.C:
            j = i - self.C  # the (i - C + 1)-th finish frees the slot the next send waits for
            if j >= self.finished:
                return math.inf
            t = max(t, float(self.finish_order[j]))
        return t

    def advance(self) -> None:
        """The next request was sent."""
        if self.ready is not None:
            heapq.heappop(self.ready)
        self.next += 1

    def all_sent(self) -> bool:
        return self.next >= self.N

    def finish(self, times: np.ndarray | float, count: int, ids: np.ndarray | None = None) -> None:
        """``count`` requests (``ids``) finished at ``times`` (one per request, or one for
        all); in sessions their next turns are released."""
        self.finish_order[self.finished : self.finished + count] = (
            np.sort(times) if isinstance(times, np.ndarray) else times
        )
        self.finished += count
        if self.ready is not None and ids is not None:
            at = np.broadcast_to(np.asarray(times, dtype=np.float64), (count,))
            for i, t in zip(np.asarray(ids).tolist(), at.tolist(), strict=True):
                for j in self.released_by.pop(int(i), ()):
                    ready = max(t + float(self.think[j]), float(self.arrival[j]))
                    heapq.heappush(self.ready, (ready, j))
                    self.held -= 1


__all__ = ["Client"]
