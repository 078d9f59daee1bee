"""Start-up: ``python benchmarks/startup.py [--repeats R] [--baseline DIR]``.

Times whole processes side by side, interleaved so that load on a shared machine falls on
every case alike, and prints the median wall and CPU seconds of ``R`` runs (default 7):

- the floor, ``python -c "import numpy, pydantic"``;
- ``allocator --help``;
- ``allocator solve problems/paper-r2.yaml``;
- ``python -c "import allocator"`` and, separately, whether it imported scipy.

and each case's ratio to the floor beside its target (``--help`` at most 1.2x, the small
``solve`` at most 2x), by wall time (the target's measure) and by CPU time (steadier
when other processes share the cores: a busy machine stretches every wall time), with
the first and third quartiles of the wall times. Each checkout is byte-compiled first
(``compileall``), as an installed package is, so that no case pays for compiling the
sources (which ``PYTHONDONTWRITEBYTECODE`` would otherwise make every run do), and one
untimed round warms the file cache. With ``--baseline DIR`` (another checkout of the
project) the same commands run against it too, for a before/after ratio. Nothing here is
asserted; the numbers go into the project's notes, with the load average printed before
and after.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CLI = "import sys; from allocator.cli import main; sys.argv = ['allocator', *sys.argv[1:]]; main()"


def cases(root: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "import numpy, pydantic": [py, "-c", "import numpy, pydantic"],
        "import allocator": [py, "-c", "import allocator"],
        "allocator --help": [py, "-c", CLI, "--help"],
        "allocator solve paper-r2": [py, "-c", CLI, "solve", str(root / "problems/paper-r2.yaml")],
    }


#: The ratio to the floor each case should stay within.
TARGETS = {"allocator --help": 1.2, "allocator solve paper-r2": 2.0}


def compile_checkout(root: Path) -> None:
    """Byte-compile the checkout's package, as ``pip install`` does for an installed one."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(root / "allocator")],
        check=True,
        capture_output=True,
    )


def run(cmd: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one whole process (which must exit 0). ``os.times`` counts
    in clock ticks (10 ms); the wall clock is ``perf_counter`` and the CPU the children's
    ``getrusage``, both finer."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def quartiles(xs: list[float]) -> str:
    """The first and third quartiles of ``xs`` (seconds), the spread around the median."""
    if len(xs) < 2:
        return "-"
    q1, _, q3 = statistics.quantiles(xs, n=4)
    return f"{q1:.3f}-{q3:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="whole runs per case (median)")
    ap.add_argument("--baseline", type=Path, help="another checkout to time beside this one")
    args = ap.parse_args()
    roots = {"this": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    load_before = os.getloadavg()[0]
    for root in roots.values():
        compile_checkout(root)
        for cmd in cases(root).values():  # untimed: warms the file cache
            run(cmd, root)
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for label, root in roots.items():
            for name, cmd in cases(root).items():
                w, c = run(cmd, root)
                walls.setdefault((label, name), []).append(w)
                cpus.setdefault((label, name), []).append(c)
    print(f"python {platform.python_version()}, {platform.machine()}, repeats {args.repeats}")
    print(
        f"{'checkout':9} {'case':28} {'wall s':>7} {'q1-q3':>13} {'cpu s':>7} {'/floor':>7} "
        f"{'cpu/fl':>7} {'target':>7}"
    )
    for label, root in roots.items():
        floor = statistics.median(walls[(label, "import numpy, pydantic")])
        cpu_floor = statistics.median(cpus[(label, "import numpy, pydantic")])
        for name in cases(root):
            w = statistics.median(walls[(label, name)])
            c = statistics.median(cpus[(label, name)])
            spread = quartiles(walls[(label, name)])
            target = f"{TARGETS[name]:7.1f}" if name in TARGETS else ""
            print(
                f"{label:9} {name:28} {w:7.3f} {spread:>13} {c:7.3f} {w / floor:7.2f} "
                f"{c / cpu_floor:7.2f} {target}".rstrip()
            )
        probe = subprocess.run(
            [sys.executable, "-c", "import sys, allocator; print('scipy' in sys.modules)"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        print(f"{label:9} import allocator imports scipy: {probe.stdout.strip()}")
    if "baseline" in roots:
        for name in cases(HERE):
            ratio = statistics.median(walls[("this", name)]) / statistics.median(
                walls[("baseline", name)]
            )
            print(f"this / baseline  {name:28} {ratio:7.2f}")
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
