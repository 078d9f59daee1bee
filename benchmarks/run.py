"""Benchmarks of docs/design.md §7: ``python benchmarks/run.py [--repeats R] [--quick]``.

For every case it prints the median wall time of ``R`` whole ``allocator solve``
processes (start-up included), the front size, the hypervolume ratio of that front
against a reference front found another way (exact enumeration without pruning,
the knapsack programme, or the best front any method found), and, in the same run
on the same problem, plain Optuna (its default sampler, TPE, one model call per
trial) given the same time, with its hypervolume ratio. At N=14 it also times a
straightforward per-configuration Python loop against the vectorised exact search
in one process. Cases whose error model this version lacks are listed as such.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402

from allocator import api  # noqa: E402
from allocator.core.pareto import front_order, hypervolume, nondominated  # noqa: E402
from allocator.exceptions import InputError  # noqa: E402
from allocator.search.exact import ExactStrategy  # noqa: E402
from allocator.search.knapsack import KnapsackStrategy  # noqa: E402
from allocator.search.study import SearchSpace, constraint_values, evaluate_batch  # noqa: E402


# ---------------------------------------------------------------- measuring
def whole_runs(path: Path, strategy: str, repeats: int, extra=()) -> tuple[float, dict]:
    """Median wall seconds of ``repeats`` whole ``allocator solve`` processes, and the last JSON."""
    times, doc = [], None
    for _ in range(repeats):
        out = path.with_suffix(".out.json")
        cmd = [sys.executable, "-m", "allocator", "solve", str(path), "--strategy", strategy]
        cmd += ["--json", str(out), *extra]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        doc = json.loads(out.read_text())
    return statistics.median(times), doc


def doc_points(doc) -> tuple[np.ndarray, np.ndarray]:
    return np.array([p["cost"] for p in doc["front"]]), np.array(
        [p["throughput"] for p in doc["front"]]
    )


def hv_ratio(cost, thr, ref_cost, ref_thr) -> float:
    """Hypervolume of (cost, thr) over that of the reference front (same reference point)."""
    ref_point = 1.05 * float(np.max(ref_cost))
    base = hypervolume(ref_cost, ref_thr, ref_point)
    return hypervolume(cost, thr, ref_point) / base if base > 0 else float("nan")


def plain_optuna(problem, seconds: float, seed: int = 0):
    """Optuna's default sampler (TPE), one model evaluation per trial, for ``seconds``.

    It gets the same parameters as the optuna strategy (:class:`SearchSpace`), but
    no seeding and no batching.

    Returns the front (cost, throughput) of its feasible trials, re-evaluated.
    """
    space = SearchSpace(problem)

    dists = space.distributions()

    def objective(trial):
        params = {}
        for name, dist in dists.items():
            if isinstance(dist, optuna.distributions.IntDistribution):
                params[name] = trial.suggest_int(name, dist.low, dist.high)
            else:
                params[name] = trial.suggest_categorical(name, dist.choices)
        members, k = space.configs([params])
        met = evaluate_batch(problem, members, k)
        for key, v in constraint_values(problem, met).items():
            trial.set_constraint(key, float(v[0]))
        return float(met["throughput"][0]), float(met[problem.cost_metric][0])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=optuna.samplers.TPESampler(seed=seed)
    )
    study.optimize(objective, timeout=seconds)
    ok = [
        t
        for t in study.trials
        if t.values is not None and all(c <= 0 for c in t.constraints.values())
    ]
    if not ok:
        return np.zeros(0), np.zeros(0), len(study.trials)
    cost = np.array([t.values[1] for t in ok])
    thr = np.array([t.values[0] for t in ok])
    keep = front_order(cost, thr)
    return cost[keep], thr[keep], len(study.trials)


def python_loop_front(raw: dict) -> list[tuple[float, float]]:
    """The N=14 baseline: every (subset, k) evaluated one at a time in plain Python."""
    d = raw["drafters"]
    acc = [x["acceptance"] for x in d]
    rho = [x["unit_cost"] for x in d]
    kmax = raw["search"]["k"]["max"]
    points = []
    for m in range(1, len(d) + 1):
        for subset in itertools.combinations(range(len(d)), m):
            fail = 1.0
            for i in subset:
                fail *= 1.0 - acc[i]
            a = 1.0 - fail
            sum_rho = sum(rho[i] for i in subset)
            for k in range(1, kmax + 1):
                e = k if a == 1.0 else (1.0 - a**k) / (1.0 - a)
                t = k * sum_rho + 1.0
                points.append((k * sum_rho, e / t))
    points.sort(key=lambda p: (p[0], -p[1]))
    front, best = [], -math.inf
    for c, t in points:
        if t > best:
            front.append((c, t))
            best = t
    return front


# ---------------------------------------------------------------- the cases
def load_case(raw: dict, path: Path):
    """Write ``raw`` to ``path`` and load it: ``(problem, None)``, or ``(None, why not)``
    when this version cannot build it (an error model it lacks)."""
    path.write_text(json.dumps(raw))
    try:
        return api.load(path), None
    except InputError as exc:
        return None, exc.message


def show(row: list[str]) -> None:
    print("  " + " | ".join(row), file=sys.stderr, flush=True)


def run_case(label, raw, strategy, target, folder, repeats, reference, rows):
    path = folder / f"{raw['name']}.json"
    problem, why = load_case(raw, path)
    if why is not None:
        rows.append([label, strategy, target, "not available", "", "", "", why])
        return
    seconds, doc = whole_runs(path, strategy, repeats)
    cost, thr = doc_points(doc)
    ref_cost, ref_thr, ref_name = reference(problem, cost, thr)
    ratio = hv_ratio(cost, thr, ref_cost, ref_thr)
    p_cost, p_thr, p_trials = plain_optuna(problem, seconds)
    p_ratio = hv_ratio(p_cost, p_thr, ref_cost, ref_thr)
    note = (
        f"{doc['strategy']}, exact={str(doc['exact']).lower()}, {doc['seconds']:.3f} s inside "
        f"the process; reference: {ref_name}; plain Optuna ran {p_trials} trials"
    )
    rows.append(
        [
            label,
            strategy,
            target,
            f"{seconds:.2f}",
            str(len(doc["front"])),
            f"{ratio:.6f}",
            f"{p_ratio:.4f}",
            note,
        ]
    )


def ref_unpruned(problem, cost, thr):
    r = ExactStrategy(prune=False).solve(problem)
    return r.front.cost, r.front.throughput, "exact enumeration without pruning"


def ref_knapsack(problem, cost, thr):
    r = KnapsackStrategy().solve(problem)
    return r.front.cost, r.front.throughput, "knapsack programme"


def ref_self(problem, cost, thr):
    return cost, thr, "itself (--quick skips the unpruned check)"


def ref_none_other(problem, cost, thr):
    return cost, thr, "itself (no other exact method reaches N=200 with m free)"


def gaussian_case(folder, seconds, rows):
    raw = cases.gaussian_problem("n60-gaussian", 60)
    raw["search"]["m"]["max"] = 6  # the gaussian model integrates subsets of up to 12
    label = "N=60, gaussian matrix, m <= 6, heuristic"
    target = ">= 99% of best-known HV in 60 s, ahead of plain Optuna"
    path = folder / "n60-gaussian.json"
    problem, why = load_case(raw, path)
    if why is not None:
        rows.append([label, "optuna", target, "not available", "", "", "", why])
        return
    run_s, doc = whole_runs(path, "optuna", 1, ["--timeout", str(seconds), "--seed", "0"])
    cost, thr = doc_points(doc)
    p_cost, p_thr, p_trials = plain_optuna(problem, seconds)
    all_c, all_t = np.concatenate([cost, p_cost]), np.concatenate([thr, p_thr])
    keep = front_order(all_c, all_t)
    ref_c, ref_t = all_c[keep], all_t[keep]
    ratio = hv_ratio(cost, thr, ref_c, ref_t)
    p_ratio = hv_ratio(p_cost, p_thr, ref_c, ref_t)
    note = (
        f"{doc['evaluated']} trials in a {seconds:g} s budget; reference: best front of both; "
        f"plain Optuna ran {p_trials} trials"
    )
    rows.append(
        [
            label,
            "optuna",
            target,
            f"{run_s:.2f}",
            str(len(doc["front"])),
            f"{ratio:.6f}",
            f"{p_ratio:.4f}",
            note,
        ]
    )


def floor_case(folder, repeats, rows):
    """Whole-process time of a trivial solve: start-up and imports, the floor of every case."""
    path = folder / "floor.json"
    raw = cases.problem("floor", 1)
    raw["search"]["k"]["max"] = 1
    path.write_text(json.dumps(raw))
    seconds, doc = whole_runs(path, "exact", max(repeats, 3))
    rows.append(
        [
            "start-up floor: 1 drafter, k = 1",
            "exact",
            "",
            f"{seconds:.2f}",
            str(len(doc["front"])),
            "",
            "",
            "interpreter start, imports, reading the file: part of every whole-process time",
        ]
    )


def loop_case(folder, repeats, rows):
    raw = cases.problem("n14", 14)
    problem, _ = load_case(raw, folder / "n14.json")
    times = []
    for _ in range(max(repeats, 3)):
        t0 = time.perf_counter()
        res = api.solve(problem, "exact")
        times.append(time.perf_counter() - t0)
    fast = statistics.median(times)
    t0 = time.perf_counter()
    front = python_loop_front(raw)
    slow = time.perf_counter() - t0
    configs = (2 ** len(raw["drafters"]) - 1) * raw["search"]["k"]["max"]
    same = len(front) == len(res.front) and np.allclose(
        [t for _, t in front], res.front.throughput, rtol=1e-12
    )
    rows.append(
        [
            "N=14, independent, exact vs per-configuration Python loop (one process)",
            "exact",
            ">= 100x the loop",
            f"{fast:.4f}",
            str(len(res.front)),
            "1.000000" if same else "fronts differ",
            "",
            f"loop {slow:.2f} s over {configs:,} configurations: {slow / fast:,.0f}x faster",
        ]
    )


def front_utility_timing(rows):
    """front_order (moocore pre-filter, then the scan) against the scan alone and moocore alone."""
    from allocator.core.pareto import _scan

    rng = np.random.default_rng(0)
    cost, thr = rng.uniform(0, 1, 200_000), rng.uniform(0, 1, 200_000)

    def timed(fn) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        return (time.perf_counter() - t0) / 5

    ours = timed(lambda: front_order(cost, thr))
    scan = timed(lambda: _scan(cost, thr, ()))
    lib = timed(lambda: nondominated(cost, thr))
    rows.append(
        [
            "non-dominated filter, 200,000 random points",
            "pareto.front_order",
            "library unless faster",
            f"{ours:.4f}",
            "",
            "",
            "",
            f"hand-written scan alone {scan:.4f} s; moocore.is_nondominated alone {lib:.4f} s "
            "(mask only, no order); front_order = moocore, then the scan on the survivors",
        ]
    )


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores (nproc), {cpu}, Python {platform.python_version()}, "
        f"load average at the end {load}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="whole runs per case (median)")
    ap.add_argument("--quick", action="store_true", help="1 repeat, 10 s heuristic budget")
    ap.add_argument("--gaussian-seconds", type=float, default=60.0)
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    g_seconds = 10.0 if args.quick else args.gaussian_seconds
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        exact_ref = ref_self if args.quick else ref_unpruned  # unpruned N=20: ~45 s each
        specs = [
            (
                "N=20, independent, k 1..64, m free",
                cases.problem("n20", 20),
                "exact",
                "<= 2 s",
                ref_knapsack,
            ),
            ("N=20, independent (auto)", cases.problem("n20a", 20), "auto", "<= 2 s", exact_ref),
            (
                "N=20, exchangeable r=0.3",
                cases.problem("n20-exch", 20, errors={"model": "exchangeable", "correlation": 0.3}),
                "exact",
                "<= 2 s",
                exact_ref,
            ),
            (
                "N=20, factor",
                cases.factor_problem("n20-factor", 20),
                "exact",
                "<= 2 s",
                exact_ref,
            ),
            (
                "N=20, empirical log of 200,000 rows",
                cases.empirical_problem("n20-emp", 20, 200_000, folder),
                "exact",
                "<= 5 s",
                exact_ref,
            ),
            (
                "N=200, m <= 3, independent",
                cases.problem("n200m3", 200, m_max=3),
                "exact",
                "<= 3 s",
                ref_knapsack,
            ),
            (
                "N=200, m free, independent, draft cost",
                cases.problem("n200", 200),
                "knapsack",
                "<= 10 s",
                ref_none_other,
            ),
        ]
        print("... start-up floor", file=sys.stderr, flush=True)
        floor_case(folder, repeats, rows)
        show(rows[-1])
        for label, raw, strategy, target, ref in specs:
            print(f"... {label}", file=sys.stderr, flush=True)
            run_case(label, raw, strategy, target, folder, repeats, ref, rows)
            show(rows[-1])
        print("... N=14 loop", file=sys.stderr, flush=True)
        loop_case(folder, repeats, rows)
        show(rows[-1])
        print(f"... N=60 gaussian ({g_seconds:g} s each)", file=sys.stderr, flush=True)
        gaussian_case(folder, g_seconds, rows)
        show(rows[-1])
        front_utility_timing(rows)
    head = [
        "case",
        "strategy",
        "target",
        "median s, whole process",
        "front",
        "HV ratio",
        "plain Optuna HV ratio, same time",
        "notes",
    ]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {machine()}; repeats {repeats}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nbenchmarks/run.py {' '.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
