"""Benchmark of ``allocator schedule``: ``python benchmarks/serving.py [--repeats R] [--seed S]``.

Issue 10's case: 20 drafters, 16 batch sizes, k up to 16, step times from the component
model (a ``verify_ms`` table by batch and verified tokens, ``draft_ms`` per drafter).
The schedule enumerates every subset of the search space at every k and batch size; the
problems here cap the subset size (``search.m.max``) and the report says at which cap:
with 20 drafters, ``m.max = 3`` is 1,350 subsets and ``m.max = 4`` 6,195 (x 16 k x 16
batch sizes). All numbers in the generated problems are synthetic (seeded), made for
timing only.

For every case it prints the median wall time of ``R`` whole ``allocator schedule``
processes (start-up included), and beside it, in the same run, the baseline: ``R`` whole
``allocator solve --strategy exact`` processes on the same problem without its
``serving`` section (the batch-1 front in verifier-units), and the ratio of the two; then
the median of ``R`` schedule computations inside this process (no start-up), and the
start-up floor (``R`` whole ``allocator schema`` processes). The load average is printed
at the end: on a shared machine wall times grow with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from processes import timed_runs

N_DRAFTERS = 20
BATCH_SIZES = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384]
K_MAX = 16


def problem(seed: int, m_max: int, serving: bool = True) -> dict:
    """A synthetic 20-drafter problem with a component step-time model."""
    rng = np.random.default_rng(seed)
    drafters = []
    for i in range(N_DRAFTERS):
        d1 = float(np.round(rng.uniform(0.2, 1.5), 3))
        drafters.append(
            {
                "name": f"d{i:02d}",
                "acceptance": float(np.round(rng.uniform(0.3, 0.9), 3)),
                "unit_cost": float(np.round(rng.uniform(0.02, 0.2), 3)),
                "hosting_cost": float(rng.integers(1, 5)),
                "draft_ms": {1: d1, 384: float(np.round(d1 * rng.uniform(2, 6), 3))},
            }
        )
    tokens = [1, 2, 4, 8, 16, 32, 64]
    batch = [1, 16, 64, 128, 256, 384]
    ms = [
        [round(6.0 + 0.02 * b + 0.002 * b * (t - 1) + 0.05 * t, 3) for t in tokens] for b in batch
    ]
    data: dict = {
        "name": f"serving-bench-m{m_max}",
        "convention": "bonus",
        "drafters": drafters,
        "search": {"k": {"max": K_MAX}, "m": {"max": m_max}},
        "budget": {"hosting_cost": 8.0},
    }
    if serving:
        data["serving"] = {
            "batch_sizes": BATCH_SIZES,
            "gpu_cost_per_hour": 4.0,
            "overhead_ms": 0.1,
            "verify_ms": {"batch": batch, "tokens": tokens, "ms": ms},
        }
    else:
        for d in drafters:
            del d["draft_ms"]
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="whole runs per case (median)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic problems")
    ap.add_argument("--m-max", type=int, nargs="+", default=[3, 4], help="subset-size caps")
    args = ap.parse_args()
    py = sys.executable
    print(f"python {platform.python_version()}, {platform.machine()}, repeats {args.repeats}")
    from allocator.analysis.schedule import schedule
    from allocator.io.build import problem_from_spec
    from allocator.io.spec import parse_problem

    print(
        f"{'case':<34} {'configs':>10} {'schedule s':>11} {'solve s':>9} {'ratio':>7} "
        f"{'in-process s':>13} {'off from':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for m_max in args.m_max:
            with_serving = Path(tmp) / f"serving-m{m_max}.yaml"
            without = Path(tmp) / f"plain-m{m_max}.yaml"
            with_serving.write_text(yaml.safe_dump(problem(args.seed, m_max)))
            without.write_text(yaml.safe_dump(problem(args.seed, m_max, serving=False)))
            sched = timed_runs(
                [py, "-m", "allocator", "schedule", str(with_serving), "--json", "-"], args.repeats
            )
            t_sched, out = sched.median, sched.stdout
            t_solve = timed_runs(
                [
                    py,
                    "-m",
                    "allocator",
                    "solve",
                    str(without),
                    "--strategy",
                    "exact",
                    "--json",
                    "-",
                ],
                args.repeats,
            ).median
            doc = json.loads(out)
            subsets = sum(math.comb(N_DRAFTERS, m) for m in range(1, m_max + 1))
            cells = subsets * K_MAX * len(BATCH_SIZES)
            name = f"N={N_DRAFTERS} B={len(BATCH_SIZES)} k<={K_MAX} m<={m_max}"
            prob = problem_from_spec(parse_problem(problem(args.seed, m_max)))
            inner = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                schedule(prob)
                inner.append(time.perf_counter() - t0)
            print(
                f"{name:<34} {cells:>10,} {t_sched:>11.3f} {t_solve:>9.3f} "
                f"{t_sched / t_solve:>7.2f} {statistics.median(inner):>13.3f} "
                f"{str(doc['speculation_off_from']):>9}"
            )
    floor = timed_runs([py, "-m", "allocator", "schema"], args.repeats).median
    print(f"start-up floor (allocator schema, whole process): {floor:.3f} s")
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
