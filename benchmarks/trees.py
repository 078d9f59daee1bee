"""Benchmarks for token trees: ``python benchmarks/trees.py [--repeats R]``.

Whole processes (start-up included), median of ``R`` runs each, side by side:

* ``allocator tree --nodes 256 --depth 16 --width 8``: the exact optimal tree (target ≤ 1 s);
* ``allocator tree --max-nodes 256 --depth 16 --width 8``: the front over N = 1..256
  (target ≤ 2 s);
* the baseline ``allocator tree --nodes 1 --depth 1``: the same process with a trivial
  programme (start-up, imports and reading the problem), so the ratio shows what the
  programme itself adds.

In one process it also times the vectorised programme against a straightforward
per-state Python loop of the same recursion (same answer, checked) at N = 256.
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
from processes import timed_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from allocator.model.token_tree import TreeProgramme, edge_weights  # noqa: E402

PROBLEM = """\
name: tree-benchmark
convention: bonus
verifier: {pass_cost: 1.0, token_cost: 0.004}
drafters:
  - name: eagle
    acceptance: 0.72
    unit_cost: 0.04
    acceptance_by_rank: [0.72, 0.38, 0.25, 0.18, 0.14, 0.11, 0.09, 0.08]
"""
RANKS = np.array([[0.72, 0.38, 0.25, 0.18, 0.14, 0.11, 0.09, 0.08]])


def whole(path: Path, args: list[str], repeats: int) -> tuple[float, float, dict]:
    """Median wall and CPU (user + system) seconds of ``repeats`` whole ``allocator tree``
    processes, and the last JSON. CPU time is what the process itself used, less sensitive
    than wall time to other work on a shared machine."""
    cmd = [sys.executable, "-m", "allocator", "tree", str(path), "-d", "eagle", *args]
    runs = timed_runs([*cmd, "--json", "-"], repeats)
    return runs.median, statistics.median(runs.cpus), json.loads(runs.stdout)


def python_loop(p: np.ndarray, nodes: int, depth: int, width: int) -> float:
    """The same programme with one Python loop per state (one rank list): best E."""
    q = edge_weights(p)[0, :width].tolist()
    size = nodes + 1
    ninf = -math.inf
    value = [ninf, 1.0] + [ninf] * (size - 1)  # left = 0: only the root
    for _left in range(1, depth + 1):
        f = [0.0] + [ninf] * size
        for j in range(len(q) - 1, -1, -1):
            g = [0.0] + [ninf] * size
            for k in range(1, size + 1):
                best = ninf
                for s in range(1, k + 1):
                    if value[s] == ninf or f[k - s] == ninf:
                        continue
                    v = q[j] * value[s] + f[k - s]
                    if v > best:
                        best = v
                g[k] = best
            f = g
        value = [ninf, 1.0] + [1.0 + f[s - 1] for s in range(2, size + 1)]
    return max(v for v in value if v != ninf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="whole runs per case (median)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree.yaml"
        path.write_text(PROBLEM)
        cases = [
            ("baseline: tree --nodes 1 --depth 1", ["--nodes", "1", "--depth", "1"]),
            (
                "optimal tree N=256, depth<=16, width<=8",
                ["--nodes", "256", "--depth", "16", "--width", "8"],
            ),
            (
                "front N=1..256, depth<=16, width<=8",
                ["--max-nodes", "256", "--depth", "16", "--width", "8"],
            ),
        ]
        results = [(label, *whole(path, argv, args.repeats)) for label, argv in cases]
    print(
        f"whole processes, median of {args.repeats}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"{'case':<42} {'wall s':>7} {'cpu s':>7} {'wall/base':>10} {'cpu/base':>9}")
    base_wall, base_cpu = results[0][1], results[0][2]
    for label, wall, cpu, _ in results:
        print(f"{label:<42} {wall:7.3f} {cpu:7.3f} {wall / base_wall:9.2f}x {cpu / base_cpu:8.2f}x")
    doc, fdoc = results[1][3], results[2][3]
    print(
        f"optimal tree: E = {doc['expected_accepted']:.6f}, {doc['nodes']} nodes, "
        f"depth {doc['depth']}; front best throughput at {fdoc['best']['nodes']} nodes"
    )
    t0 = time.perf_counter()
    fast = TreeProgramme(RANKS, 256, 16, 8).best().expected_accepted
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = python_loop(RANKS, 256, 16, 8)
    t_slow = time.perf_counter() - t0
    assert abs(fast - slow) < 1e-9, (fast, slow)
    print(
        f"in one process, N=256: vectorised {t_fast:.3f} s, Python loop {t_slow:.3f} s "
        f"({t_slow / t_fast:.0f}x), same E {fast:.6f}"
    )


if __name__ == "__main__":
    main()
