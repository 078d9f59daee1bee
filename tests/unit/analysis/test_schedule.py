"""``allocator schedule``: the plan per batch size against an independent brute force,
``speculation_off_from``, the vLLM export, and bad input."""

import itertools
import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from allocator.analysis.schedule import schedule, speculation_off_from
from allocator.cli import app
from allocator.engines.vllm import batch_ranges
from allocator.engines.vllm import schedule_config as speculative_config
from allocator.exceptions import InputError
from allocator.io.build import problem_from_file, problem_from_spec
from allocator.io.spec import Drafter, parse_problem

runner = CliRunner()


# ---------------------------------------------------------------- an independent model
def lerp(xs, ys, x):
    """Plain scalar linear interpolation through sorted points; None outside."""
    if x < xs[0] or x > xs[-1]:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(zip(xs, ys, strict=True)):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[0]  # a single point, x equal to it


def brute_step(data, members, k, b):
    """Step ms of one configuration by the issue's rules, written from scratch; None
    when neither measured nor modelled."""
    s = data["serving"]
    names = [d["name"] for d in data["drafters"]]
    chosen = sorted(n for n, on in zip(names, members, strict=True) if on)
    for t in s.get("step_ms", []):
        if sorted(t["drafters"]) == chosen:
            rows = sorted(t["by_batch"].items())
            bs = [r[0] for r in rows]
            at = []
            for _, by_k in rows:
                ks = sorted(by_k)
                at.append(lerp(ks, [by_k[x] for x in ks], k))
            if b < bs[0] or b > bs[-1]:
                return None
            for (b0, v0), (b1, v1) in itertools.pairwise(zip(bs, at, strict=True)):
                if b0 <= b <= b1:
                    if b == b0:
                        return v0
                    if b == b1:
                        return v1
                    if v0 is None or v1 is None:
                        return None
                    return v0 + (v1 - v0) * (b - b0) / (b1 - b0)
            return at[0] if bs[0] == b else None
    v = s.get("verify_ms")
    if v is None:
        return None
    col = []
    for j in range(len(v["tokens"])):
        col.append(lerp(v["batch"], [row[j] for row in v["ms"]], b))
    if col[0] is None:
        return None
    if k == 0:
        return col[0]
    if not chosen:
        return None
    verify = lerp(v["tokens"], col, len(chosen) * k + 1)
    if verify is None:
        return None
    draft = []
    for d in data["drafters"]:
        if d["name"] in chosen:
            dm = d.get("draft_ms")
            if not dm:
                return None
            x = lerp(sorted(dm), [dm[q] for q in sorted(dm)], b)
            if x is None:
                return None
            draft.append(x)
    per = sum(draft) if data.get("drafting", "sequential") == "sequential" else max(draft)
    return verify + k * per + s.get("overhead_ms", 0.0)


def brute_e(data, members, k):
    """Bonus-convention E for independent errors, any-correct pooling: 1 + Σ Π pooled."""
    acc = []
    for d, on in zip(data["drafters"], members, strict=True):
        if on:
            a = d["acceptance"]
            acc.append([a] * k if np.isscalar(a) else [a[min(j, len(a) - 1)] for j in range(k)])
    e, surv = 1.0, 1.0
    for j in range(k):
        fail = 1.0
        for a in acc:
            fail *= 1.0 - a[j]
        surv *= 1.0 - fail
        e += surv
    return e


def brute_schedule(data):
    """Best tokens/s per batch size over every subset and k (and speculation off)."""
    names = [d["name"] for d in data["drafters"]]
    n = len(names)
    cap = data.get("budget", {}).get("hosting_cost")
    k_max = data.get("search", {}).get("k", {}).get("max", 64)
    out = []
    for b in data["serving"]["batch_sizes"]:
        base = brute_step(data, [False] * n, 0, b)
        best = (b * 1000.0 / base, 0, 0, ())
        for m in range(1, n + 1):
            for combo in itertools.combinations(range(n), m):
                members = [i in combo for i in range(n)]
                hosting = sum(data["drafters"][i].get("hosting_cost", 0.0) for i in combo)
                if cap is not None and hosting > cap + 1e-9:
                    continue
                for k in range(1, k_max + 1):
                    step = brute_step(data, members, k, b)
                    if step is None:
                        continue
                    tps = b * 1000.0 * brute_e(data, members, k) / step
                    key = (tps, -k, -m)
                    if key > (best[0], -best[1], -best[2]):
                        best = (tps, k, m, tuple(names[i] for i in combo))
        out.append(best)
    return out


def random_problem(seed):
    rng = np.random.default_rng(seed)
    n = 4
    drafters = []
    for i in range(n):
        d = {
            "name": f"d{i}",
            "acceptance": float(np.round(rng.uniform(0.3, 0.9), 3)),
            "unit_cost": 0.05,
            "hosting_cost": float(rng.integers(1, 4)),
        }
        if i < n - 1:  # the last drafter only has a measured table
            d["draft_ms"] = {
                1: float(np.round(rng.uniform(0.2, 1.0), 3)),
                128: float(np.round(rng.uniform(1.0, 4.0), 3)),
            }
        drafters.append(d)
    base = np.array([6.0, 6.5, 9.0, 16.0])
    growth = np.array([0.05, 0.15, 0.6, 1.6])  # ms per extra verified token, by batch
    tokens = [1, 2, 4, 8, 12]
    ms = [
        [float(np.round(b0 + g * (t - 1), 3)) for t in tokens]
        for b0, g in zip(base, growth, strict=True)
    ]
    by_batch = {
        1: {
            0: 6.0,
            2: float(np.round(rng.uniform(6.5, 8), 3)),
            5: float(np.round(rng.uniform(8, 10), 3)),
        },
        128: {
            0: 16.0,
            2: float(np.round(rng.uniform(18, 24), 3)),
            5: float(np.round(rng.uniform(25, 40), 3)),
        },
    }
    return {
        "name": f"random-{seed}",
        "convention": str(rng.choice(["paper", "bonus"])),
        "drafting": str(rng.choice(["sequential", "parallel"])),
        "drafters": drafters,
        "budget": {"hosting_cost": float(rng.integers(3, 7))},
        "search": {"k": {"max": 8}},
        "serving": {
            "batch_sizes": [1, 3, 16, 40, 64, 128],
            "gpu_cost_per_hour": 2.5,
            "overhead_ms": 0.1,
            "step_ms": [{"drafters": [f"d{n - 1}"], "by_batch": by_batch}],
            "verify_ms": {"batch": [1, 16, 64, 128], "tokens": tokens, "ms": ms},
        },
    }


@pytest.mark.parametrize("seed", range(6))
def test_schedule_matches_brute_force(seed):
    data = random_problem(seed)
    sched = schedule(problem_from_spec(parse_problem(data)))
    want = brute_schedule(data)
    rows = sched.rows()
    for row, (tps, k, m, names) in zip(rows, want, strict=True):
        assert row["tokens_per_s"] == pytest.approx(tps, rel=1e-9), (row, tps, k, names)
        assert row["k"] == k and len(row["drafters"]) == m
        assert tuple(row["drafters"]) == names
        assert row["tokens_per_s_per_seq"] == pytest.approx(tps / row["batch"], rel=1e-9)
        assert row["cost_per_mtok"] == pytest.approx(2.5 / (3600 * tps) * 1e6, rel=1e-9)
    # by_k's envelope is the schedule
    assert np.nanmax(sched.by_k, axis=1) == pytest.approx(sched.metrics["tokens_per_s"])


def test_schedule_turns_speculation_off_when_it_stops_paying():
    data = random_problem(0)
    # make verifying extra tokens very expensive at large batches
    ms = data["serving"]["verify_ms"]["ms"]
    ms[2] = [9.0] + [60.0 + t for t in range(1, 5)]
    ms[3] = [16.0] + [200.0 + t for t in range(1, 5)]
    data["serving"]["step_ms"][0]["by_batch"][128] = {0: 16.0, 2: 300.0, 5: 500.0}
    sched = schedule(problem_from_spec(parse_problem(data)))
    rows = sched.rows()
    assert rows[0]["k"] > 0
    assert [r["k"] for r in rows[-2:]] == [0, 0]
    assert rows[-1]["drafters"] == [] and rows[-1]["speedup"] == 1.0
    off = sched.speculation_off_from
    assert off is not None and all(r["k"] == 0 for r in rows if r["batch"] >= off)
    assert [r for r in rows if r["batch"] < off][-1]["k"] > 0
    for row, (tps, k, _, _) in zip(rows, brute_schedule(data), strict=True):
        assert row["k"] == k and row["tokens_per_s"] == pytest.approx(tps, rel=1e-9)


def unmeasured_at_128(data):
    """No speculative step time at 128: the draft times stop at 64 and the measured
    table has only its k = 0 entry there (the baseline is still measured)."""
    for d in data["drafters"]:
        if "draft_ms" in d:
            d["draft_ms"] = {1: d["draft_ms"][1], 64: d["draft_ms"][128]}
    data["serving"]["step_ms"][0]["by_batch"][128] = {0: 16.0}


def test_unmeasured_speculation_is_not_reported_as_not_paying(tmp_path):
    """At a planned batch size where no configuration with k >= 1 has a step time, k = 0
    would win by default and read as "speculation stops paying" (speculation_off_from):
    that batch size is left out, with a note naming it, and the rest planned as without it."""
    data = random_problem(0)
    unmeasured_at_128(data)
    sched = schedule(problem_from_spec(parse_problem(data)))
    assert [r["batch"] for r in sched.rows()] == [1, 3, 16, 40, 64]
    assert any(n.startswith("batch 128 left out: no configuration") for n in sched.notes)
    # the same as planning without 128, and k = 0 there is still a measured decision
    data["serving"]["batch_sizes"] = data["serving"]["batch_sizes"][:-1]
    alone = schedule(problem_from_spec(parse_problem(data)))
    assert sched.rows() == alone.rows()
    out = tmp_path / "s.json"
    r = runner.invoke(app, ["schedule", str(write(tmp_path, data)), "--json", str(out)])
    assert r.exit_code == 0 and out.exists()


def test_a_budget_that_excludes_speculation_still_turns_it_off():
    """Configurations with a step time but over the budget are a measured "no"."""
    data = random_problem(0)
    data["budget"] = {"draft_cost_per_round": 1e-6}
    sched = schedule(problem_from_spec(parse_problem(data)))
    assert all(r["k"] == 0 and r["drafters"] == [] for r in sched.rows())
    assert sched.speculation_off_from == 1


@pytest.mark.parametrize(
    ("k", "want"),
    [
        ([3, 2, 0, 0], 16),
        ([3, 2, 1, 1], None),
        ([0, 0, 0, 0], 1),
        ([0, 2, 0, 0], 16),  # off at 1, on at 4: "from" means for every larger batch too
        ([3, 0, 2, 0], 64),
    ],
)
def test_speculation_off_from_definition(k, want):
    assert speculation_off_from(np.array([1, 4, 16, 64]), np.array(k)) == want


# ---------------------------------------------------------------- the vLLM export
def vllm_lookup(schedule_entries, max_batch, num_spec):
    """vLLM's dense batch-size -> k lookup, as its dynamic/utils.py expands the ranges
    (a gap, and every size past the last range, inherit the previous range's k;
    k is clamped to num_speculative_tokens), reimplemented for the test."""
    dense = [0] * (max_batch + 1)
    entries = sorted(schedule_entries)
    assert entries[0][0] == 1
    for (lo, hi, _), (lo2, _, _) in itertools.pairwise(entries):
        assert lo <= hi < lo2
    last = None
    nxt = 1
    for lo, hi, k in entries:
        for bs in range(nxt, min(lo, max_batch + 1)):
            dense[bs] = min(num_spec, last)
        for bs in range(lo, min(hi, max_batch) + 1):
            dense[bs] = min(num_spec, k)
        nxt, last = hi + 1, k
    for bs in range(nxt, max_batch + 1):
        dense[bs] = min(num_spec, last)
    return dense


def test_batch_ranges_cover_every_batch_size_and_reproduce_the_plan():
    batch, ks = [1, 4, 16, 32, 64, 128], [5, 4, 4, 3, 0, 0]
    entries = batch_ranges(batch, ks)
    assert entries == [[1, 3, 5], [4, 31, 4], [32, 63, 3], [64, 128, 0]]
    dense = vllm_lookup(entries, 256, max(ks))
    for b, k in zip(batch, ks, strict=True):
        assert dense[b] == k
    assert dense[20] == 4 and dense[200] == 0  # between planned sizes: the lower one's plan


def test_export_from_the_bundled_problem(problems_dir, tmp_path):
    r = runner.invoke(
        app, ["schedule", str(problems_dir / "serving-eagle.yaml"), "--export", "vllm"]
    )
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)
    assert config["method"] == "eagle" and config["model"]
    r = runner.invoke(app, ["schedule", str(problems_dir / "serving-eagle.yaml"), "--json", "-"])
    rows = json.loads(r.stdout)["rows"]
    assert config["num_speculative_tokens"] == max(r["k"] for r in rows) > 0
    dense = vllm_lookup(
        config["num_speculative_tokens_per_batch_size"], 64, config["num_speculative_tokens"]
    )
    assert [dense[r["batch"]] for r in rows] == [r["k"] for r in rows]


def drafter(name, **fields):
    return Drafter(name=name, acceptance=0.7, unit_cost=0.05, **fields)


def test_export_of_drafters_without_a_model():
    rows = [{"batch": 1, "drafters": ["a"], "k": 4}, {"batch": 32, "drafters": [], "k": 0}]
    # prompt lookup takes no model and keeps its window; MTP may use the target's layers
    got, _ = speculative_config(
        rows, {"a": drafter("a", method="ngram", prompt_lookup_min=2, prompt_lookup_max=5)}
    )
    assert got == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 5,
        "num_speculative_tokens_per_batch_size": [[1, 31, 4], [32, 32, 0]],
    }
    got, _ = speculative_config(rows, {"a": drafter("a", method="mtp")})
    assert got == {
        "method": "mtp",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 31, 4], [32, 32, 0]],
    }


def test_export_refuses_what_vllm_cannot_serve():
    rows = [
        {"batch": 1, "drafters": ["a", "b"], "k": 3},
        {"batch": 8, "drafters": ["a"], "k": 2},
    ]
    drafters = {"a": drafter("a", model="org/a"), "b": drafter("b", model="org/b")}
    with pytest.raises(InputError, match="one drafter"):
        speculative_config(rows, drafters)
    with pytest.raises(InputError, match="never speculates"):
        speculative_config([{"batch": 1, "drafters": [], "k": 0}], drafters)
    with pytest.raises(InputError, match="no `model`"):
        speculative_config(rows[1:], {"a": drafter("a")})
    got, notes = speculative_config(rows[1:] + [{"batch": 64, "drafters": [], "k": 0}], drafters)
    assert any("no method" in n for n in notes)  # exported as draft_model, and said so
    assert got == {
        "method": "draft_model",
        "model": "org/a",
        "num_speculative_tokens": 2,
        "num_speculative_tokens_per_batch_size": [[1, 63, 2], [64, 64, 0]],
    }
    # issue 12: a drafter without method exports as draft_model, with a note saying so
    assert any("has no method" in n for n in notes)


def test_export_follows_the_method_table():
    """The schedule's drafter part is what vLLM's SpeculativeConfig takes for its method
    (vllm/config/speculative.py): mtp without model loads the target's own MTP layers
    (no refusal), ngram carries its lookup fields and no model."""
    rows = [{"batch": 1, "drafters": ["a"], "k": 3}, {"batch": 16, "drafters": ["a"], "k": 1}]
    got, notes = speculative_config(rows, {"a": drafter("a", method="mtp")})
    assert got == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 15, 3], [16, 16, 1]],
    }
    assert any("MTP layers" in n for n in notes) and not any("has no method" in n for n in notes)
    ngram = drafter("a", method="ngram", prompt_lookup_min=2, prompt_lookup_max=4)
    got, _ = speculative_config(rows, {"a": ngram})
    assert got["method"] == "ngram" and "model" not in got
    assert (got["prompt_lookup_min"], got["prompt_lookup_max"]) == (2, 4)


def test_export_cli_prints_notes_on_stderr_only(problems_dir, tmp_path):
    data = yaml.safe_load((problems_dir / "serving-eagle.yaml").read_text())
    data["drafters"][0]["method"] = "mtp"
    del data["drafters"][0]["model"]
    r = runner.invoke(app, ["schedule", str(write(tmp_path, data)), "--export", "vllm"])
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)
    assert config["method"] == "mtp" and "model" not in config
    assert "MTP layers" in r.stderr


# ---------------------------------------------------------------- command line
def test_schedule_json_has_exactly_the_issue_fields(problems_dir, tmp_path):
    out = tmp_path / "s.json"
    r = runner.invoke(
        app, ["schedule", str(problems_dir / "serving-eagle.yaml"), "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"rows", "speculation_off_from", "notes"}  # notes: issue 20
    keys = {
        "batch",
        "drafters",
        "k",
        "tokens_per_s",
        "tokens_per_s_per_seq",
        "tpot_ms",
        "speedup",
        "cost_per_mtok",
    }
    assert all(set(row) == keys for row in doc["rows"])
    assert [row["batch"] for row in doc["rows"]] == [1, 4, 16, 32, 64]


def test_schedule_plot(problems_dir, tmp_path):
    from allocator.plots import plot_schedule

    sched = schedule(problem_from_file(problems_dir / "serving-eagle.yaml"))
    drawn = plot_schedule(sched, tmp_path / "s.png")
    assert drawn["envelope"] == pytest.approx(sched.metrics["tokens_per_s"])
    assert set(drawn["lines"]) == set(range(0, 8))
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def write(tmp_path, data):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.pop("serving"), "serving"),
        (
            lambda d: d["serving"]["step_ms"][0]["by_batch"][1].pop(0),
            "serving.step_ms.0.by_batch.1",
        ),
        (
            lambda d: d["serving"]["step_ms"][0]["drafters"].append("nope"),
            "serving.step_ms.0.drafters",
        ),
        (lambda d: d["serving"]["batch_sizes"].append(256), "serving.batch_sizes.6"),
        (
            lambda d: d["serving"]["verify_ms"]["ms"][0].__setitem__(2, -1.0),
            "serving.verify_ms.ms.0.2",
        ),
    ],
)
def test_schedule_bad_input(tmp_path, edit, field):
    data = random_problem(1)
    edit(data)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    r = runner.invoke(
        app, ["schedule", str(write(tmp_path, data)), "--json", str(out), "--plot", str(plot)]
    )
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.output
    assert not out.exists() and not plot.exists()


def test_schedule_export_bad_options(problems_dir):
    path = str(problems_dir / "serving-eagle.yaml")
    r = runner.invoke(app, ["schedule", path, "--export", "sglang"])
    assert r.exit_code == 2 and r.output.startswith("error: --export: ")
    r = runner.invoke(app, ["schedule", path, "--export", "vllm", "--json", "-"])
    assert r.exit_code == 2 and r.output.startswith("error: --export: ")
    # a schedule planned for an engine that takes none is not exported for another
    r = runner.invoke(app, ["schedule", path, "--export", "vllm", "--engine", "sglang"])
    assert r.exit_code == 2 and r.output.startswith("error: --engine: SGLang takes no k schedule")
    assert len(r.output.strip().splitlines()) == 1


def test_outputs_never_overwrite_the_problem_or_each_other(problems_dir, tmp_path):
    path = tmp_path / "p.yaml"
    text = (problems_dir / "serving-eagle.yaml").read_text()
    path.write_text(text)
    for args, option in [
        (["--json", str(path)], "--json"),
        (["--json", str(tmp_path / ".." / tmp_path.name / "p.yaml")], "--json"),
        (["--json", str(tmp_path / "s.svg"), "--plot", str(tmp_path / "s.svg")], "--json"),
    ]:
        r = runner.invoke(app, ["schedule", str(path), *args])
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines() == [r.output.strip()]
        assert r.output.startswith(f"error: {option}: "), r.output
        assert path.read_text() == text
        assert not (tmp_path / "s.svg").exists()


def _memory_problem(tmp_path, a_gb: float):
    """Drafters a and b (m = 1, k 1..2) with measured tables at batches 1 and 64 and a
    40 GB KV cache at 0.5 GB a sequence: a's ``a_gb`` leave (40 - a_gb) / 0.5 sequences."""
    table = {1: {0: 6.0, 1: 7.0, 2: 8.0}, 64: {0: 20.0, 1: 24.0, 2: 28.0}}
    data = {
        "name": "mem",
        "convention": "bonus",
        "drafters": [
            {"name": "a", "acceptance": 0.8, "unit_cost": 0.1, "memory_gb": a_gb},
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.1},
        ],
        "search": {"k": {"min": 1, "max": 2}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": [1, 64],
            "step_ms": [{"drafters": [n], "by_batch": table} for n in ("a", "b")],
            "memory": {"kv_cache_gb": 40.0, "kv_per_seq_gb": 0.5},
        },
    }
    path = tmp_path / "mem.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_solve_batch_notes_configurations_left_out_for_memory(tmp_path):
    """a's 34 GB leave (40 - 34) / 0.5 = 12 sequences: at batch 64 its two configurations
    (k = 1, 2) are left out, and said so as `schedule` does; at batch 8 they fit."""
    path = _memory_problem(tmp_path, 34.0)
    r = runner.invoke(app, ["solve", str(path), "--batch", "64", "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {tuple(p["drafters"]) for p in doc["front"]} == {("b",)}
    want = (
        "2 configuration(s) left out at batch 64: their drafters take KV-cache memory "
        "the batch needs (serving.memory, drafters[].memory_gb)"
    )
    assert want in doc["notes"]
    r = runner.invoke(app, ["solve", str(path), "--batch", "64"])  # the table: notes on stderr
    assert r.exit_code == 0, r.output
    assert want in " ".join(r.stderr.split())
    r = runner.invoke(app, ["solve", str(path), "--batch", "1", "--json", "-"])
    assert r.exit_code == 0, r.output
    assert not any("KV-cache" in n for n in json.loads(r.stdout)["notes"])


def test_solve_batch_says_memory_when_nothing_fits(tmp_path):
    """With b excluded only a is left, and at batch 64 it does not fit: the error says why."""
    path = _memory_problem(tmp_path, 34.0)
    data = yaml.safe_load(path.read_text())
    data["search"]["exclude"] = ["b"]
    path.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["solve", str(path), "--batch", "64"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: serving: ")
    assert "2 have a step time but their drafters take the KV-cache memory" in lines[0]
