"""Benchmark of ``allocator front``: ``python benchmarks/front.py [--repeats R] [--quick]``.

The case (issue 26: a front of at least 200 simulated points of 2,000 requests within 60 s
on 2 cores): ``problems/roofline-llama31-8b.yaml`` (its step times the roofline's, asked at
every step: the slowest path of the simulator) on ``h100-sxm`` and ``h200`` at TP 1, every
candidate of capacity (speculation off, EAGLE and EAGLE-3 at ``k = 1..7``, each one's ``k``
by batch size: 17 configurations) at ``max_num_seqs`` 4, 8, 16, 32, 64, 128: 204 points,
each 2,000 requests of 1,024 prompt and 256 output tokens sent at once (``--request-rate
inf``), seed 0. ``--quick``: 200 requests per point; ``--sizes 4,128``: those
``max_num_seqs`` only (fewer points, for a loaded machine); ``--save PATH``: keep the
2-worker front document (to compare two versions' fronts point by point).

It prints the median wall time of ``R`` whole ``allocator front`` processes (start-up
included) on 2 local worker processes beside the same command in one process
(``--workers 1``), their ratio, the CPU seconds each used (less sensitive than wall time to
other work on a shared machine), the points and requests simulated per wall second, the
load average at the end (other work lengthens the wall times far more than the CPU
seconds), and checks that both give the same front document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from processes import timed_runs

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "problems/roofline-llama31-8b.yaml"
SIZES = "4,8,16,32,64,128"


def command(out: Path, workers: int, prompts: int, sizes: str = SIZES) -> list[str]:
    return [
        sys.executable, "-m", "allocator", "front", str(PROBLEM),
        "--gpus", "h100-sxm,h200", "--tp", "1", "--max-num-seqs", sizes,
        "--input-len", "1024", "--output-len", "256", "--num-prompts", str(prompts),
        "--seed", "0", "--workers", str(workers), "--json", str(out),
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="200 requests per point")
    ap.add_argument("--no-baseline", action="store_true", help="skip the --workers 1 run")
    ap.add_argument("--sizes", default=SIZES, help=f"max_num_seqs values (default {SIZES})")
    ap.add_argument("--save", type=Path, help="write the 2-worker front document there")
    args = ap.parse_args()
    prompts = 200 if args.quick else 2000
    rows = []
    docs = {}
    print(f"allocator front: {args.sizes} max_num_seqs, 2 GPUs, {prompts:,} requests a "
          f"point, median of {args.repeats} run(s)")  # fmt: skip
    print(f"{'workers':>8} {'points':>7} {'wall s':>8} {'CPU s':>8} {'points/s':>9} "
          f"{'requests/s':>11}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (2,) if args.no_baseline else (2, 1):
            out = Path(tmp) / f"front-{workers}.json"
            runs = timed_runs(command(out, workers, prompts, args.sizes), args.repeats, cwd=ROOT)
            doc = json.loads(out.read_text())
            docs[workers] = doc
            n = len(doc["points"])
            wall, cpu = runs.median, statistics.median(runs.cpus)
            rows.append((workers, wall, cpu, n))
            rate = n * prompts / wall
            print(f"{workers:>8} {n:>7} {wall:>8.1f} {cpu:>8.1f} {n / wall:>9.2f} {rate:>11,.0f}",
                  flush=True)  # fmt: skip
    if args.save is not None:
        args.save.write_text(json.dumps(docs[2], sort_keys=True))
    same = len(docs) < 2 or docs[1]["points"] == docs[2]["points"]
    # other work on the machine shows in the wall times, far less in the CPU seconds
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    if len(rows) == 2:
        print(f"ratio 2 workers / 1: {rows[0][1] / rows[1][1]:.2f} (wall)")
    print(f"same front on 1 and 2 workers: {same}")
    if not same:
        raise SystemExit("the fronts differ")


if __name__ == "__main__":
    main()
