"""Fleet exports (:mod:`allocator.engines.disagg_exports`, :mod:`allocator.engines.routers`) checked
against the flags, choices and plugin names extracted from the releases, always run.

``tests/support/fixtures/fleet_flags.json`` holds what was read, with the file each list
comes from:

- vLLM 0.33.0 (PyPI wheel): ``vllm serve``'s flags from ``vllm/engine/arg_utils.py``
  (``EngineArgs.add_cli_args``) and ``vllm/entrypoints/common/cli_args.py``
  (``FrontendArgs``); ``KVTransferConfig``'s fields and ``kv_role`` literals from
  ``vllm/config/kv_transfer.py``; connector names from
  ``vllm/distributed/kv_transfer/kv_connector/factory.py``;
- SGLang 0.5.23 (PyPI wheel): ``launch_server``'s flags from
  ``sglang/srt/arg_groups/fields/*.py``; the transfer backends from ``choices.py``;
- sglang-router 0.3.2 and vllm-router 0.1.17 (PyPI wheels): ``*/router_args.py``;
- vLLM production-stack ``vllm-stack-0.1.12`` (commit ``66b60661``):
  ``src/vllm_router/parsers/parser.py``;
- llm-d-inference-scheduler v0.8.0 (commit ``05c91f0d``) ``pkg/epp/framework/plugins/
  register.go`` and gateway-api-inference-extension v1.5.0 (commit ``df9f8909``)
  ``cmd/epp/runner/runner.go`` (plugin types), ``apix/config/v1alpha1/
  endpointpickerconfig_types.go`` (the config's fields).

Which scorer each router must use is the table :data:`EXPECTED_SCORERS`, written from the
scorers' sources (cited in ``allocator/sim/routers/*.py``), not from the module under test.
"""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from allocator.engines import (
    ROUTER_NAMES,
    Pool,
    llm_d_config,
    production_stack_command,
    sglang_disagg,
    vllm_disagg,
)
from allocator.engines.sglang import launch_flags
from allocator.engines.vllm import schedule_config, speculative_config
from allocator.exceptions import ParameterError
from allocator.io.spec import Drafter
from allocator.sim.routers import ROUTERS
from tests.support.engine_schemas import check_sglang, check_vllm

FLAGS = json.loads(
    (Path(__file__).resolve().parents[2] / "support/fixtures/fleet_flags.json").read_text()
)
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
EAGLE3 = Drafter(name="e3", acceptance=[0.8, 0.6], unit_cost=0.05, method="eagle3", model="org/e3")
NGRAM = Drafter(name="ng", acceptance=[0.5], unit_cost=0.01, method="ngram", prompt_lookup_max=4)
MTP = Drafter(name="mtp", acceptance=[0.7], unit_cost=0.05, method="mtp")

#: The llm-d scorers (plugin type: weight) each simulated rule is, from the scorers' code:
#: active-request-scorer ranks by the router's in-flight count, kv-cache-utilization-scorer
#: by 1 - KV usage, prefix-cache-scorer by the prefix blocks an endpoint was sent,
#: session-affinity-scorer 1 for the session's endpoint; round-robin has no scorer.
EXPECTED_SCORERS = {
    "round-robin": {},
    "least-requests": {"active-request-scorer": 1},
    "least-kv": {"kv-cache-utilization-scorer": 1},
    "prefix-affinity": {"prefix-cache-scorer": 2, "active-request-scorer": 1},
    "session-affinity": {"session-affinity-scorer": 2, "active-request-scorer": 1},
}


def split(line: str) -> tuple[dict[str, str], list[str]]:
    """A shell line as its leading ``NAME=value`` assignments and its argv."""
    words = shlex.split(line)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def options(argv: list[str], start: int) -> dict[str, list[list[str]]]:
    """``--flag values...`` of ``argv[start:]``: each flag's occurrences, each a list of
    the words up to the next flag."""
    out: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    for w in argv[start:]:
        if w.startswith("--"):
            current = []
            out.setdefault(w, []).append(current)
        else:
            assert current is not None, argv
            current.append(w)
    return out


def one(opts: dict, flag: str) -> str:
    (values,) = opts[flag]
    (value,) = values
    return value


# ---------------------------------------------------------------- vLLM
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_vllm_commands_use_only_flags_of_the_release(router):
    spec, _ = speculative_config(EAGLE3, 3)
    fleet = vllm_disagg(
        MODEL, Pool(2, 4, 64), Pool(3, 8, 256, 8192), speculative_config=spec, router=router
    )
    assert len(fleet.prefill) == 2 and len(fleet.decode) == 3
    serve_flags = set(FLAGS["vllm"]["serve_flags"])
    for role, pool, commands in (
        ("kv_producer", Pool(2, 4, 64), fleet.prefill),
        ("kv_consumer", Pool(3, 8, 256, 8192), fleet.decode),
    ):
        hosts = []
        for c in commands:
            env, argv = split(c.line())
            assert set(env) <= set(FLAGS["vllm"]["env"])
            hosts.append(env["VLLM_NIXL_SIDE_CHANNEL_HOST"])
            assert argv[:3] == ["vllm", "serve", MODEL]
            opts = options(argv, 3)
            assert set(opts) <= serve_flags, set(opts) - serve_flags
            assert all(len(v) == 1 for v in opts.values()), opts  # each flag once
            assert int(one(opts, "--tensor-parallel-size")) == pool.tp
            assert int(one(opts, "--max-num-seqs")) == pool.max_num_seqs
            if pool.max_num_batched_tokens is None:
                assert "--max-num-batched-tokens" not in opts
            else:
                assert int(one(opts, "--max-num-batched-tokens")) == pool.max_num_batched_tokens
            kv = json.loads(one(opts, "--kv-transfer-config"))
            assert set(kv) <= set(FLAGS["vllm"]["kv_transfer_fields"])
            assert kv["kv_connector"] in FLAGS["vllm"]["kv_connectors"]
            assert kv["kv_connector"] == "NixlConnector"
            assert kv["kv_role"] in FLAGS["vllm"]["kv_roles"] and kv["kv_role"] == role
            check_vllm(json.loads(one(opts, "--speculative-config")))
        assert len(set(hosts)) == len(hosts)
    env, argv = split(fleet.router.line())
    assert not env and argv[0] == "vllm-router"
    opts = options(argv, 1)
    assert set(opts) <= set(FLAGS["vllm_router"]["flags"]), set(opts)
    assert one(opts, "--policy") in FLAGS["vllm_router"]["policies"]
    assert one(opts, "--kv-connector") in FLAGS["vllm_router"]["kv_connectors"]
    assert opts["--vllm-pd-disaggregation"] == [[]]
    # the router names every replica, at its host and port
    ports = {"prefill": 8100, "decode": 8200}
    for flag, commands, role in (
        ("--prefill", fleet.prefill, "prefill"),
        ("--decode", fleet.decode, "decode"),
    ):
        urls = [v[0] for v in opts[flag]]
        assert urls == [f"http://{c.host}:{ports[role]}" for c in commands]
        for c, url in zip(commands, urls, strict=True):
            assert f"--port {url.rsplit(':', 1)[1]}" in c.line()


def test_vllm_speculation_plans_decode_and_keeps_prefill_compatible():
    """The decode pool runs the planned config as given; the prefill pool runs the same
    hidden-state drafter at one token (vLLM's P/D EAGLE-3 test), nothing for n-gram."""
    spec, _ = speculative_config(EAGLE3, 5)
    fleet = vllm_disagg(MODEL, Pool(1, 2, 8), Pool(1, 2, 8), speculative_config=spec)
    (d,) = fleet.decode
    (p,) = fleet.prefill
    d_spec = json.loads(one(options(split(d.line())[1], 3), "--speculative-config"))
    p_spec = json.loads(one(options(split(p.line())[1], 3), "--speculative-config"))
    assert d_spec == {"method": "eagle3", "model": "org/e3", "num_speculative_tokens": 5}
    assert p_spec == {"method": "eagle3", "model": "org/e3", "num_speculative_tokens": 1}

    mtp, _ = speculative_config(MTP, 2)
    fleet = vllm_disagg(MODEL, Pool(1, 2, 8), Pool(1, 2, 8), speculative_config=mtp)
    p_spec = json.loads(one(options(split(fleet.prefill[0].line())[1], 3), "--speculative-config"))
    assert p_spec == {"method": "mtp", "num_speculative_tokens": 1}

    ngram, _ = speculative_config(NGRAM, 3)
    fleet = vllm_disagg(MODEL, Pool(1, 2, 8), Pool(1, 2, 8), speculative_config=ngram)
    assert "--speculative-config" not in split(fleet.prefill[0].line())[1]
    assert any("decode pool alone" in n for n in fleet.notes)

    fleet = vllm_disagg(MODEL, Pool(1, 2, 8), Pool(1, 2, 8))
    assert all("--speculative-config" not in c.line() for c in fleet.prefill + fleet.decode)


def test_vllm_schedule_stays_on_decode():
    rows = [{"batch": b, "drafters": ["e3"], "k": k} for b, k in ((1, 4), (8, 2), (32, 1))]
    spec, _ = schedule_config(rows, {"e3": EAGLE3})
    fleet = vllm_disagg(MODEL, Pool(1, 1, 32), Pool(2, 1, 32), speculative_config=spec)
    d_spec = json.loads(one(options(split(fleet.decode[1].line())[1], 3), "--speculative-config"))
    p_spec = json.loads(one(options(split(fleet.prefill[0].line())[1], 3), "--speculative-config"))
    assert d_spec == spec
    check_vllm(d_spec)
    assert "num_speculative_tokens_per_batch_size" not in p_spec
    check_vllm(p_spec, 1)


# ---------------------------------------------------------------- SGLang
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_sglang_commands_use_only_flags_of_the_release(router):
    flags, _ = launch_flags(EAGLE3, 3, batch=300)
    fleet = sglang_disagg(
        MODEL,
        Pool(2, 4, 64),
        Pool(3, 8, 256),
        speculative_flags=flags,
        router=router,
        transfer_backend="nixl",
        ib_device="mlx5_0,mlx5_1",
    )
    launch = set(FLAGS["sglang"]["launch_flags"])
    for mode, pool, commands in (
        ("prefill", Pool(2, 4, 64), fleet.prefill),
        ("decode", Pool(3, 8, 256), fleet.decode),
    ):
        for c in commands:
            env, argv = split(c.line())
            assert not env and argv[:3] == ["python", "-m", "sglang.launch_server"]
            opts = options(argv, 3)
            assert set(opts) <= launch, set(opts) - launch
            assert all(len(v) == 1 for v in opts.values()), opts
            assert one(opts, "--model-path") == MODEL
            assert one(opts, "--disaggregation-mode") == mode
            assert one(opts, "--disaggregation-mode") in FLAGS["sglang"]["disaggregation_modes"]
            backend = one(opts, "--disaggregation-transfer-backend")
            assert backend in FLAGS["sglang"]["transfer_backends"]
            assert one(opts, "--disaggregation-ib-device") == "mlx5_0,mlx5_1"
            assert int(one(opts, "--tp-size")) == pool.tp
            assert int(one(opts, "--max-running-requests")) == pool.max_num_seqs
            spec = argv[argv.index("--speculative-algorithm") :]
            settings = check_sglang([*spec, "--max-running-requests", str(pool.max_num_seqs)])
            assert (settings.algorithm, settings.steps, settings.topk) == ("EAGLE3", 3, 1)
            assert settings.max_running_requests == pool.max_num_seqs
    env, argv = split(fleet.router.line())
    assert argv[:3] == ["python", "-m", "sglang_router.launch_router"]
    opts = options(argv, 3)
    assert set(opts) <= set(FLAGS["sglang_router"]["flags"]), set(opts)
    assert one(opts, "--policy") in FLAGS["sglang_router"]["policies"]
    if "--assignment-mode" in opts:
        assert one(opts, "--assignment-mode") in FLAGS["sglang_router"]["assignment_modes"]
    assert [v for v in opts["--prefill"]] == [
        [f"http://{c.host}:30000", "8998"] for c in fleet.prefill
    ]
    assert [v for v in opts["--decode"]] == [[f"http://{c.host}:30000"] for c in fleet.decode]
    for c in fleet.prefill:
        assert one(options(split(c.line())[1], 3), "--disaggregation-bootstrap-port") == "8998"


def test_sglang_speculation_on_prefill_only_for_the_eagle_worker():
    ngram, _ = launch_flags(NGRAM, 4)
    fleet = sglang_disagg(MODEL, Pool(1, 1, 8), Pool(1, 1, 8), speculative_flags=ngram)
    assert "--speculative-algorithm" not in fleet.prefill[0].argv
    assert fleet.decode[0].argv[fleet.decode[0].argv.index("--speculative-algorithm") + 1] == (
        "NGRAM"
    )
    eagle, _ = launch_flags(EAGLE3, 2)
    fleet = sglang_disagg(MODEL, Pool(1, 1, 8), Pool(1, 1, 8), speculative_flags=eagle)
    p, d = fleet.prefill[0].argv, fleet.decode[0].argv
    assert p[p.index("--speculative-algorithm") :] == d[d.index("--speculative-algorithm") :]


# ---------------------------------------------------------------- llm-d and production-stack
@pytest.mark.parametrize("disaggregated", [False, True])
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_llm_d_config_is_the_schema_with_the_routers_scorers(router, disaggregated):
    text, notes = llm_d_config(router, disaggregated=disaggregated)
    doc = yaml.safe_load(text)
    spec = FLAGS["llm_d"]
    assert doc["apiVersion"] == spec["api_version"] and doc["kind"] == spec["kind"]
    assert set(doc) <= set(spec["config_fields"])
    declared = {}
    for plugin in doc["plugins"]:
        assert set(plugin) <= set(spec["plugin_fields"]), plugin
        assert plugin["type"] in spec["plugin_types"], plugin["type"]
        name = plugin.get("name", plugin["type"])
        assert name not in declared
        declared[name] = plugin
    names = [p["name"] for p in doc["schedulingProfiles"]]
    assert names == (["prefill", "decode"] if disaggregated else ["default"])
    used = set()
    for profile in doc["schedulingProfiles"]:
        assert set(profile) <= set(spec["profile_fields"])
        refs = profile["plugins"]
        for ref in refs:
            assert set(ref) <= set(spec["profile_plugin_fields"])
            assert ref["pluginRef"] in declared
            used.add(ref["pluginRef"])
        types = [declared[r["pluginRef"]]["type"] for r in refs]
        assert sum(t.endswith("-picker") for t in types) == 1, types
        scorers = {
            declared[r["pluginRef"]]["type"]: r.get("weight")
            for r in refs
            if declared[r["pluginRef"]]["type"].endswith("-scorer")
        }
        assert scorers == EXPECTED_SCORERS[router]
        if disaggregated:
            assert f"{profile['name']}-filter" in types
    handlers = [p for p in doc["plugins"] if p["type"].endswith("profile-handler")]
    assert len(handlers) == 1
    if disaggregated:
        (h,) = handlers
        assert h["type"] == "disagg-profile-handler"
        allowed = spec["disagg_profile_handler_parameters"]
        for key, value in h["parameters"].items():
            assert set(value) <= set(allowed[key])
        assert h["parameters"]["deciders"]["prefill"] in declared
        assert set(h["parameters"]["profiles"].values()) == set(names)
    # every declared plugin is used by a profile or a handler
    assert set(declared) - used <= {h["type"] for h in handlers} | {
        "disagg-headers-handler",
        "always-disagg-pd-decider",
    }
    assert bool(notes) == (router in ("round-robin", "prefix-affinity"))


def test_session_affinity_weights_keep_the_session_first():
    """The session scorer's weight exceeds what the other scorers (each in 0..1) can add,
    so the session's endpoint always wins, as the simulated rule keeps it."""
    doc = yaml.safe_load(llm_d_config("session-affinity", disaggregated=False)[0])
    refs = doc["schedulingProfiles"][0]["plugins"]
    weights = {r["pluginRef"]: r.get("weight", 0) for r in refs}
    others = sum(w for k, w in weights.items() if k != "session-affinity-scorer")
    assert weights["session-affinity-scorer"] > others


@pytest.mark.parametrize("router", ["round-robin", "prefix-affinity", "session-affinity"])
def test_production_stack_command_uses_only_its_flags(router):
    backends = ["http://r0:8000", "http://r1:8000", "http://r2:8000"]
    argv = production_stack_command(router, backends, MODEL)
    assert argv[0] == "vllm-router"
    opts = options(argv, 1)
    assert set(opts) <= set(FLAGS["production_stack"]["flags"]), set(opts)
    assert one(opts, "--routing-logic") in FLAGS["production_stack"]["routing_logic"]
    assert one(opts, "--static-backends").split(",") == backends
    assert one(opts, "--static-models").split(",") == [MODEL] * 3
    assert ("--session-key" in opts) == (router == "session-affinity")


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call",
    [
        lambda r: vllm_disagg(MODEL, Pool(1, 1, 1), Pool(1, 1, 1), router=r),
        lambda r: sglang_disagg(MODEL, Pool(1, 1, 1), Pool(1, 1, 1), router=r),
        lambda r: llm_d_config(r, disaggregated=True),
        lambda r: production_stack_command(r, ["http://r0:8000"], MODEL),
    ],
)
def test_an_unknown_router_is_refused_listing_the_known_ones(call):
    with pytest.raises(ParameterError) as e:
        call("least-latency")
    assert e.value.field == "router"
    for name in ROUTERS:
        assert name in str(e.value)
    assert ROUTER_NAMES == tuple(ROUTERS)


@pytest.mark.parametrize("export", [vllm_disagg, sglang_disagg])
@pytest.mark.parametrize(
    ("prefill", "decode", "field"),
    [
        (Pool(0, 1, 8), Pool(1, 1, 8), "prefill_replicas"),
        (Pool(1, 1, 8), Pool(0, 1, 8), "decode_replicas"),
        (Pool(1, 0, 8), Pool(1, 1, 8), "prefill_tp"),
        (Pool(1, 1, 8), Pool(1, 1, 0), "decode_max_num_seqs"),
        (Pool(2, 1, 8, hosts=("a",)), Pool(1, 1, 8), "prefill_hosts"),
        (Pool(1, 1, 8, hosts=("a/b",)), Pool(1, 1, 8), "prefill_hosts"),
        (Pool(1, 1, 8), Pool(1, 1, 8, port=70000), "decode_port"),
        (Pool(True, 1, 8), Pool(1, 1, 8), "prefill_replicas"),
    ],
)
def test_a_bad_pool_is_refused_naming_its_field(export, prefill, decode, field):
    with pytest.raises(ParameterError) as e:
        export(MODEL, prefill, decode)
    assert e.value.field == field


def test_other_bad_input_is_refused():
    with pytest.raises(ParameterError) as e:
        vllm_disagg("m\nrm -rf /", Pool(1, 1, 1), Pool(1, 1, 1))
    assert e.value.field == "model"
    with pytest.raises(ParameterError) as e:
        sglang_disagg(MODEL, Pool(1, 1, 1), Pool(1, 1, 1), transfer_backend="fake")
    assert e.value.field == "transfer_backend"
    with pytest.raises(ParameterError) as e:
        sglang_disagg(MODEL, Pool(1, 1, 1), Pool(1, 1, 1), speculative_flags=["--x", "1"])
    assert e.value.field == "speculative_flags"
    with pytest.raises(ParameterError) as e:
        vllm_disagg(MODEL, Pool(1, 1, 1), Pool(1, 1, 1), speculative_config={"k": 3})
    assert e.value.field == "speculative_config"
    for router in ("least-requests", "least-kv"):
        with pytest.raises(ParameterError, match="llm-d") as e:
            production_stack_command(router, ["http://r0:8000"], MODEL)
        assert e.value.field == "router"


def test_words_reach_the_shell_as_they_are():
    """A model path or host with shell syntax stays one word, never a command."""
    model = "/models/it's $(touch x) `y`; z"
    hosts = ("$(touch${IFS}x)", "h;ls")
    fleet = vllm_disagg(model, Pool(2, 1, 8, hosts=hosts), Pool(1, 1, 8))
    for c, host in zip(fleet.prefill, hosts, strict=True):
        env, argv = split(c.line())
        assert env == {"VLLM_NIXL_SIDE_CHANNEL_HOST": host}
        assert argv[2] == model
    urls = [v[0] for v in options(split(fleet.router.line())[1], 1)["--prefill"]]
    assert urls == [f"http://{h}:8100" for h in hosts]
    text = fleet.text()
    assert "\n# on $(touch${IFS}x):\n" in text and text.count("\n") == len(text.splitlines())


def test_the_guides_example_runs(capsys):
    """The fleet example of docs/guides/fronts.md runs and prints what the page says."""
    page = Path(__file__).resolve().parents[3] / "docs/guides/fronts.md"
    body = page.read_text().split("### Exports for a fleet", 1)[1]
    code = body.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, str(page), "exec"), {})
    out = capsys.readouterr().out
    assert "kv_producer" in out and "kv_consumer" in out and "vllm-router" in out
    assert "# on gpu-b:" in out and "# on prefill-1:" in out
    assert "active-request-scorer" in out and "session-affinity-scorer" in out
    assert "single-profile-handler" in out
