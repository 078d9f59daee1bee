"""``session-affinity``: a session's requests to the replica that served its first.

llm-d-inference-scheduler ``pkg/plugins/scorer/session_affinity.go`` (commit
``0b592cd334fb134974c1366c5b54d44cab1da53c``), ``SessionAffinity.Score``: score 1 for the
endpoint named in the request's ``llm-d-session`` cookie (set by ``ResponseReceived`` to
the endpoint that served the session before), 0 for the others. vLLM production-stack's
``SessionRouter`` (``src/vllm_router/routers/routing_logic.py``, commit
``008a23bd48371ffc707875848b19784c348a3de0``) keeps a session on one endpoint too, by a hash
ring of the session id, and sends requests without one to the endpoint of lowest QPS.

A request's key is its session (``Requests.session``: ``--turns`` sessions, a trace's
``session_id`` column). A session not seen before goes to the replica with the
fewest requests in flight (llm-d: with no cookie the other scorers decide), and stays
there.
"""

from __future__ import annotations

from .base import Router, View


class SessionAffinity(Router):
    """A session stays on the replica of its first request."""

    name = "session-affinity"
    summary = (
        "a session's requests to the replica of its first, a new session to the fewest in "
        "flight (llm-d session-affinity scorer, production-stack SessionRouter)"
    )
    reads = frozenset({"in_flight"})
    keyed = "requests that carry a session id"
    key = "session"

    def reset(self) -> None:
        self.home: dict[int, int] = {}

    def choose(self, view: View) -> int:
        r = self.home.get(view.key)
        if r is None:
            r = self.least(view.in_flight)
            self.home[view.key] = r
        return r


__all__ = ["SessionAffinity"]
