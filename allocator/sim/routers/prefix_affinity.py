"""``prefix-affinity``: the replica holding the longest prefix of the prompt.

kubernetes-sigs/gateway-api-inference-extension (llm-d's prefix-cache scorer),
``pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go`` (commit
``4bc4889d121683cc5facdb43d619d5627df2d3d6``): the prompt hashed in blocks, each server
scored by the share of those blocks its index holds, the index filled by the router's own
decisions (``PreRequest`` records the chosen server's blocks), so the score is where the
router sent the prefix before, not the server's cache itself. vLLM production-stack's
``PrefixAwareRouter`` (``src/vllm_router/routers/routing_logic.py``, commit
``008a23bd48371ffc707875848b19784c348a3de0``) does the same over a hash trie of prompts,
without eviction, picking among the longest matches at random.

A request's key is its *prefix group* (``Requests.prefix_group``: requests of a group
share their prefix, of whatever length; the longest prefix the workload shares), so every
replica the router sent the group to holds the longest prefix known. Among them (or all
replicas, for a group not seen before) the one with the fewest requests in flight is chosen
(llm-d's default profile weighs the prefix score with load scorers; production-stack picks
at random), and the replica is recorded for the group. No eviction from the index. So a
group stays on the replica it first went to: with ``K`` groups over ``N`` replicas, each
group's requests all go to one replica, and with one group (``--shared-prefix-len`` alone:
every prompt shares one prefix) every request goes to one replica, the others idle, as
production-stack's router does when every prompt's longest match is one endpoint. For
``--turns`` sessions (and a trace's ``session_id``) the group is the session (its first
turn's content is its own), so the rule routes as ``session-affinity`` does.
"""

from __future__ import annotations

import numpy as np

from .base import Router, View


class PrefixAffinity(Router):
    """Where the request's prefix group was sent before, the least loaded of those."""

    name = "prefix-affinity"
    summary = (
        "the replica the prompt's prefix was sent to before, fewest in flight among them "
        "(llm-d prefix-cache scorer, production-stack PrefixAwareRouter)"
    )
    reads = frozenset({"in_flight"})
    keyed = "prompts that share a prefix (a prefix group per request)"
    key = "prefix_group"

    def reset(self) -> None:
        self.holders: dict[int, np.ndarray] = {}

    def choose(self, view: View) -> int:
        held = self.holders.get(view.key)
        r = self.least(view.in_flight, held)
        if held is None:
            self.holders[view.key] = np.array([r])
        return r


__all__ = ["PrefixAffinity"]
