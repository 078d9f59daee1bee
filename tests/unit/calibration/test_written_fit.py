"""The file calibrate writes is the fit (issue 24): rows made from known parameters by the
step formulas written out here, with one row per group so that parameters confound; the
file read back must predict every row as the report says and as measured, and every
parameter the rows cannot separate is written with the combination they determine.
Rows without k = 0 with specs, and rows varying in context without them."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.cli import app
from allocator.core.hardware import Hardware
from allocator.core.model_spec import ModelSpec
from allocator.io.build import problem_from_file
from allocator.model.steptime.roofline import PeakTerms
from tests.support.cli_runner import runner

# ---------------------------------------------------------------- today's form
TODAY = """\
name: synth
convention: bonus
drafters:
  - {name: a, acceptance: 0.7, unit_cost: 0.05}
  - {name: b, acceptance: 0.5, unit_cost: 0.1}
search: {k: {max: 8}}
"""


def today_step(p: dict, names: list[str], k: int, b: int) -> float:
    """``max(v0 + v1·b, c·b·t) + k·Σ (d0 + d1·b) + overhead`` by hand."""
    t = len(names) * k + 1
    verify = max(p["v0"] + p["v1"] * b, p["c"] * b * t)
    draft = sum(p[f"d0_{n}"] + p[f"d1_{n}"] * b for n in names)
    return verify + k * draft + (p["ovh"] if k else 0.0)


def bonus_e(acc: float, k: int) -> float:
    return sum(acc**i for i in range(k + 1))


def today_rows(p: dict, b: int, ka: int, kb: int) -> tuple[str, list[float]]:
    """One batch size, one row per drafter set, each drafter at one k: the slopes, the
    overhead and the drafters' fixed times cannot be separated."""
    lines, steps = ["drafters,k,batch,tokens_per_s"], []
    for names, k, e in (([], 0, 1.0), (["a"], ka, bonus_e(0.7, ka)), (["b"], kb, bonus_e(0.5, kb))):
        step = today_step(p, names, k, b)
        steps.append(step)
        lines.append(f"{'+'.join(names)},{k},{b},{1000 * b * e / step!r}")
    return "\n".join(lines) + "\n", steps


def combination_at(expression: str, values: dict[str, float]) -> float:
    """``"a + 3·b - 0.5/c"`` at ``values``: a term is ``[coef·]name`` or ``coef/name``."""
    import re

    total = 0.0
    for sign, coef, op, name in re.findall(
        r"([+-]?)\s*(?:([0-9.e+-]+)([·/]))?([A-Za-z_][\w.]*)", expression
    ):
        c = float(coef) if coef else 1.0
        v = values[name]
        total += (-1 if sign == "-" else 1) * (c / v if op == "/" else c * v)
    return total


def file_steps(path, doc) -> np.ndarray:
    """Step ms of every row of ``doc`` by the written file, read back as any command does."""
    from allocator.model.under_load import predictor

    p2 = problem_from_file(path)
    members = np.array([[n in r["drafters"] for n in p2.names] for r in doc["rows"]])
    k = np.array([r["k"] for r in doc["rows"]])
    t = members.sum(axis=1) * k + 1
    b = np.array([float(r["batch"]) for r in doc["rows"]])
    ctx = np.array([r.get("context", 0.0) for r in doc["rows"]])
    if doc["model"].get("form") != "roofline":
        ctx = np.zeros_like(ctx)  # today's form reads no context
    return predictor(p2).step_ms(members, k, t, b, ctx, 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_written_file_predicts_the_fit_on_confounded_rows_today(tmp_path, seed):
    rng = np.random.default_rng(seed)
    p = {
        "v0": rng.uniform(3, 12),
        "v1": rng.uniform(0, 0.1),
        "c": rng.uniform(0.0, 1e-4),  # memory bound at every row
        "ovh": rng.uniform(0, 1.5),
        "d0_a": rng.uniform(0.1, 2),
        "d1_a": rng.uniform(0, 0.02),
        "d0_b": rng.uniform(0.1, 2),
        "d1_b": rng.uniform(0, 0.02),
    }
    b = int(rng.choice([1, 4, 16, 64]))
    ka, kb = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    text, steps = today_rows(p, b, ka, kb)
    (tmp_path / "m.csv").write_text(text)
    (tmp_path / "p.yaml").write_text(TODAY)
    out = tmp_path / "p2.yaml"
    r = runner.invoke(
        app,
        ["calibrate", str(tmp_path / "m.csv"), "-p", str(tmp_path / "p.yaml")]
        + ["-o", str(out), "--json", "-"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    got = file_steps(out, doc)
    reported = np.array([row["predicted_step_ms"] for row in doc["rows"]])
    np.testing.assert_allclose(got, reported, rtol=1e-9)
    np.testing.assert_allclose(got, steps, rtol=1e-6)  # the measured rows, by hand
    assert doc["predicted_from"] == "the written file, read back"
    params = {q["name"]: q for q in doc["parameters"]}
    # one k per drafter: overhead and draft fixed times confound; written, never dropped
    for name in ("overhead_ms", "drafters.a.fixed_ms", "drafters.b.fixed_ms"):
        q = params[name]
        assert q["value"] is None and q["written"] is not None, q
        assert "overhead_ms" in q["determined_combination"], q
    # what the rows determine has the truth's value: each combination at the truth's
    # parameters equals its value at the fit (overhead + k·(d0 + d1·b), v0 + b·v1); one
    # with the compute term is the fit's own side of the kink (the truth is memory bound)
    truth = {
        "verify_fixed_ms": p["v0"],
        "verify_per_seq_ms": p["v1"],
        "compute_ms_per_token": p["c"],
        "overhead_ms": p["ovh"],
    }
    for n in "ab":
        truth[f"drafters.{n}.fixed_ms"] = p[f"d0_{n}"]
        truth[f"drafters.{n}.per_seq_ms"] = p[f"d1_{n}"]
    for q in params.values():
        if q["determined_combination"] and "compute" not in q["determined_combination"]:
            expression, value = q["determined_combination"].split(" = ")
            assert combination_at(expression, truth) == pytest.approx(float(value), rel=1e-3), q
    # every fitted drafter keeps a draft time in the file: every measured k is evaluable
    written = yaml.safe_load(out.read_text())
    assert all(d.get("draft_ms") for d in written["drafters"])


# ---------------------------------------------------------------- the roofline from specs
MODEL = {
    "params_b": 0.5,
    "layers": 24,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 16,
    "head_dim": 128,
    "dtype": "bf16",
}


def roofline_problem(path, extra: dict | None = None) -> None:
    data = {
        "name": "roof",
        "convention": "bonus",
        "drafters": [
            {"name": "d", "method": "eagle3", "model": "o/h", "acceptance": 0.7, "unit_cost": 0.1}
        ],
        "search": {"k": {"max": 6}, "m": {"max": 1}},
        "serving": {"batch_sizes": [1, 8], "hardware": {"gpu": "h100-sxm"}, "model": MODEL},
    }
    data["serving"].update(extra or {})
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def peak() -> PeakTerms:
    return PeakTerms.from_specs(Hardware.from_fields("h100-sxm"), ModelSpec.from_fields(**MODEL))


def roofline_step(p: dict, k: int, b: float, ctx: float) -> float:
    """The roofline of a dense verifier by hand (docs/design.md §8.12), a drafter without
    a spec drafting ``fixed + seq·b`` per pass, the KV write counted."""
    pk = peak()
    t = k + 1
    n = b * t
    memory = (pk.weights_ms + pk.kv_ms * (b * ctx + n)) / p["mem_eff"] + p["fixed_ms"]
    memory += p["seq_ms"] * b
    compute = (pk.token_ms * n + pk.attn_ms * b * t * ctx) / p["compute_eff"]
    draft = p["d_fixed"] + p["d_seq"] * b
    return max(memory, compute) + k * draft + (p["overhead_ms"] if k else 0.0)


def roofline_csv(p: dict, rows) -> str:
    lines = ["drafters,k,batch,tokens_per_s,context"]
    for k, b, ctx in rows:
        e = bonus_e(0.7, k)
        step = roofline_step(p, k, b, ctx)
        lines.append(f"{'d' if k else ''},{k},{b},{1000 * b * e / step!r},{ctx}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(4))
def test_written_file_predicts_the_fit_on_confounded_rows_roofline(tmp_path, seed):
    """One context, one row per (k, batch): fixed_ms and mem_eff are one constant, which
    the old file dropped (fixed_ms not written, so the file was fast by its share)."""
    rng = np.random.default_rng(100 + seed)
    p = {
        "mem_eff": rng.uniform(0.4, 0.9),
        "compute_eff": 0.5,
        "fixed_ms": rng.uniform(0.5, 4),
        "seq_ms": rng.uniform(0.005, 0.03),
        "overhead_ms": rng.uniform(0.1, 0.5),
        "d_fixed": rng.uniform(0.1, 0.6),
        "d_seq": rng.uniform(0.001, 0.01),
    }
    ctx = float(rng.choice([0, 16, 64]))  # one short context: the KV read is no lever
    rows = [(0, 1, ctx), (0, 8, ctx), (2, 1, ctx), (4, 8, ctx), (3, 4, ctx)]
    (tmp_path / "m.csv").write_text(roofline_csv(p, rows))
    roofline_problem(tmp_path / "p.yaml")
    out = tmp_path / "p2.yaml"
    report = api.calibrate(tmp_path / "m.csv", tmp_path / "p.yaml", out)
    out.write_text(report.text())
    doc = report.to_dict()
    got = file_steps(out, doc)
    want = [roofline_step(p, k, b, c) for k, b, c in rows]
    np.testing.assert_allclose(got, [r["predicted_step_ms"] for r in doc["rows"]], rtol=1e-9)
    # fixed_ms is held (mem_eff takes the constant); only the KV write, 0.2% of a pass,
    # could tell them apart, so the fit is within that of the rows
    np.testing.assert_allclose(got, want, rtol=5e-3)
    params = {q["name"]: q for q in doc["parameters"]}
    fixed = params["fixed_ms"]
    assert fixed["value"] is None and fixed["written"] is not None
    assert "/mem_eff" in fixed["determined_combination"], fixed
    roof = yaml.safe_load(out.read_text())["serving"]["roofline"]
    assert roof["fixed_ms"] == pytest.approx(fixed["written"], rel=1e-9)
    assert set(roof["drafters"]["d"]) == {"fixed_ms", "seq_ms"}
    # the determined combination's value is the truth's: fixed_ms + A/mem_eff (+ b·seq_ms)
    # is the memory-side time they share, A the row's traffic at peak bandwidth
    expression, value = fixed["determined_combination"].split(" = ")
    truth = {k: p[k] for k in ("mem_eff", "compute_eff", "fixed_ms", "seq_ms", "overhead_ms")}
    truth |= {"draft.d.fixed_ms": p["d_fixed"], "draft.d.seq_ms": p["d_seq"]}
    assert combination_at(expression, truth) == pytest.approx(float(value), rel=5e-3)


def test_no_plain_decoding_row_with_specs_is_fitted_and_evaluable(tmp_path):
    """Rows users have: speculation on only. With specs, plain decoding follows from the
    hardware, the model and the fitted efficiencies; the overhead is held at the file's."""
    p = {
        "mem_eff": 0.7,
        "compute_eff": 0.5,
        "fixed_ms": 1.2,
        "seq_ms": 0.01,
        "overhead_ms": 0.3,
        "d_fixed": 0.4,
        "d_seq": 0.004,
    }
    rows = [(k, b, c) for k in (1, 2, 4) for b in (1, 8, 32) for c in (512, 4096)]
    (tmp_path / "m.csv").write_text(roofline_csv(p, rows))
    roofline_problem(tmp_path / "p.yaml", {"roofline": {"overhead_ms": 0.3}})
    out = tmp_path / "p2.yaml"
    r = runner.invoke(
        app,
        ["calibrate", str(tmp_path / "m.csv"), "-p", str(tmp_path / "p.yaml"), "-o", str(out)]
        + ["--json", "-"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert any("no plain-decoding (k = 0) row" in n for n in doc["notes"]), doc["notes"]
    assert doc["max_abs_error_pct"] < 1e-3
    from allocator.model.under_load import serving_metrics

    p2 = problem_from_file(out)
    for k in (0, 1, 3, 4):
        for b in (1, 16):
            got = serving_metrics(p2, np.array([[k > 0]]), np.array([k]), b, 2048.0)["step_ms"]
            assert got[0] == pytest.approx(roofline_step(p, k, b, 2048.0), rel=1e-4), (k, b)


# ---------------------------------------------------------------- context without specs
def test_rows_varying_in_context_without_specs_are_refused_naming_the_column(tmp_path):
    (tmp_path / "p.yaml").write_text(TODAY)
    csv = tmp_path / "m.csv"
    csv.write_text(
        "drafters,k,batch,tokens_per_s,context\n,0,1,100,512\na,2,1,150,512\n"
        "b,3,1,140,512\n,0,1,80,8192\n"
    )
    out = tmp_path / "o.yaml"
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(tmp_path / "p.yaml"), "-o", str(out)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: measured.context: "), r.output
    assert "serving.hardware and serving.model" in lines[0] and not out.exists()
    # one context throughout: nothing is dropped, the form holds it
    csv.write_text(csv.read_text().replace("8192", "512"))
    r = runner.invoke(app, ["calibrate", str(csv), "-p", str(tmp_path / "p.yaml"), "-o", str(out)])
    assert r.exit_code == 0, r.output


def test_a_file_that_would_not_be_the_fit_is_not_written(tmp_path, monkeypatch):
    """The read-back check refuses, naming --out, and leaves nothing behind."""
    from allocator.calibration import report as report_module

    text, _ = today_rows(
        {"v0": 6, "v1": 0.03, "c": 0.02, "ovh": 0.3, "d0_a": 0.5, "d1_a": 0, "d0_b": 1, "d1_b": 0},
        4,
        2,
        3,
    )
    (tmp_path / "m.csv").write_text(text)
    (tmp_path / "p.yaml").write_text(TODAY)
    real = report_module.CalibrationReport.text

    def off(self):  # the file as a broken writer would give it: one table entry moved
        return re.sub(
            r"overhead_ms: (\S+)",
            lambda m: f"overhead_ms: {float(m.group(1)) + 1.0!r}",
            real(self),
            count=1,
        )

    monkeypatch.setattr(report_module.CalibrationReport, "text", off)
    out = tmp_path / "o.yaml"
    before = set(tmp_path.iterdir())
    r = runner.invoke(
        app, ["calibrate", str(tmp_path / "m.csv"), "-p", str(tmp_path / "p.yaml"), "-o", str(out)]
    )
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --out: ") and len(r.output.strip().splitlines()) == 1
    assert set(tmp_path.iterdir()) == before


def test_bench_runs_without_specs_are_written_at_the_whole_batches_either_side(tmp_path):
    """Little's law gives fractional batch sizes (some below 1): the tables are written at
    the whole batch sizes either side, so the file still predicts every run as the fit."""
    from tests.unit.calibration.test_calibrate_engines import bench_files
    from tests.unit.calibration.test_calibrate_engines import roofline_problem as bench_problem

    files = [f for f in bench_files(tmp_path) if "i128" in f.name]  # one context
    data = yaml.safe_load(bench_problem(tmp_path).read_text())
    del data["serving"]["hardware"], data["serving"]["model"]
    data["serving"]["verify_ms"] = {"batch": [1], "tokens": [1, 2], "ms": [[1.0, 1.1]]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "o.yaml"
    report = api.calibrate(files, tmp_path / "p.yaml", out)
    out.write_text(report.text())
    doc = report.to_dict()
    batches = [row["batch"] for row in doc["rows"]]
    assert any(b < 1 for b in batches) and any(b != round(b) for b in batches if b > 1)
    written = yaml.safe_load(out.read_text())["serving"]["verify_ms"]["batch"]
    for b in batches:
        assert b < 1 or (int(np.floor(b)) in written and int(np.ceil(b)) in written), b
    doc_at_one = {**doc, "rows": [{**r, "batch": max(r["batch"], 1)} for r in doc["rows"]]}
    got = file_steps(out, doc_at_one)
    np.testing.assert_allclose(got, [r["predicted_step_ms"] for r in doc["rows"]], rtol=1e-9)
    assert doc["median_abs_error_pct"] < 2.0  # 1% noise
