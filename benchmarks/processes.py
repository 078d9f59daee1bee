"""Timing whole ``allocator`` processes (start-up included) for the benchmark scripts.

``python benchmarks/<topic>.py`` puts this folder first on ``sys.path``, so the scripts
import it as ``processes``.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Runs:
    """``walls``: wall seconds of each run; ``cpus``: CPU seconds (user + system) each
    run's process used, less sensitive than wall time to other work on a shared machine;
    ``stdout``: the last run's standard output."""

    walls: list[float]
    cpus: list[float]
    stdout: str

    @property
    def median(self) -> float:
        """Median wall seconds."""
        return statistics.median(self.walls)


def timed_runs(cmd: list[str], repeats: int, cwd: Path | None = None) -> Runs:
    """Run ``cmd`` ``repeats`` times as whole processes; every run must exit 0
    (``RuntimeError`` with its stderr otherwise)."""
    walls, cpus, stdout = [], [], ""
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        stdout = r.stdout
    return Runs(walls, cpus, stdout)
