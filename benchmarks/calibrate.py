"""Calibration speed and accuracy: ``python benchmarks/calibrate.py [--repeats R]``,
``python benchmarks/calibrate.py --rate [--repeats R]`` (runs at a request rate, fitted
through the simulator: ``rate_case``) and ``python benchmarks/calibrate.py --accuracy``.

Times ``R`` whole ``allocator calibrate`` processes (start-up included) on a 50-row
measured table (two drafters and their pair, k = 1, 3, 5, 7 at four batch sizes, the
k = 0 rows at each, 2% seeded noise on a known roofline step-time model) and, side by
side in the same run, ``R`` whole ``allocator evaluate`` processes on the same problem
(start-up, imports and reading the file: the floor of any command). Prints the medians,
their ratio, the calibration's in-sample median and largest error, and the target
(<= 2 s, issue 10).

``--accuracy``: ``allocator calibrate`` (the library call, :func:`allocator.api.calibrate`)
on every bundled measured table that gives a step time per row
(``problems/measured/README.md``), in today's form and, where the verifier's hardware and
architecture are known, the roofline from specs (``serving.hardware``/``serving.model``
added to a copy of the bundled problem; the architectures are the Hugging Face
``config.json`` fields of tests/support/measured_fit.py). Errors on tokens/s, as
``calibrate`` reports them: in-sample; held out at random (``--holdout 0.3``, seeds
0..9, every held-out row of the ten fits pooled); leave-one-k-out (``by-k``) and
leave-one-batch-out (``by-batch``), each with the count of rows the other rows cannot
predict. Then each roofline fit's in-sample residuals by k and by batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from processes import timed_runs

# the known step-time model the tests draw their synthetic rows from
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.rate_reference import Truth, problem_file, run, vllm_file  # noqa: E402
from tests.support.synthetic_serving import true_expected, true_step  # noqa: E402

PROBLEM = """\
name: bench-calibrate
convention: bonus
drafters:
  - {name: a, acceptance: [0.8, 0.7, 0.6], unit_cost: 0.05}
  - {name: b, acceptance: 0.6, unit_cost: 0.1}
search: {k: {max: 16}}
"""
TARGET_S = 2.0
#: Request-rate case (issue 24, item 3): runs, requests per run, and the target, s.
RATE_RUNS, RATE_REQUESTS, RATE_TARGET_S = 8, 300, 60.0
#: (request rate /s, mean prompt, mean output tokens) of the rate case's runs
RATE_CASE = (
    (4.0, 512, 128),
    (12.0, 1024, 128),
    (20.0, 256, 256),
    (8.0, 2048, 64),
    (16.0, 512, 128),
    (6.0, 1024, 256),
    (24.0, 256, 64),
    (10.0, 768, 128),
)


def table(seed: int = 0) -> str:
    """The first 50 of 52 rows: 4 batch sizes x (k = 0, and 3 drafter sets x k = 1, 3, 5, 7)."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in (1, 8, 32, 128):
        for names in ([], ["a"], ["b"], ["a", "b"]):
            for k in [0] if not names else [1, 3, 5, 7]:
                step = true_step(names, k, b)
                tps = 1000 * b * true_expected(names, k) / step * (1 + 0.02 * rng.standard_normal())
                rows.append(f"{'+'.join(names)},{k},{b},{tps:.4f}")
    rows = rows[:50]
    return "drafters,k,batch,tokens_per_s\n" + "\n".join(rows) + "\n"


# ---------------------------------------------------------------- accuracy
MEASURED = ROOT / "problems" / "measured"
#: (table, problem, hardware and tensor-parallel count or None, architecture name)
TABLES = (
    ("vllm-issue20780-bs1.csv", "llama31-8b-eagle.yaml", ("h100-sxm", 1), "llama"),
    ("vllm-pr16937-h100-bs1.csv", "llama31-8b-eagle.yaml", ("h100-sxm", 1), "llama"),
    ("sglang-specforge339-2xh100.csv", "qwen3-30b-a3b-eagle3.yaml", ("h100-sxm", 2), "qwen"),
    ("leviathan2023-table2.csv", "leviathan2023-t5.yaml", None, None),
)


def _problem_with_specs(tmp: Path, problem: str, hw, arch: str | None) -> Path:
    """A copy of the bundled problem, with serving.hardware and serving.model when given."""
    import yaml

    from tests.support.measured_fit import LLAMA_8B, QWEN3_30B_A3B

    data = yaml.safe_load((MEASURED / problem).read_text())
    if hw is None:
        path = tmp / problem
        path.write_text(yaml.safe_dump(data))
        return path
    config = {"llama": LLAMA_8B, "qwen": QWEN3_30B_A3B}[arch]
    (tmp / f"{arch}.json").write_text(json.dumps(config))
    data["serving"] = {
        "batch_sizes": [1],
        "hardware": {"gpu": hw[0], "count": hw[1]},
        "model": {"config": f"{arch}.json"},
    }
    path = tmp / f"roofline-{problem}"
    path.write_text(yaml.safe_dump(data))
    return path


def _summary(errors) -> str:
    a = np.abs(np.asarray(errors, float))
    a = a[np.isfinite(a)]
    return "-" if a.size == 0 else f"{np.median(a):.2f}% / {a.max():.2f}%"


def accuracy() -> None:
    from allocator import api

    out = []
    residuals = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for csv_name, problem, hw, arch in TABLES:
            forms = [("today", None, None)] + ([("roofline", hw, arch)] if hw else [])
            for form, h, a in forms:
                path = _problem_with_specs(d, problem, h, a)
                rows = str(MEASURED / csv_name)
                ins = api.calibrate(rows, path, d / "o.yaml").to_dict()
                held = []
                for seed in range(10):
                    doc = api.calibrate(rows, path, d / "o.yaml", holdout=0.3, seed=seed).to_dict()
                    held += [r["error_pct"] for r in doc["rows"] if r["held_out"]]
                cells = [
                    csv_name,
                    form,
                    str(len(ins["rows"])),
                    _summary([r["error_pct"] for r in ins["rows"]]),
                    _summary(held),
                ]
                for scheme in ("by-k", "by-batch"):
                    doc = api.calibrate(rows, path, d / "o.yaml", holdout=scheme).to_dict()
                    errs = [r["error_pct"] for r in doc["rows"] if r["predictable"]]
                    lost = sum(not r["predictable"] for r in doc["rows"])
                    cells.append(f"{_summary(errs)} ({lost} not predictable)")
                out.append("| " + " | ".join(cells) + " |")
                if form == "roofline":
                    residuals.append((csv_name, ins))
    print(
        "| table | form | rows | in-sample median / largest | held out 30% x 10 seeds | "
        "leave-one-k-out | leave-one-batch-out |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(out))
    for name, doc in residuals:
        print(f"\n{name}, roofline, in-sample error % by (batch, k):")
        by_k: dict[int, list[float]] = {}
        by_b: dict[float, list[float]] = {}
        for r in doc["rows"]:
            by_k.setdefault(r["k"], []).append(r["error_pct"])
            by_b.setdefault(r["batch"], []).append(r["error_pct"])
        print(
            "  by k:     " + ", ".join(f"k={k}: {np.mean(v):+.2f}" for k, v in sorted(by_k.items()))
        )
        print(
            "  by batch: "
            + ", ".join(f"b={b:g}: {np.mean(v):+.2f}" for b, v in sorted(by_b.items()))
        )
        und = [p["name"] for p in doc["parameters"] if p["value"] is None]
        print(f"  undetermined: {', '.join(und) or 'none'}")


def rate_case(repeats: int) -> None:
    """``--rate``: ``repeats`` whole ``allocator calibrate`` processes on
    :data:`RATE_RUNS` runs of :data:`RATE_REQUESTS` requests at a request rate, made by the
    independent reference engine of tests/support/rate_reference.py (known factors, 2%
    step noise), beside ``allocator evaluate``'s start-up; the median, the ratio, the
    target and the fitted factors against the reference's."""
    truth = Truth()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = []
        for i, (rate, pin, pout) in enumerate(RATE_CASE[:RATE_RUNS]):
            prompts = rng.integers(pin // 2, pin * 3 // 2, RATE_REQUESTS)
            outputs = rng.integers(pout // 2, pout * 3 // 2, RATE_REQUESTS)
            sim = run(truth, rate=rate, prompts=prompts, outputs=outputs, seed=i)
            f = d / f"run{i}.json"
            vllm_file(f, sim, rate=rate, prompts=prompts, outputs=outputs)
            files.append(str(f))
        problem = problem_file(d / "p.yaml")
        py = [sys.executable, "-m", "allocator"]
        cal = py + ["calibrate", *files, "-p", str(problem), "-o", str(d / "p2.yaml")]
        cal += ["--json", "-"]
        base = py + ["evaluate", str(problem), "-d", "d", "-k", "3", "--json", "-"]
        t_base = timed_runs(base, repeats).median
        runs = timed_runs(cal, repeats)
        doc = json.loads(runs.stdout)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load}; repeats {repeats}"
    )
    t = runs.median
    print("| case | median s, whole process | ratio to evaluate | target | evaluations |")
    print("|---|---|---|---|---|")
    print(f"| allocator evaluate (baseline: start-up floor) | {t_base:.2f} | 1.00 |  |  |")
    print(
        f"| allocator calibrate, {RATE_RUNS} runs x {RATE_REQUESTS} requests at a rate | "
        f"{t:.2f} | {t / t_base:.2f} | <= {RATE_TARGET_S:.0f} s "
        f"{'met' if t <= RATE_TARGET_S else 'MISSED'} | {doc['evaluations']} |"
    )
    want = {
        "mem_eff": truth.mem_eff,
        "compute_eff": truth.compute_eff,
        "prefill_eff": truth.prefill_eff,
        "ttft_overhead_ms": truth.overhead_ms,
    }
    for p in doc["parameters"]:
        shown = "not determined" if p["value"] is None else f"{p['value']:.4g}"
        print(f"{p['name']}: {shown} (written {p['written']:.4g}; reference {want[p['name']]})")
    print(
        f"in-sample median |error| {doc['median_abs_error_pct']:.2f}%, "
        f"largest {doc['max_abs_error_pct']:.2f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--accuracy", action="store_true", help="held-out errors, not speed")
    ap.add_argument(
        "--rate", action="store_true", help="the request-rate case (8 runs x 300 requests)"
    )
    args = ap.parse_args()
    if args.accuracy:
        accuracy()
        return
    if args.rate:
        rate_case(args.repeats)
        return
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "p.yaml").write_text(PROBLEM)
        (d / "m.csv").write_text(table())
        n_rows = len((d / "m.csv").read_text().splitlines()) - 1
        py = [sys.executable, "-m", "allocator"]
        cal = py + ["calibrate", str(d / "m.csv"), "-p", str(d / "p.yaml")]
        cal += ["-o", str(d / "p2.yaml"), "--json", "-"]
        base = py + ["evaluate", str(d / "p.yaml"), "-d", "a", "-k", "3", "--json", "-"]
        t_base = timed_runs(base, args.repeats).median
        runs = timed_runs(cal, args.repeats)
        t_cal, out = runs.median, runs.stdout
        doc = json.loads(out)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, load average {load}; repeats {args.repeats}"
    )
    print("| case | median s, whole process | ratio to evaluate | target | in-sample error |")
    print("|---|---|---|---|---|")
    print(f"| allocator evaluate (baseline: start-up floor) | {t_base:.2f} | 1.00 |  |  |")
    print(
        f"| allocator calibrate, {n_rows} rows | {t_cal:.2f} | {t_cal / t_base:.2f} | "
        f"<= {TARGET_S:.0f} s {'met' if t_cal <= TARGET_S else 'MISSED'} | median "
        f"{doc['median_abs_error_pct']:.2f}%, largest {doc['max_abs_error_pct']:.2f}% |"
    )


if __name__ == "__main__":
    main()
