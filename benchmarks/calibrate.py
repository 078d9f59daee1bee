"""Calibration speed: ``python benchmarks/calibrate.py [--repeats R]``.

Times ``R`` whole ``allocator calibrate`` processes (start-up included) on a 50-row
measured table (two drafters and their pair, k = 1, 3, 5, 7 at four batch sizes, the
k = 0 rows at each, 2% seeded noise on a known roofline step-time model) and, side by
side in the same run, ``R`` whole ``allocator evaluate`` processes on the same problem
(start-up, imports and reading the file: the floor of any command). Prints the medians,
their ratio, the calibration's in-sample median and largest error, and the target
(<= 2 s, issue 10).
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from synthetic_serving import true_expected, true_step  # noqa: E402

PROBLEM = """\
name: bench-calibrate
convention: bonus
drafters:
  - {name: a, acceptance: [0.8, 0.7, 0.6], unit_cost: 0.05}
  - {name: b, acceptance: 0.6, unit_cost: 0.1}
search: {k: {max: 16}}
"""
TARGET_S = 2.0


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
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
