"""Reading big problem files: ``python benchmarks/loading.py [--repeats R] [--baseline DIR]``.

For problem files of growing size (one drafter whose ``acceptance`` lists ``P``
positions, so the file holds ``P`` numbers), prints the median wall time of ``R``
whole ``allocator evaluate FILE -d a -k 1`` processes (start-up included) with this
checkout, and, side by side, the same command run against a baseline checkout
(``--baseline``, default: none) and against this checkout with PyYAML's pure-Python
safe loader forced (the loader the package used before libyaml's C loader), with the
ratios. Nothing here is asserted; the numbers go into the project's notes.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

#: Run the command with yaml.CSafeLoader hidden, so the package falls back to SafeLoader.
PURE_PYTHON = (
    "import yaml, runpy, sys; yaml.__dict__.pop('CSafeLoader', None); "
    "sys.argv = ['allocator'] + sys.argv[1:]; runpy.run_module('allocator', run_name='__main__')"
)


def problem_text(positions: int) -> str:
    values = ", ".join("0.5" for _ in range(positions))
    return f"name: big\ndrafters:\n  - {{name: a, acceptance: [{values}], unit_cost: 0.1}}\n"


def median_run(cmd: list[str], env: dict, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to compare")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus")
    header = f"{'numbers':>10} {'MB':>6} {'this (s)':>9} {'pure-Python YAML (s)':>21} {'ratio':>6}"
    if args.baseline:
        header += f" {'baseline (s)':>13} {'ratio':>6}"
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"big-{size}.yaml"
            path.write_text(problem_text(size))
            tail = ["evaluate", str(path), "-d", "a", "-k", "1"]
            env = {**os.environ, "PYTHONPATH": str(HERE)}
            ours = median_run([sys.executable, "-m", "allocator", *tail], env, args.repeats)
            pure = median_run([sys.executable, "-c", PURE_PYTHON, *tail], env, args.repeats)
            row = (
                f"{size:>10,} {path.stat().st_size / 1e6:>6.1f} {ours:>9.2f} {pure:>21.2f} "
                f"{pure / ours:>6.1f}"
            )
            if args.baseline:
                benv = {**os.environ, "PYTHONPATH": str(args.baseline)}
                base = median_run([sys.executable, "-m", "allocator", *tail], benv, args.repeats)
                row += f" {base:>13.2f} {base / ours:>6.1f}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
