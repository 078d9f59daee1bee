"""Benchmark of the serving simulator: ``python benchmarks/sim.py [--repeats R] [--quick]``.

The case: the first ``N`` requests of the bundled Azure LLM inference trace 2023
(conversation), replayed at their own timestamps on one replica (``max_num_seqs`` 256,
``max_num_batched_tokens`` 8192, a KV cache of 500,000 tokens in blocks of 16, vLLM's
synchronous scheduler unless said), speculation
on at ``k = 4`` with the pmf of the EAGLE-3 per-position acceptance bundled in
``problems/measured/llama31-8b-eagle.yaml`` (acceptance length 3.08), and a linear step
function (synthetic, loosely the size of an 8B verifier; for timing only, not a
measurement): ``7 + 1.1 k + 0.02 b (1 + k) + 2e-5 b · context + 0.012 · prefill`` ms.

It prints, each a median of ``R`` runs inside this process (no start-up):

* the case at ``N = 10,000``: wall and CPU seconds, requests simulated per second, the
  engine steps played; beside it, in the same loop, the same requests with speculation
  off (the baseline: one token per step, more steps), the case with a step function that
  also takes arrays (``many``: one call per decode-only stretch) and the same run played
  step by step (the reference the decode-only stretches are tested against, identical
  output), with the ratios; then the case under async scheduling (vLLM's default,
  ``Scheduler(async_scheduling=True)``), with its decode-only stretches and step by step;
* how the time grows with the requests (``N`` = 1,000 .. all 19,366 at the trace's rate)
  and with ``max_num_seqs`` (8 .. 512, the trace sped up 4x so that the batch fills).

Then the same through the problem file (``--problem``, in this process: ``allocator.api.bench``,
the path ``allocator bench`` takes): ``problems/requests-70b.yaml`` (its measured tables,
prefill table and scheduler, ``max_num_seqs`` 50, async scheduling as the file's default),
the first 10,000 conversation requests at
their own timestamps, EAGLE-3 with ``k`` by batch size (speculation on) beside speculation off;
requests simulated per second, and how the time grows with the requests and with
``max_num_seqs`` (speculation off, whose step times reach batch 50: 8 .. 50, the trace sped up
2x so that the batch fills).

The load average is printed at the end: on a shared machine wall times grow with it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator.io.trace import read_trace  # noqa: E402
from allocator.sim import Scheduler, SpecPolicy, simulate  # noqa: E402
from allocator.sim.engine import _Engine  # noqa: E402

TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
#: EAGLE-3 on Llama 3.1 8B, positions 1..4 (problems/measured/llama31-8b-eagle.yaml)
ACCEPTANCE = [0.780629, 0.742184, 0.742184, 0.674419]


def chain_pmf(acceptance: list[float]) -> np.ndarray:
    """Tokens per step of a chain: ``P(emit >= j) = Π_{i<j} a_i``, ``j = 1..k+1``."""
    at_least = np.concatenate(([1.0], np.cumprod(acceptance), [0.0]))
    return np.concatenate(([0.0], at_least[:-1] - at_least[1:]))


def step_ms(decode_seqs: int, k: int, context_tokens: float, prefill_tokens: int) -> float:
    """The synthetic linear step time of the case, ms."""
    decode = 0.0
    if decode_seqs:
        decode = 7.0 + 1.1 * k + 0.02 * decode_seqs * (1 + k) + 2e-5 * decode_seqs * context_tokens
    return decode + 0.012 * prefill_tokens


class ArrayStep:
    """:func:`step_ms` that also takes arrays (``many``): stretches ask once for all steps."""

    __call__ = staticmethod(step_ms)

    @staticmethod
    def many(decode_seqs, k, context_tokens, prefill_tokens):
        decode = 7.0 + 1.1 * k + 0.02 * decode_seqs * (1 + k) + 2e-5 * decode_seqs * context_tokens
        return np.where(decode_seqs > 0, decode, 0.0) + 0.012 * prefill_tokens


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """Median wall and CPU seconds of ``repeats`` calls of ``fn``, and its last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), out


def problem_case(repeats: int, quick: bool) -> None:
    """``bench`` through the problem file (module docstring)."""
    from allocator import api

    path = ROOT / "problems/requests-70b.yaml"
    prob = api.load(path)

    def run(n: int, speedup: float | None = None, **kw):
        return api.bench(prob, trace=TRACE, num_prompts=n, trace_speedup=speedup, seed=0, **kw)

    print()
    print("through the problem file (problems/requests-70b.yaml, allocator.api.bench)")
    print(
        f"{'10,000 conversation requests':<34} {'wall s':>8} {'cpu s':>8} {'req/s':>9} {'steps':>9}"
    )
    rows = []
    for name, kw in (
        ("eagle3, k by batch size", {"drafters": ["eagle3"], "schedule": True}),
        ("speculation off", {}),
    ):
        w, c, r = timed(lambda kw=kw: run(10_000, **kw), repeats)
        rows.append(w)
        print(f"{name:<34} {w:>8.3f} {c:>8.3f} {10_000 / w:>9,.0f} {r.result.steps:>9,}")
    print(f"ratio speculation / off: {rows[0] / rows[1]:.2f}")
    sizes = [1_000, 5_000, 19_366] if quick else [1_000, 2_000, 5_000, 10_000, 19_366]
    print(f"{'requests':>9} {'wall s':>8} {'us/request':>11}   (eagle3, k by batch size)")
    for n in sizes:
        wn, _, _ = timed(lambda n=n: run(n, drafters=["eagle3"], schedule=True), repeats)
        print(f"{n:>9,} {wn:>8.3f} {1e6 * wn / n:>11.1f}")
    print("10,000 requests at 2x the trace's rate, speculation off")
    print(f"{'max_num_seqs':>12} {'wall s':>8} {'steps':>9} {'max running':>12}")
    for b in [8, 16, 32, 50]:
        wb, _, rb = timed(lambda b=b: run(10_000, 2.0, max_num_seqs=b), repeats)
        print(f"{b:>12} {wb:>8.3f} {rb.result.steps:>9,} {rb.metrics['max_running_seqs']:>12}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (median)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes, 3 repeats")
    ap.add_argument("--problem", action="store_true", help="only the problem-file case")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    if args.problem:
        problem_case(repeats, args.quick)
        print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"repeats {repeats} (medians)")
    pmf = chain_pmf(ACCEPTANCE)
    spec = SpecPolicy.fixed(4, pmf)
    off = SpecPolicy.off()
    sched = Scheduler(256, 8192, 500_000, async_scheduling=False)
    every = read_trace(TRACE)
    reqs = every.head(10_000)

    asched = Scheduler(256, 8192, 500_000, async_scheduling=True)

    def step_by_step(sc=sched):
        engine = _Engine(reqs, spec, step_ms, sc, 0, stretches=False)
        engine.run()
        return engine.result()

    w, c, r = timed(lambda: simulate(reqs, spec, step_ms, sched, seed=0), repeats)
    w_off, c_off, r_off = timed(lambda: simulate(reqs, off, step_ms, sched, seed=0), repeats)
    w_arr, c_arr, r_arr = timed(lambda: simulate(reqs, spec, ArrayStep(), sched, seed=0), repeats)
    w_ref, c_ref, _ = timed(step_by_step, max(1, repeats // 2))
    w_as, c_as, r_as = timed(lambda: simulate(reqs, spec, step_ms, asched, seed=0), repeats)
    w_asr, c_asr, r_asr = timed(lambda: step_by_step(asched), repeats)
    print()
    print(
        f"{'10,000 conversation requests':<34} {'wall s':>8} {'cpu s':>8} {'req/s':>9} {'steps':>9}"
    )
    for name, wall, cpu, run in (
        ("speculation k=4 (the case)", w, c, r),
        ("speculation off (baseline)", w_off, c_off, r_off),
        ("k=4, step_ms with many()", w_arr, c_arr, r_arr),
        ("k=4 step by step (reference)", w_ref, c_ref, r),
        ("k=4 async scheduling", w_as, c_as, r_as),
        ("k=4 async step by step", w_asr, c_asr, r_asr),
    ):
        print(f"{name:<34} {wall:>8.3f} {cpu:>8.3f} {len(reqs) / wall:>9,.0f} {run.steps:>9,}")
    print(f"ratio case / baseline: {w / w_off:.2f}; step-by-step / case: {w_ref / w:.2f}")
    print(f"async: async / case {w_as / w:.2f}; async step-by-step / async {w_asr / w_as:.2f}")

    sizes = [1_000, 5_000, 19_366] if args.quick else [1_000, 2_000, 5_000, 10_000, 19_366]
    print()
    print(f"{'requests':>9} {'wall s':>8} {'us/request':>11} {'steps':>9}")
    for n in sizes:
        part = every.head(n)
        wn, _, rn = timed(lambda part=part: simulate(part, spec, step_ms, sched, seed=0), repeats)
        print(f"{n:>9,} {wn:>8.3f} {1e6 * wn / n:>11.1f} {rn.steps:>9,}")

    fast = read_trace(TRACE, num_prompts=10_000, speedup=4.0)
    seqs = [8, 64, 512] if args.quick else [8, 32, 64, 128, 256, 512]
    print()
    print("10,000 requests at 4x the trace's rate")
    print(
        f"{'max_num_seqs':>12} {'wall s':>8} {'steps':>9} {'max running':>12} {'preemptions':>12}"
    )
    for b in seqs:
        sb = Scheduler(b, 8192, 500_000, async_scheduling=False)
        wb, _, rb = timed(lambda sb=sb: simulate(fast, spec, step_ms, sb, seed=0), repeats)
        print(
            f"{b:>12} {wb:>8.3f} {rb.steps:>9,} {rb.max_running_seqs:>12} "
            f"{int(rb.preemptions.sum()):>12}"
        )
    problem_case(repeats, args.quick)
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
