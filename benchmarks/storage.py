"""Stored-study and large-N timings: ``python benchmarks/storage.py [--repeats R]``.

Whole ``allocator solve`` processes (start-up included), median of ``R`` runs, each
case beside its baseline run side by side in the same invocation:

* ``--timeout 10`` on 100 drafters, SQLite storage, a fresh study each run: the wall
  time against the 10 s asked (the old seeding ran 48 s before its first trial), and
  against the same run in memory.
* ``auto`` at N = 1024 (knapsack) against N = 100, and ``optuna --trials 100`` at
  N = 1024 against N = 100.
* exact search under a gaussian matrix at 11 and 12 drafters (one acceptance each),
  against ``auto`` on 12 strongly correlated drafters with 3 positions (which it sends
  to optuna: exact would need 12,051 integrals).

The problems are generated here from fixed seeds (acceptance U(0.3, 0.9), unit cost
U(0.01, 0.1), k up to 16). Set ``ALLOCATOR_TEST_POSTGRES_URL`` to add the 100-drafter
timeout case on PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np


def problem(path: Path, n: int, seed: int = 0, errors: dict | None = None, positions: int = 1):
    rng = np.random.default_rng(seed)

    def acceptance():
        if positions == 1:
            return round(float(rng.uniform(0.3, 0.9)), 3)
        return [round(float(a), 3) for a in sorted(rng.uniform(0.3, 0.9, positions))[::-1]]

    raw = {
        "name": path.stem,
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": acceptance(),
                "unit_cost": round(float(rng.uniform(0.01, 0.1)), 3),
            }
            for i in range(n)
        ],
        "search": {"k": {"max": 16}},
    }
    if errors is not None:
        raw["errors"] = errors
    path.write_text(json.dumps(raw))
    return path


def gaussian(n: int, strong: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    if strong:  # one factor with loadings 0.6-0.9
        loadings = rng.uniform(0.6, 0.9, size=n)
        matrix = np.outer(loadings, loadings)
    else:  # three factors, weak
        a = rng.normal(size=(n, 3))
        c = a @ a.T + n * np.eye(n)
        d = np.sqrt(np.diag(c))
        matrix = c / np.outer(d, d)
    matrix = np.round(matrix, 4)
    np.fill_diagonal(matrix, 1.0)
    return {"model": "gaussian", "matrix": matrix.tolist()}


def whole_runs(path: Path, repeats: int, *args: str) -> tuple[float, dict]:
    """Median wall seconds of ``repeats`` whole processes, and the last JSON document.

    ``{study}`` in an argument is replaced by a fresh name for every run.
    """
    times, doc = [], {}
    for _ in range(repeats):
        out = path.with_suffix(".out.json")
        fresh = [a.replace("{study}", f"bench-{uuid.uuid4().hex[:8]}") for a in args]
        cmd = [sys.executable, "-m", "allocator", "solve", str(path), *fresh, "--json", str(out)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        doc = json.loads(out.read_text())
    return statistics.median(times), doc


def row(label: str, seconds: float, doc: dict, base: float | None = None) -> None:
    ratio = "" if base is None else f"{seconds / base:6.2f}x"
    note = doc["notes"][-1] if doc.get("notes") else ""
    print(
        f"{label:52} {seconds:7.2f} s {ratio:>7}  front {len(doc['front']):3d}  "
        f"evaluated {doc['evaluated']:>6}  {note[:90]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    r = args.repeats
    print(f"# {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores")
    print(f"# median of {r} whole processes; ratio against the line above it")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        p100 = problem(d / "n100.json", 100)
        p1024 = problem(d / "n1024.json", 1024)
        db = f"sqlite:///{d / 'study.db'}"

        base, doc = whole_runs(p100, r, "-s", "optuna", "--timeout", "10")
        row("optuna --timeout 10, N=100, in memory", base, doc)
        t, doc = whole_runs(p100, r, "-s", "optuna", "--timeout", "10", "--storage", db,
                            "--study", "{study}")  # fmt: skip
        row("optuna --timeout 10, N=100, SQLite, fresh study", t, doc, base)
        pg = os.environ.get("ALLOCATOR_TEST_POSTGRES_URL")
        if pg:
            t, doc = whole_runs(p100, r, "-s", "optuna", "--timeout", "10", "--storage", pg,
                                "--study", "{study}")  # fmt: skip
            row("optuna --timeout 10, N=100, PostgreSQL, fresh study", t, doc, base)

        base, doc = whole_runs(p100, r)
        row("auto, N=100 (knapsack)", base, doc)
        t, doc = whole_runs(p1024, r)
        row("auto, N=1024 (knapsack)", t, doc, base)
        base, doc = whole_runs(p100, r, "-s", "optuna", "--trials", "100")
        row("optuna --trials 100, N=100", base, doc)
        t, doc = whole_runs(p1024, r, "-s", "optuna", "--trials", "100")
        row("optuna --trials 100, N=1024", t, doc, base)

        g11 = problem(d / "g11.json", 11, 1, gaussian(11, False, 1))
        g12 = problem(d / "g12.json", 12, 1, gaussian(12, False, 1))
        g12s = problem(d / "g12s.json", 12, 2, gaussian(12, True, 2), positions=3)
        base, doc = whole_runs(g11, r, "-s", "exact")
        row("exact, gaussian N=11 (1,981 integrals)", base, doc)
        t, doc = whole_runs(g12, r, "-s", "exact")
        row("exact, gaussian N=12 (4,017 integrals)", t, doc, base)
        t, doc = whole_runs(g12s, r)
        row("auto, gaussian N=12 strong, 3 positions (12,051)", t, doc, base)


if __name__ == "__main__":
    main()
