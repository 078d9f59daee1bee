"""allocator calibrate: recovery of known step-time parameters from synthetic rows with
seeded noise, the row-to-step conversion by hand, held-out errors, the written file,
and bad input (one line, exit 2, no file)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from allocator.calibration import calibrate, holdout_mask, read_measured, serving_section
from allocator.cli import app
from allocator.core.problem import Problem
from allocator.io.build import problem_from_file
from allocator.io.spec import load_problem
from allocator.model.under_load import bonus_expected
from tests.support.synthetic_serving import DRAFT, OVH, PROBLEM, V0, V1, C, true_expected, true_step

runner = CliRunner()


def synthetic_csv(noise: float, seed: int, ks=(1, 3, 5, 7), batches=(1, 8, 32, 64, 128)) -> str:
    rng = np.random.default_rng(seed)
    lines = ["drafters,k,batch,tokens_per_s"]
    for b in batches:
        for names in ([], ["a"], ["b"], ["a", "b"]):
            for k in [0] if not names else ks:
                tps = 1000 * b * true_expected(names, k) / true_step(names, k, b)
                tps *= 1.0 + noise * rng.standard_normal()
                lines.append(f"{'+'.join(names)},{k},{b},{tps:.6f}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def problem_file(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(PROBLEM)
    return p


def load(path) -> Problem:
    return problem_from_file(path)


def test_bonus_expected_by_hand(problem_file):
    prob = load(problem_file)
    members = np.array([[1, 0], [1, 0], [0, 1], [1, 1], [0, 0]], bool)
    k = np.array([3, 1, 2, 2, 0])
    got = bonus_expected(prob, members, k)
    want = [
        1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6,
        1.8,
        1 + 0.6 + 0.36,
        1 + (1 - 0.2 * 0.4) + (1 - 0.2 * 0.4) * (1 - 0.3 * 0.4),
        1.0,
    ]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_recovers_known_parameters_from_noisy_rows(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.01, seed=7))
    prob = load(problem_file)
    cal = calibrate(prob, read_measured(csv, prob))
    m = cal.model
    assert m.verify_fixed == pytest.approx(V0, rel=0.03)
    assert m.verify_per_seq == pytest.approx(V1, rel=0.15)
    assert m.compute_per_token == pytest.approx(C, rel=0.05)
    assert m.overhead == pytest.approx(OVH, abs=0.15)
    for i, n in enumerate(prob.names):
        if n in DRAFT:
            assert m.draft_fixed[i] == pytest.approx(DRAFT[n][0], rel=0.1, abs=0.05)
            assert m.draft_per_seq[i] == pytest.approx(DRAFT[n][1], rel=0.15, abs=0.001)
    # 1% noise: in-sample errors of a few percent at most
    assert cal.median_abs_error_pct < 2.0
    # the written tables reproduce the truth at k never measured (2, 4, 6)
    serving, draft_ms, k_max = serving_section(prob, cal)
    assert k_max == 7
    table = serving["verify_ms"]
    for b in (1, 32, 128):
        for names, k in ((["a"], 4), (["b"], 2), (["a", "b"], 6)):
            t = len(names) * k + 1
            verify = table["ms"][table["batch"].index(b)][table["tokens"].index(t)]
            step = verify + k * sum(draft_ms[n][b] for n in names) + serving["overhead_ms"]
            assert step == pytest.approx(true_step(names, k, b), rel=0.03)


def test_noise_free_rows_fit_exactly(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.0, seed=0))
    prob = load(problem_file)
    cal = calibrate(prob, read_measured(csv, prob))
    assert cal.max_abs_error_pct < 1e-3


def test_mean_accepted_converts_rows_to_step_times(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(
        "drafters,k,batch,tokens_per_s,mean_accepted\n"
        ",0,4,400,\n"
        "a,2,4,600,2.5\n"
        "a,4,4,640,\n"
        "b,3,4,500,1.9\n"
    )
    prob = load(problem_file)
    cal = calibrate(prob, read_measured(csv, prob))
    e_a4 = 1 + 0.8 + 0.56 + 0.336 + 0.2016
    np.testing.assert_allclose(cal.expected, [1.0, 2.5, e_a4, 1.9], rtol=1e-12)
    np.testing.assert_allclose(
        cal.measured_step,
        [1000 * 4 * 1 / 400, 1000 * 4 * 2.5 / 600, 1000 * 4 * e_a4 / 640, 1000 * 4 * 1.9 / 500],
        rtol=1e-12,
    )


def test_holdout_reports_held_out_rows_only(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.02, seed=3))
    prob = load(problem_file)
    data = read_measured(csv, prob)
    mask = holdout_mask(data, 0.25, seed=11)
    assert mask.sum() == round(0.25 * len(data))
    np.testing.assert_array_equal(mask, holdout_mask(data, 0.25, seed=11))
    assert not np.array_equal(mask, holdout_mask(data, 0.25, seed=12))
    cal = calibrate(prob, data, holdout=0.25, seed=11)
    np.testing.assert_array_equal(cal.held_out, mask)
    held = np.abs(cal.error_pct[mask])
    assert cal.median_abs_error_pct == pytest.approx(float(np.median(held)))
    assert cal.max_abs_error_pct == pytest.approx(float(held.max()))
    # every drafter set keeps a fitted row
    for row in np.unique(data.members, axis=0):
        same = np.all(data.members == row, axis=1)
        assert (same & ~mask).any()


def test_cli_writes_problem_and_reports(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.01, seed=5))
    out = tmp_path / "p2.yaml"
    r = runner.invoke(
        app,
        [
            "calibrate",
            str(csv),
            "--problem",
            str(problem_file),
            "--out",
            str(out),
            "--json",
            "-",
            "--holdout",
            "0.2",
            "--seed",
            "4",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["holdout"]["rows"] == round(0.2 * 65)
    assert doc["evaluated_on"] == "held-out rows"
    held = [row["error_pct"] for row in doc["rows"] if row["held_out"]]
    assert doc["max_abs_error_pct"] == pytest.approx(max(abs(e) for e in held))
    spec = load_problem(out)  # validates
    before = load_problem(problem_file)
    assert spec.name == before.name and spec.convention == before.convention
    assert [d.acceptance for d in spec.drafters] == [d.acceptance for d in before.drafters]
    assert [d.unit_cost for d in spec.drafters] == [d.unit_cost for d in before.drafters]
    assert spec.serving is not None and spec.serving.batch_sizes == [1, 8, 32, 64, 128]
    assert spec.drafters[1].draft_ms is not None
    assert spec.search.k.max == 7
    assert "comments" in out.read_text().splitlines()[1]


def test_cli_human_table(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.01, seed=5))
    out = tmp_path / "p2.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(problem_file), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "median |error|" in r.stdout and "largest" in r.stdout and out.exists()


GOOD_ROWS = "drafters,k,batch,tokens_per_s\n,0,1,100\na,2,1,150\na,4,1,160\nb,3,1,140\n"


@pytest.mark.parametrize(
    ("csv_text", "field"),
    [
        ("drafters,k,tokens_per_s\n,0,100\n", "measured.batch"),
        ("drafters,k,batch,tokens_per_s,speed\n,0,1,100,3\n", "measured.speed"),
        ("drafters,k,batch,tokens_per_s\n,0,1,fast\n", "measured.tokens_per_s (line 2)"),
        ("drafters,k,batch,tokens_per_s\n,0,one,100\n", "measured.batch (line 2)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,100\na,2.5,1,150\n", "measured.k (line 3)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,100\nzz,2,1,150\n", "measured.drafters (line 3)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,100\na,17,1,150\n", "measured.k (line 3)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,100\na,-1,1,150\n", "measured.k (line 3)"),
        ("drafters,k,batch,tokens_per_s\n,0,0,100\n", "measured.batch (line 2)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,-5\n", "measured.tokens_per_s (line 2)"),
        ("drafters,k,batch,tokens_per_s\n,0,1,nan\n", "measured.tokens_per_s (line 2)"),
        (
            "drafters,k,batch,tokens_per_s,mean_accepted\na,2,1,150,3.5\n",
            "measured.mean_accepted (line 2)",
        ),
        ("drafters,k,batch,tokens_per_s\n,0,1,100,7\n", "measured (line 2)"),
        ("drafters,k,batch,tokens_per_s\n", "measured"),
        ("drafters,k,batch,tokens_per_s\n,0,1,100\na,2,1,150\n", "measured.drafters"),
    ],
)
def test_bad_measured_rows(problem_file, tmp_path, csv_text, field):
    csv = tmp_path / "m.csv"
    csv.write_text(csv_text)
    out = tmp_path / "p2.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(problem_file), "-o", str(out)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.output
    assert "Traceback" not in r.output
    assert not out.exists()


@pytest.mark.parametrize("which", ["problem", "csv"])
def test_out_may_not_be_an_input(problem_file, tmp_path, which):
    csv = tmp_path / "m.yaml" if which == "csv" else tmp_path / "m.csv"
    csv.write_text(GOOD_ROWS)
    before = {p: p.read_text() for p in (problem_file, csv)}
    out = problem_file if which == "problem" else csv
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(problem_file), "-o", str(out)])
    assert r.exit_code == 2
    assert r.output.startswith("error: --out: ") and len(r.output.strip().splitlines()) == 1
    assert {p: p.read_text() for p in before} == before


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--holdout", "1.5"], "--holdout"),
        (["--holdout", "0"], "--holdout"),
    ],
)
def test_bad_options(problem_file, tmp_path, args, field):
    csv = tmp_path / "m.csv"
    csv.write_text(GOOD_ROWS)
    out = tmp_path / "p2.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(problem_file), "-o", str(out), *args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {field}: ")
    assert not out.exists()


def test_comment_lines_and_one_batch_note(problem_file, tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("# source: a test\n" + GOOD_ROWS)
    prob = load(problem_file)
    cal = calibrate(prob, read_measured(csv, prob))
    assert any("one batch size" in n for n in cal.notes)
    assert cal.model.verify_per_seq == 0.0 and cal.model.draft_per_seq.max() == 0.0
    with open(tmp_path / "p.yaml") as f:
        assert yaml.safe_load(f)["name"] == "synth"


def test_written_problem_predicts_through_the_serving_model(problem_file, tmp_path):
    """P2, read back and evaluated by the serving model (not by calibrate's own code),
    gives calibrate's predictions at the measured rows and the truth at unmeasured k."""
    from allocator.model.under_load import serving_metrics

    csv = tmp_path / "m.csv"
    csv.write_text(synthetic_csv(noise=0.01, seed=9))
    out = tmp_path / "p2.yaml"
    r = runner.invoke(
        app, ["calibrate", str(csv), "-p", str(problem_file), "-o", str(out), "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    p2 = problem_from_file(out)
    for row in doc["rows"]:
        members = np.array([[n in row["drafters"] for n in p2.names]])
        got = serving_metrics(p2, members, np.array([row["k"]]), row["batch"])
        assert got["tokens_per_s"][0] == pytest.approx(row["predicted_tokens_per_s"], rel=1e-5)
    for b in (8, 64):
        for names, k in ((["a"], 2), (["b"], 4), (["a", "b"], 6)):
            members = np.array([[n in names for n in p2.names]])
            got = serving_metrics(p2, members, np.array([k]), b)
            want = 1000 * b * true_expected(names, k) / true_step(names, k, b)
            assert got["tokens_per_s"][0] == pytest.approx(want, rel=0.03)
    # past the verify table (m_max * k_max + 1 = 15 tokens): refused, naming serving
    r = runner.invoke(app, ["evaluate", str(out), "-d", "a", "-k", "15", "--batch", "8"])
    assert r.exit_code == 2 and r.output.startswith("error: serving: "), r.output
    assert problem_from_file(out).k_max == 7  # solve and schedule stay at measured k


MEASURED = Path(__file__).resolve().parents[3] / "problems" / "measured"


@pytest.mark.parametrize(
    ("csv_name", "problem_name"),
    [
        ("vllm-issue20780-bs1.csv", "llama31-8b-eagle.yaml"),
        ("vllm-pr16937-h100-bs1.csv", "llama31-8b-eagle.yaml"),
        ("sglang-specforge339-2xh100.csv", "qwen3-30b-a3b-eagle3.yaml"),
        ("leviathan2023-table2.csv", "leviathan2023-t5.yaml"),
    ],
)
def test_bundled_measurements_calibrate(tmp_path, csv_name, problem_name):
    out = tmp_path / "p2.yaml"
    r = runner.invoke(
        app,
        ["calibrate", str(MEASURED / csv_name), "-p", str(MEASURED / problem_name), "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert problem_from_file(out).serving is not None


def test_bundled_acceptance_reproduces_the_measured_accept_lengths():
    """llama31-8b-eagle.yaml's per-position acceptance was derived from issue 20780's
    accept lengths; the bonus-convention E of that acceptance gives them back."""
    prob = problem_from_file(MEASURED / "llama31-8b-eagle.yaml")
    data = read_measured(MEASURED / "vllm-issue20780-bs1.csv", prob)
    spec = data.k > 0
    got = bonus_expected(prob, data.members[spec], data.k[spec])
    np.testing.assert_allclose(got, data.mean_accepted[spec], atol=2e-6)
    # Leviathan's rows: E = (1 - a^(g+1)) / (1 - a) of the alpha in the file's header
    lev = (MEASURED / "leviathan2023-table2.csv").read_text().splitlines()
    table = [x.split() for x in lev if x.startswith("#   EnDe") or x.startswith("#   CNNDM")]
    rows = [x.split(",") for x in lev if x and not x.startswith("#")][2:]
    assert len(table) == len(rows) == 12
    for words, row in zip(table, rows, strict=True):
        g, a = int(words[4]), float(words[5])
        assert row[0] == words[2] and int(row[1]) == g
        assert float(row[4]) == pytest.approx((1 - a ** (g + 1)) / (1 - a), abs=1e-6)
        assert float(row[3]) == float(words[6].rstrip("X"))


def test_steps_sweep_reads_in_the_calibrate_format(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: s\nconvention: bonus\ndrafters: [{name: eagle, acceptance: 0.7, unit_cost: 0.1}]\n"
    )
    data = read_measured(MEASURED / "sglang-pr22246-steps.csv", problem_from_file(p))
    assert len(data) == 42 and set(data.k.tolist()) == set(range(1, 7))


def test_spreadsheet_export_with_byte_order_mark_and_crlf(problem_file, tmp_path):
    # Excel's "CSV UTF-8" starts with a byte-order mark; it read as part of the first
    # column's name ('\ufeffdrafters'), so the file was refused for a missing column
    csv = tmp_path / "m.csv"
    csv.write_bytes(b"\xef\xbb\xbf" + GOOD_ROWS.replace("\n", "\r\n").encode())
    plain = tmp_path / "plain.csv"
    plain.write_text(GOOD_ROWS)
    prob = load(problem_file)
    got, want = read_measured(csv, prob), read_measured(plain, prob)
    for name in ("members", "k", "batch", "tokens_per_s", "mean_accepted", "lines"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_rows_without_a_baseline_say_the_baseline_is_not_measured(problem_file, tmp_path):
    # speedups are read against k = 0: without such a row at a batch size the calibrated
    # baseline there is inferred from the speculative rows, which the notes must say
    csv = tmp_path / "m.csv"
    csv.write_text(
        "drafters,k,batch,tokens_per_s\n,0,1,100\na,2,1,150\na,4,1,160\nb,3,1,140\n"
        "a,2,8,900\nb,3,8,850\n"
    )
    prob = load(problem_file)
    notes = calibrate(prob, read_measured(csv, prob)).notes
    assert any("no plain-decoding row (k = 0) at batch 8" in n for n in notes), notes
    csv.write_text(GOOD_ROWS)
    assert not any("plain-decoding" in n for n in calibrate(prob, read_measured(csv, prob)).notes)


def test_undetermined_parameters_have_no_value_in_the_model_block(tmp_path):
    """SpecForge 339 measures one drafter at one k: its draft cost and the step's overhead
    cannot be told apart. The JSON's ``model`` block carries no number for them (null),
    the same parameters ``parameters`` lists as undetermined; the determined ones keep
    their fitted values."""
    from allocator import api

    root = Path(__file__).resolve().parents[3] / "problems" / "measured"
    doc = api.calibrate(
        root / "sglang-specforge339-2xh100.csv",
        root / "qwen3-30b-a3b-eagle3.yaml",
        tmp_path / "q.yaml",
    ).to_dict()
    undetermined = {p["name"] for p in doc["parameters"] if p["value"] is None}
    # the pair one k cannot separate (the per-sequence slope, fixed by two batch sizes, may or
    # may not clear its standard error, as the optimiser lands)
    assert {"overhead_ms", "drafters.eagle3.fixed_ms"} <= undetermined
    m = doc["model"]
    flat = {k: v for k, v in m.items() if k.endswith("_ms") or k == "compute_ms_per_token"}
    for name, d in m["drafters"].items():
        flat.update({f"drafters.{name}.{key}": v for key, v in d.items()})
    assert {k for k, v in flat.items() if v is None} == undetermined
    fitted = {p["name"]: p["value"] for p in doc["parameters"] if p["value"] is not None}
    assert all(flat[k] == pytest.approx(v) for k, v in fitted.items() if k in flat)
