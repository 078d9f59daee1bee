"""The serving front (``allocator front``, :mod:`allocator.analysis.front`).

Checked against: brute force (the non-dominated points by pairwise comparison, over the
same simulated points and on random values with ties); capacity's candidate list (the
points are exactly its candidates); ``output_throughput / TP`` and the price per GPU-hour
worked out by hand; the KV cache of a re-targeted replica from the GPU's memory, the
weights and the KV bytes per token in closed form (the figures of the problem's header);
vLLM's own rule that TP divides the attention heads."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from allocator import api
from allocator.analysis import deployments as dp
from allocator.analysis import front as fr
from allocator.analysis.capacity.rate_search import candidates
from allocator.analysis.replica import Configuration, kv_cache_tokens
from allocator.analysis.request_source import request_source
from allocator.core.hardware import GPUS
from allocator.exceptions import InfeasibleError, InputError, ParameterError
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[3]
ROOFLINE = ROOT / "problems/roofline-llama31-8b.yaml"
SHORT = {"input_len": 64, "output_len": 16, "num_prompts": 30}


def brute_nondominated(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Pairwise: point i is dominated when some j has both values at least i's, one
    strictly higher."""
    n = g.size
    out = np.ones(n, bool)
    for i in range(n):
        for j in range(n):
            if j != i and g[j] >= g[i] and u[j] >= u[i] and (g[j] > g[i] or u[j] > u[i]):
                out[i] = False
                break
    return out


@pytest.mark.parametrize("seed", range(20))
def test_nondominated_is_the_brute_force_front_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    g = rng.integers(0, 8, n).astype(float)  # few values: many ties
    u = rng.integers(0, 8, n).astype(float)
    assert np.array_equal(fr.nondominated(g, u), brute_nondominated(g, u))


def test_nondominated_leaves_nan_points_off_the_front():
    g = np.array([1.0, np.nan, 2.0])
    u = np.array([1.0, 5.0, 0.5])
    assert fr.nondominated(g, u).tolist() == [True, False, True]


def small_front(**options):
    opts = {**SHORT, "workers": 1, **options}
    return api.front(rp.data(), **opts)


def test_points_are_capacitys_candidates_and_the_front_is_brute_force():
    result = small_front()
    prob = rp.problem()
    cands, _ = candidates(prob, engine="vllm")
    got = [(p.candidate.label(), p.candidate.max_num_seqs) for p in result.points]
    assert got == [(c.label(), c.max_num_seqs) for c in cands]
    g = np.array([p.per_gpu for p in result.points])
    u = np.array([p.per_user for p in result.points])
    assert [not p.dominated for p in result.points] == brute_nondominated(g, u).tolist()
    assert any(p.speculative for p in result.front)


def test_per_gpu_and_per_user_and_cost_from_the_metrics():
    result = small_front()
    for p in result.points:
        thr = p.metrics["output_throughput"]
        assert p.tp == 2  # the file's gpus_per_replica
        assert p.per_gpu == thr / 2
        assert p.per_user == 1000.0 / p.metrics["mean_tpot_ms"]
        # serving.gpu_cost_per_hour 2.0 for the replica's 2 GPUs: $1 per GPU-hour
        assert p.price_per_gpu_hour == 1.0
        assert p.cost_per_mtok == pytest.approx(2.0 / (3600.0 * thr) * 1e6, rel=1e-12)


def test_gpu_cost_replaces_the_files_price_and_a_gpu_without_one_has_no_cost():
    prob = api.load(ROOFLINE)
    prices, notes = dp.gpu_prices(prob, ["h100-sxm", "h200"], {"h200": 3.0})
    assert prices["h200"] == 3.0 and math.isnan(prices["h100-sxm"])  # the file has no price
    assert any("no price for h100-sxm" in n for n in notes)


def test_slos_flag_points_and_none_met_names_the_closest():
    ok = small_front(slo=["p99_tpot_ms=1000"])
    assert all(p.meets_slo for p in ok.points)
    tpot = [p.metrics["p99_tpot_ms"] for p in ok.points]
    ceiling = (min(tpot) + max(tpot)) / 2
    mixed = small_front(slo=[f"p99_tpot_ms={ceiling}"])
    assert [p.meets_slo for p in mixed.points] == [t <= ceiling for t in tpot]
    lowest = min(tpot)
    with pytest.raises(InfeasibleError) as exc:
        small_front(slo=[f"p99_tpot_ms={lowest / 2}"])
    assert exc.value.field == "slo"
    assert "closest: p99_tpot_ms" in exc.value.message
    assert f"+{lowest / (lowest / 2) - 1:.1%}" in exc.value.message
    kept = small_front(slo=[f"p99_tpot_ms={lowest / 2}"], require_slo=False)
    assert not any(p.meets_slo for p in kept.points)


def test_concurrency_levels_run_each_configuration_at_its_largest_max_num_seqs():
    result = small_front(max_concurrency=[1, 4])
    assert {p.max_concurrency for p in result.points} == {1, 4}
    assert {p.candidate.max_num_seqs for p in result.points} == {16}
    for p in result.points:
        assert p.metrics["max_concurrency"] == p.max_concurrency
        assert p.metrics["max_running_seqs"] <= p.max_concurrency
        assert "--max-concurrency" in p.bench_command


def test_vllm_flags_of_a_chain_and_a_schedule():
    result = small_front(max_num_seqs=[4])
    flags = {p.candidate.config.label(): p.vllm_serve_flags for p in result.points}
    off = flags["speculation off"]
    assert off == ["--tensor-parallel-size", "2", "--max-num-seqs", "4",
                   "--max-num-batched-tokens", "2048"]  # fmt: skip
    chain = flags["eagle, k=2"]
    assert chain[-2] == "--speculative-config"
    assert '"num_speculative_tokens": 2' in chain[-1] and '"method": "eagle3"' in chain[-1]
    sched = next(f for label, f in flags.items() if "by batch size" in label)
    assert "num_speculative_tokens_per_batch_size" in sched[-1]


# ---------------------------------------------------------------- re-targeted deployments
def roofline_data() -> dict:
    d = api.load_data(ROOFLINE)
    d["serving"]["scheduler"]["max_num_seqs"] = 8
    d["search"]["k"] = {"max": 2}
    return d


def closed_form_kv_tokens(gpu: str, tp: int) -> int:
    """The header of problems/roofline-llama31-8b.yaml: 8,030,261,248 bf16 weights, KV 2 x
    32 layers x 8 heads x 128 x 2 bytes = 131,072 per token (8 KV heads: no copies up to
    TP 8), vLLM's gpu_memory_utilization 0.92."""
    room = GPUS[gpu].memory_gb * 1e9 * tp * 0.92 - 8_030_261_248 * 2
    return math.floor(room / 131_072)


@pytest.mark.parametrize(("gpu", "tp"), [("h200", 1), ("h100-sxm", 2), ("a100-80g", 4)])
def test_a_retargeted_kv_cache_follows_the_replicas_memory(gpu, tp):
    data = roofline_data()
    prob = api.load(copy.deepcopy(data))
    source = request_source(10, input_len=64, output_len=16)
    deployed, _ = dp.deployments(prob, data, None, source, gpus=[gpu], tp=[tp])
    (d,) = deployed
    assert not d.own and d.problem.serving.hardware.count == tp
    assert d.problem.serving.hardware.gpu.name == gpu
    tokens = kv_cache_tokens(d.problem, Configuration.off(d.problem.names))
    assert tokens == closed_form_kv_tokens(gpu, tp)
    assert "kv_cache_tokens" not in d.data["serving"]["scheduler"]
    assert data["serving"]["scheduler"]["kv_cache_tokens"] == 438991  # left unchanged


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"gpus": ["h900"]}, "gpus", "known: a100-80g, b200, h100-sxm"),
        ({"tp": [3]}, "tp", "does not divide the 32 heads"),
        ({"tp": [16]}, "tp", "from 1 to 8"),
        ({"tp": [0]}, "tp", "from 1 to 8"),
    ],
)
def test_bad_hardware_is_refused_naming_the_parameter(options, field, words):
    data = roofline_data()
    prob = api.load(copy.deepcopy(data))
    source = request_source(10, input_len=64, output_len=16)
    with pytest.raises(ParameterError) as exc:
        dp.deployments(prob, data, None, source, **options)
    assert exc.value.field == field and words in exc.value.message


def test_a_replica_that_cannot_hold_the_model_is_left_out_or_refused():
    data = roofline_data()
    model = data["serving"]["model"]
    model["params_b"] = 70.0  # 140 GB of bf16 weights
    prob = api.load(copy.deepcopy(data))
    source = request_source(10, input_len=64, output_len=16)
    with pytest.raises(ParameterError) as exc:
        dp.deployments(prob, data, None, source, gpus=["l40s"], tp=[1, 2])
    assert exc.value.field == "tp" and "holds the model" in exc.value.message
    kept, notes = dp.deployments(prob, data, None, source, gpus=["h200"], tp=[1, 2])
    assert [(d.gpu, d.tp) for d in kept] == [("h200", 2)]
    assert any("h200 TP1" in n and "GB of weights" in n for n in notes)


def test_a_problem_without_the_roofline_is_not_retargeted():
    with pytest.raises(ParameterError) as exc:
        api.front(rp.data(), gpus=["h200"], **SHORT)
    assert exc.value.field == "gpus" and "not the roofline's" in exc.value.message


@pytest.mark.slow
def test_a_front_over_two_gpus_is_the_brute_force_front_of_its_points():
    result = api.front(
        roofline_data(), gpus=["h100-sxm", "h200"], gpu_cost={"h200": 3.5}, workers=2, **SHORT
    )
    g = np.array([p.per_gpu for p in result.points])
    u = np.array([p.per_user for p in result.points])
    assert [not p.dominated for p in result.points] == brute_nondominated(g, u).tolist()
    assert {p.gpu for p in result.points} == {"h100-sxm", "h200"}
    for p in result.points:
        assert p.per_gpu == p.metrics["output_throughput"] / p.tp
    on, off = result.arrays()["front_on"], result.arrays()["front_off"]
    spec = result.arrays()["speculative"]
    assert np.array_equal(on[spec], brute_nondominated(g[spec], u[spec]))
    assert np.array_equal(off[~spec], brute_nondominated(g[~spec], u[~spec]))
    # the same front on one worker as on two
    again = api.front(
        roofline_data(), gpus=["h100-sxm", "h200"], gpu_cost={"h200": 3.5}, workers=1, **SHORT
    )
    assert [p.metrics for p in again.points] == [p.metrics for p in result.points]


def test_gpus_at_fitted_defaults_beside_gpus_at_peaks_are_said_not_like_for_like():
    """A GPU with efficiencies fitted to public runs (core/defaults.PER_GPU) beside one at
    the vendor's peaks: one note naming both; none when all are of one kind or the file
    gives its own efficiencies."""
    from allocator.analysis.deployments import _default_notes
    from allocator.core.defaults import PER_GPU

    fitted = sorted(PER_GPU)[0]
    peak = next(g for g in ("h100-sxm", "l40s", "b200") if g not in PER_GPU)
    (note,) = _default_notes([fitted, peak], {"serving": {}})
    assert fitted in note and peak in note and "not compared like for like" in note
    assert _default_notes([fitted], {"serving": {}}) == []
    assert _default_notes([peak], None) == []
    own = {"serving": {"roofline": {"mem_eff": 0.7, "compute_eff": 0.6}}}
    assert _default_notes([fitted, peak], own) == []


# ---------------------------------------------------------------- disaggregated points
DISAGG = {**SHORT, "workers": 1, "max_num_seqs": [4], "disaggregated": True,
          "pd_ratios": [(1, 1), (2, 1)]}  # fmt: skip


def bench_kwargs(point: fr.FrontPoint) -> dict:
    """``api.bench``'s arguments for the point's candidate, independently of its command."""
    c = point.candidate.config
    out: dict = {"max_num_seqs": point.candidate.max_num_seqs, "seed": 0, **SHORT}
    if c.speculative:
        out["drafters"] = list(c.drafters)
        if c.k is None:
            out["schedule"] = True
        else:
            out["k"] = c.k
    return out


def test_disaggregated_points_are_api_bench_runs_with_the_same_pools():
    data = roofline_data()
    result = api.front(data, gpus=["h100-sxm"], tp=[1, 2], gpu_cost={"h100-sxm": 3.0},
                       **DISAGG)  # fmt: skip
    agg = [p for p in result.points if not p.disaggregated]
    dis = [p for p in result.points if p.disaggregated]
    # every candidate of every deployment at each split, beside the aggregated points
    assert len(dis) == 2 * len(agg) and {p.pd for p in dis} == {(1, 1), (2, 1)}
    assert {(p.tp, p.candidate.label()) for p in dis} == {(p.tp, p.candidate.label()) for p in agg}
    seen_spec = set()
    for p in dis:
        hw = {} if p.tp == 1 else {"prefill_tp": p.tp, "decode_tp": p.tp}
        doc = api.bench(data, prefill_replicas=p.pd[0], decode_replicas=p.pd[1],
                        **hw, **bench_kwargs(p)).to_dict()  # fmt: skip
        assert {k: v for k, v in doc.items() if k not in fr.LEFT_OUT} == p.metrics, p.label()
        gpus = (p.pd[0] + p.pd[1]) * p.tp
        thr = p.metrics["output_throughput"]
        assert p.per_gpu == thr / gpus
        assert p.per_user == 1000.0 / p.metrics["mean_tpot_ms"]
        assert p.cost_per_mtok == pytest.approx(3.0 * gpus / (3600.0 * thr) * 1e6, rel=1e-12)
        d = p.document()
        assert d["deployment"] == f"{p.pd[0]}:{p.pd[1]}"
        assert f"--prefill-replicas {p.pd[0]} --decode-replicas {p.pd[1]}" in p.bench_command
        assert p.fleet_export is not None and p.fleet_export.count("vllm serve") == sum(p.pd)
        assert f"--tensor-parallel-size {p.tp}" in p.fleet_export
        seen_spec.add(("--speculative-config" in p.fleet_export, p.speculative))
    assert seen_spec == {(True, True), (False, False)}
    assert all(p.document()["deployment"] == "aggregated" for p in agg)


def test_the_front_with_disaggregated_points_is_the_brute_force_front():
    result = api.front(roofline_data(), **DISAGG)
    g = np.array([p.per_gpu for p in result.points])
    u = np.array([p.per_user for p in result.points])
    assert [not p.dominated for p in result.points] == brute_nondominated(g, u).tolist()
    arrays = result.arrays()
    spec, dis = arrays["speculative"], arrays["disaggregated"]
    assert dis.any() and (~dis).any()
    for side, key in ((spec, "front_on"), (~spec, "front_off")):
        want = np.zeros(g.size, bool)
        want[side] = brute_nondominated(g[side], u[side])
        assert arrays[key].tolist() == want.tolist()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"pd_ratios": [(0, 1)]}, "pd_ratios"),
        ({"pd_ratios": [(1, 2, 3)]}, "pd_ratios"),
        ({"pd_ratios": []}, "pd_ratios"),
        ({"max_concurrency": [2]}, "max_concurrency"),
        ({"turns": 2}, "turns"),
        ({"kv_link": "carrier-pigeon"}, "kv_link"),
    ],
)
def test_bad_disaggregated_input_is_refused_naming_the_parameter(options, field):
    with pytest.raises(ParameterError) as exc:
        api.front(roofline_data(), **{**DISAGG, **options})
    assert exc.value.field == field


def test_pd_ratios_without_disaggregated_is_refused():
    with pytest.raises(ParameterError) as exc:
        small_front(pd_ratios=[(1, 1)])
    assert exc.value.field == "pd_ratios"


def test_disaggregated_points_need_the_models_kv_bytes_and_say_so_before_any_run():
    calls = []
    with pytest.raises(InputError) as exc:
        small_front(disaggregated=True, progress=lambda done, total: calls.append(done))
    assert exc.value.field == "serving.model" and calls == []
