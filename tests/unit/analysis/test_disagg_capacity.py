"""The P:D split capacity finds for a rate (:mod:`allocator.analysis.disagg_capacity`)
against brute force: every split up to the bound simulated with ``bench``, the answer
picked by the rule written here (fewest replicas, then the least largest SLO ratio, then
fewer prefill replicas), and its ``bench`` command giving its metrics."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from allocator import api
from allocator.analysis import request_source
from allocator.analysis.disagg_capacity import least_prefill_replicas
from allocator.exceptions import InputError
from allocator.sim import metric
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

MODEL = {
    "params_b": 8.030261248,
    "embedding_params_b": 0.525336576,
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype": "bf16",
    "kv_dtype": "bf16",
}
DATA = rp.data(model=MODEL, hardware={"gpu": "h100-sxm", "count": 2})
SLOS = {"p90_ttft_ms": 150.0, "mean_tpot_ms": 14.0}
RATE = 40.0
RUN = {"input_len": 1500, "output_len": 40, "num_prompts": 120, "seed": 3}
SEQS = {"prefill_max_num_seqs": 4, "decode_max_num_seqs": 16}
BOUND = 6


def brute_force() -> tuple[int, int]:
    best = None
    for p in range(1, BOUND):
        for d in range(1, BOUND - p + 1):
            common = dict(drafters=["eagle"], k=2, prefill_replicas=p, decode_replicas=d)
            at_rate = api.bench(DATA, request_rate=RATE, **common, **RUN, **SEQS)
            values = {key: metric(at_rate.result, key) for key in SLOS}
            if any(values[key] > ceiling for key, ceiling in SLOS.items()):
                continue
            at_once = api.bench(DATA, request_rate=float("inf"), **common, **RUN, **SEQS)
            if at_once.metrics["request_throughput"] < RATE:
                continue
            worst = max(values[key] / ceiling for key, ceiling in SLOS.items())
            key = (p + d, worst, p)
            if best is None or key < best[0]:
                best = (key, (p, d))
    assert best is not None
    return best[1]


def test_the_split_is_brute_forces():
    found = api.size_disaggregated_for_rate(
        DATA, RATE, [f"{k}={v}" for k, v in SLOS.items()], drafters=["eagle"], k=2,
        max_total=BOUND, **RUN, **SEQS,
    )  # fmt: skip
    want = brute_force()
    assert (found.prefill_replicas, found.decode_replicas) == want
    assert want[0] + want[1] > 2  # (a case where the search has to look)
    totals = [t["prefill_replicas"] + t["decode_replicas"] for t in found.tried]
    assert totals == sorted(totals) and max(totals) == sum(want)


def test_the_command_gives_the_metrics(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(DATA))
    found = api.size_disaggregated_for_rate(
        str(path), RATE, [f"{k}={v}" for k, v in SLOS.items()], drafters=["eagle"], k=2,
        max_total=BOUND, **RUN, **SEQS,
    )  # fmt: skip
    words = shlex.split(found.bench_command)
    assert words[:2] == ["allocator", "bench"]
    r = run(*words[1:], "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "completed", "duration"):
        assert doc[key] == found.metrics[key], key


def test_no_split_within_the_bound():
    with pytest.raises(InputError) as e:
        api.size_disaggregated_for_rate(
            DATA, RATE, ["p90_ttft_ms=1"], drafters=["eagle"], k=2, max_total=3, **RUN, **SEQS
        )
    assert e.value.field == "slo" and "no split of at most 3 replicas" in e.value.message


def test_the_prefill_bound_by_hand_and_against_a_saturated_pool():
    """The prefill table's best rate is at its last point, 60 ms for 2,048 tokens: a prompt
    of 1,500 tokens takes at least 1,500 · 60 / 2,048 ms, so a replica completes at most
    2,048 / (1.5 · 60) ≈ 22.8 prompts/s; 40/s needs 2. A prefill pool of one replica sent
    every request at once completes fewer than that."""
    problem = api.load(DATA)
    source = request_source.request_source(120, input_len=1500, output_len=40)
    per_replica = 2048 / (1.5 * 60)
    assert least_prefill_replicas(problem, source, 40.0, 4) == 2
    assert least_prefill_replicas(problem, source, per_replica * 0.999, 4) == 1
    assert least_prefill_replicas(problem, source, per_replica * 1.001, 4) == 2
    shared = request_source.request_source(
        120, input_len=1500, output_len=40, shared_prefix_len=1000
    )
    assert least_prefill_replicas(problem, shared, 40.0, 4) == 1
    at_once = api.bench(DATA, request_rate=float("inf"), **RUN, **SEQS, **{
        "prefill_replicas": 1, "decode_replicas": 4})  # fmt: skip
    assert at_once.disagg["pools"]["prefill"]["request_throughput"] <= per_replica
