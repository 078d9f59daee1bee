"""Routers in front of a fleet of replicas, one module each, and their registry.

A router (:class:`~.base.Router`) chooses, at each arrival, the replica that serves the
request, from what a router in front of vLLM sees (:class:`~.base.View`). To add one: a
module with a :class:`~.base.Router` subclass, registered in :data:`ROUTERS`; the contract
tests (``tests/contract/test_routers_contract.py``) then run on it.
"""

from __future__ import annotations

from ...exceptions import ParameterError
from .base import Router, View
from .least_kv import LeastKV
from .least_requests import LeastRequests
from .prefix_affinity import PrefixAffinity
from .round_robin import RoundRobin
from .session_affinity import SessionAffinity

#: Every router by the name ``--router`` takes.
ROUTERS: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastRequests, LeastKV, PrefixAffinity, SessionAffinity)
}


def get_router(name: str) -> Router:
    """A new router by name; ``ParameterError`` on ``router`` naming the known ones."""
    cls = ROUTERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ParameterError("router", f"unknown router {name!r}: one of {', '.join(ROUTERS)}")
    return cls()


__all__ = [
    "ROUTERS",
    "LeastKV",
    "LeastRequests",
    "PrefixAffinity",
    "RoundRobin",
    "Router",
    "SessionAffinity",
    "View",
    "get_router",
]
