"""Benchmark of ``allocator capacity``: ``python benchmarks/capacity.py [--repeats R] [--m M]``.

The case (synthetic, generated from a seed; no number in it is a measurement): 20
drafters, 16 batch sizes (1..128), ``k`` up to 16, subsets of up to ``M`` drafters, step
times from the component model (``verify_ms`` over batch x verified tokens, each drafter's
``draft_ms`` by batch), a KV-cache memory cap and a price. It prints

* the median wall time of ``R`` whole ``allocator capacity --sweep-load`` processes
  (start-up included), beside the median of ``R`` whole ``allocator schema`` processes
  run in the same loop (the package's start-up alone), and their ratio;
* in one process, the vectorised sizing against a straightforward per-configuration
  Python loop over the same configurations at one batch size (both give the same answer),
  and the loop's time extrapolated to every batch size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from processes import timed_runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator.analysis.fleet import serving_grid, size_fleet  # noqa: E402
from allocator.io.build import problem_from_spec  # noqa: E402
from allocator.io.spec import parse_problem  # noqa: E402

BATCHES = [1, 2, 4, 6, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128]


def synthetic(n: int = 20, m_max: int = 2, k_max: int = 16, seed: int = 0) -> dict:
    """A problem file (dict) with a component step-time model; every number from ``seed``."""
    rng = np.random.default_rng(seed)
    tokens = list(range(1, m_max * k_max + 2))
    # a verifier pass: a fixed part plus a part growing with the tokens in the batch
    ms = [[round(8.0 + 0.02 * b * t + 0.5 * math.log1p(b * t), 4) for t in tokens] for b in BATCHES]
    drafters = []
    for i in range(n):
        per = round(float(rng.uniform(0.2, 1.5)), 4)
        drafters.append(
            {
                "name": f"d{i:02d}",
                "acceptance": round(float(rng.uniform(0.4, 0.9)), 4),
                "unit_cost": round(per / 10.0, 4),
                "draft_ms": {b: round(per * (1.0 + b / 64.0), 4) for b in BATCHES},
                "memory_gb": round(float(rng.uniform(0.0, 4.0)), 3),
            }
        )
    return {
        "name": f"capacity-bench-n{n}-m{m_max}-k{k_max}",
        "convention": "bonus",
        "drafters": drafters,
        "search": {"k": {"min": 1, "max": k_max}, "m": {"max": m_max}},
        "serving": {
            "batch_sizes": BATCHES,
            "gpu_cost_per_hour": 12.0,
            "verify_ms": {"batch": BATCHES, "tokens": tokens, "ms": ms},
            "overhead_ms": 0.3,
            "memory": {"kv_cache_gb": 60.0, "kv_per_seq_gb": 0.45},
        },
    }


def loop_metrics_seconds(problem, grid, sample: int = 200) -> float:
    """Seconds per configuration and batch size when each configuration's serving metrics
    are computed one at a time (``serving_metrics`` on a single row), over ``sample`` rows."""
    from allocator.model.serving import serving_metrics

    rows = np.linspace(1, grid.k.size - 1, sample).astype(int)
    b = int(grid.batch[0])
    t0 = time.perf_counter()
    for c in rows:
        serving_metrics(problem, grid.members[c : c + 1], grid.k[c : c + 1], b)
    return (time.perf_counter() - t0) / sample


def loop_cheapest(problem, grid, batch_index: int, load: float, target: float):
    """Per configuration, in plain Python: the cheapest (replicas, itl) at one batch size."""
    best = None
    b = int(grid.batch[batch_index])
    for c in range(grid.k.size):
        tps = float(grid.tokens_per_s[batch_index, c])
        itl = float(grid.itl_ms[batch_index, c])
        if not math.isfinite(tps) or itl > target or b > int(grid.max_batch[c]):
            continue
        replicas = max(1, math.ceil(load * (1 - 1e-12) / tps))
        key = (replicas, itl)
        if best is None or key < best[0]:
            best = (key, c)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--m", type=int, default=2, help="largest subset size (search.m.max)")
    args = ap.parse_args()
    data = synthetic(m_max=args.m)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(data))
        out = Path(tmp) / "out.json"
        cmd = [
            sys.executable,
            "-m",
            "allocator",
            "capacity",
            str(path),
            "--tokens-per-s",
            "50000",
            "--itl-ms",
            "25",
            "--sweep-load",
            "1000:200000:50",
            "--json",
            str(out),
        ]
        base = [sys.executable, "-m", "allocator", "schema"]
        cap_t, base_t = [], []
        for _ in range(args.repeats):  # side by side, interleaved
            cap_t += timed_runs(cmd, 1, ROOT).walls
            base_t += timed_runs(base, 1, ROOT).walls
        doc = json.loads(out.read_text())
        problem = problem_from_spec(parse_problem(data))
    t0 = time.perf_counter()
    grid = serving_grid(problem)
    fleet = size_fleet(problem, 50_000, 25.0, grid=grid)
    vec = time.perf_counter() - t0
    i = BATCHES.index(fleet.best.batch)
    t0 = time.perf_counter()
    best = loop_cheapest(problem, grid, i, 50_000, 25.0)
    loop = time.perf_counter() - t0
    assert best is not None and best[0][0] == fleet.best.replicas
    per = loop_metrics_seconds(problem, grid)
    cap_med, base_med = statistics.median(cap_t), statistics.median(base_t)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (1 min)")
    print(f"case: {data['name']}: {grid.k.size:,} configurations x {len(BATCHES)} batch sizes")
    print(
        f"answer: {doc['replicas']} replicas at batch {doc['batch']}, k={doc['k']}, "
        f"{len(doc['drafters'])} drafter(s), ${doc['cost_per_hour']:,.2f}/h"
    )
    print(
        f"allocator capacity (whole process, sweep of 50 loads): median {cap_med:.3f} s "
        f"over {args.repeats}"
    )
    print(f"allocator schema   (whole process, start-up only):     median {base_med:.3f} s")
    print(f"ratio capacity / start-up: {cap_med / base_med:.2f}")
    print(
        f"in process: grid + sizing {vec:.3f} s; per-configuration Python loop at one batch "
        f"size {loop:.3f} s (x{len(BATCHES)} batch sizes = {loop * len(BATCHES):.3f} s, "
        "on top of the same grid)"
    )
    total = per * grid.k.size * len(BATCHES)
    print(
        f"baseline: serving metrics one configuration at a time: {per * 1e3:.3f} ms each, "
        f"x {grid.k.size * len(BATCHES):,} = {total:.1f} s (extrapolated from 200); "
        f"vectorised grid + sizing is {total / vec:.0f}x faster"
    )


if __name__ == "__main__":
    main()
