"""Fleet exports parsed by the engines' and routers' own parsers, where installed.

Each test imports only the release's argument-parsing module and is skipped, with the
reason, when the package is not installed: vllm-router 0.1.17 and sglang-router 0.3.2
(``*/router_args.py``: ``RouterArgs.add_cli_args`` and ``from_cli_args``; they need their
Rust extension, nothing else), vLLM 0.33.0 (``vllm/entrypoints/common/cli_args.py``
``make_arg_parser``; needs torch) and SGLang 0.5.23 (``sglang/srt/server_args.py``
``ServerArgs.add_cli_args``; needs msgspec, orjson and torch). The always-run check of the
same commands against the flags extracted from these releases is
``tests/unit/engines/test_fleet_exports.py``.
"""

import argparse
import json
import shlex

import pytest

from allocator.engines import Pool, sglang_disagg, vllm_disagg
from allocator.engines.sglang import launch_flags
from allocator.engines.vllm import speculative_config
from allocator.io.spec import Drafter
from allocator.sim.routers import ROUTERS

MODEL = "org/target-70b"
EAGLE3 = Drafter(name="e3", acceptance=[0.8], unit_cost=0.05, method="eagle3", model="org/e3")
PREFILL = Pool(2, 4, 64, hosts=("10.0.0.1", "10.0.0.2"))
DECODE = Pool(3, 8, 256, 8192, hosts=("10.0.1.1", "10.0.1.2", "10.0.1.3"))


def argv_of(line: str) -> list[str]:
    """A shell line's argv, its leading ``NAME=value`` assignments dropped."""
    words = shlex.split(line)
    while "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return words


def router_args(module: str, reason: str):
    """``RouterArgs`` of ``module``, or skip with ``reason``."""
    return pytest.importorskip(module, reason=reason).RouterArgs


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_vllm_router_parses_the_pairing_command(router):
    args_cls = router_args("vllm_router.router_args", "vllm-router 0.1.17 is not installed")
    fleet = vllm_disagg(MODEL, PREFILL, DECODE, router=router)
    parser = argparse.ArgumentParser(exit_on_error=False)
    args_cls.add_cli_args(parser)
    args = args_cls.from_cli_args(parser.parse_args(argv_of(fleet.router.line())[1:]))
    assert args.vllm_pd_disaggregation
    assert args.prefill_urls == [(f"http://{h}:8100", None) for h in PREFILL.hosts]
    assert args.decode_urls == [f"http://{h}:8200" for h in DECODE.hosts]
    assert args.kv_connector == "nixl"


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_sglang_router_parses_the_pairing_command(router):
    args_cls = router_args("sglang_router.router_args", "sglang-router 0.3.2 is not installed")
    fleet = sglang_disagg(MODEL, PREFILL, DECODE, router=router)
    parser = argparse.ArgumentParser(exit_on_error=False)
    args_cls.add_cli_args(parser)
    args = args_cls.from_cli_args(parser.parse_args(argv_of(fleet.router.line())[3:]))
    assert args.pd_disaggregation
    assert args.prefill_urls == [(f"http://{h}:30000", 8998) for h in PREFILL.hosts]
    assert args.decode_urls == [f"http://{h}:30000" for h in DECODE.hosts]


def test_vllm_serve_parses_every_replica():
    cli_args = pytest.importorskip(
        "vllm.entrypoints.common.cli_args", reason="vLLM 0.33.0 (with torch) is not installed"
    )
    argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")
    spec, _ = speculative_config(EAGLE3, 3)
    fleet = vllm_disagg(MODEL, PREFILL, DECODE, speculative_config=spec)
    parser = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser())
    for role, commands in (("kv_producer", fleet.prefill), ("kv_consumer", fleet.decode)):
        for c in commands:
            args = parser.parse_args(argv_of(c.line())[2:])
            assert args.model_tag == MODEL
            kv = args.kv_transfer_config
            assert getattr(kv, "kv_role", None) or json.loads(kv)["kv_role"] == role
            assert args.speculative_config["method"] == "eagle3"


def test_sglang_launch_server_parses_every_replica():
    server_args = pytest.importorskip(
        "sglang.srt.server_args", reason="SGLang 0.5.23 (with torch) is not installed"
    )
    flags, _ = launch_flags(EAGLE3, 3, batch=256)
    fleet = sglang_disagg(MODEL, PREFILL, DECODE, speculative_flags=flags, transfer_backend="nixl")
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    for mode, pool, commands in (
        ("prefill", PREFILL, fleet.prefill),
        ("decode", DECODE, fleet.decode),
    ):
        for c in commands:
            ns = parser.parse_args(argv_of(c.line())[3:])
            assert ns.disaggregation_mode == mode
            assert ns.disaggregation_transfer_backend == "nixl"
            assert ns.tp_size == pool.tp and ns.max_running_requests == pool.max_num_seqs
            assert ns.speculative_algorithm == "EAGLE3"
