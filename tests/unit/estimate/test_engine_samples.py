"""The sample engine outputs in problems/measurements/ are what their seeded script
writes, and every reader's interval on them holds the truth they were drawn from."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from allocator.calibration.steady_state import steady_state
from allocator.estimate.bench_files import read_bench_files
from allocator.estimate.sglang_requests import estimate_sglang_requests
from allocator.estimate.vllm_requests import estimate_vllm_requests

HERE = Path(__file__).resolve().parents[3] / "problems" / "measurements"


def generator():
    spec = importlib.util.spec_from_file_location("engine_files", HERE / "generate_engine_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def truth():
    return json.loads((HERE / "truth-engine-files.json").read_text())


def test_samples_match_their_generator(tmp_path):
    gen = generator()
    gen.write_all(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "vllm-requests.jsonl" in written and "sglang-bench.jsonl" in written
    for name in written:
        assert (tmp_path / name).read_bytes() == (HERE / name).read_bytes(), name


def covers(drafter, truth_values):
    lo, hi = drafter.interval
    t = np.asarray(truth_values)[: lo.size]
    return bool(np.all((lo <= t) & (t <= hi)))


def test_vllm_requests_sample(truth):
    est = estimate_vllm_requests(HERE / "vllm-requests.jsonl", "eagle3")
    w = {x.name: x.drafters[0] for x in est.workloads}
    t = truth["vllm-requests.jsonl"]
    assert covers(w["chat"], t["chat"]) and covers(w["json"], t["json"])
    assert est.k_max == 4 and not est.drafters[0].bounded  # per-step arrays: exact


def test_sglang_samples(truth):
    tree = estimate_sglang_requests(HERE / "sglang-tree-requests.jsonl", topk=4)
    assert tree.k_max == 3 and covers(
        tree.drafters[0], truth["sglang-tree-requests.jsonl"]["by_depth"]
    )
    ada = estimate_sglang_requests(HERE / "sglang-adaptive-requests.jsonl")
    assert ada.k_max == 7 and covers(
        ada.drafters[0], truth["sglang-adaptive-requests.jsonl"]["acceptance"]
    )
    oai = estimate_sglang_requests(HERE / "sglang-openai.jsonl")
    assert oai.k_max == 3 and covers(oai.drafters[0], truth["sglang-openai.jsonl"]["acceptance"])


def test_bench_samples(truth):
    gen = generator()
    sb = gen._synthetic_bench()
    step = sb.Roofline(**truth["bench"]["step_ms"])
    vllm = read_bench_files(sorted(HERE.glob("vllm-bench-*.json")), drafter="eagle3")
    sglang = read_bench_files([HERE / "sglang-bench.jsonl"], drafter="eagle3")
    for runs in (vllm, sglang):
        assert len(runs) == 6 and {r.kind for r in runs} == {"steady-state"}
        for run in runs:
            s = steady_state(run)
            expected = step(s.batch, run.k + 1, s.context, s.prefill_tokens)
            assert s.step_ms == pytest.approx(expected, rel=0.01), run.source


def test_structured_output_sample(tmp_path):
    """vLLM 0.33.0 under structured output: a draft the grammar rejects whole counts with
    0 tokens, so position 1 is only bounded, and its interval holds the truth (the ratio
    per_pos[0] / num_drafts reads about 0.56 for a true 0.80)."""
    from allocator.estimate import estimate
    from allocator.estimate.vllm_metrics import parse_counters
    from allocator.io.inputs import read_input_text

    spec = importlib.util.spec_from_file_location(
        "structured", HERE / "generate_structured_output.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    truth = json.loads((HERE / "truth-structured-output.json").read_text())
    t = truth["vllm-structured-output.prom"]
    # the sample is the generator's (prometheus_client stamps _created with the clock)
    counters = parse_counters(read_input_text(HERE / "vllm-structured-output.prom", "x"), "x")
    module.write(tmp_path)
    again = parse_counters(read_input_text(tmp_path / "vllm-structured-output.prom", "x"), "x")
    assert again == counters
    assert (tmp_path / "truth-structured-output.json").read_text() == json.dumps(
        truth, indent=1
    ) + "\n"
    m = counters[t["model_name"]]
    assert m["per_pos"][0] / m["drafts"] == pytest.approx(0.56, abs=0.01)
    est = estimate(HERE / "vllm-structured-output.prom", "vllm-metrics", HERE / "x.yaml")
    (d,) = est.drafters
    assert covers(d, t["acceptance"]) and d.bounded
    assert any("positions 1-4" in n and "only bounded" in n for n in est.notes)
