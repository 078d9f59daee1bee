"""``allocator capacity --tokens-per-s``: fleet sizing against brute force over every
integer batch size, configurations and replica counts, the memory cap on the batch, the
load sweep, the notes, and bad input (exit 2, one line, no file).

Every expected value is computed here from a hand-written step-time table: the step at an
integer batch size linear between the measured ones, expected tokens per step in the bonus
convention ``E = 1 + Σ_{i=1..k} a^i`` (one drafter, one acceptance), ``tokens/s = b · 1000
· E / step_ms``, ``tpot = step_ms / E``, and the replica count found by counting up until
the fleet carries the load.
"""

from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from allocator.analysis.capacity.by_load import size_fleet, sweep_load
from allocator.analysis.capacity.crossings import crossings
from allocator.cli import app
from allocator.core.problem import Problem
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.memory_fit import max_batch, memory_model

runner = CliRunner()

BATCHES = [1, 8, 32, 64]
KS = [0, 1, 2, 3, 4]
PRICE = 10.0


def problem_data(tables: dict[str, dict[int, dict[int, float]]], acc: dict[str, float], **serving):
    """A problem whose only step times are the measured tables (one drafter each)."""
    return {
        "name": "cap",
        "convention": "bonus",
        "drafters": [{"name": n, "acceptance": a, "unit_cost": 0.1} for n, a in acc.items()],
        "search": {"k": {"min": 1, "max": max(KS)}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": BATCHES,
            "gpu_cost_per_hour": PRICE,
            "step_ms": [{"drafters": [n], "by_batch": t} for n, t in tables.items()],
            **serving,
        },
    }


def build(data: dict) -> Problem:
    return problem_from_spec(parse_problem(copy.deepcopy(data)))


def random_tables(rng: np.random.Generator, names) -> dict:
    """Step times rising with k and with the batch; the same k = 0 (plain decoding) row
    in every table, as one verifier measured twice would give."""
    base = {b: float(6.0 + 0.25 * b * rng.uniform(0.5, 1.5)) for b in BATCHES}
    out = {}
    for n in names:
        t = {}
        for b in BATCHES:
            row = {0: base[b]}
            for k in KS[1:]:
                row[k] = row[k - 1] + rng.uniform(0.3, 2.0) * (1.0 + b / 16.0)
            t[b] = row
        out[n] = t
    return out


def table_step(table: dict, b: int, k: int) -> float | None:
    """A table's step at integer batch ``b``: linear between the measured batch sizes
    around it (each having ``k``), ``None`` outside or where ``k`` was not measured."""
    sizes = sorted(table)
    if b < sizes[0] or b > sizes[-1]:
        return None
    hi = next(x for x in sizes if x >= b)
    if k not in table[hi]:
        return None
    if hi == b:
        return table[hi][k]
    lo = max(x for x in sizes if x < b)
    if k not in table[lo]:
        return None
    w = (b - lo) / (hi - lo)
    return (1 - w) * table[lo][k] + w * table[hi][k]


def brute_force(data: dict, load: float, itl_target: float, speculative=None, allowed=None):
    """Every (integer batch up to the largest measured, drafter or none, k) and every replica
    count, in plain Python; ``allowed(name, k)``: which speculative configurations a budget
    leaves in."""
    tables = {t["drafters"][0]: t["by_batch"] for t in data["serving"]["step_ms"]}
    acc = {d["name"]: d["acceptance"] for d in data["drafters"]}
    mem = data["serving"].get("memory")
    gb = {d["name"]: d.get("memory_gb", 0.0) for d in data["drafters"]}
    first = next(iter(tables.values()))
    options = [(None, 0)] + [(n, k) for n in tables for k in KS[1:]]
    best = None
    top = max(max(t) for t in tables.values())
    for b, (name, k) in itertools.product(range(1, top + 1), options):
        if speculative is not None and (k > 0) != speculative:
            continue
        if name is not None and allowed is not None and not allowed(name, k):
            continue
        if mem is not None:
            room = mem["kv_cache_gb"] - (gb[name] if name else 0.0)
            if b > math.floor(room / mem["kv_per_seq_gb"] + 1e-9):
                continue
        step = table_step(tables[name] if name else first, b, k)
        if step is None:
            continue
        e = 1.0 + sum(acc[name] ** i for i in range(1, k + 1)) if name else 1.0
        tps, itl = b * 1000.0 * e / step, step / e
        if itl > itl_target:
            continue
        replicas = 1
        while replicas * tps < load * (1 - 1e-12):
            replicas += 1
        key = (replicas * PRICE, replicas, itl, b, 1 if name else 0, k)
        if best is None or key < best[0]:
            best = (
                key,
                {
                    "replicas": replicas,
                    "batch": b,
                    "drafters": [name] if name else [],
                    "k": k,
                    "tpot_ms": itl,
                    "tokens_per_s_per_replica": tps,
                    "cost_per_hour": replicas * PRICE,
                },
            )
    return None if best is None else best[1]


def same_fleet(got: dict, want: dict) -> None:
    for key in ("replicas", "batch", "drafters", "k", "cost_per_hour"):
        assert got[key] == want[key], (key, got, want)
    assert got["tpot_ms"] == pytest.approx(want["tpot_ms"], rel=1e-12)
    assert got["tokens_per_s_per_replica"] == pytest.approx(
        want["tokens_per_s_per_replica"], rel=1e-12
    )


# ---------------------------------------------------------------- brute force
@pytest.mark.parametrize("seed", range(12))
def test_cheapest_fleet_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    acc = {"a": float(rng.uniform(0.4, 0.95)), "b": float(rng.uniform(0.4, 0.95))}
    data = problem_data(random_tables(rng, acc), acc)
    if seed % 3 == 0:  # a memory cap on the batch, different for each drafter
        data["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5}
        data["drafters"][0]["memory_gb"] = float(rng.uniform(0.0, 30.0))
        data["drafters"][1]["memory_gb"] = float(rng.uniform(0.0, 30.0))
    prob = build(data)
    for load, target in [(50.0, 1e9), (3e3, 10.0), (2.5e4, 20.0), (1e5, 40.0), (7e5, 8.0)]:
        want = brute_force(data, load, target)
        if want is None:
            with pytest.raises(InputError) as exc:
                size_fleet(prob, load, target)
            assert exc.value.field == "tpot_ms"
            continue
        doc = size_fleet(prob, load, target).document()
        same_fleet(doc, want)
        assert doc["cost_per_mtok"] == pytest.approx(want["cost_per_hour"] / (3600 * load) * 1e6)
        plain = brute_force(data, load, target, speculative=False)
        if plain is None:
            assert doc["without_speculation"] is None and doc["saving"] is None
        else:
            same_fleet(doc["without_speculation"], plain)
            assert doc["saving"] == pytest.approx(
                1 - want["cost_per_hour"] / plain["cost_per_hour"]
            )


def test_sweep_matches_brute_force_at_every_load():
    rng = np.random.default_rng(7)
    acc = {"a": 0.8, "b": 0.55}
    data = problem_data(random_tables(rng, acc), acc)
    prob = build(data)
    loads = np.linspace(100.0, 2e5, 23)
    sweep = sweep_load(prob, loads, 25.0)
    for x, (spec, plain) in zip(loads, sweep.fleets, strict=True):
        for got, side in ((spec, True), (plain, False)):
            want = brute_force(data, x, 25.0, speculative=side)
            assert (got is None) == (want is None)
            if want is not None:
                same_fleet(got.document(), want)


@pytest.mark.parametrize("seed", range(6))
def test_the_budget_caps_the_configurations_as_schedule_applies_them(seed):
    """budget.draft_cost_per_round 0.2 with unit_cost 0.1 leaves k <= 2 (k · 0.1 per
    round); plain decoding stays a candidate whatever the budget."""
    rng = np.random.default_rng(100 + seed)
    acc = {"a": float(rng.uniform(0.85, 0.95)), "b": float(rng.uniform(0.85, 0.95))}
    data = problem_data(random_tables(rng, acc), acc)
    free = build(data)
    data["budget"] = {"draft_cost_per_round": 0.2}
    prob = build(data)
    changed = False
    for load, target in [(50.0, 1e9), (3e3, 10.0), (2.5e4, 20.0), (1e5, 40.0)]:
        want = brute_force(data, load, target, allowed=lambda name, k: k * 0.1 <= 0.2)
        if want is None:
            with pytest.raises(InputError):
                size_fleet(prob, load, target)
            continue
        got = size_fleet(prob, load, target)
        same_fleet(got.document(), want)
        assert got.document()["k"] <= 2
        assert any("left out by the budget" in n for n in got.notes)
        changed |= size_fleet(free, load, target).document()["k"] > 2
    assert changed  # the case would pass without the budget otherwise


def test_capacity_and_schedule_agree_on_the_budget():
    """At one batch size with no latency target and a load one replica carries, the
    cheapest fleet is the fastest candidate: schedule's pick at that batch size."""
    rng = np.random.default_rng(3)
    acc = {"a": 0.9, "b": 0.92}
    data = problem_data(random_tables(rng, acc), acc)
    data["serving"]["batch_sizes"] = [1]
    data["budget"] = {"draft_cost_per_round": 0.2}
    prob = build(data)
    from allocator.analysis.schedule import schedule

    row = schedule(prob).rows()[0]
    got = size_fleet(prob, 1.0).document()
    assert (got["drafters"], got["k"]) == (row["drafters"], row["k"])
    assert got["k"] <= 2


def test_a_drafter_with_rank_acceptances_is_noted_as_sized_in_chains(tmp_path):
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    plain = size_fleet(build(data), 500.0)
    assert not any("acceptance_by_rank" in n for n in plain.notes)
    data["drafters"][0]["acceptance_by_rank"] = [0.8, 0.3]
    ranked = size_fleet(build(data), 500.0)
    assert ranked.document() == plain.document()  # the tree is not used: chains only
    assert any("acceptance_by_rank" in n and "chains only" in n for n in ranked.notes)
    r = runner.invoke(app, ["capacity", write(tmp_path, data), "--tokens-per-s", "500"])
    assert r.exit_code == 0, r.output
    assert "chains only" in " ".join(r.output.split())


# ---------------------------------------------------------------- decisions flip
def _flip_tables():
    """Speculation with drafter a (acceptance 0.8) at k = 2: E = 2.44. At batch 1 it
    cuts the latency 6.87 -> 8.0 / 2.44 = 3.28 ms; at batch 64 the step grows to 50 ms,
    so a replica makes 64·1000·2.44/50 = 3123.2 tokens/s against 64·1000/20 = 3200
    without speculation."""
    row = {
        1: {0: 6.87, 2: 8.0},
        8: {0: 8.0, 2: 11.0},
        32: {0: 12.0, 2: 28.0},
        64: {0: 20.0, 2: 50.0},
    }
    return {"a": row}


def test_speculation_wins_at_low_load_and_loses_at_high_load():
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    prob = build(data)
    low = size_fleet(prob, 500.0).document()
    # one replica either way: the tie goes to the lower latency, speculation at batch 1..
    assert low["replicas"] == low["without_speculation"]["replicas"] == 1
    assert low["k"] == 2 and low["drafters"] == ["a"] and low["saving"] == 0.0
    high = size_fleet(prob, 1e5).document()
    # ..while at 10^5 tokens/s it needs ceil(1e5 / 3123.2) = 33 replicas against 32 (batch
    # 64 is the most throughput of either side: between measured sizes the step is linear,
    # b / (c0 + c1 b) rises with b)
    # 32 replicas need 3125 tokens/s each: b · 1000 / (4 + b / 4) >= 3125 from b = 58 on
    # (the step linear from 12 ms at 32 to 20 ms at 64), and ties go to the lower TPOT
    assert high["k"] == 0 and high["replicas"] == 32 and high["batch"] == 58
    sweep = sweep_load(prob, np.array([500.0, 5e4, 1e5]))
    assert sweep.with_speculation.tolist() == [PRICE, 17 * PRICE, 33 * PRICE]
    assert sweep.without_speculation.tolist() == [PRICE, 16 * PRICE, 32 * PRICE]
    assert sweep.crossings == [
        {"from_tokens_per_s": 500.0, "to_tokens_per_s": 5e4, "cheaper": "no speculation"}
    ]
    assert sweep.cheaper_from == {"tokens_per_s": 5e4, "cheaper": "no speculation"}


def test_a_drafters_memory_flips_the_decision():
    """At batch 64 drafter a's k = 2 makes 64·1000·2.44/30 = 5205 tokens/s against 3200
    without speculation; its 34 GB leave (40 - 34) / 0.5 = 12 sequences, so the largest
    batch it can run is 12: 12·1000·2.44/13.83 = 2116.6 tokens/s (the step 11 + 17·4/24
    ms between the measured 8 and 32), and plain decoding wins."""
    tables = _flip_tables()
    tables["a"][64] = {0: 20.0, 2: 30.0}
    data = problem_data(tables, {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    free = size_fleet(build(data), 1e5).document()
    # 20 replicas need 5000 tokens/s each: b · 2440 / (28 + (b - 32) / 16) >= 5000 from
    # b = 62 on; ties go to the lower TPOT
    assert free["drafters"] == ["a"] and free["batch"] == 62
    assert free["replicas"] == math.ceil(1e5 / (64 * 1000 * 2.44 / 30))
    data["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5}
    data["drafters"][0]["memory_gb"] = 34.0
    prob = build(data)
    assert max_batch(prob, np.array([[True], [False]])).tolist() == [12, 80]
    capped = size_fleet(prob, 1e5).document()
    assert capped["k"] == 0 and capped["batch"] == 58 and capped["replicas"] == 32  # as above


def test_memory_model_by_hand():
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["drafters"].append({"name": "g", "acceptance": 0.3, "unit_cost": 0.0})  # no memory
    data["serving"]["memory"] = {"kv_cache_gb": 10.0, "kv_per_seq_gb": 0.75}
    data["drafters"][0]["memory_gb"] = 2.5
    model = memory_model(build(data))
    rows = np.array([[False, False], [True, False], [False, True], [True, True]])
    # floor(10 / .75) = 13; floor(7.5 / .75) = 10 exactly (not 9 from rounding)
    assert model.max_batch(rows).tolist() == [13, 10, 13, 10]


# ---------------------------------------------------------------- command line
def write(tmp_path, data) -> str:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_cli_json_and_plot(tmp_path):
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    p = write(tmp_path, data)
    out, png = tmp_path / "c.json", tmp_path / "c.png"
    r = runner.invoke(
        app,
        [
            "capacity",
            p,
            "--tokens-per-s",
            "1e5",
            "--itl-ms",
            "20",
            "--json",
            str(out),
            "--sweep-load",
            "500:1e5:3",
            "--plot",
            str(png),
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    keys = [
        "replicas",
        "batch",
        "drafters",
        "k",
        "tpot_ms",
        "tokens_per_s_per_replica",
        "cost_per_hour",
        "cost_per_mtok",
    ]
    keys.insert(1, "gpus")
    assert list(doc) == [*keys, "without_speculation", "saving", "sweep", "notes"]
    assert list(doc["without_speculation"]) == keys
    assert doc["sweep"]["crossings"][0]["cheaper"] == "no speculation"
    assert png.stat().st_size > 0
    r = runner.invoke(app, ["capacity", p, "--tokens-per-s", "1e5", "--json", "-"])
    assert r.exit_code == 0 and "sweep" not in json.loads(r.stdout)


def _bad_cases():
    base = problem_data(_flip_tables(), {"a": 0.8})
    no_price = copy.deepcopy(base)
    del no_price["serving"]["gpu_cost_per_hour"]
    tiny_kv = copy.deepcopy(base)
    tiny_kv["serving"]["memory"] = {"kv_cache_gb": 0.4, "kv_per_seq_gb": 0.5}
    fat_drafter = copy.deepcopy(base)
    fat_drafter["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5}
    fat_drafter["drafters"][0]["memory_gb"] = 39.6
    no_serving = copy.deepcopy(base)
    del no_serving["serving"]
    ok = ["--tokens-per-s", "1000"]
    return [
        (base, ["--tokens-per-s", "0"], "--tokens-per-s"),
        (base, ["--tokens-per-s", "-5"], "--tokens-per-s"),
        (base, ["--tokens-per-s", "nan"], "--tokens-per-s"),
        (base, [*ok, "--itl-ms", "0"], "--itl-ms"),
        (base, [*ok, "--itl-ms", "-1"], "--itl-ms"),
        (base, [*ok, "--itl-ms", "1"], "--itl-ms"),  # below anything reachable
        (base, [*ok, "--tpot-ms", "0"], "--tpot-ms"),
        (base, [*ok, "--tpot-ms", "1"], "--tpot-ms"),
        (base, [*ok, "--tpot-ms", "5", "--itl-ms", "5"], "--itl-ms"),
        (base, [*ok, "--slo", "p99_ttft_ms=5"], "--slo"),
        (base, ["--request-rate", "1", "--tokens-per-s", "5"], "--tokens-per-s"),
        (base, [], "--request-rate"),
        (no_price, ok, "serving.gpu_cost_per_hour"),
        (tiny_kv, ok, "serving.memory.kv_cache_gb"),
        (fat_drafter, ok, "drafters[a].memory_gb"),
        (no_serving, ok, "serving"),
        (base, [*ok, "--sweep-load", "0:10:3"], "--sweep-load"),
        (base, [*ok, "--sweep-load", "1:10"], "--sweep-load"),
        (base, [*ok, "--plot", "x.png"], "--plot"),
        # more replicas than int64 counts hold: refused, not wrapped to a negative fleet
        (base, ["--tokens-per-s", "1e30"], "--tokens-per-s"),
        (base, [*ok, "--sweep-load", "1:1e30:3"], "--sweep-load"),
        # a sweep of 10^8 loads would run for minutes and fill memory: refused up front
        (base, [*ok, "--sweep-load", "1:10:100000000"], "--sweep-load"),
    ]


@pytest.mark.parametrize("data,args,field", _bad_cases())
def test_bad_input_one_line_exit_2_no_file(tmp_path, data, args, field):
    p = write(tmp_path, data)
    args = [a if a != "x.png" else str(tmp_path / "x.png") for a in args]
    r = runner.invoke(app, ["capacity", p, *args, "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.stderr
    assert "Traceback" not in r.output
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.yaml"]


def test_infeasible_target_names_the_best_latency(tmp_path):
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    r = runner.invoke(
        app, ["capacity", write(tmp_path, data), "--tokens-per-s", "10", "--itl-ms", "2"]
    )
    assert r.exit_code == 2
    # the lowest latency: drafter a at k = 2, batch 1: 8.0 / 2.44 ms
    assert f"{8.0 / 2.44:.6g} ms" in r.stderr and "batch 1" in r.stderr
    assert "drafters a, k=2" in r.stderr, r.stderr  # the drafter named, as printed


def test_schedule_applies_the_memory_cap():
    """The same flip as above, seen by ``schedule``: at batch 64 drafter a's 34 GB leave
    room for 12 sequences only, so the schedule runs plain decoding there."""
    from allocator.analysis.schedule import schedule

    tables = _flip_tables()
    tables["a"][64] = {0: 20.0, 2: 30.0}
    data = problem_data(tables, {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    free = schedule(build(data))
    assert free.k.tolist() == [2, 2, 2, 2]  # 32: 32·1000·2.44/28 = 2788.6 > 32000/12
    data["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5}
    data["drafters"][0]["memory_gb"] = 34.0
    capped = schedule(build(data))
    assert capped.k.tolist() == [2, 2, 0, 0]


def test_plan_keeps_the_hosted_drafters_within_the_memory_a_batch_leaves():
    """Two drafters for two workloads; big (acceptance 0.9) takes 30 GB of a 40 GB KV
    cache at 0.5 GB per sequence. Without --batch the plan hosts it for workload x; at
    --batch 32 it may take only 40 - 16 = 24 GB, so x falls back to small; at --batch 81
    nothing fits (80 sequences at most)."""
    from allocator.analysis.plan import make_plan

    data = {
        "name": "mem-plan",
        "drafters": [
            {"name": "big", "acceptance": 0.9, "unit_cost": 0.05, "memory_gb": 30.0},
            {"name": "small", "acceptance": 0.6, "unit_cost": 0.05, "memory_gb": 1.0},
        ],
        "workloads": [
            {"name": "x", "weight": 1.0},
            {"name": "y", "weight": 1.0, "acceptance": {"big": 0.3}},
        ],
        "search": {"k": {"max": 6}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": [1],
            "step_ms": [{"drafters": ["big"], "by_batch": {1: {0: 10.0}}}],
            "memory": {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5},
        },
    }
    prob = build(data)
    free = make_plan(prob)
    assert free.hosted.tolist() == [True, True]
    capped = make_plan(prob, batch=32)
    assert capped.hosted.tolist() == [False, True]
    assert capped.members.tolist() == [[False, True], [False, True]]
    with pytest.raises(InputError) as exc:
        make_plan(prob, batch=81)
    assert exc.value.field == "batch" and "at most 80" in exc.value.message
    data["drafters"][1]["memory_gb"] = 25.0  # now nothing leaves room for 32
    with pytest.raises(InputError) as exc:
        make_plan(build(data), batch=32)
    assert exc.value.field == "batch"


def test_routes_sized_together_match_brute_force():
    """Two workloads on drafter a's table, each with its own acceptance and k: the fleet
    at batch b needs ceil(Σ_w p_w X / tps_w(b)) replicas (counted up here)."""
    from allocator.analysis.capacity.by_load import size_routes

    rng = np.random.default_rng(3)
    acc = {"a": 0.8, "b": 0.6}
    data = problem_data(random_tables(rng, acc), acc)
    data["workloads"] = [
        {"name": "chat", "weight": 3.0, "acceptance": {"a": 0.5}},
        {"name": "code", "weight": 1.0, "acceptance": {"a": 0.9, "b": 0.7}},
    ]
    prob = build(data)
    members = np.array([[False, True], [True, False]])  # chat on b, code on a
    ks = np.array([2, 4])
    tables = {t["drafters"][0]: t["by_batch"] for t in data["serving"]["step_ms"]}
    accs = [0.6, 0.9]  # chat's b, code's a
    share = [0.75, 0.25]
    for load, target in [(1e3, 1e9), (4e4, 12.0), (2e5, 30.0)]:
        best = None
        for b in range(1, BATCHES[-1] + 1):
            need, worst = 0.0, 0.0
            for w, (name, k) in enumerate([("b", 2), ("a", 4)]):
                step = table_step(tables[name], b, k)
                e = 1 + sum(accs[w] ** i for i in range(1, k + 1))
                need += share[w] * load / (b * 1000 * e / step)
                worst = max(worst, step / e)
            if worst > target:
                continue
            r = 1
            while r < need * (1 - 1e-12):
                r += 1
            if best is None or (r, worst, b) < best:
                best = (r, worst, b)
        got = size_routes(prob, load, target, members, ks)
        if best is None:
            assert got is None
            continue
        assert (got.replicas, got.batch) == (best[0], best[2])
        assert got.tpot_ms == pytest.approx(best[1])
        assert [r["k"] for r in got.routes] == [2, 4]


def test_cli_reports_routes_for_mixed_traffic(tmp_path):
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    data["workloads"] = [
        {"name": "chat", "weight": 1.0},
        {"name": "code", "weight": 1.0, "acceptance": {"a": 0.95}},
    ]
    r = runner.invoke(
        app, ["capacity", write(tmp_path, data), "--tokens-per-s", "2e4", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["routed"]["hosted"] == ["a"]
    assert [x["workload"] for x in doc["routed"]["routes"]] == ["chat", "code"]


def test_cheaper_from_skips_the_flicker_of_ties():
    from allocator.analysis.capacity.by_load import LoadSweep

    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    a = np.array([1.0, 1.0, 2.0, 2.0, 2.0])
    b = np.array([2.0, 1.0, 3.0, 2.0, 3.0])
    sweep = LoadSweep(x, a, b, [(None, None)] * 5, crossings(x, a, b))
    assert sweep.cheaper_from == {"tokens_per_s": 5.0, "cheaper": "speculation"}
    tie = LoadSweep(x, a, a.copy(), [(None, None)] * 5, [])
    assert tie.cheaper_from is None


def test_too_large_a_space_is_refused_before_any_work(monkeypatch):
    import allocator.analysis.capacity.grid as cap

    data = problem_data(_flip_tables(), {"a": 0.8})
    monkeypatch.setattr(cap, "MAX_CELLS", 3)
    with pytest.raises(InputError) as exc:
        size_fleet(build(data), 100.0)
    # 1 subset x 2 k (search.k reaches 4, the table only k = 2) x 64 batch sizes = 128 pairs
    assert exc.value.field == "search.m.max" and "128 (configuration" in exc.value.message


def test_sweep_plot_draws_both_sides(tmp_path):
    from allocator.plots import plot_capacity_sweep

    x = np.array([100.0, 200.0, 300.0])
    a = np.array([10.0, 20.0, np.nan])
    b = np.array([10.0, 10.0, 20.0])
    got = plot_capacity_sweep(
        x, a, b, tmp_path / "s.svg", crossings=crossings(x, a, b), tpot_ms=30.0
    )
    assert got["loads"].tolist() == x.tolist()
    np.testing.assert_array_equal(got["with_speculation"], a)
    np.testing.assert_array_equal(got["without_speculation"], b)
    assert got["crossings"] == [200.0] and got["format"] == "svg"
    assert "$/h" in got["ylabel"] and (tmp_path / "s.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "memory,args",
    [(False, ["--batch", "4"]), (True, ["--batch", "4", "--sweep", "hosting_cost"])],
)
def test_plan_batch_bad_input(tmp_path, memory, args):
    data = problem_data(_flip_tables(), {"a": 0.8})
    if memory:
        data["serving"]["memory"] = {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5}
    p = write(tmp_path, data)
    r = runner.invoke(app, ["plan", p, *args, "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --batch:"), r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.yaml"]


# ---------------------------------------------------------------- issue 20: no grid, notes
def capacity_70b_data(batch_sizes):
    from allocator import api

    data = api.load_data("problems/capacity-70b.yaml")
    data["serving"]["batch_sizes"] = batch_sizes
    return data


def test_the_answer_does_not_depend_on_the_batch_sizes_grid():
    """capacity-70b.yaml with [1, 5, 10, 25, 50] and with [1..50] once gave 31 and 27
    replicas (k 4 and 1): every integer batch size the step times reach is a candidate
    now, whatever serving.batch_sizes says, so both give the same answer; a batch size
    outside every measured range (500) refuses nothing."""
    from allocator import api

    docs = [
        api.size_fleet(capacity_70b_data(g), 20000, 30).to_dict()
        for g in ([1, 5, 10, 25, 50], list(range(1, 51)), [1, 500])
    ]
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["batch"] not in (1, 5, 10, 25, 50)  # found between the measured sizes


def test_notes_at_the_end_of_the_measured_range_and_at_the_memory_cap(tmp_path):
    """Plain decoding's best batch here is 64, the last the tables reach: said so. With a
    memory cap of 40 sequences the answer sits at the cap: said so too; the JSON carries
    the notes."""
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["search"]["k"] = {"min": 2, "max": 2}
    doc = size_fleet(build(data), 3e5).to_dict()
    assert doc["batch"] == 64
    assert any("last batch size the step times" in n for n in doc["notes"])
    data["serving"]["memory"] = {"kv_cache_gb": 20.0, "kv_per_seq_gb": 0.5}
    capped = size_fleet(build(data), 3e5).to_dict()
    assert capped["batch"] == 40
    assert any("memory cap" in n for n in capped["notes"])
    r = runner.invoke(
        app, ["capacity", write(tmp_path, data), "--tokens-per-s", "3e5", "--json", "-"]
    )
    from allocator import api

    assert r.exit_code == 0
    assert json.loads(r.stdout)["notes"] == api.size_fleet(data, 3e5).to_dict()["notes"]


def test_gpus_are_replicas_times_gpus_per_replica():
    data = problem_data(_flip_tables(), {"a": 0.8})
    data["serving"]["gpus_per_replica"] = 4
    doc = size_fleet(build(data), 1e5).to_dict()
    assert doc["gpus"] == 4 * doc["replicas"]
    assert doc["without_speculation"]["gpus"] == 4 * doc["without_speculation"]["replicas"]


def test_a_drafter_without_step_times_is_left_out_with_a_note():
    """A component model and two drafters, one without draft_ms (and no table): the file is
    not refused; the drafter is left out, and a note says why."""
    data = {
        "name": "c",
        "convention": "bonus",
        "drafters": [
            {"name": "a", "acceptance": 0.8, "unit_cost": 0.1, "draft_ms": {1: 1.0, 16: 1.5}},
            {"name": "b", "acceptance": 0.9, "unit_cost": 0.1},
        ],
        "search": {"k": {"min": 1, "max": 3}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": [1, 8, 100],
            "gpu_cost_per_hour": 3.0,
            "verify_ms": {
                "batch": [1, 16],
                "tokens": [1, 2, 4],
                "ms": [[10, 11, 13], [14, 16, 20]],
            },
        },
    }
    r = size_fleet(build(data), 2000.0, 8.0)
    assert r.best.drafters == ["a"]
    assert any(n.startswith("left out: b") for n in r.notes)


def test_only_what_the_engine_serves_unless_pooled(tmp_path):
    """Two drafters whose pooled table is fastest: by default (vLLM) the answer runs one
    drafter and says so; --pooled may pool them, labelled as the upper bound it is."""
    from allocator import api
    from allocator.engines import POOLED_BOUND

    tables = random_tables(np.random.default_rng(1), ["a", "b"])
    data = problem_data(tables, {"a": 0.7, "b": 0.7})
    data["search"]["m"] = {"max": 2}
    fast = {b: {k: 0.5 * v if k else v for k, v in row.items()} for b, row in tables["a"].items()}
    data["serving"]["step_ms"].append({"drafters": ["a", "b"], "by_batch": fast})
    one = api.size_fleet(data, 1e4, 10.0)
    assert len(one.best.drafters) == 1 and any("one drafter per server" in n for n in one.notes)
    pooled = api.size_fleet(data, 1e4, 10.0, pooled=True)
    assert pooled.best.drafters == ["a", "b"] and POOLED_BOUND in pooled.notes


def test_itl_ms_is_the_old_name_of_tpot_ms(tmp_path):
    p = write(tmp_path, problem_data(_flip_tables(), {"a": 0.8}))
    new = runner.invoke(
        app, ["capacity", p, "--tokens-per-s", "1e4", "--tpot-ms", "20", "--json", "-"]
    )
    old = runner.invoke(
        app, ["capacity", p, "--tokens-per-s", "1e4", "--itl-ms", "20", "--json", "-"]
    )
    assert new.exit_code == old.exit_code == 0
    assert json.loads(new.stdout) == json.loads(old.stdout)
    said = " ".join(old.stderr.split())
    assert "old name of --tpot-ms" in said and "not vLLM's ITL" in said
    assert "old name" not in new.stderr
