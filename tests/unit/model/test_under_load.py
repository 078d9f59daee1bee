"""Serving under load: step times, tokens/s, latency, $/Mtok (allocator.model.under_load).

Expected values are computed by hand from the tables written here (issue 10's eagle
table and a small component model), never read back from the code under test.
"""

import copy
import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from allocator.cli import app
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.metrics import evaluate_configs
from allocator.model.under_load import bonus_expected, serving_metrics, step_ms

runner = CliRunner()

# issue 10's example table (eagle, ms per step, by batch then k)
EAGLE = {
    1: {0: 6.87, 1: 7.97, 3: 9.41, 7: 12.29},
    64: {0: 8.53, 1: 10.44, 3: 13.16, 7: 120.57},
}


def measured(convention="bonus", acceptance=0.8, **serving):
    data = {
        "name": "measured",
        "convention": convention,
        "drafters": [{"name": "eagle", "acceptance": acceptance, "unit_cost": 0.05}],
        "serving": {
            "batch_sizes": [1, 64],
            "gpu_cost_per_hour": 4.0,
            "step_ms": [{"drafters": ["eagle"], "by_batch": copy.deepcopy(EAGLE)}],
            **serving,
        },
    }
    return data


def component(drafting="sequential"):
    return {
        "name": "component",
        "convention": "bonus",
        "drafting": drafting,
        "drafters": [
            {"name": "a", "acceptance": 0.8, "unit_cost": 0.05, "draft_ms": {1: 0.5, 64: 1.0}},
            {"name": "b", "acceptance": 0.6, "unit_cost": 0.02, "draft_ms": {1: 0.3, 64: 0.9}},
        ],
        "serving": {
            "batch_sizes": [1, 16, 64],
            "overhead_ms": 0.2,
            "verify_ms": {
                "batch": [1, 16, 64],
                "tokens": [1, 2, 4, 8],
                "ms": [[6.0, 6.1, 6.2, 6.5], [6.5, 6.9, 7.5, 8.8], [9.0, 11.0, 14.0, 20.0]],
            },
        },
    }


def build(data):
    return problem_from_spec(parse_problem(data))


ONE = np.ones((1, 1), bool)


# ---------------------------------------------------------------- measured table
@pytest.mark.parametrize(
    ("batch", "k", "ms"), [(b, k, v) for b, r in EAGLE.items() for k, v in r.items()]
)
def test_measured_points_are_returned_exactly(batch, k, ms):
    p = build(measured())
    assert step_ms(p, ONE, np.array([k]), batch)[0] == pytest.approx(ms, rel=1e-12)


def test_interpolation_between_measured_k_and_batch():
    p = build(measured())
    # linear in k at a measured batch size
    assert step_ms(p, ONE, np.array([2]), 1)[0] == pytest.approx((7.97 + 9.41) / 2)
    assert step_ms(p, ONE, np.array([5]), 64)[0] == pytest.approx((13.16 + 120.57) / 2)
    assert step_ms(p, ONE, np.array([4]), 1)[0] == pytest.approx(9.41 + (12.29 - 9.41) / 4)
    # linear in batch, then: b = 32 is 31/63 of the way from 1 to 64
    w = 31 / 63
    at1, at64 = (7.97 + 9.41) / 2, (10.44 + 13.16) / 2
    assert step_ms(p, ONE, np.array([2]), 32)[0] == pytest.approx(at1 + w * (at64 - at1))
    assert step_ms(p, ONE, np.array([0]), 32)[0] == pytest.approx(6.87 + w * (8.53 - 6.87))


def test_vectorised_over_rows():
    p = build(measured())
    ks = np.array([0, 1, 2, 3, 7])
    got = step_ms(p, np.ones((5, 1), bool), ks, 1)
    assert got == pytest.approx([6.87, 7.97, 8.69, 9.41, 12.29])


@pytest.mark.parametrize(("k", "batch"), [(8, 1), (8, 64), (3, 65), (3, 128)])
def test_never_extrapolates(k, batch):
    p = build(measured())
    with pytest.raises(InputError) as e:
        step_ms(p, ONE, np.array([k]), batch)
    assert e.value.field == "serving"


def test_metrics_hand_computed_from_the_measured_table():
    p = build(measured())
    met = serving_metrics(p, ONE, np.array([3]), 1)
    e = 1 + 0.8 + 0.64 + 0.512  # bonus: 1 + a + a^2 + a^3
    assert met["expected_accepted"][0] == pytest.approx(2.952)
    assert met["step_ms"][0] == pytest.approx(9.41)
    assert met["tokens_per_s_per_seq"][0] == pytest.approx(1000 * 2.952 / 9.41)
    assert met["tokens_per_s"][0] == pytest.approx(1000 * e / 9.41)
    assert met["tpot_ms"][0] == pytest.approx(9.41 / 2.952)
    assert met["speedup"][0] == pytest.approx((2.952 / 9.41) / (1 / 6.87))
    assert met["cost_per_mtok"][0] == pytest.approx(4.0 / (3600 * 313.708820403826) * 1e6)

    met = serving_metrics(p, ONE, np.array([1]), 64)
    assert met["tokens_per_s"][0] == pytest.approx(64 * 1000 * 1.8 / 10.44)
    assert met["tokens_per_s_per_seq"][0] == pytest.approx(1000 * 1.8 / 10.44)
    assert met["speedup"][0] == pytest.approx(1.8 * 8.53 / 10.44)
    # k = 7 at batch 64 is slower than no speculation: the table says so
    met = serving_metrics(p, ONE, np.array([7]), 64)
    e7 = sum(0.8**i for i in range(8))
    assert met["speedup"][0] == pytest.approx(e7 * 8.53 / 120.57)
    assert met["speedup"][0] < 1


def test_k0_is_plain_decoding():
    p = build(measured())
    met = serving_metrics(p, ONE, np.array([0]), 64)
    assert met["expected_accepted"][0] == 1.0
    assert met["speedup"][0] == 1.0
    assert met["tokens_per_s"][0] == pytest.approx(64 * 1000 / 8.53)
    assert met["tpot_ms"][0] == pytest.approx(8.53)
    off = serving_metrics(p, np.zeros((1, 1), bool), np.array([0]), 64)
    assert off["tokens_per_s"][0] == pytest.approx(64 * 1000 / 8.53)


def test_no_price_gives_nan_cost():
    data = measured()
    del data["serving"]["gpu_cost_per_hour"]
    met = serving_metrics(build(data), ONE, np.array([1]), 1)
    assert np.isnan(met["cost_per_mtok"][0])


# ---------------------------------------------------------------- conventions
@pytest.mark.parametrize("acceptance", [0.8, [0.9, 0.7, 0.5], 1.0])
def test_E_is_in_the_bonus_convention_whatever_the_problem_says(acceptance):
    paper = build(measured("paper", acceptance))
    bonus = build(measured("bonus", acceptance))
    a = np.array(acceptance if isinstance(acceptance, list) else [acceptance])
    for k in range(1, 8):
        pos = np.array([a[min(j, a.size - 1)] for j in range(k)])
        hand = 1.0 + np.cumprod(pos).sum()
        for p in (paper, bonus):
            assert bonus_expected(p, ONE, np.array([k]))[0] == pytest.approx(hand, rel=1e-12)
        # the paper's round of k + 1 units is the serving step drafting k
        e_paper = evaluate_configs(paper, ONE, np.array([k + 1]))["expected_accepted"][0]
        assert e_paper == pytest.approx(hand, rel=1e-12)
    assert bonus_expected(paper, ONE, np.array([0]))[0] == 1.0


def test_bonus_E_for_a_pooled_pair_against_the_independent_formula():
    p = build(component())
    both = np.ones((1, 2), bool)
    pooled = 1 - (1 - 0.8) * (1 - 0.6)  # any-correct, independent errors
    for k in (1, 2, 3):
        hand = sum(pooled**i for i in range(k + 1))
        assert bonus_expected(p, both, np.array([k]))[0] == pytest.approx(hand)


# ---------------------------------------------------------------- component model
def test_component_model_at_grid_points():
    p = build(component())
    a, b, ab = (np.array([[True, False]]), np.array([[False, True]]), np.ones((1, 2), bool))
    # batch 1: verify(1, m k + 1) + k * draft + overhead
    assert step_ms(p, a, np.array([1]), 1)[0] == pytest.approx(6.1 + 1 * 0.5 + 0.2)
    assert step_ms(p, a, np.array([3]), 1)[0] == pytest.approx(6.2 + 3 * 0.5 + 0.2)  # tokens 4
    assert step_ms(p, ab, np.array([1]), 1)[0] == pytest.approx(6.15 + 0.8 + 0.2)  # tokens 3
    # batch 64, m = 2, k = 2: 5 tokens between 4 and 8 in the table
    v = 14.0 + (20.0 - 14.0) / 4
    assert step_ms(p, ab, np.array([2]), 64)[0] == pytest.approx(v + 2 * (1.0 + 0.9) + 0.2)
    # k = 0: the plain decoding step, no draft, no overhead
    assert step_ms(p, b, np.array([0]), 64)[0] == pytest.approx(9.0)


def test_component_model_bilinear_inside_the_table():
    p = build(component())
    a = np.array([[True, False]])
    # batch 40: halfway between 16 and 64; tokens 3: halfway between 2 and 4
    v16, v64 = (6.9 + 7.5) / 2, (11.0 + 14.0) / 2
    draft = 0.5 + (40 - 1) / 63 * 0.5
    got = step_ms(p, a, np.array([2]), 40)[0]
    assert got == pytest.approx((v16 + v64) / 2 + 2 * draft + 0.2)


def test_parallel_drafting_takes_the_slowest_member():
    p = build(component("parallel"))
    ab = np.ones((1, 2), bool)
    assert step_ms(p, ab, np.array([1]), 1)[0] == pytest.approx(6.15 + 0.5 + 0.2)


def test_component_model_refuses_too_many_tokens():
    p = build(component())
    with pytest.raises(InputError) as e:
        step_ms(p, np.ones((1, 2), bool), np.array([4]), 1)  # 9 tokens > 8
    assert e.value.field == "serving" and "m*k+1 = 9" in e.value.message


def test_measured_table_wins_over_the_component_model():
    data = component()
    data["serving"]["step_ms"] = [{"drafters": ["a"], "by_batch": {1: {0: 5.0, 2: 9.0}}}]
    p = build(data)
    assert step_ms(p, np.array([[True, False]]), np.array([1]), 1)[0] == pytest.approx(7.0)
    # the other drafter still uses the model
    assert step_ms(p, np.array([[False, True]]), np.array([1]), 1)[0] == pytest.approx(6.6)


def test_problem_without_serving_is_refused():
    data = measured()
    del data["serving"]
    p = build(data)
    assert p.serving is None
    with pytest.raises(InputError) as e:
        serving_metrics(p, ONE, np.array([1]), 1)
    assert e.value.field == "serving"


# ---------------------------------------------------------------- command line
def write(tmp_path, data, name="p.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_evaluate_batch_json(tmp_path):
    path = write(tmp_path, measured())
    r = runner.invoke(
        app, ["evaluate", str(path), "-d", "eagle", "-k", "3", "--batch", "1", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    for key in (
        "tokens_per_s",
        "tokens_per_s_per_seq",
        "tpot_ms",
        "speedup",
        "cost_per_mtok",
        "step_ms",
    ):
        assert key in doc
    assert doc["batch"] == 1 and doc["step_ms"] == pytest.approx(9.41)
    assert doc["tokens_per_s"] == pytest.approx(1000 * 2.952 / 9.41)
    # without --batch nothing changes
    r = runner.invoke(app, ["evaluate", str(path), "-d", "eagle", "-k", "3", "--json", "-"])
    assert "tokens_per_s" not in json.loads(r.stdout)


def test_evaluate_k0_with_batch(tmp_path):
    data = measured()
    del data["serving"]["gpu_cost_per_hour"]
    path = write(tmp_path, data)
    r = runner.invoke(app, ["evaluate", str(path), "-k", "0", "--batch", "64", "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["drafters"] == [] and doc["k"] == 0 and doc["speedup"] == 1.0
    assert doc["tokens_per_s"] == pytest.approx(64000 / 8.53)
    assert doc["cost_per_mtok"] is None


def test_solve_batch_puts_tokens_per_s_on_the_throughput_axis(tmp_path):
    data = component()
    data["serving"]["gpu_cost_per_hour"] = 3.0
    data["cost_metric"] = "cost_per_mtok"
    data["search"] = {"k": {"max": 4}}
    path = write(tmp_path, data)
    # --pooled: every subset (the default is what vLLM serves, one drafter per server)
    r = runner.invoke(app, ["solve", str(path), "--batch", "16", "--pooled", "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # brute force: every subset and k, tokens/s at batch 16 by hand from the model
    best = 0.0
    for members in ([True, False], [False, True], [True, True]):
        for k in (1, 2, 3, 4):
            m = sum(members)
            if m * k + 1 > 8:
                continue
            met = serving_metrics(build(data), np.array([members]), np.array([k]), 16)
            best = max(best, met["tokens_per_s"][0])
    # cost_per_mtok falls as tokens/s rises: the front is the one fastest point
    assert len(doc["front"]) == 1
    point = doc["front"][0]
    assert point["throughput"] == pytest.approx(best) == pytest.approx(point["tokens_per_s"])
    assert point["cost"] == pytest.approx(3.0 / (3600 * best) * 1e6)
    assert any("1 of 12 configurations have no step time" in n for n in doc["notes"])  # m=2, k=4


# ---------------------------------------------------------------- bad input
def bad_cases():
    def edit(fn, base=measured):
        data = base()
        fn(data)
        return data

    def set_(path, value):
        def fn(d):
            node = d
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value

        return fn

    yield "missing k=0", edit(set_(["serving", "step_ms", 0, "by_batch", 64], {1: 10.44, 3: 13.16}))
    yield "zero time", edit(set_(["serving", "step_ms", 0, "by_batch", 1, 3], 0.0))
    yield "negative time", edit(set_(["serving", "step_ms", 0, "by_batch", 1, 3], -1.0))
    yield "unknown drafter", edit(set_(["serving", "step_ms", 0, "drafters"], ["medusa"]))
    yield "no step times", edit(set_(["serving", "step_ms"], []))
    yield "batch sizes unsorted", edit(set_(["serving", "batch_sizes"], [64, 1]))
    yield (
        "verify rows",
        edit(set_(["serving", "verify_ms", "ms"], [[6.0, 6.1, 6.2, 6.5]]), component),
    )
    yield (
        "verify cols",
        edit(set_(["serving", "verify_ms", "ms"], [[6.0], [6.5], [9.0]]), component),
    )
    yield (
        "verify tokens lack 1",
        edit(set_(["serving", "verify_ms", "tokens"], [2, 3, 4, 8]), component),
    )
    yield (
        "verify tokens order",
        edit(set_(["serving", "verify_ms", "tokens"], [1, 4, 2, 8]), component),
    )
    yield (
        "verify batch order",
        edit(set_(["serving", "verify_ms", "batch"], [1, 64, 16]), component),
    )
    yield (
        "verify negative",
        edit(
            set_(
                ["serving", "verify_ms", "ms"],
                [[6.0, 6.1, 6.2, 6.5], [6.5, -6.9, 7.5, 8.8], [9, 11, 14, 20]],
            ),
            component,
        ),
    )
    yield "draft_ms zero", edit(set_(["drafters", 1, "draft_ms"], {1: 0.0}), component)


@pytest.mark.parametrize(("label", "data"), list(bad_cases()), ids=[c[0] for c in bad_cases()])
def test_bad_serving_input(tmp_path, label, data):
    path = write(tmp_path, data)
    out = tmp_path / "out.json"
    r = runner.invoke(app, ["evaluate", str(path), "-k", "0", "--batch", "1", "--json", str(out)])
    assert r.exit_code == 2, (label, r.output)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    field = lines[0][len("error: ") :].split(":", 1)[0]
    assert field.startswith("serving") or (
        field.startswith("drafters[") and ".draft_ms" in field
    ), lines[0]
    assert "Traceback" not in r.output and not out.exists()


def test_what_a_command_does_not_use_refuses_nothing(tmp_path):
    """A planned batch size outside every table, or a drafter with neither a table nor
    draft_ms, no longer refuses the file (issue 20: capacity was refused for them, though
    it never plans there): evaluate at a covered batch answers; schedule, which plans at
    serving.batch_sizes, refuses the uncovered size; the drafter without a step time is
    refused where it is asked for, and left out elsewhere."""
    data = measured()
    data["serving"]["batch_sizes"] = [1, 64, 128]
    path = write(tmp_path, data)
    ok = runner.invoke(app, ["evaluate", str(path), "-k", "0", "--batch", "1", "--json", "-"])
    assert ok.exit_code == 0, ok.output
    r = runner.invoke(app, ["schedule", str(path)])
    assert r.exit_code == 2 and r.output.startswith("error: serving.batch_sizes.2: batch size 128")
    comp = component()
    comp["drafters"][1]["draft_ms"] = None
    path = write(tmp_path, comp)
    plain = runner.invoke(app, ["evaluate", str(path), "-k", "0", "--batch", "1", "--json", "-"])
    assert plain.exit_code == 0, plain.output
    name = comp["drafters"][1]["name"]
    r = runner.invoke(app, ["evaluate", str(path), "-d", name, "-k", "1", "--batch", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: serving:"), r.output


@pytest.mark.parametrize(
    "args",
    [
        ["-d", "eagle", "-k", "8", "--batch", "1"],  # k past the largest measured
        ["-d", "eagle", "-k", "3", "--batch", "65"],  # batch outside the table
        ["-d", "eagle", "-k", "3", "--batch", "200"],
        ["-k", "0", "--batch", "200"],
    ],
)
def test_requests_outside_the_tables(tmp_path, args):
    path = write(tmp_path, measured())
    out = tmp_path / "out.json"
    r = runner.invoke(app, ["evaluate", str(path), *args, "--json", str(out)])
    assert r.exit_code == 2
    assert r.output.startswith("error: serving: ") and len(r.output.strip().splitlines()) == 1
    assert "never extrapolated" in r.output
    assert not out.exists()


def test_huge_k_is_refused_before_the_model_runs(tmp_path, monkeypatch):
    """evaluate --k 1000000000 --batch 4 must say the table stops at k = 7, not build
    acceptance curves a billion long first (it ran out of memory)."""
    import allocator.model.point

    def never(*_args, **_kw):
        raise AssertionError("the model ran before the step-time check")

    monkeypatch.setattr(allocator.model.point, "evaluate_configs", never)
    path = write(tmp_path, measured())
    r = runner.invoke(app, ["evaluate", str(path), "-d", "eagle", "-k", "1000000000", "-b", "4"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --k: ") and "100000" in r.output.replace(",", "")


@pytest.mark.parametrize(
    ("command", "args", "line"),
    [
        (
            "evaluate",
            ["-d", "eagle", "-k", "3", "--batch", "0"],
            ("error: --batch: ", "1"),
        ),
        ("evaluate", ["-d", "eagle", "-k", "3", "-b", "-4"], ("error: --batch: ", "1")),
        ("evaluate", ["-d", "eagle", "-k", "-1", "-b", "4"], ("error: --k: ", "0")),
        ("solve", ["--batch", "0"], ("error: --batch: ", "1")),
    ],
)
def test_out_of_range_options_are_one_line(tmp_path, command, args, line):
    """The project's one-line error naming the option and its bound, not typer's boxed
    usage message."""
    path = write(tmp_path, measured())
    out = tmp_path / "o.json"
    r = runner.invoke(app, [command, str(path), *args, "--json", str(out)])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [r.output.strip()], r.output
    prefix, bound = line
    assert r.output.startswith(prefix) and bound in r.output[len(prefix) :], r.output
    assert not out.exists()


def test_cost_per_mtok_needs_serving_and_a_price(tmp_path):
    data = measured()
    data["cost_metric"] = "cost_per_mtok"
    del data["serving"]
    r = runner.invoke(app, ["solve", str(write(tmp_path, data))])
    assert r.exit_code == 2 and r.output.startswith("error: cost_metric: ")
    data = measured()
    data["cost_metric"] = "cost_per_mtok"
    del data["serving"]["gpu_cost_per_hour"]
    r = runner.invoke(app, ["solve", str(write(tmp_path, data))])
    assert r.exit_code == 2 and "gpu_cost_per_hour" in r.output
    data = measured()
    data["cost_metric"] = "cost_per_mtok"
    r = runner.invoke(app, ["solve", str(write(tmp_path, data))])  # no --batch
    assert r.exit_code == 2 and r.output.startswith("error: cost_metric: ")


def test_batch_without_serving(tmp_path):
    data = measured()
    del data["serving"]
    r = runner.invoke(
        app, ["evaluate", str(write(tmp_path, data)), "-d", "eagle", "-k", "1", "--batch", "4"]
    )
    assert r.exit_code == 2 and r.output.startswith("error: serving: ")


@pytest.mark.parametrize("drafting", ["sequential", "parallel"])
def test_grid_agrees_with_rows(drafting):
    """The searches' (subset x k) grid gives the per-row values of the public function."""
    from allocator.model.under_load import step_grid, step_ms_or_nan

    data = component(drafting)
    data["serving"]["step_ms"] = [{"drafters": ["b"], "by_batch": {1: {0: 5.0, 2: 9.0}}}]
    p = build(data)
    members = np.array([[True, False], [False, True], [True, True]])
    ks = np.arange(0, 5)
    for batch in (1, 10, 64, 65):
        grid = step_grid(p, members, ks, batch)
        rows = step_ms_or_nan(p, np.repeat(members, ks.size, axis=0), np.tile(ks, 3), batch)
        np.testing.assert_array_equal(grid.ravel(), rows)


def test_solve_batch_csv_plot_and_refusals(tmp_path):
    data = component()
    data["search"] = {"k": {"max": 3}}
    path = write(tmp_path, data)
    csv_path, png = tmp_path / "f.csv", tmp_path / "f.png"
    r = runner.invoke(
        app, ["solve", str(path), "--batch", "16", "--csv", str(csv_path), "--plot", str(png)]
    )
    assert r.exit_code == 0, r.output
    header = csv_path.read_text().splitlines()[0].split(",")
    assert {"batch", "tokens_per_s", "tpot_ms", "speedup", "cost_per_mtok"} <= set(header)
    assert png.stat().st_size > 0
    for extra in (["--strategy", "knapsack"], ["--samples", "10"], ["--export", "vllm"]):
        out = tmp_path / "x.json"
        r = runner.invoke(app, ["solve", str(path), "--batch", "16", *extra, "--json", str(out)])
        assert r.exit_code == 2 and r.output.startswith("error: --"), r.output
        assert not out.exists()
