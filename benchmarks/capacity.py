"""Benchmark of ``allocator capacity``: ``python benchmarks/capacity.py [--repeats R] [--m M]
[--requests-only | --tokens-only]``.

**For a request rate** (``--request-rate``): the bundled ``problems/requests-70b.yaml``, the
first 2,000 rows of the Azure conversation trace (the default for a P99 SLO), 10 requests/s
under ``p99_ttft_ms=2000`` and ``p99_tpot_ms=50``, ``max_num_seqs`` 4, 8, 16, 25, 50: 20
candidates (speculation off and the schedule at all five, EAGLE-3 at ``k = 1`` to batch 25
at four, at ``k = 2..4`` to batch 10 at two). It prints the median wall time of ``R``
searches in this process on 2 local worker processes beside the same search in this process
alone (``--workers 1``), their ratio, the candidates simulated, the runs and runs per second,
and checks that both give the same document.

**For a token load** (``--tokens-per-s``; synthetic, generated from a seed; no number in it
is a measurement): 20 drafters, step times at batch sizes 1..128 (every integer is sized),
``k`` up to 16, subsets of up to ``M`` drafters, step times from the component model
(``verify_ms`` over batch x verified tokens, each drafter's ``draft_ms`` by batch), a KV-cache
memory cap and a price. It prints

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

from allocator.analysis.capacity.by_load import size_fleet  # noqa: E402
from allocator.analysis.capacity.grid import serving_grid  # noqa: E402
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
    from allocator.model.under_load import serving_metrics

    rows = np.linspace(1, grid.k.size - 1, sample).astype(int)
    b = int(grid.batch[0])
    t0 = time.perf_counter()
    for c in rows:
        serving_metrics(problem, grid.members[c : c + 1], grid.k[c : c + 1], b)
    return (time.perf_counter() - t0) / sample


def loop_cheapest(problem, grid, batch_index: int, load: float, target: float):
    """Per configuration, in plain Python: the cheapest (replicas, tpot) at one batch size."""
    best = None
    b = int(grid.batch[batch_index])
    for c in range(grid.k.size):
        tps = float(grid.tokens_per_s[batch_index, c])
        itl = float(grid.tpot_ms[batch_index, c])
        if not math.isfinite(tps) or itl > target or b > int(grid.max_batch[c]):
            continue
        replicas = max(1, math.ceil(load * (1 - 1e-12) / tps))
        key = (replicas, itl)
        if best is None or key < best[0]:
            best = (key, c)
    return best


def requests_case(repeats: int) -> None:
    """Capacity for a request rate: 20 candidates at one rate, on 2 workers and on 1."""
    from allocator import api

    path = ROOT / "problems/requests-70b.yaml"
    trace = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
    slos = ["p99_ttft_ms=2000", "p99_tpot_ms=50"]

    def search(workers: int):
        return api.size_fleet_for_rate(
            path, 10.0, slos, trace=trace, max_num_seqs=[4, 8, 16, 25, 50], workers=workers
        )

    walls: dict[int, list[float]] = {1: [], 2: []}
    docs = {}
    for _ in range(repeats):  # side by side, interleaved
        for w in (2, 1):
            t0 = time.perf_counter()
            res = search(w)
            walls[w].append(time.perf_counter() - t0)
            docs[w] = res
    assert docs[1].to_dict() == docs[2].to_dict()
    res = docs[2]
    d = res.to_dict()
    count = next(n for n in res.notes if "candidate(s)" in n)
    med1, med2 = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (1 min)")
    print(f"case: requests-70b, 2,000 conversation requests per run, 10 req/s, {', '.join(slos)}")
    print(f"  {count}")
    print(
        f"answer: {d['replicas']} replicas of {d['drafters'] or 'no drafter'} k={d['k']} "
        f"max_num_seqs {d['max_num_seqs']}; baseline {d['baseline']['replicas']} replicas"
    )
    print(f"search on 2 local processes: median {med2:.1f} s over {repeats}")
    print(f"search in this process:      median {med1:.1f} s over {repeats}")
    print(
        f"ratio 1 process / 2: {med1 / med2:.2f}; {res.simulations:,} runs, "
        f"{res.simulations / med2:.1f} runs/s on 2 processes (the same document both ways)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--m", type=int, default=2, help="largest subset size (search.m.max)")
    ap.add_argument("--requests-only", action="store_true", help="only the request-rate case")
    ap.add_argument("--tokens-only", action="store_true", help="only the token-load case")
    args = ap.parse_args()
    if not args.tokens_only:
        requests_case(min(args.repeats, 3))
        if args.requests_only:
            return
        print()
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
            "--tpot-ms",
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
    i = int(np.flatnonzero(grid.batch == fleet.best.batch)[0])
    t0 = time.perf_counter()
    best = loop_cheapest(problem, grid, i, 50_000, 25.0)
    loop = time.perf_counter() - t0
    assert best is not None and best[0][0] == fleet.best.replicas
    per = loop_metrics_seconds(problem, grid)
    cap_med, base_med = statistics.median(cap_t), statistics.median(base_t)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (1 min)")
    print(f"case: {data['name']}: {grid.k.size:,} configurations x {grid.batch.size} batch sizes")
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
        f"size {loop:.3f} s (x{grid.batch.size} batch sizes = {loop * grid.batch.size:.3f} s, "
        "on top of the same grid)"
    )
    total = per * grid.k.size * grid.batch.size
    print(
        f"baseline: serving metrics one configuration at a time: {per * 1e3:.3f} ms each, "
        f"x {grid.k.size * grid.batch.size:,} = {total:.1f} s (extrapolated from 200); "
        f"vectorised grid + sizing is {total / vec:.0f}x faster"
    )


if __name__ == "__main__":
    main()
