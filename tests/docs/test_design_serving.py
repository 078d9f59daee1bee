"""Claims of docs/design.md §8 checked against hand-computed values and brute force:
the schedule's decision beside its speedup (§8.5), what calibration fixes and what the
calibrated file reproduces (§8.7), and the per-batch-size export against the method
table (§8.6, §8.8)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from allocator.analysis.schedule import schedule
from allocator.calibration import calibrate, calibrated_problem_data, read_measured
from allocator.core.problem import Problem
from allocator.engines.vllm import schedule_config
from allocator.engines.vllm import speculative_config as point_config
from allocator.io.build import problem_from_file
from allocator.io.spec import Drafter
from allocator.model.under_load import serving_metrics
from tests.support.synthetic_serving import DRAFT, PROBLEM, true_expected, true_step


# ---------------------------------------------------------------- §8.7 calibration
def rows_csv(rows: list[tuple[list[str], int, int]], draft: dict = DRAFT) -> str:
    lines = ["drafters,k,batch,tokens_per_s"]
    for names, k, b in rows:
        tps = 1000.0 * b * true_expected(names, k) / true_step(names, k, b, draft)
        lines.append(f"{'+'.join(names)},{k},{b},{tps:.9f}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def problem(tmp_path) -> Problem:
    p = tmp_path / "p.yaml"
    p.write_text(PROBLEM)
    return problem_from_file(p)


def test_a_drafter_measured_at_one_batch_size_gets_no_batch_slope_and_a_note(problem, tmp_path):
    """§8.7: a slope the rows cannot determine is fixed at 0 and said so. Drafter b is
    measured at batch 1 only while a and the baseline span 1..64: any split of b's time
    into fixed and per-sequence parts fits, so the slope must be fixed, not guessed."""
    rows = [([], 0, b) for b in (1, 8, 64)]
    rows += [(["a"], k, b) for b in (1, 8, 64) for k in (1, 3, 5)]
    rows += [(["b"], k, 1) for k in (1, 3, 5)]
    csv = tmp_path / "m.csv"
    csv.write_text(rows_csv(rows))
    cal = calibrate(problem, read_measured(csv, problem))
    a, b = problem.names.index("a"), problem.names.index("b")
    assert cal.model.draft_per_seq[b] == 0.0
    assert any("b's speculative rows are at batch 1 only" in n for n in cal.notes), cal.notes
    assert not any(n.startswith("a's") for n in cal.notes)
    # b's whole draft time at batch 1 lands in its fixed part; a keeps its true slope
    assert cal.model.draft_fixed[b] == pytest.approx(DRAFT["b"][0] + DRAFT["b"][1], rel=1e-4)
    assert cal.model.draft_per_seq[a] == pytest.approx(DRAFT["a"][1], rel=1e-3)
    assert cal.max_abs_error_pct < 1e-3


def test_calibrated_file_reproduces_the_fit_to_its_rounding(problem, tmp_path):
    """§8.7: through the serving model (§8.2), P2 gives the fitted step at every measured
    batch size and every k up to the largest measured, within 10⁻⁶ relative (12
    significant digits written), and a draft time fitted as 0 is written at most at the
    1e-9 ms floor."""
    free = {"a": (0.0, 0.0), "b": DRAFT["b"]}  # a drafts for free: its fit is 0
    rows = [([], 0, b) for b in (1, 16, 64)]
    rows += [(n, k, b) for b in (1, 16, 64) for n in (["a"], ["b"]) for k in (1, 2, 4)]
    csv = tmp_path / "m.csv"
    csv.write_text(rows_csv(rows, free))
    cal = calibrate(problem, read_measured(csv, problem))
    data, _ = calibrated_problem_data(problem, cal, tmp_path / "p2.yaml", tmp_path / "p.yaml")
    (tmp_path / "p2.yaml").write_text(yaml.safe_dump(data))
    p2 = problem_from_file(tmp_path / "p2.yaml")
    assert set(data["drafters"][0]["draft_ms"]) == {1, 16, 64}
    assert all(1e-9 <= v < 1e-8 for v in data["drafters"][0]["draft_ms"].values())
    for b in (1, 16, 64):
        for names in (["a"], ["b"], ["a", "b"]):
            members = np.array([[n in names for n in problem.names]])
            for k in range(0, 5):
                got = serving_metrics(p2, members, np.array([k]), b)["step_ms"][0]
                fit = cal.model.step_ms(members, np.array([k]), np.array([b]))[0]
                assert abs(got - fit) <= 1e-6 * fit, (names, k, b)
                if len(names) == 1:  # measured sets; the pair's t = 2k + 1 was never seen
                    assert got == pytest.approx(true_step(names, k, b, free), rel=1e-3)


# ---------------------------------------------------------------- §8.5 the schedule
DISAGREE = """\
name: disagree
convention: bonus
drafters:
  - {name: eagle, acceptance: 0.1, unit_cost: 0.05, draft_ms: {1: 0.5}}
serving:
  batch_sizes: [1]
  step_ms:
    - drafters: [eagle]
      by_batch: {1: {0: 6.0, 1: 7.0}}
  verify_ms: {batch: [1], tokens: [1, 2], ms: [[8.0, 8.5]]}
"""


def test_schedule_decides_against_the_baseline_and_reports_speedup_over_its_own_k0(
    tmp_path,
):
    """§8.5: the decision compares tokens/s with speculation off at baseline(b) =
    verify_ms(b, 1) = 8 ms; the row's speedup is over the table's own k = 0 (6 ms).
    Hand-computed: E(1) = 1.1; eagle at k = 1: 1100/7 = 157.14 tokens/s beats 1000/8 =
    125, so it is chosen, with speedup 1.1 · 6 / 7 = 0.943 below 1."""
    p = tmp_path / "d.yaml"
    p.write_text(DISAGREE)
    sched = schedule(problem_from_file(p))
    (row,) = sched.rows()
    assert row["drafters"] == ["eagle"] and row["k"] == 1
    assert row["tokens_per_s"] == pytest.approx(1100.0 / 7.0, rel=1e-12)
    assert row["speedup"] == pytest.approx(1.1 * 6.0 / 7.0, rel=1e-12)
    # ... and the schedule says the file's k = 0 times disagree
    (note,) = [n for n in sched.notes if "disagree" in n]
    assert "eagle's table 6 ms against 8 at batch 1" in note
    # when they agree (within 1%), speedup is the ratio to speculation off, and no note
    agree = DISAGREE.replace("ms: [[8.0, 8.5]]", "ms: [[6.05, 6.5]]")
    p.write_text(agree.replace("{0: 6.0, 1: 7.0}", "{0: 6.0, 1: 6.2}"))
    sched = schedule(problem_from_file(p))
    (row,) = sched.rows()
    assert row["k"] == 1 and row["speedup"] == pytest.approx(1.1 * 6.0 / 6.2, rel=1e-12)
    assert row["tokens_per_s"] / (1000.0 / 6.05) == pytest.approx(row["speedup"], rel=0.01)
    assert not any("disagree" in n for n in sched.notes)


# ---------------------------------------------------------------- §8.6 / §8.8 exports
def test_schedule_export_takes_mtp_without_a_model_like_the_point_export():
    drafter = Drafter(name="m", acceptance=0.7, unit_cost=0.05, method="mtp")
    point, _ = point_config(drafter, 2)
    assert "model" not in point  # vLLM loads the target's own MTP layers
    rows = [{"batch": 1, "drafters": ["m"], "k": 2}, {"batch": 8, "drafters": [], "k": 0}]
    got, _ = schedule_config(rows, {"m": drafter})
    assert got["method"] == "mtp" and "model" not in got


# ---------------------------------------------------------------- §8.9 short drafts
def vllm_counters(lengths: np.ndarray, accepted: np.ndarray, k: int):
    """vLLM's counters of drafts of ``lengths`` (0..k: a draft the grammar rejected whole
    counts with 0 tokens under asynchronous scheduling) that accepted ``accepted`` tokens:
    num_drafts, per-position cumulative counts, num_draft_tokens."""
    per_pos = np.array([(accepted > i).sum() for i in range(k)])
    return len(lengths), per_pos, int(lengths.sum())


@pytest.mark.parametrize("seed", range(6))
def test_short_draft_bounds_hold_the_true_number_of_rounds(seed):
    """§8.9: whatever the draft lengths, the rounds that reached position j lie in
    [trials_low, trials], position 1 included (drafts of no token), and the interval
    written contains the Jeffreys interval at the true count. Brute force over random
    populations, many ending exactly at j - 1."""
    from allocator.estimate.counts import DrafterCounts, bounded_trials, jeffreys_interval

    rng = np.random.default_rng(seed)
    for _ in range(300):
        k = int(rng.integers(1, 7))
        d = int(rng.integers(1, 40))
        lengths = rng.integers(1, k + 1, size=d)
        if rng.random() < 0.5:  # many short drafts that were accepted in full
            lengths = np.where(rng.random(d) < 0.6, rng.integers(1, k + 1, size=d), lengths)
        if rng.random() < 0.5:  # drafts the grammar rejected whole
            lengths = np.where(rng.random(d) < 0.3, 0, lengths)
        p = rng.choice([0.3, 0.8, 0.97])
        accepted = np.array([int(np.argmin(np.r_[rng.random(n) < p, False])) for n in lengths])
        drafts, per_pos, tokens = vllm_counters(lengths, accepted, k)
        true_n = np.array([((lengths >= j) & (accepted >= j - 1)).sum() for j in range(1, k + 1)])
        hi, lo = bounded_trials(drafts, per_pos, tokens)
        assert np.all(lo <= true_n) and np.all(true_n <= hi), (lengths, accepted)
        assert hi[0] == drafts  # position 1: at most every draft; fewer when some hold none
        ok = true_n > 0
        c = DrafterCounts("x", per_pos[ok], hi[ok], trials_low=lo[ok])
        wlo, whi = c.interval
        tlo, thi = jeffreys_interval(per_pos[ok], true_n[ok])
        assert np.all(wlo <= tlo + 1e-12) and np.all(thi <= whi + 1e-12)


# ---------------------------------------------------------------- §8.1–§8.3 by hand
def test_a_table_is_never_left_for_the_component_model(tmp_path):
    """§8.1: past its table's largest k a configuration has no step time, even where the
    component model would give one (verify_ms reaches 4 tokens, draft_ms is given)."""
    from allocator.exceptions import InputError
    from allocator.model.under_load import step_ms

    p = tmp_path / "d.yaml"
    p.write_text(
        DISAGREE.replace("tokens: [1, 2], ms: [[8.0, 8.5]]", "tokens: [1, 4], ms: [[8.0, 9.5]]")
    )
    prob = problem_from_file(p)
    one = np.array([[True]])
    assert step_ms(prob, one, np.array([1]), 1)[0] == 7.0  # the table
    with pytest.raises(InputError, match="outside its measured step_ms table"):
        step_ms(prob, one, np.array([2]), 1)


def test_tokens_per_step_of_a_mixture_is_the_harmonic_mean_in_the_bonus_convention(tmp_path):
    """§8.3: E = 1 / Σ_w p_w / E_w with each E_w = 1 + Σ_{i≤k} Π_{j≤i} a_w(j), for a
    problem written in the paper convention."""
    p = tmp_path / "w.yaml"
    p.write_text(
        """\
name: w
convention: paper
drafters: [{name: d, acceptance: 0.5, unit_cost: 0.1, draft_ms: {1: 0.5}}]
workloads:
  - {name: chat, weight: 3, acceptance: {d: 0.9}}
  - {name: code, weight: 1, acceptance: {d: 0.4}}
serving:
  batch_sizes: [1]
  verify_ms: {batch: [1], tokens: [1, 4], ms: [[10.0, 13.0]]}
"""
    )
    prob = problem_from_file(p)
    k = 3
    e = {a: 1 + sum(a**i for i in range(1, k + 1)) for a in (0.9, 0.4)}
    want = 1.0 / (0.75 / e[0.9] + 0.25 / e[0.4])
    got = serving_metrics(prob, np.array([[True]]), np.array([k]), 1)
    assert got["expected_accepted"][0] == pytest.approx(want, rel=1e-12)
    assert got["step_ms"][0] == pytest.approx(13.0 + k * 0.5)  # V(1, 4) + k · d(1)
    assert got["tokens_per_s"][0] == pytest.approx(1000.0 * want / (13.0 + k * 0.5))


def test_calibration_says_when_it_replaces_the_planned_batch_sizes(tmp_path):
    """§8.7: P2's batch_sizes are the measured ones; P's own plan, replaced, is noted."""
    p = tmp_path / "p.yaml"
    p.write_text(
        PROBLEM
        + "serving:\n  batch_sizes: [1, 8, 64]\n  gpu_cost_per_hour: 2.0\n"
        + "  verify_ms: {batch: [1, 64], tokens: [1, 2], ms: [[6, 7], [8, 9]]}\n"
    )
    p.write_text(p.read_text().replace("unit_cost: 0.05}", "unit_cost: 0.05, draft_ms: {1: 1}}"))
    p.write_text(p.read_text().replace("unit_cost: 0.1}", "unit_cost: 0.1, draft_ms: {1: 1}}"))
    prob = problem_from_file(p)
    rows = [([], 0, b) for b in (1, 64)] + [
        (n, k, b) for b in (1, 64) for n in (["a"], ["b"]) for k in (1, 3)
    ]
    csv = tmp_path / "m.csv"
    csv.write_text(rows_csv(rows))
    cal = calibrate(prob, read_measured(csv, prob))
    data, notes = calibrated_problem_data(prob, cal, tmp_path / "p2.yaml", p)
    assert data["serving"]["batch_sizes"] == [1, 64]
    assert data["serving"]["gpu_cost_per_hour"] == 2.0
    assert any(
        "batch_sizes [1, 8, 64] replaced by the measured batch sizes [1, 64]" in n for n in notes
    ), notes


def test_short_draft_bounds_by_hand():
    """§8.9, worked by hand: k = 3, 10 drafts, per-position accepted [8, 5, 2], 27 draft
    tokens. The deficit 3·10 − 27 = 3 can hide at most min(3 // 3, 10 − 8) = 1 draft of no
    token at position 1 (one the grammar rejected whole), at most 3 // 2 = 1 draft of
    length 1 at position 2 and at most min(3 // 1, 5 − 2) = 3 drafts of length 2 at
    position 3, so the rounds reaching positions 1..3 lie in [9, 10], [7, 8], [2, 5]. With
    no short draft (30 tokens) the bounds meet."""
    from allocator.estimate.counts import bounded_trials

    hi, lo = bounded_trials(10, np.array([8, 5, 2]), 27)
    assert hi.tolist() == [10, 8, 5] and lo.tolist() == [9, 7, 2]
    hi, lo = bounded_trials(10, np.array([8, 5, 2]), 30)
    assert hi.tolist() == lo.tolist() == [10, 8, 5]
