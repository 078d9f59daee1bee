"""``allocator bench --replicas N --router NAME``: one replica is today's bench, document
for document; a fleet's JSON has the fleet's metrics at the top, ``router`` and one entry
per replica whose requests add up to the run's; bad input is one line, exit 2, nothing
written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from allocator.cli.common import ROUTER_NAMES
from allocator.sim.routers import ROUTERS
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

FIXED = ["--input-len", "100", "--output-len", "20", "--num-prompts", "60"]


def problem_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data()))
    return p


def bench_doc(*args: object) -> dict:
    r = run("bench", *args, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    doc.pop("date")
    return doc


def test_one_replica_is_todays_bench(tmp_path):
    p = problem_file(tmp_path)
    common = [p, "-d", "eagle", "-k", "2", "--request-rate", "30", *FIXED, "--seed", "4"]
    today = bench_doc(*common)
    assert bench_doc(*common, "--replicas", "1") == today
    assert bench_doc(*common, "--replicas", "1", "--router", "least-kv") == today
    assert "replicas" not in today and "router" not in today


@pytest.mark.parametrize("router", ["round-robin", "least-requests", "least-kv"])
def test_a_fleet_document(tmp_path, router):
    p = problem_file(tmp_path)
    doc = bench_doc(p, "--request-rate", "40", *FIXED, "--replicas", "3", "--router", router)
    assert doc["router"] == router
    assert doc["label"].endswith(f"3 replicas behind {router}")
    parts = doc["replicas"]
    assert [e["replica"] for e in parts] == [0, 1, 2]
    assert sum(e["num_prompts"] for e in parts) == 60
    assert sum(e["completed"] for e in parts) == doc["completed"] == 60
    assert sum(e["total_output_tokens"] for e in parts) == doc["total_output_tokens"]
    assert max(e["duration"] for e in parts) == doc["duration"]
    keys = {k for k in doc if k.endswith("_ms")}
    for e in parts:
        assert keys <= set(e)
    if router == "round-robin":
        assert [e["num_prompts"] for e in parts] == [20, 20, 20]


def test_round_robin_is_the_default_past_one_replica(tmp_path):
    p = problem_file(tmp_path)
    doc = bench_doc(p, "--request-rate", "40", *FIXED, "--replicas", "2")
    assert doc["router"] == "round-robin"


def test_the_help_names_every_router():
    assert ROUTER_NAMES == tuple(ROUTERS)
    r = run("bench", "--help")
    assert "--router" in r.stdout and "--replicas" in r.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--replicas", "2", "--router", "fastest"], "--router: unknown router 'fastest': one of"),
        (["--replicas", "0"], "--replicas: must be"),
        (["--replicas", "100000"], "--replicas: at most 1,024 in one simulated fleet (each"),
        (["--replicas", "2", "--router", "prefix-affinity"], "--router: prefix-affinity needs"),
        (["--replicas", "2", "--router", "session-affinity"], "--router: session-affinity needs"),
        (["--replicas", "2", "--max-concurrency", "4"], "--max-concurrency: is not modelled"),
    ],
)
def test_bad_input(tmp_path, args, says):
    p = problem_file(tmp_path)
    out = tmp_path / "b.json"
    r = run("bench", p, *FIXED, *args, "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.output
    assert not out.exists()


def test_a_fleet_runs_the_files_scheduling(tmp_path):
    """vLLM's default (asynchronous scheduling, the file's default) is what a fleet's
    replicas play, as one replica does, with no note; --no-async-scheduling makes the same
    fleet synchronous (a different run) and --async-scheduling is the default's run."""
    p = problem_file(tmp_path)
    args = [p, "--request-rate", "40", *FIXED, "--replicas", "2"]
    fleet = bench_doc(*args)
    assert fleet["async_scheduling"] is True
    assert not any("synchronous" in n for n in fleet["notes"])
    assert bench_doc(*args, "--async-scheduling") == fleet
    sync = bench_doc(*args, "--no-async-scheduling")
    assert sync["async_scheduling"] is False
    assert sync["notes"] == fleet["notes"]
    assert sync["mean_ttft_ms"] != fleet["mean_ttft_ms"]


@pytest.mark.parametrize(
    "workload, router",
    [
        (["--shared-prefix-len", "64"], "prefix-affinity"),
        (["--turns", "3", "--think-time", "0.2"], "session-affinity"),
    ],
)
def test_a_fleet_plays_shared_prompts_and_sessions(tmp_path, workload, router):
    """What requests share reaches a fleet's replicas: behind prefix-affinity one shared
    prefix sends every request to one replica, so the fleet is that replica's run, metrics
    and hit rate those of one replica alone; behind session-affinity each replica
    sees its sessions' turns hit their earlier turns, so the fleet hits; with caching
    off nothing hits."""
    p = problem_file(tmp_path)
    common = [p, "--request-rate", "20", *FIXED, "--seed", "3", *workload]
    fleet = bench_doc(*common, "--replicas", "3", "--router", router)
    assert fleet["prefix_cache_hit_rate"] > 0
    if router == "prefix-affinity":
        alone = bench_doc(*common)
        assert [e["num_prompts"] for e in fleet["replicas"]].count(60) == 1
        for key in ("prefix_cache_hit_rate", "mean_ttft_ms", "p99_e2el_ms", "duration"):
            assert fleet[key] == pytest.approx(alone[key], rel=1e-12), key
    off = bench_doc(*common, "--replicas", "3", "--router", router, "--no-prefix-caching")
    assert off["prefix_cache_hit_rate"] == 0
