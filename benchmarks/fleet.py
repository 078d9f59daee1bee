"""Benchmark of a fleet on one clock: ``python benchmarks/fleet.py [--repeats R] [--quick]
[--no-async-scheduling]``.

The case is :mod:`benchmarks.sim`'s (the bundled Azure LLM inference trace 2023,
conversation; ``max_num_seqs`` 256, ``max_num_batched_tokens`` 8192, a KV cache of 500,000
tokens; speculation at ``k = 4`` with the EAGLE-3 pmf; the synthetic linear step function,
for timing only; asynchronous scheduling as vLLM's default, or synchronous with
``--no-async-scheduling``), and the same step function with ``many`` (one call per
decode-only stretch, as the problem file's step times have):

* one replica, the first 10,000 requests at the trace's own times: the single-replica
  figure of ``benchmarks/sim.py``;
* a fleet of 8 replicas (:func:`allocator.sim.fleet.simulate_fleet`) over the first 10,000
  requests sped up 8x (each replica at about the trace's rate), behind each router that
  needs no keys: round-robin (reads no load: a replica is played only when it receives a
  request), least-requests (every replica played to every arrival, the fast path's
  stretches cut there) and least-kv (every step on its own).

It prints, each a median of ``R`` runs inside this process: wall and CPU seconds, requests
simulated per second, engine steps (over all replicas), and the ratio of each fleet's
requests per second to the single replica's. The load average is printed at the end: on a
shared machine wall times grow with it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator.io.trace import read_trace  # noqa: E402
from allocator.sim import Scheduler, SpecPolicy, simulate  # noqa: E402
from allocator.sim.fleet import simulate_fleet  # noqa: E402
from benchmarks.sim import ACCEPTANCE, TRACE, ArrayStep, chain_pmf, step_ms, timed  # noqa: E402

REPLICAS = 8
REQUESTS = 10_000
ROUTERS = ("round-robin", "least-requests", "least-kv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (median)")
    ap.add_argument("--quick", action="store_true", help="3 repeats")
    ap.add_argument(
        "--no-async-scheduling",
        dest="async_scheduling",
        action="store_false",
        help="every replica synchronous (default: asynchronous, as vLLM)",
    )
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    mode = "asynchronous" if args.async_scheduling else "synchronous"
    print(f"repeats {repeats} (medians), {mode} scheduling")
    spec = SpecPolicy.fixed(4, chain_pmf(ACCEPTANCE))
    sched = Scheduler(256, 8192, 500_000, async_scheduling=args.async_scheduling)
    one = read_trace(TRACE, num_prompts=REQUESTS)
    fast = read_trace(TRACE, num_prompts=REQUESTS, speedup=float(REPLICAS))
    header = f"{'':<44} {'wall s':>8} {'cpu s':>8} {'req/s':>9} {'steps':>9} {'ratio':>6}"
    for label, fn in (("step_ms", step_ms), ("step_ms with many()", ArrayStep())):
        print()
        print(f"{REQUESTS:,} conversation requests, k=4, {label}")
        print(header)
        w1, c1, r1 = timed(lambda fn=fn: simulate(one, spec, fn, sched, seed=0), repeats)
        base = REQUESTS / w1
        print(f"{'one replica, trace rate':<44} {w1:>8.3f} {c1:>8.3f} {base:>9,.0f} "
              f"{r1.steps:>9,} {1.0:>6.2f}")  # fmt: skip
        for router in ROUTERS:
            w, c, run = timed(
                lambda fn=fn, router=router: simulate_fleet(
                    fast, spec, fn, sched, REPLICAS, router, seed=0
                ),
                repeats,
            )
            rate = REQUESTS / w
            name = f"{REPLICAS} replicas, {REPLICAS}x the rate, {router}"
            print(f"{name:<44} {w:>8.3f} {c:>8.3f} {rate:>9,.0f} {run.fleet.steps:>9,} "
                  f"{rate / base:>6.2f}")  # fmt: skip
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
