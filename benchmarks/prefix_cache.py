"""Benchmark of prefix caching in the simulator: ``python benchmarks/prefix_cache.py
[--repeats R] [--quick]``.

The cases, each through ``allocator.api.bench`` on ``problems/requests-70b.yaml`` (the path
``allocator bench`` takes, in this process: no start-up), speculation off, synchronous
scheduling (the file's async default played too, as ``bench`` plays it, in the last case):

* ``trace``: the first 10,000 requests of the bundled Azure LLM inference trace 2023
  (conversation) at their own timestamps: no tokens shared between requests, so every
  block is a request's own (the case issue 25 measured at about 4.5x);
* ``shared prefix``: 5,000 requests of 1,024 + 128 tokens at 4 req/s, every prompt's first
  512 tokens shared (``--shared-prefix-len 512``);
* ``sessions``: 4,000 requests of 1,024 + 128 tokens in sessions of 4 turns at 8 req/s.

Each case runs with prefix caching on and off (``--no-prefix-caching``); it prints the
median CPU seconds of the process over ``R`` runs (CPU, not wall: on a shared machine wall
times grow with the load, printed at the end) and the ratio on / off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator import api  # noqa: E402

TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"


def cases(n: int) -> list[tuple[str, dict]]:
    """The cases (module docstring) at ``n`` trace requests."""
    return [
        ("trace", {"trace": TRACE, "num_prompts": n}),
        (
            "shared prefix",
            {
                "num_prompts": n // 2,
                "input_len": 1024,
                "output_len": 128,
                "shared_prefix_len": 512,
                "request_rate": 4.0,
            },
        ),
        (
            "sessions",
            {
                "num_prompts": 4 * n // 10,
                "input_len": 1024,
                "output_len": 128,
                "turns": 4,
                "request_rate": 8.0,
            },
        ),
    ]


def median_cpu(fn, repeats: int) -> float:
    """The median CPU seconds of ``repeats`` calls of ``fn``."""
    cpu = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        cpu.append(time.process_time() - t0)
    return statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (median)")
    ap.add_argument("--quick", action="store_true", help="2,000 trace requests, 3 repeats")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    n = 2_000 if args.quick else 10_000
    prob = api.load(ROOT / "problems/requests-70b.yaml")
    print(f"problems/requests-70b.yaml, speculation off, CPU s, median of {repeats}")
    print(f"{'case':<16} {'on s':>8} {'off s':>8} {'on/off':>7}")
    for name, kw in cases(n):
        on = median_cpu(
            lambda kw=kw: api.bench(prob, seed=0, async_scheduling=False, **kw), repeats
        )
        off = median_cpu(
            lambda kw=kw: api.bench(
                prob, seed=0, async_scheduling=False, prefix_caching=False, **kw
            ),
            repeats,
        )
        print(f"{name:<16} {on:>8.3f} {off:>8.3f} {on / off:>7.2f}")
    kw = cases(n)[0][1]
    on = median_cpu(lambda: api.bench(prob, seed=0, **kw), repeats)
    off = median_cpu(lambda: api.bench(prob, seed=0, prefix_caching=False, **kw), repeats)
    print(f"{'trace, async':<16} {on:>8.3f} {off:>8.3f} {on / off:>7.2f}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
