"""``allocator capacity --request-rate ... --router NAME``: the replica count found by
simulating the fleet behind the router, checked against ``bench`` runs of the fleet (the
count sustains the rate, one fewer does not), reproduced by the command its notes print,
and the same on a local Ray instance of two workers as in this process."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
import yaml

from allocator import api
from allocator.analysis.capacity.slo import SLACK, clock_ms, parse_slos
from allocator.exceptions import ParameterError
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

FIXED = {"input_len": 100, "output_len": 20, "num_prompts": 300}
SLOS = ["p99_ttft_ms=300", "p99_tpot_ms=15"]
RATE = 60.0


def problem_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data()))
    return p


def sustains(path: Path, answer: dict, replicas: int, router: str) -> bool:
    """The fleet of ``replicas`` behind ``router`` meets every SLO at the rate (a bench
    run) and the rate is at most ``replicas`` saturations of one replica."""
    cfg = {"max_num_seqs": answer["max_num_seqs"], "seed": 0, **FIXED}
    if answer["drafters"]:
        cfg.update(drafters=answer["drafters"], k=answer["k"])
    run_ = api.bench(path, request_rate=RATE, replicas=replicas, router=router, **cfg)
    sat = api.bench(path, request_rate=math.inf, **cfg).metrics["request_throughput"]
    clock = clock_ms(run_.result)
    met = all(s.met(run_.metrics[s.key], clock) for s in parse_slos(SLOS))
    return met and RATE <= replicas * sat * (1 + SLACK)


@pytest.mark.parametrize("router", ["round-robin", "least-requests"])
def test_the_count_is_sustained_and_one_fewer_is_not(tmp_path, router):
    p = problem_file(tmp_path)
    args = ["--request-rate", RATE, *(x for s in SLOS for x in ("--slo", s))]
    args += ["--input-len", 100, "--output-len", 20, "--num-prompts", 300]
    args += ["--max-num-seqs", "8", "--workers", "1", "--router", router, "--json", "-"]
    r = run("capacity", p, *args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["router"] == router
    n = doc["replicas"]
    assert sustains(p, doc, n, router)
    if n > 1:
        assert not sustains(p, doc, n - 1, router)
    # the metrics are the fleet's: the printed bench command gives them
    line = next(x for x in doc["notes"] if "reproduce: " in x)
    words = shlex.split(line.split("reproduce: ", 1)[1])
    assert words[:3] == ["allocator", "bench", str(p)]
    b = run("bench", p, *words[3:], "--json", "-")
    assert b.exit_code == 0, b.output
    bench_doc = json.loads(b.stdout)
    for key, value in doc["metrics"].items():
        assert bench_doc[key] == value, key


def test_router_belongs_to_a_request_rate(tmp_path):
    p = problem_file(tmp_path)
    r = run("capacity", p, "--tokens-per-s", "1000", "--tpot-ms", "30", "--router", "least-kv")
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: --router: belongs to sizing for a request rate: give --request-rate"
    ]


def test_unknown_router_is_one_line(tmp_path):
    p = problem_file(tmp_path)
    r = run("capacity", p, "--request-rate", "5", "--slo", "p99_ttft_ms=300",
            "--input-len", "100", "--output-len", "20", "--router", "fastest")  # fmt: skip
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --router: unknown router 'fastest'")


@pytest.mark.slow
def test_a_search_behind_a_router_on_a_local_ray_of_two_workers_equals_the_serial_one():
    ray = pytest.importorskip("ray", reason="Ray is not installed (allocator[ray])")
    prob = rp.problem()
    args = dict(seed=1, max_num_seqs=[4, 16], router="least-requests", **FIXED)
    here = api.size_fleet_for_rate(prob, RATE, SLOS, workers=1, **args)
    try:
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        there = api.size_fleet_for_rate(prob, RATE, SLOS, ray="local", **args)
    except ParameterError as exc:
        if exc.field == "ray":
            pytest.skip(f"a local Ray instance cannot start here: {exc.message}")
        raise
    except Exception as exc:  # ray.init's own failures to start
        pytest.skip(f"a local Ray instance cannot start here: {type(exc).__name__}")
    finally:
        if ray.is_initialized():
            ray.shutdown()

    def answer(doc: dict) -> dict:  # the note on where and how many runs differs
        return {**doc, "notes": [n for n in doc["notes"] if "simulated runs" not in n]}

    assert answer(here.to_dict()) == answer(there.to_dict())
