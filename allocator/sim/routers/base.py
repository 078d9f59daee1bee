"""The router's contract: what it sees at an arrival (:class:`View`) and what it answers.

A fleet (:mod:`allocator.sim.fleet`) asks its router, at each request's arrival, which
replica serves it. A router sees the request (its prompt length and, when the workload has
one, its key: a session or a prefix group) and each replica's load as a router in front of
vLLM sees it:

* ``in_flight``: requests the router sent the replica that have not finished by the
  arrival, counted by the router itself as llm-d's active-request scorer counts them
  (llm-d-inference-scheduler ``pkg/plugins/scorer/active_request.go``, commit
  ``139bcce2c631da70474516154a1e3dfaf9245a09``: ``PreRequest`` adds one, ``ResponseComplete``
  takes it away): no staleness;
* ``kv_usage``: each replica's KV-cache usage (blocks allocated over the usable blocks)
  as of its last engine step completed at or before the arrival, the value vLLM's
  scheduler reports after each step and llm-d scrapes (``KVCacheUsagePercent``): staleness
  of up to one step (the scrape interval is not modelled).

A router may read only what its class names in :attr:`Router.reads` (the fleet keeps the
rest out of date: a router that reads nothing costs nothing per replica). Ties between
equally good replicas are broken at random, seeded (GIE's max-score picker shuffles the
candidates before it picks). Every router keeps the contract of
``tests/contract/test_routers_contract.py``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...exceptions import ParameterError


class View:
    """What a router sees at one arrival: ``in_flight`` ``(R,)`` int64 (requests sent to
    each replica, not yet finished), ``kv_usage`` ``(R,)`` float64 (fraction of each
    replica's usable KV blocks allocated, as of its last completed step), and the request:
    ``request`` (its index), ``prompt_tokens`` and ``key`` (its session or prefix group;
    ``-1``: none). Entries a router does not read may be stale."""

    __slots__ = ("in_flight", "key", "kv_usage", "prompt_tokens", "request")

    def __init__(self, replicas: int) -> None:
        self.in_flight = np.zeros(replicas, dtype=np.int64)
        self.kv_usage = np.zeros(replicas)
        self.request = 0
        self.prompt_tokens = 0
        self.key = -1


class Router:
    """A routing rule. Subclasses set :attr:`name`, :attr:`reads`, :attr:`keyed` and
    implement :meth:`choose`; state kept across arrivals is set up in :meth:`reset`."""

    #: The name ``--router`` takes.
    name: ClassVar[str] = ""
    #: One line: the rule, and the production router it follows.
    summary: ClassVar[str] = ""
    #: The :class:`View` entries :meth:`choose` reads (``in_flight``, ``kv_usage``).
    reads: ClassVar[frozenset[str]] = frozenset()
    #: What requests must carry for this router, its key's meaning (``""``: keys unused);
    #: a keyed router refuses a workload without keys.
    keyed: ClassVar[str] = ""
    #: Which of the requests' keys it routes on (:meth:`allocator.sim.Requests.keys`:
    #: ``prefix_group`` or ``session``; ``""`` for none).
    key: ClassVar[str] = ""

    def __init__(self) -> None:
        self.replicas = 0
        self.rng = np.random.default_rng(0)

    def start(self, replicas: int, seed: int = 0) -> None:
        """Set up for a run over ``replicas`` replicas, ties drawn from ``seed``."""
        self.replicas = int(replicas)
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        """Forget every earlier decision (called by :meth:`start`)."""

    def check(self, has_keys: bool) -> None:
        """Refuse (``ParameterError`` on ``router``) a workload this router cannot route."""
        if self.keyed and not has_keys:
            raise ParameterError(
                "router", f"{self.name} needs {self.keyed}; these requests carry none"
            )

    def choose(self, view: View) -> int:
        """The replica (``0 .. replicas - 1``) that serves the request ``view`` shows."""
        raise NotImplementedError

    def least(self, values: np.ndarray, among: np.ndarray | None = None) -> int:
        """The replica with the smallest of ``values`` (``(R,)``), over ``among`` (replica
        indices) or all; ties broken at random."""
        if among is not None:
            sub = values[among]
            low = sub.min()
            ties = among[sub == low]
        else:
            low = values.min()
            ties = np.flatnonzero(values == low)
        if ties.size == 1:
            return int(ties[0])
        return int(ties[self.rng.integers(ties.size)])


__all__ = ["Router", "View"]
