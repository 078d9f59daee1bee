"""Benchmark files for calibration: ``vllm bench serve --save-result`` (vLLM 0.33.0) and
SGLang's ``bench_serving --output-file`` (0.5.23) with every key they write, the
steady-state relation worked by hand and against a simulated engine of known step time,
mixed deployments refused, and bad files refused in one line."""

import json
import math
import re

import pytest

from allocator.calibration.steady_state import calibration_rows, steady_state
from allocator.estimate.bench_files import read_bench_files
from allocator.exceptions import InputError
from tests.support.synthetic_bench import (
    Roofline,
    sglang_result,
    simulate,
    time_average_step,
    vllm_result,
    write_sglang,
    write_vllm,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# One closed-loop run worked by hand: 96 requests in 30 s (λ = 3.2/s) at concurrency 4,
# 500 input and 121 output tokens each; TTFT 50 ms, E2EL 1250 ms, so each request decodes
# D = 1200 ms and TPOT = 1200 / 120 = 10 ms; acceptance length E = 2.5 (k = 3).
# In flight: λ · E2EL = 4 (the loop is full). Decoding: b = λ · D = 3.84 = 4 · (1 − 50/1250).
# Decode tokens/s: λ · 120 = 384. Step: 1000 · 3.84 · 2.5 / 384 = 25 ms = TPOT · E.
# Context 500 + 121/2 = 560.5; prefill per step 3.2 · 500 · 0.025 = 40 tokens.


def vllm_by_hand(**override):
    r = {
        "date": "20261201-101500",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": None,
        "model_id": MODEL,
        "tokenizer_id": MODEL,
        "num_prompts": 96,
        "hardware": "h100-sxm",
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 30.0,
        "completed": 96,
        "failed": 0,
        "total_input_tokens": 48000,
        "total_output_tokens": 11616,
        "request_throughput": 3.2,
        "request_goodput": None,
        "output_throughput": 387.2,
        "total_token_throughput": 1987.2,
        "max_output_tokens_per_s": 410.0,
        "max_concurrent_requests": 4,
        "rtfx": 0.0,
        "spec_decode_acceptance_rate": 50.0,
        "spec_decode_acceptance_length": 2.5,
        "spec_decode_num_drafts": 4608,
        "spec_decode_draft_tokens": 13824,
        "spec_decode_accepted_tokens": 6912,
        "spec_decode_per_position_acceptance_rates": [0.7, 0.5, 0.3],
        "mean_ttft_ms": 50.0,
        "median_ttft_ms": 49.0,
        "std_ttft_ms": 3.0,
        "p99_ttft_ms": 61.0,
        "mean_tpot_ms": 10.0,
        "median_tpot_ms": 10.0,
        "std_tpot_ms": 0.5,
        "p99_tpot_ms": 11.5,
        "mean_itl_ms": 24.0,
        "median_itl_ms": 24.5,
        "std_itl_ms": 2.0,
        "p99_itl_ms": 30.0,
        "mean_e2el_ms": 1250.0,
        "median_e2el_ms": 1249.0,
        "std_e2el_ms": 5.0,
        "p99_e2el_ms": 1262.0,
    }
    r.update(override)
    return r


def sglang_by_hand(**override):
    r = {
        "tag": None,
        "backend": "sglang-oai",
        "dataset_name": "random",
        "request_rate": math.inf,
        "max_concurrency": 4,
        "sharegpt_output_len": None,
        "random_input_len": 500,
        "random_output_len": 121,
        "random_range_ratio": 1.0,
        "server_info": {
            "model_path": MODEL,
            "served_model_name": MODEL,
            "tp_size": 1,
            "speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
            "speculative_adaptive": False,
            "version": "0.5.23",
            "internal_states": [{"avg_spec_accept_length": 2.5}],
        },
        "duration": 30.0,
        "completed": 96,
        "total_input_tokens": 48000,
        "total_input_text_tokens": 48000,
        "total_input_vision_tokens": 0,
        "total_output_tokens": 11616,
        "total_output_tokens_retokenized": 11616,
        "request_throughput": 3.2,
        "input_throughput": 1600.0,
        "output_throughput": 387.2,
        "total_throughput": 1987.2,
        "concurrency": 4.0,
        "accept_length": 2.5,
        "max_output_tokens_per_s": 410.0,
        "max_concurrent_requests": 4,
    }
    for metric, values in (
        ("e2e_latency", (1250.0, 1249.0, 5.0, 1258.0, 1260.0, 1262.0)),
        ("ttft", (50.0, 49.0, 3.0, 55.0, 58.0, 61.0)),
        ("tpot", (10.0, 10.0, 0.5, 10.6, 11.0, 11.5)),
        ("itl", (24.0, 24.5, 2.0, 27.0, 28.0, 30.0)),
    ):
        for stat, v in zip(("mean", "median", "std", "p90", "p95", "p99"), values, strict=True):
            r[f"{stat}_{metric}_ms"] = v
    r.update(override)
    return r


def dump(path, obj):
    path.write_text(json.dumps(obj))
    return path


def dump_lines(path, objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def test_vllm_file_every_key(tmp_path):
    (run,) = read_bench_files([dump(tmp_path / "v.json", vllm_by_hand())])
    assert (run.engine, run.model, run.hardware, run.source) == (
        "vllm",
        MODEL,
        "h100-sxm",
        "v.json",
    )
    assert run.k == 3 and run.per_position == (0.7, 0.5, 0.3)
    assert run.mean_accepted == 2.5 and run.verified_tokens == 4.0  # 13824 / 4608 = 3 drafted
    assert run.drafter is None and run.topk is None and not run.adaptive
    assert (run.max_concurrency, run.request_rate, run.num_prompts) == (4, math.inf, 96)
    assert (run.mean_input, run.mean_output) == (500.0, 121.0)
    assert run.kind == "steady-state" and run.lengths == "unknown"
    assert run.context == 560.5 and run.tokens_per_s == 387.2
    assert run.ttft_ms == {"mean": 50.0, "median": 49.0, "std": 3.0, "p99": 61.0}
    assert run.tpot_ms["p99"] == 11.5 and run.itl_ms["mean"] == 24.0
    assert run.e2el_ms["mean"] == 1250.0
    assert any("lengths taken as fixed" in n for n in run.notes)
    row = run.as_row()
    assert row["request_rate"] == "inf" and row["per_position"] == [0.7, 0.5, 0.3]
    json.dumps(row)  # plain data


def test_steady_state_by_hand(tmp_path):
    for obj, name in ((vllm_by_hand(), "v.json"), (sglang_by_hand(), "s.jsonl")):
        (run,) = read_bench_files([dump(tmp_path / name, obj)])
        s = steady_state(run)
        assert s.batch == pytest.approx(3.84)
        assert s.batch_from_concurrency == pytest.approx(3.84)
        assert s.tokens_per_s == pytest.approx(384.0)
        assert s.step_ms == pytest.approx(25.0)
        assert s.step_ms_tpot == pytest.approx(25.0)
        assert s.context == pytest.approx(560.5)
        assert s.prefill_tokens == pytest.approx(40.0)
        assert s.mean_accepted == 2.5 and s.k == 3 and s.verified_tokens == 4.0
        assert s.notes == ()
    # without mean_e2el_ms (vLLM's default --percentile-metrics), D = TPOT · (O − 1)
    v = vllm_by_hand()
    for key in ("mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p99_e2el_ms"):
        del v[key]
    (run,) = read_bench_files([dump(tmp_path / "v2.json", v)])
    assert steady_state(run).batch == pytest.approx(3.84)


def test_sglang_file_every_key(tmp_path):
    (run,) = read_bench_files([dump_lines(tmp_path / "s.jsonl", [sglang_by_hand()])])
    assert (run.engine, run.model, run.tensor_parallel) == ("sglang", MODEL, 1)
    assert run.method == "EAGLE3" and run.draft_model == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert (run.k, run.topk, run.verified_tokens, run.mean_accepted) == (3, 1, 4.0, 2.5)
    assert run.lengths == "fixed" and run.kind == "steady-state"
    assert run.num_prompts is None and run.concurrency == 4.0
    assert run.e2el_ms["p95"] == 1260.0 and run.ttft_ms["p90"] == 55.0
    assert run.source == "s.jsonl"  # one line: the file is the run


def test_speculation_off_rate_runs_trees_and_adaptive(tmp_path):
    off = {k: v for k, v in vllm_by_hand().items() if not k.startswith("spec_decode_")}
    (run,) = read_bench_files([dump(tmp_path / "off.json", off)])
    assert run.k == 0 and run.mean_accepted == 1.0 and run.verified_tokens == 1.0
    assert calibration_rows([run])[0]["drafters"] == ""
    rate = read_bench_files([dump(tmp_path / "r.json", vllm_by_hand(request_rate=4.0))])[0]
    assert rate.kind == "rate" and rate.context is None and rate.request_rate == 4.0
    with pytest.raises(InputError, match="needs the serving simulator"):
        steady_state(rate)
    ramp = vllm_by_hand(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=8)
    assert read_bench_files([dump(tmp_path / "ramp.json", ramp)])[0].kind == "rate"
    varied = sglang_by_hand(random_range_ratio=0.5)
    assert read_bench_files([dump(tmp_path / "var.json", varied)])[0].lengths == "varied"
    info = sglang_by_hand()["server_info"] | {
        "speculative_num_steps": 5,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
    }
    tree = read_bench_files([dump(tmp_path / "t.json", sglang_by_hand(server_info=info))])[0]
    assert (tree.k, tree.topk, tree.verified_tokens) == (5, 4, 8.0)
    info = sglang_by_hand()["server_info"] | {"speculative_adaptive": True}
    ada = read_bench_files([dump(tmp_path / "a.json", sglang_by_hand(server_info=info))])[0]
    assert ada.adaptive and ada.verified_tokens is None
    trace = read_bench_files([dump(tmp_path / "tr.json", sglang_by_hand(request_rate="trace"))])
    assert trace[0].kind == "rate" and trace[0].as_row()["request_rate"] == "trace"
    # saved per-request lengths decide
    detailed = vllm_by_hand(input_lens=[500] * 95 + [499], output_lens=[121] * 96)
    assert read_bench_files([dump(tmp_path / "d.json", detailed)])[0].kind == "rate"


def test_appended_and_pretty_printed_files(tmp_path):
    a, b = vllm_by_hand(), vllm_by_hand(max_concurrency=8)
    runs = read_bench_files([dump_lines(tmp_path / "app.json", [a, b])])
    assert [r.source for r in runs] == ["app.json line 1", "app.json line 2"]
    assert [r.max_concurrency for r in runs] == [4, 8]
    (tmp_path / "pretty.json").write_text(json.dumps(a, indent=2))
    assert len(read_bench_files([tmp_path / "pretty.json"])) == 1


def test_mixed_deployments_refused_naming_both(tmp_path):
    base = dump(tmp_path / "a.json", vllm_by_hand())
    other = dump(tmp_path / "b.json", vllm_by_hand(model_id="Qwen/Qwen3-8B"))
    with pytest.raises(InputError) as info:
        read_bench_files([base, other])
    assert str(info.value) == (
        f"b.json: model 'Qwen/Qwen3-8B', but a.json has {MODEL!r}: one read calibrates "
        "one deployment"
    )
    gpu = dump(tmp_path / "c.json", vllm_by_hand(hardware="a100-80g"))
    with pytest.raises(InputError, match="c.json: hardware 'a100-80g', but a.json has 'h100"):
        read_bench_files([base, gpu])
    sg = dump(tmp_path / "s.json", sglang_by_hand())
    with pytest.raises(InputError, match="s.json: engine 'sglang', but a.json has 'vllm'"):
        read_bench_files([base, sg])
    tp = dump(tmp_path / "tp.json", vllm_by_hand(tensor_parallel_size=2))
    tp1 = dump(tmp_path / "tp1.json", vllm_by_hand(tensor_parallel_size="1"))  # --metadata
    with pytest.raises(InputError, match="tp.json: tensor-parallel size 2, but tp1.json has 1"):
        read_bench_files([tp1, tp])
    # an unrecorded hardware is not a second one
    no_gpu = {k: v for k, v in vllm_by_hand().items() if k != "hardware"}
    assert len(read_bench_files([base, dump(tmp_path / "n.json", no_gpu)])) == 2


def test_the_odd_file_is_named_even_when_it_comes_first(tmp_path):
    """Three files, the first on another GPU: the message names the first (the odd one),
    not the second, beside the files that agree."""
    odd = dump(tmp_path / "odd.json", vllm_by_hand(hardware="a100-80g"))
    b = dump(tmp_path / "b.json", vllm_by_hand())
    c = dump(tmp_path / "c.json", vllm_by_hand())
    with pytest.raises(InputError) as info:
        read_bench_files([odd, b, c])
    text = str(info.value)
    assert text.startswith("odd.json: hardware 'a100-80g', but b.json and 1 other file(s) have")


def test_a_long_value_is_quoted_short(tmp_path):
    """A name read from a file is quoted as a short prefix with its length, never whole."""
    a = dump(tmp_path / "a.json", vllm_by_hand())
    b = dump(tmp_path / "b.json", vllm_by_hand(model_id="SECRET=" + "x" * 5000))
    with pytest.raises(InputError) as info:
        read_bench_files([a, b])
    assert "xxxxx" * 20 not in str(info.value) and len(str(info.value)) < 400


def test_calibration_rows_need_the_drafter(tmp_path):
    path = dump(tmp_path / "v.json", vllm_by_hand())
    with pytest.raises(InputError, match="needs its drafter's name"):
        calibration_rows(read_bench_files([path]))
    (row,) = calibration_rows(read_bench_files([path], drafter="eagle3"))
    assert row["drafters"] == "eagle3" and row["k"] == 3
    assert row["batch"] == pytest.approx(3.84) and row["tokens_per_s"] == pytest.approx(384.0)
    # calibrate's relation gives the step back
    assert 1000 * row["batch"] * row["mean_accepted"] / row["tokens_per_s"] == pytest.approx(25)
    assert row["verified_tokens"] == 4.0 and row["context"] == pytest.approx(560.5)
    rate = dump(tmp_path / "r.json", vllm_by_hand(request_rate=2.0))
    assert calibration_rows(read_bench_files([path, rate], drafter="eagle3")) == [row]
    info = sglang_by_hand()["server_info"] | {"speculative_adaptive": True}
    ada = dump(tmp_path / "a.json", sglang_by_hand(server_info=info))
    with pytest.raises(InputError, match="adaptive run drafts a different k"):
        calibration_rows(read_bench_files([ada], drafter="eagle3"))


def drop(obj, key):
    out = dict(obj)
    del out[key]
    return out


BAD_FILES = [
    (drop(vllm_by_hand(), "total_output_tokens"), "v.json: total_output_tokens: missing"),
    (vllm_by_hand(completed=-3), "v.json: completed: must be an integer in 0..2**53, got -3"),
    (
        vllm_by_hand(output_throughput=float("nan")),
        "output_throughput: must be a finite number >= 0, got nan",
    ),
    (vllm_by_hand(model_id=7), "v.json: model_id: 7 is not a name"),
    (
        vllm_by_hand(request_rate="fast"),
        "request_rate: must be a number > 0 requests/s (or inf), got 'fast'",
    ),
    (
        vllm_by_hand(request_rate=-1),
        "request_rate: must be a number > 0 requests/s (or inf), got -1",
    ),
    (vllm_by_hand(max_concurrency=0), "max_concurrency: must be an integer >= 1, got 0"),
    (vllm_by_hand(max_concurrency=2.5), "max_concurrency: must be an integer in 0..2**53, got 2.5"),
    (vllm_by_hand(duration=0), "duration: must be a finite number > 0, got 0"),
    (vllm_by_hand(completed=0), "completed: 0: no request completed"),
    (vllm_by_hand(output_throughput=400.0), "output_throughput: 400 given, but total_output/dur"),
    (vllm_by_hand(request_throughput=3.0), "request_throughput: 3 given, but completed/duration"),
    (vllm_by_hand(mean_ttft_ms=-1.0), "mean_ttft_ms: must be a finite number >= 0, got -1.0"),
    (vllm_by_hand(p99_itl_ms="slow"), "p99_itl_ms: must be a finite number >= 0, got 'slow'"),
    (
        vllm_by_hand(spec_decode_per_position_acceptance_rates=[0.5, 0.7, 0.3]),
        "rates[1]: 0.7 exceeds position 0's 0.5",
    ),
    (
        vllm_by_hand(spec_decode_per_position_acceptance_rates=[1.2, 0.5, 0.3]),
        "rates[0]: must be a number in [0, 1], got 1.2",
    ),
    (vllm_by_hand(spec_decode_per_position_acceptance_rates=[]), "must be a non-empty list"),
    (vllm_by_hand(spec_decode_draft_tokens=20000), "spec_decode_draft_tokens: 20000 is not"),
    (vllm_by_hand(spec_decode_acceptance_length=2.4), "spec_decode_acceptance_length: 2.4"),
    (vllm_by_hand(spec_decode_accepted_tokens=6000), "spec_decode_acceptance_length"),
    (vllm_by_hand(spec_decode_num_drafts=0), "spec_decode_num_drafts: 0 drafts"),
    (drop(vllm_by_hand(), "spec_decode_num_drafts"), "spec_decode_num_drafts: missing"),
    (vllm_by_hand(input_lens=[500] * 96, output_lens=[121] * 95), "95 entries for 96 inputs"),
    (sglang_by_hand(server_info=None), "server_info: is not an object"),
    (sglang_by_hand(server_info={"tp_size": 1}), "server_info: model_path: missing"),
    (sglang_by_hand(accept_length=5.5), "accept_length: 5.5 is outside [1, 4]"),
    (sglang_by_hand(accept_length=float("inf")), "accept_length: must be a finite number, got inf"),
    (
        sglang_by_hand(server_info=sglang_by_hand()["server_info"] | {"speculative_adaptive": 1}),
        "speculative_adaptive: 1 is not a bool",
    ),
    ({"date": "x"}, "neither a vllm bench serve result (model_id) nor SGLang"),
    ([vllm_by_hand()], "expected one benchmark result object"),
]


@pytest.mark.parametrize("obj,needle", BAD_FILES)
def test_bad_files_one_line(tmp_path, obj, needle):
    path = dump(tmp_path / "v.json", obj)
    with pytest.raises(InputError) as info:
        read_bench_files([path])
    assert "\n" not in str(info.value) and needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "v.json: is empty"),
        ('{"model_id": ', "v.json: not JSON"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"n": ' + "1" * 400 + "}", "a number of 400 characters"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ],
)
def test_bad_text_one_line(tmp_path, text, needle):
    path = tmp_path / "v.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_bench_files([path])
    assert "\n" not in str(info.value) and needle in str(info.value), str(info.value)


def test_not_a_regular_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_bench_files([tmp_path / "missing.json"])
    with pytest.raises(InputError, match="is a directory"):
        read_bench_files([tmp_path])


# ------------------------------------------------------------ the synthetic generator


def simulated(k, c, seed, step=None, n=None):
    return simulate(
        step or Roofline(),
        concurrency=c,
        num_prompts=n or 12 * c,
        input_len=400,
        output_len=96,
        k=k,
        acceptance=[0.8, 0.7, 0.6],
        seed=seed,
    )


def test_generator_is_deterministic(tmp_path):
    for name in ("a", "b"):
        sim = simulated(3, 4, seed=9)
        kw = {"model": MODEL, "concurrency": 4, "input_len": 400, "output_len": 96, "k": 3}
        write_vllm(tmp_path / f"{name}.json", vllm_result(sim, num_prompts=48, **kw))
        write_sglang(tmp_path / f"{name}.jsonl", [sglang_result(sim, **kw)])
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


@pytest.mark.parametrize("fmt", ["vllm", "vllm-no-e2el", "sglang"])
def test_steady_state_recovers_the_simulated_step(tmp_path, fmt):
    """Through every file format, the relation returns the simulated engine's own
    time-average batch and the step time its decoding sequences saw, to rounding; and
    the known step function at the returned (batch, k + 1, context, prefill) within
    1%."""
    truth = Roofline()
    for k in (0, 3):
        for c in (1, 4, 16):
            sim = simulated(k, c, seed=100 * k + c)
            kw = {"model": MODEL, "concurrency": c, "input_len": 400, "output_len": 96, "k": k}
            path = tmp_path / f"{fmt}-{k}-{c}.json"
            if fmt == "sglang":
                write_sglang(path, [sglang_result(sim, **kw)])
            else:
                res = vllm_result(sim, num_prompts=12 * c, e2el=fmt == "vllm", **kw)
                write_vllm(path, res)
            (run,) = read_bench_files([path])
            s = steady_state(run)
            batch, step = time_average_step(sim)
            assert s.batch == pytest.approx(batch, rel=1e-9)
            assert s.step_ms == pytest.approx(step, rel=1e-9)
            assert s.step_ms_tpot == pytest.approx(step, rel=1e-9)  # fixed lengths
            assert s.verified_tokens == k + 1
            expected = truth(s.batch, k + 1, s.context, s.prefill_tokens)
            assert s.step_ms == pytest.approx(expected, rel=0.01), (k, c)


# ------------------------------------------------------------ derived fields' tolerance

# Each field the readers check against the counts it derives from, with its value from
# the hand-worked counts above: 11616 output tokens and 96 requests in 30 s, 6912 of
# 13824 drafted tokens accepted over 4608 drafts, per-position rates 0.7 + 0.5 + 0.3.
DERIVED = [
    (vllm_by_hand, "output_throughput", 11616 / 30),
    (vllm_by_hand, "request_throughput", 96 / 30),
    (vllm_by_hand, "spec_decode_acceptance_length", 2.5),
    (vllm_by_hand, "spec_decode_acceptance_rate", 50.0),
    (vllm_by_hand, "spec_decode_per_position_acceptance_rates", 1.5),
    (sglang_by_hand, "output_throughput", 11616 / 30),
    (sglang_by_hand, "request_throughput", 96 / 30),
]


def _with(make, key, factor):
    """The hand-worked file with ``key`` scaled by ``factor`` (each rate, for the
    per-position rates: their sum scales alike)."""
    value = make()[key]
    if isinstance(value, list):
        return make(**{key: [r * factor for r in value]})
    return make(**{key: value * factor})


def _numbers(text):
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


@pytest.mark.parametrize("make,key,derived", DERIVED, ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("factor", [1 - 0.99e-3, 1 + 0.99e-3])
def test_derived_field_just_inside_the_tolerance(tmp_path, make, key, derived, factor):
    (run,) = read_bench_files([dump(tmp_path / "v.json", _with(make, key, factor))])
    assert run.completed == 96


@pytest.mark.parametrize("make,key,derived", DERIVED, ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("factor", [1 - 1.01e-3, 1 + 1.01e-3, 1 + 2e-3])
def test_derived_field_past_the_tolerance_names_both_values(tmp_path, make, key, derived, factor):
    with pytest.raises(InputError) as info:
        read_bench_files([dump(tmp_path / "v.json", _with(make, key, factor))])
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"v.json: {key}: "), message
    numbers = _numbers(message[len(f"v.json: {key}: ") :])
    given = derived * factor
    assert any(n == pytest.approx(given, rel=1e-8) for n in numbers), message
    assert any(n == pytest.approx(derived, rel=1e-8) for n in numbers), message


def test_acceptance_length_to_more_digits_than_the_counts_give(tmp_path):
    # 4161 accepted over 2000 drafts: 1 + 4161/2000 = 3.0805; the file says 3.08047104
    obj = vllm_by_hand(
        spec_decode_acceptance_length=3.08047104,
        spec_decode_num_drafts=2000,
        spec_decode_draft_tokens=6000,
        spec_decode_accepted_tokens=4161,
        spec_decode_acceptance_rate=100 * 4161 / 6000,
        spec_decode_per_position_acceptance_rates=[0.8, 0.7, 0.5805],
    )
    (run,) = read_bench_files([dump(tmp_path / "v.json", obj)])
    assert run.mean_accepted == 3.08047104 and run.verified_tokens == 4.0


@pytest.mark.parametrize("make", [vllm_by_hand, sglang_by_hand])
def test_duration_rounded_to_four_decimals(tmp_path, make):
    # the throughputs over the run's 7.65432109 s; the file keeps 7.6543
    obj = make(
        duration=7.6543,
        output_throughput=11616 / 7.65432109,
        request_throughput=96 / 7.65432109,
    )
    (run,) = read_bench_files([dump(tmp_path / "v.json", obj)])
    assert run.duration_s == 7.6543


def test_nothing_accepted_near_zero(tmp_path):
    """With no draft token accepted the derived rate and rate sum are 0, where only the
    absolute floor (far below any rounding) allows a difference."""

    def none_accepted(**override):
        r = vllm_by_hand(
            spec_decode_acceptance_length=1.0,
            spec_decode_accepted_tokens=0,
            spec_decode_acceptance_rate=0.0,
            spec_decode_per_position_acceptance_rates=[0.0, 0.0, 0.0],
        )
        r.update(override)
        return r

    (run,) = read_bench_files([dump(tmp_path / "z.json", none_accepted())])
    assert run.mean_accepted == 1.0
    noise = none_accepted(spec_decode_acceptance_rate=1e-12)
    assert read_bench_files([dump(tmp_path / "n.json", noise)])[0].mean_accepted == 1.0
    off = none_accepted(spec_decode_acceptance_rate=1e-6)
    with pytest.raises(InputError, match=r"n.json: spec_decode_acceptance_rate: 1e-06 given"):
        read_bench_files([dump(tmp_path / "n.json", off)])
    off = none_accepted(spec_decode_per_position_acceptance_rates=[1e-6, 0.0, 0.0])
    with pytest.raises(InputError, match=r"n.json: spec_decode_per_position_acceptance_rates"):
        read_bench_files([dump(tmp_path / "n.json", off)])
