"""Plans for mixed traffic against an independent brute force, and the ``plan`` command.

The brute force (:func:`brute_plan`) tries every hosted set and, for each workload, every
configuration those drafters allow, with the plain-Python model of ``reference.py``; it
shares no code with ``allocator.analysis.plan`` or ``allocator.model``.
"""

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from allocator import solve
from allocator.analysis.plan import make_plan, sweep_hosting
from allocator.analysis.plan.candidates import dominated_by_subset
from allocator.exceptions import InputError
from allocator.io.build import problem_from_file, problem_from_spec
from allocator.io.spec import parse_problem
from tests.support import reference
from tests.support.cli_runner import run

SLACK = 1e-9


def within(value, cap):
    return value <= cap + SLACK * max(1.0, abs(cap))


# ----------------------------------------------------------------- brute force


def workload_dicts(raw):
    """(weight share, per-workload problem dict) for each workload, plain Python."""
    wls = raw.get("workloads") or [{"name": raw["name"], "weight": 1.0}]
    total = sum(w["weight"] for w in wls)
    out = []
    for w in wls:
        over = w.get("acceptance", {})
        drafters = [
            dict(d, acceptance=over.get(d["name"], d["acceptance"])) for d in raw["drafters"]
        ]
        out.append((w["weight"] / total, dict(raw, drafters=drafters)))
    return out


def space(raw):
    """Every (subset, k) of the search space, as in reference.brute_front."""
    d = raw["drafters"]
    names = [x["name"] for x in d]
    s = raw.get("search", {})
    kr, mr = s.get("k", {}), s.get("m", {})
    mmax = mr.get("max") or len(d)
    req = {names.index(n) for n in s.get("require", [])}
    exc = {names.index(n) for n in s.get("exclude", [])}
    for m in range(mr.get("min", 1), mmax + 1):
        for subset in itertools.combinations(range(len(d)), m):
            if req <= set(subset) and not exc & set(subset):
                for k in range(kr.get("min", 1), kr.get("max", 64) + 1):
                    yield subset, k


def brute_plan(raw, hosting_cap=None):
    """Best plan by exhaustion: (time per unit or None, {hosted set: (cost, time)}, single).

    ``single`` is the best mixture throughput of one configuration for all traffic.
    """
    budget = dict(raw.get("budget", {}))
    cap = budget.pop("hosting_cost", math.inf) if hosting_cap is None else hosting_cap
    budget.pop("hosting_cost", None)
    h = [d.get("hosting_cost", 0.0) for d in raw["drafters"]]
    wls = workload_dicts(raw)
    table = []  # (subset, hosting, [S_w or None if the caps fail on w], single ok, S_w)
    for subset, k in space(raw):
        row, thr = [], []
        mixed = dict.fromkeys(budget, 0.0)
        for share, p in wls:
            met = reference.metrics(p, subset, k)
            ok = all(within(met[b], c) for b, c in budget.items())
            row.append(met["throughput"] if ok else None)
            thr.append(met["throughput"])
            for b in budget:  # per-token cost averages over generated units; others agree
                if b == "draft_cost_per_token":
                    mixed[b] += share * met[b]
                else:
                    mixed[b] = met[b]
        single_ok = all(within(mixed[b], c) for b, c in budget.items())
        table.append((set(subset), sum(h[i] for i in subset), row, single_ok, thr))
    best, per_set = None, {}
    n = len(h)
    for r in range(n + 1):
        for hosted in itertools.combinations(range(n), r):
            cost = sum(h[i] for i in hosted)
            if not within(cost, cap):
                continue
            t = 0.0
            for w, (share, _) in enumerate(wls):
                s = [
                    row[w]
                    for sub, _, row, _, _ in table
                    if sub <= set(hosted) and row[w] is not None
                ]
                if not s:
                    t = None
                    break
                t += share / max(s)
            if t is None:
                continue
            per_set[hosted] = (cost, t)
            best = t if best is None else min(best, t)
    single = None  # as `solve` would pick it: caps on the mixture's metrics
    for _, hc, _, single_ok, thr in table:
        if within(hc, cap) and single_ok:
            mix = 1.0 / sum(share / s for (share, _), s in zip(wls, thr, strict=True))
            single = mix if single is None else max(single, mix)
    return best, per_set, single


def random_plan_problem(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    names = [f"d{i}" for i in range(n)]

    def acc():
        if rng.random() < 0.3:
            return [float(x) for x in np.round(rng.uniform(0.2, 1.0, size=rng.integers(2, 4)), 3)]
        return float(np.round(rng.uniform(0.1, 0.95), 3))

    drafters = [
        {
            "name": nm,
            "acceptance": acc(),
            "unit_cost": float(np.round(rng.uniform(0.0, 0.3), 3)),
            "hosting_cost": float(rng.integers(0, 5)) / 2,
        }
        for nm in names
    ]
    raw = {
        "name": f"plan-{seed}",
        "convention": str(rng.choice(["paper", "bonus"])),
        "drafting": str(rng.choice(["sequential", "parallel"])),
        "verifier": {
            "pass_cost": float(np.round(rng.uniform(0.5, 2.0), 3)),
            "token_cost": float(rng.choice([0.0, 0.02])),
        },
        "drafters": drafters,
        "search": {
            "k": {"min": int(rng.integers(1, 3)), "max": int(rng.integers(3, 7))},
            "m": {"min": 1, "max": int(rng.integers(1, n + 1))},
        },
    }
    n_w = int(rng.integers(0, 4))
    if n_w:
        raw["workloads"] = [
            {
                "name": f"w{j}",
                "weight": float(rng.integers(1, 5)),
                "acceptance": {nm: acc() for nm in names if rng.random() < 0.6},
            }
            for j in range(n_w)
        ]
    if n >= 3 and rng.random() < 0.2:
        raw["search"]["require"] = ["d0"]
    budget = {}
    if rng.random() < 0.7:
        budget["hosting_cost"] = float(rng.integers(0, 7)) / 2
    if rng.random() < 0.3:
        metric = str(rng.choice(["draft_cost_per_round", "draft_cost_per_token", "drafters"]))
        budget[metric] = {"draft_cost_per_round": 0.8, "draft_cost_per_token": 0.3, "drafters": 2}[
            metric
        ]
    if budget:
        raw["budget"] = budget
    return raw


def build(raw):
    return problem_from_spec(parse_problem(raw))


# ----------------------------------------------------------------- exactness


@pytest.mark.parametrize("seed", range(40))
def test_plan_equals_brute_force(seed):
    raw = random_plan_problem(seed)
    best, _, single = brute_plan(raw)
    problem = build(raw)
    if best is None:
        with pytest.raises(InputError) as info:
            make_plan(problem)
        assert info.value.field.startswith("budget")
        return
    plan = make_plan(problem)
    assert plan.exact and plan.status == "optimal" and plan.gap == 0.0
    assert math.isclose(1.0 / plan.throughput, best, rel_tol=1e-9)
    # the reported configurations, re-evaluated independently, give that objective
    wls = workload_dicts(raw)
    hosted = set(np.flatnonzero(plan.hosted))
    t = 0.0
    for w, (share, p) in enumerate(wls):
        subset = tuple(np.flatnonzero(plan.members[w]))
        assert set(subset) <= hosted
        met = reference.metrics(p, subset, int(plan.k[w]))
        assert math.isclose(met["throughput"], plan.metrics["throughput"][w], rel_tol=1e-10)
        for metric, cap in raw.get("budget", {}).items():
            if metric != "hosting_cost":
                assert within(met[metric], cap)
        t += share / met["throughput"]
    assert math.isclose(t, best, rel_tol=1e-9)
    cost = sum(raw["drafters"][i].get("hosting_cost", 0.0) for i in hosted)
    assert math.isclose(plan.hosting_cost, cost, abs_tol=1e-12)
    assert within(cost, raw.get("budget", {}).get("hosting_cost", math.inf))
    # the one-configuration baseline is the brute-force best single configuration
    if single is None:
        assert plan.single_throughput is None
    else:
        assert math.isclose(plan.single_throughput, single, rel_tol=1e-9)
        if "draft_cost_per_token" not in raw.get("budget", {}):
            # every single configuration is also a routed plan
            assert plan.throughput >= plan.single_throughput * (1 - 1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_single_workload_plan_is_solves_best_point(seed):
    raw = random_plan_problem(1000 + seed)
    raw.pop("workloads", None)
    problem = build(raw)
    try:
        front = solve(problem, "exact").points()
    except InputError as exc:
        with pytest.raises(InputError) as info:
            make_plan(problem)
        assert info.value.field.startswith("budget") and exc.field.startswith("budget")
        return
    plan = make_plan(problem)
    best = max(front, key=lambda p: p["throughput"])
    assert math.isclose(plan.throughput, best["throughput"], rel_tol=1e-12)
    assert plan.single_throughput == pytest.approx(best["throughput"], rel=1e-12)
    # the plan's one configuration, re-evaluated independently, is that fast within every cap
    subset = tuple(np.flatnonzero(plan.members[0]))
    met = reference.metrics(raw, subset, int(plan.k[0]))
    assert math.isclose(met["throughput"], best["throughput"], rel_tol=1e-9)
    assert math.isclose(plan.hosting_cost, met["hosting_cost"], abs_tol=1e-12)
    assert all(within(met[metric], cap) for metric, cap in raw.get("budget", {}).items())


@pytest.mark.parametrize("seed", range(12))
def test_single_configuration_is_solves_best_point_on_the_mixture(seed):
    raw = random_plan_problem(4000 + seed)
    raw.setdefault(
        "workloads",
        [
            {"name": "a", "weight": 1.0, "acceptance": {"d0": 0.95}},
            {"name": "b", "weight": 2.0, "acceptance": {"d1": 0.9}},
        ],
    )
    problem = build(raw)
    try:
        front = solve(problem, "exact").points()
    except InputError:
        front = []
    try:
        plan = make_plan(problem)
    except InputError:
        assert not front or brute_plan(raw)[0] is None
        return
    if not front:
        assert plan.single_throughput is None
        return
    best = max(p["throughput"] for p in front)
    assert math.isclose(plan.single_throughput, best, rel_tol=1e-12)


def test_one_workload_plan_is_solve_on_its_view():
    raw = random_plan_problem(7)
    raw["workloads"] = [{"name": "only", "weight": 3.0, "acceptance": {"d0": 0.9}}]
    problem = build(raw)
    plan = make_plan(problem)
    best = max(p["throughput"] for p in solve(problem.workload_view(0), "exact").points())
    assert math.isclose(plan.throughput, best, rel_tol=1e-12)


TWO_CLASSES = {
    "name": "two-classes",
    "drafters": [
        {"name": "general", "acceptance": 0.55, "unit_cost": 0.05, "hosting_cost": 1},
        {"name": "coder", "acceptance": 0.3, "unit_cost": 0.05, "hosting_cost": 4},
        {"name": "tiny", "acceptance": 0.4, "unit_cost": 0.01, "hosting_cost": 0.5},
    ],
    "workloads": [
        {"name": "chat", "weight": 1},
        {"name": "code", "weight": 1, "acceptance": {"coder": 0.9, "general": 0.35}},
    ],
    "search": {"k": {"max": 16}},
}


def test_a_drafter_not_hosted_is_never_assigned():
    problem = build(TWO_CLASSES)
    free = make_plan(problem)
    code = free.workloads.index("code")
    coder = problem.names.index("coder")
    assert free.members[code, coder]  # with room to host it, code runs on coder
    tight = make_plan(problem, {"hosting_cost": 3})
    assert not tight.hosted[coder]
    assert not tight.members[:, coder].any()
    assert tight.hosting_cost <= 3
    assert tight.throughput < free.throughput


def test_routing_beats_one_configuration_when_workloads_differ():
    plan = make_plan(build(TWO_CLASSES))
    assert plan.exact
    # chat and code want different drafters: routing is strictly better
    assert plan.throughput > plan.single_throughput * 1.01
    assert not np.array_equal(plan.members[0], plan.members[1])


# ----------------------------------------------------------------- pruning


def pairwise_dominated(rows, s):
    """The definition, pair by pair: some other row inside this one has s at least as high."""
    out = np.zeros(s.shape, bool)
    for a in range(len(rows)):
        for w in range(s.shape[1]):
            if not np.isfinite(s[a, w]):
                out[a, w] = True
            for b in range(len(rows)):
                if b != a and rows[b] <= rows[a] and s[b, w] >= s[a, w]:
                    out[a, w] = True
    return out


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("width", [None, 70])
def test_subset_pruning_matches_pairwise_definition(seed, width):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 7))
    n = width or k  # with width 70, subsets of k drafters scattered among 70 (packed keys)
    pool = np.sort(rng.choice(n, size=k, replace=False))
    lo, hi = sorted(rng.integers(1, k + 1, size=2))
    sets = [
        frozenset(int(pool[i]) for i in c)
        for m in range(lo, hi + 1)
        for c in itertools.combinations(range(k), m)
    ]
    members = np.array([[i in c for i in range(n)] for c in sets], bool)
    s = np.round(rng.uniform(0, 3, size=(len(sets), 2)), 1)  # rounding makes ties
    s[rng.random(s.shape) < 0.15] = -np.inf
    expect = pairwise_dominated(sets, s)
    assert np.array_equal(dominated_by_subset(members, s), expect)
    assert np.array_equal(dominated_by_subset(members, s, word_limit=0), expect)  # packed


def test_candidate_cap_is_reported_and_still_feasible():
    problem = build(TWO_CLASSES)
    full = make_plan(problem)
    cut = make_plan(problem, max_candidates=1)
    assert not cut.exact and cut.candidates.cut
    assert any("not proven optimal" in n for n in cut.notes)
    assert cut.throughput <= full.throughput * (1 + 1e-12)
    assert (cut.candidates.kept == 1).all()


# ----------------------------------------------------------------- sweep


def brute_front(per_set):
    pts = sorted(per_set.values(), key=lambda ct: (ct[0], ct[1]))
    front, best = [], math.inf
    for cost, t in pts:
        if t < best * (1 - 1e-12):
            front.append((cost, 1.0 / t))
            best = t
    return front


@pytest.mark.parametrize("seed", range(15))
def test_automatic_sweep_is_the_brute_force_front(seed):
    raw = random_plan_problem(2000 + seed)
    raw.get("budget", {}).pop("hosting_cost", None)
    _, per_set, _ = brute_plan(raw)
    problem = build(raw)
    if not per_set:
        with pytest.raises(InputError):
            sweep_hosting(problem)
        return
    sweep = sweep_hosting(problem)
    ours = [(p.hosting_cost, p.throughput) for p in sweep.front]
    ref = brute_front(per_set)
    assert len(ours) == len(ref)
    for (c1, t1), (c2, t2) in zip(ours, ref, strict=True):
        assert math.isclose(c1, c2, abs_tol=1e-12) and math.isclose(t1, t2, rel_tol=1e-9)
    assert sweep.exact
    # strictly increasing in both: more hosting budget, more throughput
    assert all(b[0] > a[0] and b[1] > a[1] for a, b in zip(ours, ours[1:], strict=False))


@pytest.mark.parametrize("seed", range(8))
def test_range_sweep_is_monotone_and_matches_plans(seed):
    raw = random_plan_problem(3000 + seed)
    raw.get("budget", {}).pop("hosting_cost", None)
    problem = build(raw)
    caps = np.linspace(0, 6, 9)
    try:
        sweep = sweep_hosting(problem, caps)
    except InputError:
        assert brute_plan(raw, hosting_cap=6.0)[0] is None
        return
    thr = [(-1.0 if p is None else p.throughput) for _, p in sweep.steps]
    assert [c for c, _ in sweep.steps] == list(caps)
    assert all(b >= a for a, b in zip(thr, thr[1:], strict=False))
    for cap, p in sweep.steps:
        best = brute_plan(raw, hosting_cap=cap)[0]
        if p is None:
            assert best is None
        else:
            assert p.hosting_cost <= cap + 1e-12
            assert math.isclose(1.0 / p.throughput, best, rel_tol=1e-9)


# ----------------------------------------------------------------- command line


@pytest.fixture
def two_classes(tmp_path):
    p = tmp_path / "two.json"
    p.write_text(json.dumps(TWO_CLASSES))
    return p


def test_plan_json_shape(two_classes):
    r = run("plan", two_classes, "--json", "-", "--budget", "hosting_cost=5")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {
        "problem", "status", "exact", "gap", "budget", "throughput", "hosted",
        "hosting_cost", "single", "routing_gain", "workloads", "candidates", "seconds", "notes",
    }  # fmt: skip
    assert doc["status"] == "optimal" and doc["exact"] is True and doc["gap"] == 0.0
    assert doc["budget"] == {"hosting_cost": 5.0}
    assert doc["hosting_cost"] <= 5
    assert [w["name"] for w in doc["workloads"]] == ["chat", "code"]
    w = doc["workloads"][1]
    assert set(w) >= {"drafters", "m", "k", "throughput", "single_throughput", "weight"}
    assert set(w["drafters"]) <= set(doc["hosted"])
    total = sum(x["weight"] / x["throughput"] for x in doc["workloads"])
    assert math.isclose(doc["throughput"], 1 / total, rel_tol=1e-12)
    single = sum(x["weight"] / x["single_throughput"] for x in doc["workloads"])
    assert math.isclose(doc["single"]["throughput"], 1 / single, rel_tol=1e-12)
    assert math.isclose(doc["routing_gain"], doc["throughput"] / doc["single"]["throughput"] - 1)
    assert set(doc["candidates"]) == {"enumerated", "pruned", "kept", "cut"}


def test_sweep_json_shape(two_classes):
    # what vLLM serves: every route one drafter (pooled routes were the default before)
    served = json.loads(run("plan", two_classes, "--json", "-", "--sweep", "hosting_cost").stdout)
    assert all(len(w["drafters"]) == 1 for p in served["front"] for w in p["workloads"])
    assert any("one drafter per server" in n for n in served["notes"])
    # the pooled upper bound, labelled, keeps the walk below (hosting 0.5 + 1 + 4 = 5.5)
    r = run("plan", two_classes, "--json", "-", "--sweep", "hosting_cost=0:6:7", "--pooled")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["metric"] == "hosting_cost" and doc["auto"] is False and doc["exact"] is True
    assert [s["cap"] for s in doc["steps"]] == [0, 1, 2, 3, 4, 5, 6]
    assert doc["steps"][0]["throughput"] is None  # nothing is free to host
    costs = [p["hosting_cost"] for p in doc["front"]]
    thr = [p["throughput"] for p in doc["front"]]
    assert costs == sorted(costs) and thr == sorted(thr)
    assert all(set(p["hosted"]) and p["workloads"] for p in doc["front"])
    r = run("plan", two_classes, "--json", "-", "--sweep", "hosting_cost", "--pooled")
    assert r.exit_code == 0, r.output
    auto = json.loads(r.stdout)
    assert any("upper bound" in n for n in auto["notes"])
    assert auto["auto"] is True and auto["steps"][-1]["cap"] is None  # the first, uncapped
    # hosting costs 0.5 (tiny), 1 (general) and 4 (coder): the walk finds every front point
    assert [p["hosting_cost"] for p in auto["front"]] == [0.5, 1.5, 4.5, 5.5]
    assert [p["throughput"] for p in auto["front"]] == thr


@pytest.mark.slow
def test_json_stdout_holds_only_json_in_a_fresh_process(two_classes):
    proc = subprocess.run(
        [sys.executable, "-m", "allocator", "plan", str(two_classes), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["exact"] is True  # no solver banner before the JSON


@pytest.mark.parametrize(
    "args, field",
    [
        (["--budget", "hosting_cost=0.25"], "budget.hosting_cost"),
        (["--sweep", "hosting_cost=0:0.25:3"], "budget.hosting_cost"),
        (["--budget", "draft_cost_per_round=0.001"], "budget.draft_cost_per_round"),
        (["--budget", "hosting=3"], "--budget"),
        (["--budget", "hosting_cost=-1"], "--budget"),
        (["--sweep", "drafters=0:3:4"], "--sweep"),
        (["--sweep", "hosting_cost=0:3"], "--sweep"),
        (["--sweep", "hosting_cost=3:1:2"], "--sweep"),
    ],
)
def test_infeasible_or_bad_budget_exits_2_naming_it(two_classes, tmp_path, args, field):
    out = tmp_path / "plan.json"
    r = run("plan", two_classes, "--json", out, *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.stderr
    assert "Traceback" not in r.output
    assert not out.exists()


def test_a_drafters_budget_below_one_states_its_own_bound(two_classes):
    r = run("plan", two_classes, "--budget", "drafters=0.5")
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --budget: drafters: '0.5' must be a finite number >= 1"


def test_hosting_cap_each_workload_meets_alone_but_not_together():
    # x serves only w1 and y only w2 within the per-token cap; each costs 1 to host
    raw = {
        "name": "apart",
        "convention": "bonus",
        "drafters": [
            {"name": "x", "acceptance": 0.9, "unit_cost": 0.1, "hosting_cost": 1},
            {"name": "y", "acceptance": 0.9, "unit_cost": 0.1, "hosting_cost": 1},
        ],
        "workloads": [
            {"name": "w1", "weight": 1, "acceptance": {"y": 0.01}},
            {"name": "w2", "weight": 1, "acceptance": {"x": 0.01}},
        ],
        "search": {"k": {"max": 4}, "m": {"max": 1}},
        "budget": {"draft_cost_per_token": 0.09, "hosting_cost": 1.5},
    }
    assert brute_plan(raw)[0] is None
    with pytest.raises(InputError) as info:
        make_plan(build(raw))
    assert info.value.field == "budget.hosting_cost"
    assert "at least 2" in info.value.message
    with pytest.raises(InputError) as info:  # a sweep under the same cap says the same
        sweep_hosting(build(raw), np.array([0.5, 1.5]))
    assert info.value.field == "budget.hosting_cost"
    assert "at least 2" in info.value.message
    ok = make_plan(build(raw), {"hosting_cost": 2})
    assert ok.hosted.all() and ok.exact


def test_bundled_mixed_traffic_scenario(problems_dir):
    problem = problem_from_file(problems_dir / "mixed-traffic.yaml")
    assert [w.name for w in problem.workloads] == ["chat", "code", "summarisation"]
    assert 5 <= problem.n <= 8
    plan = make_plan(problem)
    assert plan.exact and plan.throughput >= plan.single_throughput
    sweep = sweep_hosting(problem)
    assert sweep.exact and len(sweep.front) >= 3


def test_automatic_sweep_stops_at_the_hosting_cap():
    problem = build(TWO_CLASSES)
    full = sweep_hosting(problem)
    capped = sweep_hosting(problem, budget={"hosting_cost": 4.6})
    expect = [(p.hosting_cost, p.throughput) for p in full.front if p.hosting_cost <= 4.6]
    assert [(p.hosting_cost, p.throughput) for p in capped.front] == expect
    assert len(expect) < len(full.front)


def test_per_token_cap_holds_per_workload_when_routed_and_on_average_for_one_config():
    raw = {
        "name": "per-token",
        "convention": "bonus",
        "drafters": [
            {"name": "x", "acceptance": 0.9, "unit_cost": 0.1},
            {"name": "y", "acceptance": 0.2, "unit_cost": 0.01},
        ],
        "workloads": [
            {"name": "w1", "weight": 1},
            {"name": "w2", "weight": 1, "acceptance": {"x": 0.5}},
        ],
        "search": {"k": {"max": 4}, "m": {"max": 1}},
        "budget": {"draft_cost_per_token": 0.06},
    }
    # x at k=1 costs 0.1/1.9 per token on w1 and 0.1/1.5 on w2: over the cap on w2 alone,
    # under it on average; so w2 is routed to y while one configuration can use x for both
    best, _, single = brute_plan(raw)
    plan = make_plan(build(raw))
    assert math.isclose(1 / plan.throughput, best, rel_tol=1e-9)
    assert math.isclose(plan.single_throughput, single, rel_tol=1e-9)
    assert plan.members[1].tolist() == [False, True]
    assert plan.single_throughput > plan.throughput
    assert any("mixture's average" in n for n in plan.notes)


def test_cut_candidates_show_in_json_and_on_stderr(two_classes):
    r = run("plan", two_classes, "--json", "-", "--max-candidates", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["exact"] is False and doc["candidates"]["cut"] is True
    assert doc["candidates"]["kept"] == {"chat": 1, "code": 1}
    assert any("not proven optimal" in n for n in doc["notes"])
    human = run("plan", two_classes, "--max-candidates", "1")
    assert human.exit_code == 0 and "not proven optimal" in human.stderr


def test_plan_throughput_is_the_simulated_long_run_rate():
    """Monte Carlo: serve each workload's share of units with its routed configuration,
    drawing every drafter's correctness at every position; units over total time
    approaches ``1 / Σ_w p_w / S_w``."""
    raw = {**TWO_CLASSES, "convention": "bonus"}
    problem = build(raw)
    plan = make_plan(problem)
    rng = np.random.default_rng(20261130)
    units, time_spent = 0.0, 0.0
    target = 400_000  # generated units in all
    for w, (share, p) in enumerate(workload_dicts(raw)):
        members = np.flatnonzero(plan.members[w])
        k = int(plan.k[w])
        acc = np.array([p["drafters"][i]["acceptance"] for i in members])
        rounds = int(share * target / plan.metrics["expected_accepted"][w])
        correct = rng.random((rounds, k, members.size)) < acc  # (rounds, positions, drafters)
        ok = correct.any(axis=2)  # any-correct pooling
        run = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))  # accepted drafted units
        units += float((1 + run).sum())  # plus the verifier's own unit (bonus)
        time_spent += rounds * float(plan.metrics["round_time"][w])
        # per workload: the simulated mean matches the model's E_k (4 standard errors)
        se = run.std() / np.sqrt(rounds)
        assert abs((1 + run).mean() - plan.metrics["expected_accepted"][w]) < 4 * se
    assert units / time_spent == pytest.approx(plan.throughput, rel=0.01)


@pytest.mark.parametrize("errors", [{"model": "exchangeable", "correlation": 0.6}])
def test_plan_under_correlated_errors_equals_exhaustion(errors):
    """The pruning and the programme rely only on subsets being available whenever their
    supersets are, not on independence: check against exhaustion with the model's own
    (correlated) evaluation of every configuration."""
    from allocator import api

    raw = {**TWO_CLASSES, "errors": errors, "search": {"k": {"max": 8}}}
    problem = build(raw)
    names = problem.names
    best = math.inf
    for r in range(1, len(names) + 1):
        for hosted in itertools.combinations(range(len(names)), r):
            if sum(problem.hosting_cost[list(hosted)]) > 5:
                continue
            t = 0.0
            for w, wl in enumerate(problem.workloads):
                view = problem.workload_view(w)
                s = max(
                    api.evaluate(view, [names[i] for i in sub], k)["throughput"]
                    for m in range(1, r + 1)
                    for sub in itertools.combinations(hosted, m)
                    for k in range(1, 9)
                )
                t += wl.weight / s
            best = min(best, t)
    plan = make_plan(problem, {"hosting_cost": 5})
    assert plan.exact
    assert math.isclose(1 / plan.throughput, best, rel_tol=1e-9)


def test_cut_candidates_without_a_plan_fall_back_to_one_configuration():
    raw = {
        "name": "fallback",
        "drafters": [
            {"name": "a", "acceptance": 0.5, "unit_cost": 0.05, "hosting_cost": 2},
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.05, "hosting_cost": 2},
            {"name": "c", "acceptance": 0.3, "unit_cost": 0.05, "hosting_cost": 1},
        ],
        "workloads": [
            {"name": "w1", "weight": 1, "acceptance": {"a": 0.9}},
            {"name": "w2", "weight": 1, "acceptance": {"b": 0.9}},
        ],
        "search": {"k": {"max": 8}, "m": {"max": 1}},
        "budget": {"hosting_cost": 3},
    }
    problem = build(raw)
    full = make_plan(problem)
    cut = make_plan(problem, max_candidates=1)  # w1 keeps only a, w2 only b: 4 > 3 together
    assert cut.status == "single_configuration" and not cut.exact
    assert any("admit no plan" in n for n in cut.notes)
    assert cut.throughput == pytest.approx(cut.single_throughput, rel=1e-12)
    assert cut.hosting_cost <= 3 and cut.throughput <= full.throughput
    assert (cut.members == cut.members[0]).all()
