"""Capacity for a request rate on a specs-only (roofline) problem, through the worker pool:
the problem pickles (its GPU's read-only tables), each worker receives it once, waves are
sized to the workers, and progress counts toward a total."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import yaml

from allocator import api
from allocator.analysis.capacity.workers import Workers
from allocator.analysis.limits import header_notes
from allocator.api import load
from allocator.exceptions import NotModelledError

ROOT = Path(__file__).resolve().parents[3]
ROOFLINE = ROOT / "problems" / "roofline-llama31-8b.yaml"
#: small enough to run in seconds, through every step of the search
SMALL = dict(input_len=200, output_len=30, num_prompts=30, max_num_seqs=[1, 2], seed=0)


def roofline_with_price() -> dict:
    data = yaml.safe_load(ROOFLINE.read_text())
    data["serving"]["gpu_cost_per_hour"] = 2.49
    return data


def test_a_problem_on_a_gpu_of_the_table_pickles():
    prob = load(ROOFLINE)
    back = pickle.loads(pickle.dumps(prob))
    assert back.serving.hardware.gpu == prob.serving.hardware.gpu
    assert dict(back.serving.hardware.gpu.dense_tflops) == dict(
        prob.serving.hardware.gpu.dense_tflops
    )


def test_the_roofline_problem_is_sized_on_worker_processes_as_in_this_process():
    data = roofline_with_price()
    seen: list[tuple[int, int]] = []
    here = api.size_fleet_for_rate(data, 4.0, ["p99_ttft_ms=1000"], workers=1, **SMALL)
    there = api.size_fleet_for_rate(
        data, 4.0, ["p99_ttft_ms=1000"], workers=2, progress=lambda d, t: seen.append((d, t)),
        **SMALL,
    )  # fmt: skip
    strip = ("simulated runs",)  # how many runs depends on how many ran at once

    def same(doc: dict) -> dict:
        return {**doc, "notes": [n for n in doc["notes"] if not any(s in n for s in strip)]}

    assert same(here.to_dict()) == same(there.to_dict())
    # progress: every job counted once, never past the total, which ends exact
    done = [d for d, _ in seen]
    assert done == sorted(done) and sorted(set(done)) == list(range(done[0], done[-1] + 1))
    assert all(d <= t for d, t in seen) and seen[-1][0] == seen[-1][1]


def square_plus(shared: int, x: int) -> int:
    return x * x + shared


def test_shared_context_is_sent_once_and_reaches_every_job():
    for workers in (1, 2):
        with Workers(workers) as pool:
            assert pool.map(square_plus, range(5), 10) == [x * x + 10 for x in range(5)]
            assert pool.wave == workers


# ---------------------------------------------------------------- specs only, end to end
def without(data: dict, *path: str) -> dict:
    """``data`` with the key at ``path`` removed (a deep copy)."""
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


@pytest.mark.parametrize("name", ["capacity-70b.yaml", "requests-70b.yaml"])
def test_schedule_runs_on_the_bundled_70b_files_leaving_out_untimed_batch_sizes(name):
    sched = api.schedule(ROOT / "problems" / name)
    assert 50 not in [int(b) for b in sched.batch]
    assert any(n.startswith("batch 50 left out: no configuration") for n in sched.notes)


def test_a_missing_drafter_architecture_is_named_as_the_cause():
    data = without(yaml.safe_load(ROOFLINE.read_text()), "serving", "roofline")
    with pytest.raises(NotModelledError) as exc:
        api.schedule(data)
    assert exc.value.field == "drafters[eagle1].architecture"
    with pytest.raises(NotModelledError) as exc:
        api.bench(data, drafters=["eagle1"], k=2, input_len=100, output_len=10, num_prompts=3)
    assert exc.value.field == "drafters[eagle1].architecture"


def test_bench_derives_the_kv_cache_from_the_specs():
    data = without(yaml.safe_load(ROOFLINE.read_text()), "serving", "scheduler", "kv_cache_tokens")
    result = api.bench(data, input_len=100, output_len=10, num_prompts=3)
    # the file's header derives 57,539,477,504 / 131,072 = 438,991 tokens
    assert result.scheduler.kv_cache_tokens == 438_991
    assert any(n.startswith("KV cache 438,991 tokens, from the specs") for n in result.notes)


# ---------------------------------------------------------------- where the numbers come from
def test_a_specs_only_answer_says_it_is_an_upper_bound_and_its_lengths_are_fixed():
    data = roofline_with_price()
    for result in (
        api.bench(data, drafters=["eagle1"], k=2, input_len=100, output_len=10, num_prompts=3),
        api.size_fleet_for_rate(data, 4.0, ["p99_ttft_ms=1000"], workers=1, **SMALL),
    ):
        notes = result.to_dict()["notes"]
        assert any("UPPER BOUND ON SPEED" in n for n in notes)
        assert any(n.startswith("lengths taken as fixed") for n in notes)


def test_a_fitted_efficiency_at_its_limit_is_named():
    data = roofline_with_price()
    data["serving"]["roofline"]["mem_eff"] = 0.99997
    data["serving"]["calibrated_from"] = {"batch": [1, 64], "k": [0, 3], "rows": 12}
    notes = api.bench(data, input_len=100, output_len=10, num_prompts=3).notes
    assert any(
        n.startswith("serving.roofline.mem_eff = 0.99997 sits at its limit of 1") for n in notes
    )
    assert not any("UPPER BOUND" in n for n in notes)


def test_the_70b_headers_assumptions_and_one_value_acceptance_reach_the_answer():
    path = ROOT / "problems" / "requests-70b.yaml"
    assert header_notes(path) == [
        f"numbers derived under assumptions the header of {path} states (A1 verification cost, "
        "A2 draft cost): not measurements; read them before trusting the answer (allocator "
        "calibrate replaces them with measured runs)"
    ]
    result = api.bench(path, drafters=["eagle3"], k=3, max_num_seqs=10, input_len=100,
                       output_len=10, num_prompts=3)  # fmt: skip
    assert any(
        n.startswith("eagle3's acceptance is one value for every position") for n in result.notes
    )


def test_a_ceiling_equal_to_the_lowest_value_reached_is_met():
    # 82.46 ms is the prefill of 1000 tokens (serving.prefill_ms): the TTFT of a request
    # that meets no other; the simulated clock gives it as 82.46000000508502
    result = api.size_fleet_for_rate(
        ROOT / "problems" / "requests-70b.yaml", 0.5, ["p99_ttft_ms=82.46"], input_len=1000,
        output_len=50, num_prompts=200, max_num_seqs=[1], workers=1,
    )  # fmt: skip
    assert result.best.metrics["p99_ttft_ms"] == pytest.approx(82.46, rel=1e-9)


def test_the_bundled_roofline_problem_answers_without_a_price():
    """A planner asking how many GPUs needs no price: the bundled specs-only file (no
    serving.gpu_cost_per_hour) is sized on the worker pool by GPU count, and a note says
    the costs are GPU-hours. With a price of p $/h per one-GPU replica the fleet is the
    same and its cost p times the GPU count."""
    plain = api.size_fleet_for_rate(ROOFLINE, 4.0, ["p99_ttft_ms=1000"], workers=2, **SMALL)
    priced = api.size_fleet_for_rate(
        roofline_with_price(), 4.0, ["p99_ttft_ms=1000"], workers=2, **SMALL
    )
    doc, ref = plain.to_dict(), priced.to_dict()
    assert any("ranked by GPU count" in n for n in doc["notes"])
    assert not any("ranked by GPU count" in n for n in ref["notes"])
    assert (doc["replicas"], doc["gpus"]) == (ref["replicas"], ref["gpus"])
    assert doc["cost_per_hour"] == doc["gpus"]  # one GPU-hour per GPU per hour
    assert ref["cost_per_hour"] == pytest.approx(2.49 * ref["gpus"])


def test_a_thin_tail_is_said():
    """P99 of 300 requests rests on 300 · 1% = 3 of them, fewer than MIN_TAIL (20): said;
    2,000 leave 20: not; a mean reads no tail."""
    from allocator.analysis.capacity.slo import MIN_TAIL, parse_slos, thin_tail

    p99 = parse_slos(["p99_ttft_ms=500"])
    assert "about 3 of them lie beyond p99" in thin_tail(p99, 300)
    assert thin_tail(p99, MIN_TAIL * 100) == ""
    assert thin_tail(parse_slos(["mean_ttft_ms=5"]), 10) == ""
