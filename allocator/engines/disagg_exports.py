"""Exports for a prefill/decode disaggregated fleet: the server command of every prefill and
decode replica, the router that pairs them, and llm-d's configuration (docs/design.md
§8.8). Speculation is planned for the decode pool; the prefill pool carries the drafter
only where the engine needs it there to hand the decode its draft state (below).

**vLLM 0.33.0** (its PyPI wheel; paths relative to the wheel root). Each replica is ``vllm
serve MODEL --port P --tensor-parallel-size T --max-num-seqs N [--max-num-batched-tokens
B] --kv-transfer-config '<JSON>' [--speculative-config '<JSON>']`` (flags of
``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``, and ``--port`` of
``vllm/entrypoints/common/cli_args.py``, ``FrontendArgs``). The KV transfer object is
``KVTransferConfig`` (``vllm/config/kv_transfer.py``): ``{"kv_connector": "NixlConnector",
"kv_role": "kv_producer"}`` on prefill and ``"kv_consumer"`` on decode. ``kv_both`` is what
older examples use; ``NixlConnector.__init__``
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py`` lines 97-103) warns that
it is deprecated and asks for producer and consumer. Each replica sets
``VLLM_NIXL_SIDE_CHANNEL_HOST`` to its own host (``vllm/envs.py``: default ``localhost``,
which a replica on another host cannot reach; port default 5600).

Speculation with NIXL: the handshake compares a compatibility hash and refuses a mismatch
(``nixl/base_worker.py`` lines 1192-1208) that includes, for the methods reading the
target's hidden states (``SpeculativeConfig.use_eagle``: eagle, eagle3, mtp, dflash,
dspark; ``vllm/config/speculative.py`` line 2120), the draft's ``method`` and ``model``
but not ``num_speculative_tokens`` (``nixl/metadata.py``,
``_get_speculative_compatibility_factors``). So for those methods the prefill replicas run
the same method and model with ``num_speculative_tokens`` 1 (dflash and dspark: the decode's
``k``, their block), as vLLM's own P/D EAGLE-3 test does (vllm-project/vllm
``tests/v1/kv_connector/nixl_integration/pd_spec_decode_eagle3_test.sh``, commit
``72ab3eff444d39d7d69a4b5d967a0a597f4d849a``: prefill ``num_speculative_tokens`` 1, decode
3); the schedule by batch size stays on decode. ``ngram``, ``suffix`` and ``draft_model``
are not in the hash: speculation runs on decode alone.

Router: vllm-project/router's ``vllm-router`` 0.1.17 (its PyPI wheel,
``vllm_router/router_args.py``): ``--vllm-pd-disaggregation --prefill URL ... --decode URL
... --policy P --kv-connector nixl``; policies ``random, round_robin, cache_aware, kv_aware,
power_of_two, consistent_hash, sticky_least_loaded``. And llm-d's ``EndpointPickerConfig``
(:func:`allocator.engines.routers.llm_d_config`), which has the simulated rules exactly.

**SGLang 0.5.23** (its PyPI wheel). Each replica is ``python -m sglang.launch_server
--model-path MODEL --host 0.0.0.0 --port P --tp-size T --max-running-requests N
--disaggregation-mode prefill|decode --disaggregation-transfer-backend B
[--disaggregation-ib-device D] [--disaggregation-bootstrap-port BP]`` (fields of
``sglang/srt/arg_groups/fields/disagg.py``, ``parallel.py``, ``model.py``, ``schedule.py``,
``serving.py``; a field ``x_y`` is the flag ``--x-y``, ``arg_utils.py``
``_field_to_cli_name``; backends ``mooncake`` (default), ``nixl``, ``ascend``, ``mori``,
``mooncake_tcp``, ``choices.py``; ``fake`` moves no KV and is refused).
``--max-running-requests`` is always given: with
speculation on SGLang otherwise runs at most 48. The decode of the EAGLE worker's algorithms
(``EAGLE``, ``EAGLE3``, ``NEXTN``) reads the draft's hidden states and top-k that the prefill
server computes (``sglang/srt/disaggregation/decode.py`` lines 2727-2731,
``prefill.py`` line 943): their flags go on both pools. Other algorithms run on decode alone
(``disaggregation/utils.py`` line 1189: a decode side may speculate where the prefill side
does not).

Router: sglang-router 0.3.2 (its PyPI wheel, ``sglang_router/router_args.py``): ``python -m
sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode
URL ... --policy P``; policies ``random, round_robin, cache_aware, power_of_two, manual``;
``manual`` with ``--assignment-mode min_load`` keeps a routing key on one worker and sends a
new key to the worker with the fewest requests (its help text); the key is read from the
header ``x-smg-routing-key`` (a string of the router's binary).

Shell words are quoted by :func:`allocator.io.quoting.shell_join`; JSON is
:func:`allocator.engines.vllm.config_text`'s one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..exceptions import ParameterError
from ..io.quoting import escape_text, shell_join, shell_word
from ..validate import whole
from .routers import check_router, list_item, llm_d_config, port_field, text_field
from .vllm import config_text

#: vLLM methods whose draft the NIXL handshake compares (``SpeculativeConfig.use_eagle``).
VLLM_PREFILL_DRAFT_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
#: Of those, the methods whose ``num_speculative_tokens`` is a trained block, kept on prefill.
VLLM_BLOCK_METHODS = ("dflash", "dspark")
#: SGLang algorithms whose decode reads the prefill server's draft state.
SGLANG_PREFILL_DRAFT_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")

#: Each simulated router as vllm-router's ``--policy`` and whether that is the same rule.
VLLM_ROUTER_POLICY: dict[str, tuple[str, bool]] = {
    "round-robin": ("round_robin", True),
    "least-requests": ("power_of_two", False),
    "least-kv": ("power_of_two", False),
    "prefix-affinity": ("cache_aware", False),
    "session-affinity": ("sticky_least_loaded", False),
}
#: Each simulated router as sglang-router's ``--policy`` (plus flags) and whether exact.
SGLANG_ROUTER_POLICY: dict[str, tuple[tuple[str, ...], bool]] = {
    "round-robin": (("round_robin",), True),
    "least-requests": (("power_of_two",), False),
    "least-kv": (("power_of_two",), False),
    "prefix-affinity": (("cache_aware",), False),
    "session-affinity": (("manual", "--assignment-mode", "min_load"), True),
}


@dataclass(frozen=True)
class Pool:
    """One pool of identical replicas: ``replicas``, tensor parallelism ``tp`` and
    ``max_num_seqs`` (concurrent sequences per replica), ``max_num_batched_tokens``
    (tokens per step per replica; ``None``: the engine's default, vLLM only), ``hosts``
    (one per replica; ``None``: the placeholders ``prefill-0``, ``decode-1``, ...) and
    ``port`` (each replica's HTTP port; ``None``: the engine's usual one for the role)."""

    replicas: int
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int | None = None
    hosts: tuple[str, ...] | None = None
    port: int | None = None


@dataclass(frozen=True)
class Command:
    """One command: its ``argv``, ``env`` (name, value) pairs set before it and ``host``,
    where it runs (``None``: anywhere)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    host: str | None = None

    def line(self) -> str:
        """The command as one shell line, every word quoted."""
        env = " ".join(f"{k}={shell_word(v)}" for k, v in self.env)
        return (env + " " if env else "") + shell_join(self.argv)


@dataclass(frozen=True)
class FleetExport:
    """What serves a disaggregated fleet: ``prefill`` and ``decode`` (one :class:`Command`
    per replica, replica order), ``router`` (the command pairing them), ``router_config``
    (llm-d's ``EndpointPickerConfig`` YAML; ``None`` where not given) and ``notes`` (each
    starting ``note:``)."""

    engine: str
    prefill: tuple[Command, ...]
    decode: tuple[Command, ...]
    router: Command
    router_config: str | None = None
    notes: tuple[str, ...] = field(default=())

    def text(self) -> str:
        """The commands as a shell script's lines, a comment above each group, and the
        llm-d configuration as comment lines (it is a file of its own)."""
        out: list[str] = []
        for role, commands in (("prefill", self.prefill), ("decode", self.decode)):
            out.append(f"# {role} pool: {len(commands)} replica(s)")
            for c in commands:
                out += [f"# on {escape_text(c.host or 'any host')}:", c.line()]
        out += ["# the router pairing prefill with decode", self.router.line()]
        if self.router_config is not None:
            out += ["# llm-d EndpointPickerConfig (a file of its own):"]
            out += ["#   " + line for line in self.router_config.splitlines()]
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------- input checks
def _pool(pool: Pool, role: str, default_port: int) -> tuple[list[str], int]:
    """``pool``'s hosts and port after checking every field (a :class:`ParameterError`
    naming ``{role}_replicas``, ``{role}_tp``, ...)."""
    if not isinstance(pool, Pool):
        raise ParameterError(role, f"must be a Pool, not {type(pool).__name__}")
    n = whole(pool.replicas, f"{role}_replicas", lo=1)
    whole(pool.tp, f"{role}_tp", lo=1)
    whole(pool.max_num_seqs, f"{role}_max_num_seqs", lo=1)
    if pool.max_num_batched_tokens is not None:
        whole(pool.max_num_batched_tokens, f"{role}_max_num_batched_tokens", lo=1)
    if pool.hosts is None:
        hosts = [f"{role}-{i}" for i in range(n)]
    else:
        hosts = [_host(h, f"{role}_hosts") for h in pool.hosts]
        if len(hosts) != n:
            raise ParameterError(
                f"{role}_hosts", f"names {len(hosts)} hosts for {n} {role} replicas"
            )
    port = default_port if pool.port is None else port_field(pool.port, f"{role}_port")
    return hosts, port


def _host(value: object, field: str) -> str:
    """A host name or address: no scheme, path, comma or blank."""
    text = list_item(value, field)
    if "/" in text or text.startswith("-"):
        raise ParameterError(field, f"{text!r} is not a host name or address")
    return text


def _url(host: str, port: int) -> str:
    """``http://host:port`` (an IPv6 address in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# ---------------------------------------------------------------- vLLM
def vllm_prefill_speculation(decode_config: dict) -> tuple[dict | None, list[str]]:
    """The ``--speculative-config`` of the prefill replicas for the decode pool's
    ``decode_config`` (:func:`allocator.engines.vllm.speculative_config` or
    ``schedule_config``'s object), and notes: ``None`` for methods the NIXL handshake does
    not compare, else the same ``method`` and ``model`` at ``num_speculative_tokens`` 1
    (dflash, dspark: the decode's, their block) without the schedule."""
    method = decode_config.get("method")
    if method not in VLLM_PREFILL_DRAFT_METHODS:
        return None, [
            f"note: vLLM's {method} drafts on the decode pool alone (NIXL's compatibility "
            "hash leaves it out)"
        ]
    k = decode_config["num_speculative_tokens"] if method in VLLM_BLOCK_METHODS else 1
    config = {key: decode_config[key] for key in ("method", "model") if key in decode_config}
    config["num_speculative_tokens"] = k
    return config, [
        f"note: vLLM's {method} on the prefill pool too (same method and model, "
        f"num_speculative_tokens {k}): NIXL refuses the handshake between prefill and decode "
        "servers whose hidden-state drafters differ"
    ]


def vllm_disagg(
    model: str,
    prefill: Pool,
    decode: Pool,
    *,
    speculative_config: dict | None = None,
    router: str = "round-robin",
    router_host: str = "0.0.0.0",
    router_port: int = 8000,
) -> FleetExport:
    """vLLM 0.33.0 prefill and decode servers with NixlConnector, vllm-router pairing them
    and llm-d's configuration (module docstring). ``speculative_config``: the decode pool's
    ``--speculative-config`` object as the single-replica export builds it
    (:func:`allocator.engines.vllm.speculative_config` or ``schedule_config``; ``None``:
    no speculation). Ports default to 8100 (prefill) and 8200 (decode), as in vLLM's
    NixlConnector examples. Refuses (a :class:`ParameterError` naming the field) a pool of
    0 replicas, an unknown router (listing the known ones), bad hosts or ports."""
    router = check_router(router)
    model = text_field(model, "model")
    p_hosts, p_port = _pool(prefill, "prefill", 8100)
    d_hosts, d_port = _pool(decode, "decode", 8200)
    notes: list[str] = []
    prefill_spec = None
    if speculative_config is not None:
        if not isinstance(speculative_config, dict) or "method" not in speculative_config:
            raise ParameterError(
                "speculative_config", "must be vLLM's --speculative-config object (with method)"
            )
        prefill_spec, more = vllm_prefill_speculation(speculative_config)
        notes += more

    def serve(pool: Pool, host: str, port: int, role: str, spec: dict | None) -> Command:
        words = [
            "vllm", "serve", model,
            "--port", str(port),
            "--tensor-parallel-size", str(int(pool.tp)),
            "--max-num-seqs", str(int(pool.max_num_seqs)),
        ]  # fmt: skip
        if pool.max_num_batched_tokens is not None:
            words += ["--max-num-batched-tokens", str(int(pool.max_num_batched_tokens))]
        kv = {"kv_connector": "NixlConnector", "kv_role": role}
        words += ["--kv-transfer-config", config_text(kv).rstrip("\n")]
        if spec is not None:
            words += ["--speculative-config", config_text(spec).rstrip("\n")]
        return Command(tuple(words), (("VLLM_NIXL_SIDE_CHANNEL_HOST", host),), host)

    prefills = tuple(serve(prefill, h, p_port, "kv_producer", prefill_spec) for h in p_hosts)
    decodes = tuple(serve(decode, h, d_port, "kv_consumer", speculative_config) for h in d_hosts)
    policy, exact = VLLM_ROUTER_POLICY[router]
    words = ["vllm-router", "--vllm-pd-disaggregation", "--kv-connector", "nixl"]
    words += ["--host", _host(router_host, "router_host")]
    words += ["--port", str(port_field(router_port, "router_port"))]
    for h in p_hosts:
        words += ["--prefill", _url(h, p_port)]
    for h in d_hosts:
        words += ["--decode", _url(h, d_port)]
    words += ["--policy", policy]
    if not exact:
        notes.append(
            f"note: vllm-router's {policy} is the closest of its policies to {router}, not "
            "the same rule; llm-d's configuration (router_config) has the simulated one"
        )
    config, more = llm_d_config(router, disaggregated=True)
    notes += more
    return FleetExport("vllm", prefills, decodes, Command(tuple(words)), config, tuple(notes))


# ---------------------------------------------------------------- SGLang
def _strip_running(flags: Sequence[str]) -> list[str]:
    """``flags`` without ``--max-running-requests N`` (each pool sets its own)."""
    out: list[str] = []
    skip = False
    for w in flags:
        if skip:
            skip = False
        elif w == "--max-running-requests":
            skip = True
        else:
            out.append(str(w))
    return out


def _algorithm(flags: Sequence[str]) -> str | None:
    """The value of ``--speculative-algorithm`` in ``flags``."""
    for i, w in enumerate(flags[:-1]):
        if w == "--speculative-algorithm":
            return str(flags[i + 1])
    return None


def sglang_disagg(
    model: str,
    prefill: Pool,
    decode: Pool,
    *,
    speculative_flags: Sequence[str] | None = None,
    router: str = "round-robin",
    transfer_backend: str = "mooncake",
    ib_device: str | None = None,
    bootstrap_port: int = 8998,
    router_host: str = "0.0.0.0",
    router_port: int = 8000,
) -> FleetExport:
    """SGLang 0.5.23 prefill and decode servers and sglang-router 0.3.2 pairing them
    (module docstring). ``speculative_flags``: the decode pool's speculative flags as the
    single-replica export builds them (:func:`allocator.engines.sglang.launch_flags` or
    ``eagle_flags``; ``None``: no speculation; a ``--max-running-requests`` in them is
    replaced by each pool's ``max_num_seqs``). ``transfer_backend``: one of SGLang's
    (``mooncake``, ``nixl``, ...); ``ib_device``: the InfiniBand device(s), where the
    backend should not choose. Ports default to 30000 on every replica (SGLang's) and
    ``bootstrap_port`` on prefill. ``max_num_batched_tokens`` is not exported (vLLM's
    setting). Refuses as :func:`vllm_disagg` does, and an unknown backend."""
    router = check_router(router)
    model = text_field(model, "model")
    p_hosts, p_port = _pool(prefill, "prefill", 30000)
    d_hosts, d_port = _pool(decode, "decode", 30000)
    if transfer_backend not in SGLANG_TRANSFER_BACKENDS:
        raise ParameterError(
            "transfer_backend",
            f"{transfer_backend!r} is not one of {', '.join(SGLANG_TRANSFER_BACKENDS)}",
        )
    boot = port_field(bootstrap_port, "bootstrap_port")
    notes: list[str] = []
    spec = _strip_running(speculative_flags) if speculative_flags else []
    algorithm = _algorithm(spec)
    if spec and algorithm is None:
        raise ParameterError("speculative_flags", "has no --speculative-algorithm")
    prefill_spec = spec if algorithm in SGLANG_PREFILL_DRAFT_ALGORITHMS else []
    if spec:
        notes.append(
            f"note: SGLang's {algorithm} on the prefill pool too: its decode reads the draft "
            "state the prefill server computes"
            if prefill_spec
            else f"note: SGLang's {algorithm} drafts on the decode pool alone"
        )

    def launch(pool: Pool, host: str, port: int, role: str, flags: list[str]) -> Command:
        words = [
            "python", "-m", "sglang.launch_server",
            "--model-path", model,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tp-size", str(int(pool.tp)),
            "--max-running-requests", str(int(pool.max_num_seqs)),
            "--disaggregation-mode", role,
            "--disaggregation-transfer-backend", transfer_backend,
        ]  # fmt: skip
        if ib_device is not None:
            words += ["--disaggregation-ib-device", text_field(ib_device, "ib_device")]
        if role == "prefill":
            words += ["--disaggregation-bootstrap-port", str(boot)]
        return Command(tuple(words + flags), host=host)

    prefills = tuple(launch(prefill, h, p_port, "prefill", prefill_spec) for h in p_hosts)
    decodes = tuple(launch(decode, h, d_port, "decode", spec) for h in d_hosts)
    policy, exact = SGLANG_ROUTER_POLICY[router]
    words = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    words += ["--host", _host(router_host, "router_host")]
    words += ["--port", str(port_field(router_port, "router_port"))]
    for h in p_hosts:
        words += ["--prefill", _url(h, p_port), str(boot)]
    for h in d_hosts:
        words += ["--decode", _url(h, d_port)]
    words += ["--policy", *policy]
    if router == "session-affinity":
        notes.append(
            "note: sglang-router's manual policy keys a request by its x-smg-routing-key "
            "header: send the session id there"
        )
    if not exact:
        notes.append(
            f"note: sglang-router's {policy[0]} is the closest of its policies to {router}, "
            "not the same rule"
        )
    return FleetExport("sglang", prefills, decodes, Command(tuple(words)), None, tuple(notes))


#: SGLang 0.5.23's ``--disaggregation-transfer-backend`` choices
#: (``sglang/srt/arg_groups/choices.py``, ``DISAGG_TRANSFER_BACKEND_CHOICES``) but ``fake``,
#: which moves no KV and which a prefill server refuses
#: (``sglang/srt/arg_groups/pd_disaggregation_hook.py``, ``handle_pd_disaggregation``).
SGLANG_TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "mori", "mooncake_tcp")


__all__ = [
    "SGLANG_PREFILL_DRAFT_ALGORITHMS",
    "SGLANG_ROUTER_POLICY",
    "SGLANG_TRANSFER_BACKENDS",
    "VLLM_BLOCK_METHODS",
    "VLLM_PREFILL_DRAFT_METHODS",
    "VLLM_ROUTER_POLICY",
    "Command",
    "FleetExport",
    "Pool",
    "sglang_disagg",
    "vllm_disagg",
    "vllm_prefill_speculation",
]
