"""The router in front of a fleet, as the production routers configure it: llm-d's
``EndpointPickerConfig`` (a YAML file), vLLM production-stack's router flags, and the policy
names of the routers that pair prefill with decode (:mod:`.disagg`). docs/design.md §8.8.

The simulated routers are :data:`allocator.sim.routers.ROUTERS`; each maps here to the
production rule it follows, exactly where the production router has it and to the closest
rule with a note where it has not.

**llm-d** (``EndpointPickerConfig``): the schema is gateway-api-inference-extension v1.5.0
(commit ``df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849``), ``apix/config/v1alpha1/
endpointpickerconfig_types.go``: ``apiVersion: inference.networking.x-k8s.io/v1alpha1``,
``kind: EndpointPickerConfig``, ``plugins`` (``type``, ``name``, ``parameters``; a plugin is
referred to by its name, its type when unnamed) and ``schedulingProfiles`` (``name``,
``plugins`` of ``pluginRef`` and ``weight``). Plugin types as registered by
llm-d-inference-scheduler v0.8.0 (commit ``05c91f0d655fbd7ea71fc50949c899c360d06f07``,
``pkg/epp/framework/plugins/register.go``, which builds on that gateway release):

- ``least-requests``: ``active-request-scorer`` (llm-d
  ``pkg/epp/framework/plugins/scheduling/scorer/activerequest/active_request.go``);
- ``least-kv``: ``kv-cache-utilization-scorer`` (gateway ``pkg/epp/framework/plugins/
  scheduling/scorer/kvcacheutilization/kvcache_utilization.go``);
- ``prefix-affinity``: ``prefix-cache-scorer`` (gateway ``.../scorer/prefix/plugin.go``)
  weighted 2 against ``active-request-scorer`` 1, the 2:1 of llm-d's own samples
  (``deploy/config/pd-epp-config.yaml``, prefix 2 against the queue scorer 1). The simulation
  keeps the prefix first and the load second; with weights a large enough difference in
  load can overrule a partial prefix match (a note says so);
- ``session-affinity``: ``session-affinity-scorer`` (llm-d ``.../scorer/sessionaffinity/
  session_affinity.go``: 1 for the session's endpoint, 0 for the others) weighted 2 against
  ``active-request-scorer`` 1 (scores in 0..1), so the session's endpoint always wins and a
  new session goes to the fewest in flight, as simulated;
- ``round-robin``: neither release registers a round-robin picker or scorer; the closest is
  ``random-picker`` (gateway ``.../picker/random_picker.go``) with no scorer, a uniform
  random choice (a note says so).

Each profile picks with ``max-score-picker`` (gateway ``.../picker/max_score_picker.go``;
ties at random, as simulated). An aggregated fleet has one profile under
``single-profile-handler``; a disaggregated one the profiles ``prefill`` and ``decode``
(filters ``prefill-filter`` / ``decode-filter`` on the pod label ``llm-d.ai/role``,
``.../filter/bylabel/roles.go``) under ``disagg-profile-handler`` with
``always-disagg-pd-decider`` (every request is disaggregated, as simulated) and
``disagg-headers-handler``, as in llm-d's ``docs/disaggregation.md``.

**vLLM production-stack** router (vllm-project/production-stack, tag ``vllm-stack-0.1.12``,
commit ``66b60661aa3052810859a417559e9e830772a091``, ``src/vllm_router/parsers/parser.py``):
``--routing-logic`` choices ``roundrobin, session, kvaware, prefixaware,
disaggregated_prefill, disaggregated_prefill_orchestrated``; ``session`` reads the session
from the header ``--session-key`` names; static discovery needs ``--static-backends`` and
``--static-models`` (comma-separated). It has no least-loaded rule (``kvaware`` asks LMCache
where a prefix is cached): ``least-requests`` and ``least-kv`` are refused for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from ..exceptions import ParameterError
from ..io.quoting import plain_text
from ..sim.routers import ROUTERS
from ..validate import whole

#: The router names ``--router`` takes, in the simulator's registry order.
ROUTER_NAMES: tuple[str, ...] = tuple(ROUTERS)

#: llm-d-inference-scheduler release and gateway-api-inference-extension release read.
LLM_D_RELEASE = "v0.8.0"
GIE_RELEASE = "v1.5.0"
#: production-stack release read.
PRODUCTION_STACK_RELEASE = "vllm-stack-0.1.12"
#: The pod label llm-d's role filters read (``roles.go``), and its values.
LLM_D_ROLE_LABEL = "llm-d.ai/role"


def check_router(name: object) -> str:
    """``name`` when it is one of :data:`ROUTER_NAMES`; a :class:`ParameterError` naming
    ``router`` and listing them otherwise."""
    if not isinstance(name, str) or name not in ROUTERS:
        raise ParameterError("router", f"unknown router {name!r}: one of {', '.join(ROUTER_NAMES)}")
    return name


@dataclass(frozen=True)
class Scoring:
    """How llm-d scores endpoints for one simulated router: ``scorers`` (plugin type,
    weight) and the ``picker`` plugin type."""

    scorers: tuple[tuple[str, int], ...]
    picker: str


#: Each simulated router as llm-d scorers and picker (module docstring).
LLM_D_SCORING: dict[str, Scoring] = {
    "round-robin": Scoring((), "random-picker"),
    "least-requests": Scoring((("active-request-scorer", 1),), "max-score-picker"),
    "least-kv": Scoring((("kv-cache-utilization-scorer", 1),), "max-score-picker"),
    "prefix-affinity": Scoring(
        (("prefix-cache-scorer", 2), ("active-request-scorer", 1)), "max-score-picker"
    ),
    "session-affinity": Scoring(
        (("session-affinity-scorer", 2), ("active-request-scorer", 1)), "max-score-picker"
    ),
}


def llm_d_notes(router: str) -> list[str]:
    """Where llm-d's configuration for ``router`` differs from the simulated rule."""
    if router == "round-robin":
        return [
            f"note: llm-d {LLM_D_RELEASE} (and gateway-api-inference-extension {GIE_RELEASE}) "
            "has no round-robin picker: the configuration picks uniformly at random "
            "(random-picker), so each replica's arrivals are a random thinning of the "
            "stream, not every R-th request"
        ]
    if router == "prefix-affinity":
        return [
            "note: llm-d adds the prefix-cache score (weight 2) to the active-request score "
            "(weight 1); a partial prefix match can lose to a much less loaded replica, "
            "where the simulation always keeps the prefix first"
        ]
    return []


def llm_d_config(router: str, *, disaggregated: bool) -> tuple[str, list[str]]:
    """llm-d's ``EndpointPickerConfig`` (YAML text) routing as ``router`` does, and notes;
    ``disaggregated``: the ``prefill`` and ``decode`` profiles of a P/D fleet (pods labelled
    ``llm-d.ai/role: prefill`` / ``decode``), otherwise one profile. Refuses an unknown
    router (:func:`check_router`)."""
    scoring = LLM_D_SCORING[check_router(router)]
    plugins: list[dict] = []
    seen: set[str] = set()

    def declare(plugin_type: str, parameters: dict | None = None) -> None:
        if plugin_type not in seen:
            seen.add(plugin_type)
            spec: dict = {"type": plugin_type}
            if parameters is not None:
                spec["parameters"] = parameters
            plugins.append(spec)

    def profile(name: str, role_filter: str | None) -> dict:
        refs: list[dict] = []
        if role_filter is not None:
            refs.append({"pluginRef": role_filter})
        refs.append({"pluginRef": scoring.picker})
        refs += [{"pluginRef": t, "weight": w} for t, w in scoring.scorers]
        return {"name": name, "plugins": refs}

    for plugin_type, _ in scoring.scorers:
        declare(plugin_type)
    declare(scoring.picker)
    if disaggregated:
        declare("prefill-filter")
        declare("decode-filter")
        declare("disagg-headers-handler")
        declare("always-disagg-pd-decider")
        declare(
            "disagg-profile-handler",
            {
                "profiles": {"prefill": "prefill", "decode": "decode"},
                "deciders": {"prefill": "always-disagg-pd-decider"},
            },
        )
        profiles = [profile("prefill", "prefill-filter"), profile("decode", "decode-filter")]
    else:
        declare("single-profile-handler")
        profiles = [profile("default", None)]
    doc = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": profiles,
    }
    head = (
        f"# llm-d inference scheduler {LLM_D_RELEASE}: router {router!s}"
        f"{' (prefill/decode)' if disaggregated else ''}\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False), llm_d_notes(router)


#: Each simulated router as production-stack's ``--routing-logic`` (``None``: it has none).
PRODUCTION_STACK_LOGIC: dict[str, str | None] = {
    "round-robin": "roundrobin",
    "least-requests": None,
    "least-kv": None,
    "prefix-affinity": "prefixaware",
    "session-affinity": "session",
}


def production_stack_command(
    router: str,
    backends: Sequence[str],
    model: str,
    *,
    port: int = 8001,
    session_key: str = "x-session-id",
) -> list[str]:
    """The argv of production-stack's router (``vllm-router``, the console script of its
    ``pyproject.toml``) in front of the aggregated replicas at ``backends`` (URLs, each
    serving ``model``), routing as ``router``; ``session_key``: the request header naming
    the session (``session-affinity`` only). Refuses (naming ``router``) a router that has
    no routing logic there (``least-requests``, ``least-kv``) and an unknown one."""
    logic = PRODUCTION_STACK_LOGIC[check_router(router)]
    if logic is None:
        known = ", ".join(r for r, v in PRODUCTION_STACK_LOGIC.items() if v)
        raise ParameterError(
            "router",
            f"{router!r}: production-stack's router ({PRODUCTION_STACK_RELEASE}) has no such "
            f"routing logic; it routes {known}. Use the llm-d configuration instead",
        )
    if not backends:
        raise ParameterError("backends", "is empty: the router needs at least one replica")
    urls = [list_item(b, "backends") for b in backends]
    model = text_field(model, "model")
    words = [
        "vllm-router", "--port", str(port_field(port, "port")),
        "--service-discovery", "static",
        "--static-backends", ",".join(urls),
        "--static-models", ",".join([model] * len(urls)),
        "--routing-logic", logic,
    ]  # fmt: skip
    if logic == "session":
        words += ["--session-key", text_field(session_key, "session_key")]
    return words


# ---------------------------------------------------------------- input checks
def text_field(value: object, field: str) -> str:
    """``value`` as a non-empty string without control characters, else a
    :class:`ParameterError` naming ``field``."""
    if not isinstance(value, str) or not value:
        raise ParameterError(field, f"must be a non-empty string, not {value!r}")
    try:
        return plain_text(value)
    except ValueError as exc:
        raise ParameterError(field, str(exc)) from None


def list_item(value: object, field: str) -> str:
    """A URL or host for a list joined with commas or spaces: no comma, no blank."""
    text = text_field(value, field)
    if any(c in text for c in ", \t"):
        raise ParameterError(field, f"{text!r} holds a comma or a blank")
    return text


def port_field(value: object, field: str) -> int:
    """``value`` as a TCP port, 1..65535."""
    return whole(value, field, lo=1, hi=65535)


__all__ = [
    "GIE_RELEASE",
    "LLM_D_RELEASE",
    "LLM_D_ROLE_LABEL",
    "LLM_D_SCORING",
    "PRODUCTION_STACK_LOGIC",
    "PRODUCTION_STACK_RELEASE",
    "ROUTER_NAMES",
    "Scoring",
    "check_router",
    "list_item",
    "llm_d_config",
    "llm_d_notes",
    "port_field",
    "production_stack_command",
    "text_field",
]
