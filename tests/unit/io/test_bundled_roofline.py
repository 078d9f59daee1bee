"""The bundled specs-only roofline problem, problems/roofline-llama31-8b.yaml: it loads, its
answers depend on the context the way the roofline says (speculation pays more at long
context under load, the memory cap falls with the context), profile-plan plans runs for
it, and one step time matches the closed form worked out by hand from the file's specs."""

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.model.memory_fit import max_batch

ROOT = Path(__file__).resolve().parents[3]
PATH = ROOT / "problems" / "roofline-llama31-8b.yaml"
RAW = yaml.safe_load(PATH.read_text(encoding="utf-8"))
DRAFTERS = [d["name"] for d in RAW["drafters"]]
K_MAX = RAW["search"]["k"]["max"]

# the vendor figures the file cites (NVIDIA H100 datasheet, H100 SXM column), written out
# here rather than read from the code under test
H100_BANDWIDTH = 3.35e12  # bytes/s, 'GPU Memory Bandwidth 3.35TB/s'
H100_MEMORY = 80e9  # bytes, 'GPU Memory 80GB'
H100_BF16 = 1979e12 / 2  # FLOP/s dense, 'BFLOAT16 Tensor Core* 1,979 teraFLOPS', sparse
BF16_BYTES = 2
VLLM_GPU_MEMORY_UTILIZATION = 0.92  # allocator/core/model_spec.py UTILISATION, as the file says


@pytest.fixture(scope="module")
def problem():
    return api.load(PATH)


def best_speedup(problem, batch: int, context: float) -> float:
    """The highest speedup over plain decoding of any one drafter at any k."""
    return max(
        api.evaluate(problem, [d], k, batch=batch, context=context).to_dict()["speedup"]
        for d in DRAFTERS
        for k in range(1, K_MAX + 1)
    )


def test_file_is_a_specs_only_roofline(problem):
    serving = RAW["serving"]
    assert serving["hardware"] == {"gpu": "h100-sxm", "count": 1}
    assert "memory" not in serving  # the cap comes from the specs, so it moves with context
    assert "calibrated_from" not in serving
    factors = serving.get("roofline", {})
    for key in ("mem_eff", "compute_eff", "fixed_ms", "seq_ms", "overhead_ms"):
        assert key not in factors  # every factor at its default: every peak reached
    header = PATH.read_text(encoding="utf-8").split("\nname:", 1)[0]
    assert "SPECS-ONLY (UNCALIBRATED) ROOFLINE" in header
    assert "UPPER BOUND ON SPEED" in header
    assert "allocator calibrate" in header and "allocator profile-plan" in header
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json" in (
        header
    )
    notes = api.evaluate(problem, ["eagle3"], 3, batch=1, context=1024).to_dict()["notes"]
    assert any("not calibrated" in n for n in notes)


def test_drafters_are_the_measured_files(problem):
    """Drafters and acceptance are problems/measured/llama31-8b-eagle.yaml's, unchanged."""
    measured = yaml.safe_load(
        (ROOT / "problems" / "measured" / "llama31-8b-eagle.yaml").read_text(encoding="utf-8")
    )
    assert RAW["drafters"] == measured["drafters"]
    assert RAW["search"] == measured["search"]
    assert RAW["convention"] == measured["convention"] == "bonus"


def test_context_changes_the_answer(problem):
    short = api.evaluate(problem, ["eagle3"], 3, batch=32, context=1024).to_dict()
    long = api.evaluate(problem, ["eagle3"], 3, batch=32, context=32768).to_dict()
    assert long["step_ms"] > 5 * short["step_ms"]  # the KV reads grow with batch x context
    assert long["speedup"] != pytest.approx(short["speedup"], rel=1e-3)


def test_speedup_under_load_rises_with_context(problem):
    """The MagicDec direction: at a large batch the KV reads keep the verifier memory bound,
    so verifying more tokens per sequence costs little and the best speedup is higher at
    32K context than at 1K."""
    assert best_speedup(problem, 64, 32768) > best_speedup(problem, 64, 1024)
    # batch 64 at 32K does not fit on one H100 (the step time is the model's alone); the
    # direction holds at the largest batch that does fit too
    assert best_speedup(problem, 12, 32768) > best_speedup(problem, 12, 1024)


def test_memory_cap_falls_with_context(problem):
    none = np.zeros((1, len(DRAFTERS)), bool)
    caps = [int(max_batch(problem, none, c)[0]) for c in (1024, 8192, 32768)]
    assert caps[0] > caps[1] > caps[2] >= 1
    # by hand: (M u - weights) / (KV bytes per token x context), the header's arithmetic
    m = RAW["serving"]["model"]
    room = H100_MEMORY * VLLM_GPU_MEMORY_UTILIZATION - m["params_b"] * 1e9 * BF16_BYTES
    kv = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * BF16_BYTES
    assert caps == [int(room // (kv * c)) for c in (1024, 8192, 32768)] == [428, 53, 13]
    # the commands say so: evaluate notes a batch past the cap
    notes = api.evaluate(problem, ["eagle3"], 3, batch=32, context=32768).to_dict()["notes"]
    said = [n for n in notes if "does not fit in memory" in n]
    assert said and re.search(r"at most 13 sequences", said[0])


@pytest.mark.slow
def test_profile_plan_returns_runs(problem):
    plan = api.profile_plan(problem)
    assert plan.runs
    assert plan.undetermined == {}
    assert any(r.k == 0 for r in plan.runs) and any(r.k > 0 for r in plan.runs)
    assert {r.drafter for r in plan.runs if r.k > 0} <= set(DRAFTERS)


def test_plain_step_matches_the_closed_form(problem):
    """Batch 1, context 1024, k = 0, from roofline.py's docstring with every factor at its
    default (eta = 1, fixed_ms = seq_ms = 0):
        memory_ms  = 1e3 [weights read + KV bytes/token x (b C + n)] / B,  n = b t = 1
        compute_ms = 1e3 [2 (active - embedding) params x n + 4 L H d x b t C] / F
    and the pass is their max (memory here)."""
    m = RAW["serving"]["model"]
    b, t, context = 1, 1, 1024
    read = (m["params_b"] - m["embedding_params_b"]) * 1e9 * BF16_BYTES
    kv = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * BF16_BYTES
    memory_ms = 1e3 * (read + kv * (b * context + b * t)) / H100_BANDWIDTH
    flops = 2 * (m["params_b"] - m["embedding_params_b"]) * 1e9 * b * t
    flops += 4 * m["layers"] * m["heads"] * m["head_dim"] * b * t * context
    compute_ms = 1e3 * flops / H100_BF16
    assert memory_ms > 100 * compute_ms  # memory bound
    expected = max(memory_ms, compute_ms)
    assert expected == pytest.approx(4.520656, abs=5e-7)  # the file header's figure
    got = api.evaluate(problem, [], 0, batch=b, context=context).to_dict()["step_ms"]
    assert got == pytest.approx(expected, rel=1e-6)


def test_an_uncalibrated_roofline_is_noted_not_called_an_extrapolation():
    """No calibrated_from, so no measured domain to leave: the schedule notes the file's
    factors but does not flag its answer as extrapolated (that caveat is for a calibrated
    file's measured domain, docs/design.md §8.5); contexts never repeat their own prefix."""
    from allocator import api

    sched = api.schedule(str(PATH), contexts=[1024, 8192])
    assert not sched.extrapolated
    assert any("not calibrated to measurements" in n for n in sched.notes)
    assert not any(n.startswith("context 1024: context 1024") for n in sched.notes)


def test_plain_decoding_past_verify_ms_falls_back_to_the_roofline():
    """A file with both a measured verify_ms (batch 1 and 16) and the specs: plain decoding
    at batch 64, past verify_ms's batch sizes, is the roofline's pass over one token per
    sequence (the baseline's last resort), the same number by every path that asks for it
    (evaluate's step, the baseline, the search grid), not a missing step time."""
    import copy

    import numpy as np
    import yaml

    from allocator import api
    from allocator.model.under_load import predictor

    raw = yaml.safe_load(PATH.read_text())
    both = copy.deepcopy(raw)
    both["serving"]["verify_ms"] = {
        "batch": [1, 16],
        "tokens": [1, 2, 4, 8],
        "ms": [[6.0, 6.1, 6.2, 6.5], [6.5, 6.9, 7.5, 8.8]],
    }
    for d in both["drafters"]:
        d["draft_ms"] = {1: 0.5, 16: 0.6}
    prob = api.load(both, base_dir=PATH.parent)
    roof = api.load(raw, base_dir=PATH.parent)
    step = api.evaluate(prob, [], 0, batch=64)["step_ms"]
    alone = api.evaluate(roof, [], 0, batch=64)["step_ms"]
    assert np.isfinite(step) and step == pytest.approx(alone, rel=1e-12)
    pred = predictor(prob)
    assert pred.baseline_ms(64.0) == pytest.approx(step, rel=1e-12)
    grid = pred.grid(np.zeros((1, prob.n), bool), np.array([0]), 64.0)
    assert grid[0, 0] == pytest.approx(step, rel=1e-12)
    # inside verify_ms's batch sizes the measured table answers, not the roofline
    assert api.evaluate(prob, [], 0, batch=1)["step_ms"] == pytest.approx(6.0)
