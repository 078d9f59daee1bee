"""allocator calibrate on the engines' own files and with the roofline: parameter recovery
from synthetic benchmark files written from a known roofline with noise, leave-one-k-out
and leave-one-batch-out, the measured domain written and noted by later commands, the
fixes of issue 20 (no baseline invented, bad input in one line) and what is refused.

The truth of the recovery test is a roofline with known factors; the synthetic engine
(tests/support/synthetic_bench.py) runs closed loops whose every step takes that
roofline's time (times a seeded noise), and writes vLLM's --save-result files from them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.cli import app
from allocator.core.hardware import Hardware
from allocator.core.model_spec import ModelSpec
from allocator.model.steptime import RooflinePredictor
from tests.support.cli_runner import runner
from tests.support.synthetic_bench import simulate, vllm_result, write_vllm
from tests.support.synthetic_serving import PROBLEM, true_expected, true_step

MEASURED = Path(__file__).resolve().parents[3] / "problems" / "measured"

# a small dense verifier whose every step is memory bound (its arithmetic is tiny), so
# that the steady state's mean prefill per step is exact for the KV it writes
MODEL = {
    "params_b": 0.5,
    "layers": 24,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 16,
    "head_dim": 128,
    "dtype": "bf16",
}
TRUTH = {
    "mem_eff": 0.6,
    "prefill_eff": 0.5,
    "fixed_ms": 0.5,
    "seq_ms": 0.01,
    "overhead_ms": 0.2,
    "draft.d.fixed_ms": 0.3,
    "draft.d.seq_ms": 0.004,
}
ACC = 0.7
#: prompts per concurrency slot of each synthetic run
PROMPTS = 6


def truth() -> RooflinePredictor:
    spec = ModelSpec.from_fields(**MODEL)
    r = RooflinePredictor.from_specs(Hardware.from_fields("h100-sxm"), spec, {"d": None})
    return r.with_parameters(TRUTH)


def roofline_problem(tmp_path: Path) -> Path:
    data = {
        "name": "bench",
        "convention": "bonus",
        "drafters": [
            {
                "name": "d",
                "method": "eagle3",
                "model": "org/head",
                "acceptance": ACC,
                "unit_cost": 0.05,
            }
        ],
        "search": {"k": {"max": 4}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": [1, 8, 32],
            "hardware": {"gpu": "h100-sxm"},
            "model": MODEL,
        },
    }
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def bench_files(tmp_path: Path, noise: float = 0.01, seed: int = 0) -> list[Path]:
    model = truth()
    rng = np.random.default_rng(seed)

    kv_write = model.peak.kv_ms / model.mem_eff  # ms per prefilled token's KV written
    # ms per prefilled token's arithmetic: the linear layers' and the attention's at the
    # run's mean prompt chunk (the model's pairs P(P + 1)/2 are taken at the mean prefill
    # per step, so the truth is too: the step stays affine in the prefill)
    phi, alpha = model.peak.token_ms, model.peak.attn_ms

    def stepper(mean_prefill: float):
        per_token = kv_write + (phi + alpha * (mean_prefill + 1.0) / 2.0) / model.prefill_eff

        def step(b: int, t: int, context: float, prefill: int) -> float:
            # the decoding step (memory bound) plus the prefilled prompts' KV write and
            # arithmetic: affine in the prefill, so that a run's mean prefill per step
            # gives its mean step
            k = t - 1 if b > 0 else 0
            if b == 0:
                ms = model.fixed_ms + model.peak.weights_ms / model.mem_eff
            else:
                x = np.array([[k > 0]])
                ms = float(model.step_ms(x, k, k + 1, float(b), context, 0.0)[0])
            return (ms + per_token * prefill) * (1.0 + noise * rng.standard_normal())

        return step

    paths = []
    for c in (1, 8, 32):
        for k in (0, 1, 2, 4):
            for input_len in (128, 512):
                # a prompt per request, a request per output / E steps in each slot
                e = sum(ACC**j for j in range(k + 1))
                sim = simulate(
                    stepper(c * input_len * e / 64),
                    concurrency=c,
                    num_prompts=PROMPTS * c,
                    input_len=input_len,
                    output_len=64,
                    k=k,
                    acceptance=[ACC],
                    seed=int(rng.integers(1 << 30)),
                )
                doc = vllm_result(
                    sim,
                    model="org/verifier",
                    concurrency=c,
                    num_prompts=PROMPTS * c,
                    input_len=input_len,
                    output_len=64,
                    k=k,
                    metadata={"hardware": "h100-sxm"},
                )
                path = tmp_path / f"run-c{c}-k{k}-i{input_len}.json"
                write_vllm(path, doc)
                paths.append(path)
    return paths


def calibrate(*args) -> tuple[int, str, dict | None]:
    r = runner.invoke(app, ["calibrate", *map(str, args), "--json", "-"])
    doc = json.loads(r.stdout) if r.exit_code == 0 else None
    return r.exit_code, r.output, doc


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """:func:`bench_files` with its defaults (seeded: the same files each time), written
    once for the module's tests: read them, copy one before changing it."""
    return bench_files(tmp_path_factory.mktemp("runs"))


def test_recovers_the_roofline_factors_from_synthetic_bench_files(tmp_path, runs):
    problem = roofline_problem(tmp_path)
    files = runs
    out = tmp_path / "p2.yaml"
    code, output, doc = calibrate(*files, "--problem", problem, "--out", out)
    assert code == 0, output
    assert doc["model"]["form"] == "roofline"
    got = {p["name"]: p for p in doc["parameters"]}
    for name, want in TRUTH.items():
        p = got[name]
        # mem_eff, fixed_ms and prefill_eff trade through the prefill (its KV write at
        # mem_eff, its arithmetic at prefill_eff, both linear in the mean prefill per step,
        # which the steady-state relation estimates only to within its own approximation;
        # mem_eff against fixed_ms only through the KV traffic): looser
        rel = 0.25 if name in ("mem_eff", "fixed_ms", "prefill_eff") else 0.1
        assert p["value"] == pytest.approx(want, rel=rel, abs=2e-3), (name, p)
        lo, hi = p["interval_95"]
        assert lo <= p["value"] <= hi
    # never compute bound: the rows cannot determine compute_eff; it is written at the
    # value the fit used (the file is the fit), and no combination of it is determined
    assert got["compute_eff"]["value"] is None and got["compute_eff"]["undetermined"]
    assert got["compute_eff"]["determined_combination"] is None
    written = yaml.safe_load(out.read_text())["serving"]
    assert written["roofline"]["compute_eff"] == pytest.approx(
        got["compute_eff"]["written"], rel=1e-9
    )
    assert written["roofline"]["mem_eff"] == pytest.approx(TRUTH["mem_eff"], rel=0.25)
    assert written["roofline"]["prefill_eff"] == pytest.approx(
        got["prefill_eff"]["written"], rel=1e-9
    )
    assert written["roofline"]["drafters"]["d"]["fixed_ms"] == pytest.approx(0.3, rel=0.1)
    cal = written["calibrated_from"]
    assert cal["rows"] == len(files)
    assert cal["k"] == [0.0, 4.0] and cal["context"] == [160.0, 544.0]
    assert cal["speculative_batch"][1] <= 32
    assert doc["median_abs_error_pct"] < 2.0


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["by-k", "by-batch"])
def test_leave_one_k_out_and_one_batch_out_predict_held_out_groups(tmp_path, scheme):
    problem = roofline_problem(tmp_path)
    files = bench_files(tmp_path, seed=3)
    code, output, doc = calibrate(
        *files, "--problem", problem, "--out", tmp_path / "o.yaml", "--holdout", scheme
    )
    assert code == 0, output
    assert doc["holdout"]["by"] == scheme.removeprefix("by-")
    assert doc["evaluated_on"] == "held-out rows"
    predicted = [r for r in doc["rows"] if r["predictable"]]
    if scheme == "by-k":
        # without the k = 0 rows nothing separates the base pass: those are not predicted
        assert all(not r["predictable"] for r in doc["rows"] if r["k"] == 0)
    assert predicted and doc["max_abs_error_pct"] < 10.0
    assert any(f"--holdout {scheme}" in n for n in doc["notes"])


def csv_rows(batches=(1, 8, 32, 64, 128), spec_batches=None, ks=(1, 3, 5, 7), noise=0.0) -> str:
    rng = np.random.default_rng(0)
    lines = ["drafters,k,batch,tokens_per_s"]
    for b in batches:
        for names in ([], ["a"], ["b"]):
            if names and spec_batches is not None and b not in spec_batches:
                continue
            for k in [0] if not names else ks:
                tps = 1000 * b * true_expected(names, k) / true_step(names, k, b)
                tps *= 1.0 + noise * rng.standard_normal()
                lines.append(f"{'+'.join(names)},{k},{b},{tps:.6f}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def synth(tmp_path):
    p = tmp_path / "synth.yaml"
    p.write_text(PROBLEM)
    return p


def test_today_form_intervals_cover_the_truth(synth, tmp_path):
    from tests.support.synthetic_serving import DRAFT, OVH, V0, V1, C

    csv = tmp_path / "m.csv"
    csv.write_text(csv_rows(noise=0.01))
    code, output, doc = calibrate(csv, "--problem", synth, "--out", tmp_path / "o.yaml")
    assert code == 0, output
    want = {
        "verify_fixed_ms": V0,
        "verify_per_seq_ms": V1,
        "compute_ms_per_token": C,
        "overhead_ms": OVH,
        "drafters.a.fixed_ms": DRAFT["a"][0],
        "drafters.a.per_seq_ms": DRAFT["a"][1],
        "drafters.b.fixed_ms": DRAFT["b"][0],
        "drafters.b.per_seq_ms": DRAFT["b"][1],
    }
    got = {p["name"]: p for p in doc["parameters"]}
    for name, v in want.items():
        lo, hi = got[name]["interval_95"]
        assert lo <= v <= hi, (name, got[name])


def test_a_fit_without_a_plain_decoding_row_is_refused(synth, tmp_path):
    """Issue 20: without k = 0 rows the fit put the forward pass into the overhead and
    wrote a 0.0001 ms plain step (evaluate --k 0 --batch 1 gave 10,000,000 tokens/s)."""
    csv = tmp_path / "m.csv"
    csv.write_text("drafters,k,batch,tokens_per_s\na,1,1,150\na,3,1,160\nb,2,1,140\nb,4,1,130\n")
    out = tmp_path / "o.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(synth), "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: measured: no plain-decoding (k = 0) row")
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()
    # the bundled SGLang steps sweep has no baseline: refused the same way
    p = tmp_path / "e.yaml"
    p.write_text(
        "name: s\nconvention: bonus\ndrafters: [{name: eagle, acceptance: 0.7, unit_cost: 0.1}]\n"
    )
    r = runner.invoke(
        app, ["calibrate", str(MEASURED / "sglang-pr22246-steps.csv"), "-p", str(p), "-o", str(out)]
    )
    assert r.exit_code == 2 and "no plain-decoding" in r.output and not out.exists()


def test_later_commands_note_plans_outside_the_calibrated_domain(synth, tmp_path):
    """Issue 20: after calibrating speculation on rows up to batch 4, schedule at 64 said
    "speculation still pays at the largest batch size planned" with no caveat."""
    csv = tmp_path / "m.csv"
    csv.write_text(csv_rows(batches=(1, 4, 16, 64), spec_batches=(1, 4)))
    out = tmp_path / "o.yaml"
    code, output, _ = calibrate(csv, "--problem", synth, "--out", out)
    assert code == 0, output
    written = yaml.safe_load(out.read_text())["serving"]["calibrated_from"]
    assert written["batch"] == [1.0, 64.0] and written["speculative_batch"] == [1.0, 4.0]
    r = runner.invoke(app, ["schedule", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any("speculative step times at batch 16..64 extrapolate" in n for n in notes), notes
    r = runner.invoke(app, ["schedule", str(out)])
    # the title wraps at the terminal's width
    assert "extrapolated: see the notes" in " ".join(r.stdout.split())
    assert "extrapolate" in r.stderr
    r = runner.invoke(
        app, ["evaluate", str(out), "-d", "a", "-k", "3", "--batch", "64", "--json", "-"]
    )
    assert any("extrapolate" in n for n in json.loads(r.stdout)["notes"])
    r = runner.invoke(app, ["solve", str(out), "--batch", "64", "--json", "-"])
    assert any("extrapolate" in n for n in json.loads(r.stdout)["notes"])
    # inside the measured domain there is nothing to say
    r = runner.invoke(
        app, ["evaluate", str(out), "-d", "a", "-k", "3", "--batch", "4", "--json", "-"]
    )
    assert "notes" not in json.loads(r.stdout)


def test_rate_runs_are_left_out_with_a_note_and_csv_mixes_with_bench_files(tmp_path, runs):
    problem = roofline_problem(tmp_path)
    files = runs
    rate = json.loads(files[0].read_text())
    rate["request_rate"] = 4.0
    rate["max_concurrency"] = None
    (tmp_path / "rate.json").write_text(json.dumps(rate))
    extra = tmp_path / "more.csv"
    extra.write_text("drafters,k,batch,tokens_per_s,context\n,0,16,5000,1000\n")
    code, output, doc = calibrate(
        *files, tmp_path / "rate.json", extra, "--problem", problem, "--out", tmp_path / "o.yaml"
    )
    assert code == 0, output
    assert any("at a request rate" in n and "serving simulator" in n for n in doc["notes"])
    assert len(doc["rows"]) == len(files) + 1
    assert sum(r["source"].startswith("more.csv line") for r in doc["rows"]) == 1


def test_the_drafter_of_bench_runs_must_be_named_when_the_problem_has_several(tmp_path, runs):
    problem = roofline_problem(tmp_path)
    data = yaml.safe_load(problem.read_text())
    data["drafters"].append(
        {"name": "e", "method": "eagle3", "model": "o/e", "acceptance": 0.5, "unit_cost": 0.05}
    )
    problem.write_text(yaml.safe_dump(data))
    files = runs
    code, output, _ = calibrate(*files, "--problem", problem, "--out", tmp_path / "o.yaml")
    assert code == 2 and output.startswith("error: --drafters: "), output
    code, output, doc = calibrate(
        *files, "--problem", problem, "--out", tmp_path / "o.yaml", "--drafters", "d"
    )
    assert code == 0, output
    assert any("no speculative row measures e" in n for n in doc["notes"])


def test_bench_files_of_other_hardware_are_refused(tmp_path, runs):
    problem = roofline_problem(tmp_path)
    doc = json.loads(runs[0].read_text())
    doc["hardware"] = "a100-80g"
    other = tmp_path / runs[0].name
    other.write_text(json.dumps(doc))
    code, output, _ = calibrate(other, "--problem", problem, "--out", tmp_path / "o.yaml")
    assert code == 2 and "a100-80g" in output and "h100-sxm" in output


# ---------------------------------------------------------------- bad input (issue 20)
GOOD = "drafters,k,batch,tokens_per_s\n,0,1,100\na,2,1,150\na,4,1,160\nb,3,1,140\nb,5,1,130\n"


@pytest.mark.parametrize(
    ("text", "args", "field"),
    [
        (GOOD, ["--seed", "-1"], "--seed"),
        (GOOD, ["--seed", str(2**64)], "--seed"),
        (GOOD, ["--holdout", "by-n"], "--holdout"),
        (
            "drafters,k,batch,tokens_per_s\n,0,1,100\na,9223372036854775808,1,150\n",
            [],
            "measured.k",
        ),
        ("drafters,k,batch,tokens_per_s\n,0,92233720368547758080,100\n", [], "measured.batch"),
        (GOOD.replace(",0,1,100", ",0,1,1e308"), [], "measured.tokens_per_s"),
        (
            'drafters,k,batch,tokens_per_s\n,0,1,100\n"a\nb",2,1,150\n',
            [],
            "measured.drafters (line 3)",
        ),
        ("drafters,k,batch,tokens_per_s,context\n,0,1,100,-4\n", [], "measured.context (line 2)"),
    ],
)
def test_bad_input_is_one_line(synth, tmp_path, text, args, field):
    csv = tmp_path / "m.csv"
    csv.write_text(text)
    out = tmp_path / "o.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(synth), "-o", str(out), *args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), r.output
    assert "Traceback" not in r.output and not out.exists()


def test_a_file_that_is_not_a_csv_is_never_echoed(synth, tmp_path):
    secret = "API_TOKEN=" + "s3cr3t" * 20
    env = tmp_path / "environ"
    env.write_bytes(f"PATH=/usr/bin\0{secret}\0".encode())
    r = runner.invoke(
        app, ["calibrate", str(env), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
    )
    assert r.exit_code == 2 and "s3cr3t" not in r.output and "NUL" in r.output
    header = tmp_path / "h.csv"
    header.write_text(f"drafters,k,batch,tokens_per_s,{secret}\n,0,1,100,1\n")
    r = runner.invoke(
        app, ["calibrate", str(header), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
    )
    assert r.exit_code == 2 and "s3cr3t" not in r.output and "column 5" in r.output
    missing = tmp_path / "m.csv"
    missing.write_text(f"{secret},k\n1,2\n")
    r = runner.invoke(
        app, ["calibrate", str(missing), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
    )
    assert r.exit_code == 2 and "s3cr3t" not in r.output


def test_a_fifo_or_a_device_is_not_a_file_not_found(synth, tmp_path):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        r = runner.invoke(
            app, ["calibrate", str(path), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
        )
        assert r.exit_code == 2
        assert "not a regular file" in r.output and "not found" not in r.output


def test_too_many_rows_is_a_stated_limit(synth, tmp_path):
    from allocator.calibration import MAX_ROWS

    csv = tmp_path / "m.csv"
    csv.write_text("drafters,k,batch,tokens_per_s\n" + ",0,1,100\n" * (MAX_ROWS + 1))
    r = runner.invoke(
        app, ["calibrate", str(csv), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
    )
    assert r.exit_code == 2 and f"more than {MAX_ROWS:,} rows" in r.output


def test_the_terminal_table_is_bounded(synth, tmp_path):
    """Issue 20: 100,001 rows took over 400 s printing the table; it shows at most
    TABLE_ROWS rows (every row is in --json)."""
    from allocator.cli.calibrate import TABLE_ROWS

    csv = tmp_path / "m.csv"
    csv.write_text(csv_rows(batches=(1, 2, 4, 8, 16, 32, 64, 128)))  # 8 x 9 = 72 rows
    r = runner.invoke(
        app, ["calibrate", str(csv), "-p", str(synth), "-o", str(tmp_path / "o.yaml")]
    )
    assert r.exit_code == 0
    table = r.stdout.split("median |error|")[0]
    body = [line for line in table.splitlines() if line.startswith("│")]
    assert len(body) == TABLE_ROWS
    assert f"({72 - TABLE_ROWS:,} more rows in --json)" in r.stdout


def test_bundled_tables_calibrate_with_each_holdout(tmp_path):
    pairs = [
        ("vllm-issue20780-bs1.csv", "llama31-8b-eagle.yaml"),
        ("sglang-specforge339-2xh100.csv", "qwen3-30b-a3b-eagle3.yaml"),
    ]
    for csv_name, problem in pairs:
        for scheme in ("0.3", "by-k", "by-batch"):
            code, output, doc = calibrate(
                MEASURED / csv_name,
                "--problem",
                MEASURED / problem,
                "--out",
                tmp_path / "o.yaml",
                "--holdout",
                scheme,
                "--seed",
                "1",
            )
            assert code == 0, (csv_name, scheme, output)
            assert doc["calibrated_from"]["rows"] >= 1


def test_a_k_never_measured_is_noted(synth, tmp_path):
    """Every speculative row at k = 3: a schedule choosing k = 1 rests on the form's split
    of draft cost and overhead, which one k cannot give."""
    csv = tmp_path / "m.csv"
    csv.write_text(csv_rows(batches=(1, 8, 32), ks=(3,)))
    out = tmp_path / "o.yaml"
    code, output, _ = calibrate(csv, "--problem", synth, "--out", out)
    assert code == 0, output
    assert yaml.safe_load(out.read_text())["serving"]["calibrated_from"]["speculative_k"] == [3, 3]
    r = runner.invoke(
        app, ["evaluate", str(out), "-d", "a", "-k", "1", "--batch", "8", "--json", "-"]
    )
    assert any("outside the speculative k measured" in n for n in json.loads(r.stdout)["notes"])
