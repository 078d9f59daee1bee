"""`allocator estimate --format sglang-requests|sglang-log`: SGLang's per-request
histograms and decode log lines, against independently simulated rounds."""

import csv
import json

import numpy as np
import pytest
from scipy import optimize

from allocator.estimate import estimate
from allocator.exceptions import InputError
from allocator.io.spec import load_problem
from tests.support.cli_runner import run
from tests.support.synthetic_logs import sglang_decode_line, sglang_response


def rounds_accepted(rng, acc, rounds, k):
    """Correct drafts per round of a chain (first rejection along k positions)."""
    acc = np.asarray(acc, float)
    a = acc[np.minimum(np.arange(k), acc.size - 1)]
    ok = rng.random((rounds, k)) < a
    return np.cumprod(ok, axis=1).sum(axis=1)


def write_jsonl(path, responses):
    path.write_text("\n".join(json.dumps(r) for r in responses) + "\n")


def test_histograms_agree_with_the_outcome_log_of_the_same_rounds(tmp_path):
    """The same rounds written two ways: SGLang's per-request histograms, and an outcome
    log with one row per reached position. Both estimates must have identical counts."""
    rng = np.random.default_rng(3)
    k = 4
    responses, rows, r = [], [], 0
    for _ in range(60):
        acc = rounds_accepted(rng, [0.8, 0.7, 0.6, 0.5], int(rng.integers(5, 60)), k)
        responses.append(sglang_response(np.bincount(acc), k=k))
        for c in acc:
            for j in range(1, min(c + 1, k) + 1):
                rows.append((r, j, int(j <= c)))
            r += 1
    write_jsonl(tmp_path / "req.jsonl", responses)
    with open(tmp_path / "out.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "position", "draft"])
        w.writerows(rows)
    a = estimate(tmp_path / "req.jsonl", "sglang-requests", tmp_path / "x.yaml", min_trials=1)
    b = estimate(
        tmp_path / "out.csv", "outcomes", tmp_path / "x.yaml", errors="independent", min_trials=1
    )
    np.testing.assert_array_equal(a.drafters[0].successes, b.drafters[0].successes)
    np.testing.assert_array_equal(a.drafters[0].trials, b.drafters[0].trials)
    assert a.k_max == k


def test_request_intervals_cover_the_truth(tmp_path):
    truth = np.array([0.75, 0.65, 0.55])
    hits = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        responses = [
            sglang_response(np.bincount(rounds_accepted(rng, truth, int(n), 3)), k=3)
            for n in rng.integers(3, 40, size=12)
        ]
        path = tmp_path / f"r{seed}.jsonl"
        write_jsonl(path, responses)
        try:
            est = estimate(path, "sglang-requests", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        lo, hi = est.drafters[0].interval
        hits.extend(((lo <= truth) & (truth <= hi)).tolist())
    assert 0.925 <= np.mean(hits) <= 0.975, np.mean(hits)


def test_workloads_and_weights(tmp_path):
    rng = np.random.default_rng(8)
    responses = []
    tokens = {"chat": 0, "code": 0}
    for w, acc in (("chat", [0.6, 0.5]), ("code", [0.9, 0.85])):
        for _ in range(80):
            c = rounds_accepted(rng, acc, 40, 2)
            tokens[w] += int((c + 1).sum())
            responses.append(sglang_response(np.bincount(c), workload=w, k=2))
    write_jsonl(tmp_path / "r.jsonl", responses)
    out = tmp_path / "p.yaml"
    res = run(
        "estimate",
        tmp_path / "r.jsonl",
        "--format",
        "sglang-requests",
        "--out",
        out,
        "--unit-cost",
        "draft=0.05",
    )
    assert res.exit_code == 0, res.output
    spec = load_problem(out)
    w = {x.name: x for x in spec.workloads}
    assert w["chat"].weight == pytest.approx(tokens["chat"] / sum(tokens.values()), abs=1e-6)
    assert w["code"].acceptance["draft"][0] == pytest.approx(0.9, abs=0.03)
    assert w["chat"].acceptance["draft"][1] == pytest.approx(0.5, abs=0.06)


def test_k_from_proposed_and_from_option(tmp_path):
    """A position where every round failed is kept when k is known, not otherwise."""
    hist = [50, 30]  # 1 correct draft at most, k = 3
    write_jsonl(tmp_path / "a.jsonl", [sglang_response(hist, k=3)])
    write_jsonl(tmp_path / "b.jsonl", [sglang_response(hist)])
    a = estimate(tmp_path / "a.jsonl", "sglang-requests", tmp_path / "x.yaml", min_trials=1, topk=1)
    b = estimate(tmp_path / "b.jsonl", "sglang-requests", tmp_path / "x.yaml", min_trials=1)
    c = estimate(tmp_path / "b.jsonl", "sglang-requests", tmp_path / "x.yaml", min_trials=1, k=3)
    assert a.drafters[0].trials.tolist() == [80, 30]  # position 3 never reached
    assert a.drafters[0].successes.tolist() == [30, 0]
    assert b.drafters[0].trials.tolist() == [80] and any("k unknown" in n for n in b.notes)
    assert c.k_max == 3 and c.drafters[0].successes.tolist() == [30, 0]


def good(**meta):
    r = sglang_response([5, 3, 2], k=2)
    r["meta_info"].update(meta)
    return json.dumps(r)


BAD_REQUESTS = [
    ('{"meta_info": {"spec_verify_ct": 3,\n', "line 1: not JSON"),
    (
        good(spec_correct_drafts_histogram=[5, -3, 2]),
        "correct_drafts_histogram[1]: must be an integer in 0..2**53, got -3",
    ),
    (good(spec_verify_ct=11), "spec_verify_ct: 11 rounds, but the histogram counts 10"),
    (good(spec_accept_histogram=[5, 3, 1]), "spec_accept_histogram: differs"),
    (good(spec_num_correct_drafts=8), "spec_num_correct_drafts: 8 correct drafts"),
    (
        json.dumps({"meta_info": {"spec_verify_ct": 4}}),
        "meta_info: spec_verify_ct without spec_correct_drafts_histogram",
    ),
    ('{"text": "hi"}', "expected an SGLang response object with meta_info"),
    (json.dumps(sglang_response([5, 3, 1, 1], k=2)), "accepted 3 drafts, more than the 2"),
    (json.dumps({"text": "", "meta_info": {}}), "no response with speculative rounds"),
    # Python's json reads NaN and Infinity: neither is a count
    (
        good().replace("[5, 3, 2]", "[5, NaN, 2]", 1),
        "histogram[1]: must be an integer in 0..2**53, got nan",
    ),
    (good(spec_verify_ct=float("inf")), "spec_verify_ct: must be an integer in 0..2**53, got inf"),
    # past 2**53: int64 overflow (a traceback, or totals wrapping to negative) before
    (
        good().replace("[5, 3, 2]", "[1e+30, 3, 2]", 1),
        "histogram[0]: must be an integer in 0..2**53, got 1e+30",
    ),
    (
        good().replace("[5, 3, 2]", f"[{2**62}, {2**62}, 1]", 1),
        f"histogram[0]: must be an integer in 0..2**53, got {2**62}",
    ),
    (good() + "\n" + json.dumps({**json.loads(good()), "workload": "chat"}), "workload: some"),
]


def test_k_past_the_proposed_drafts_is_refused(tmp_path):
    """Rounds drafting 2 tokens never reach position 3: --k 3 would read them as rejected
    there (an acceptance of 0), so it is refused; a smaller --k (a tree's depth) is kept."""
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [sglang_response([50, 30, 20], k=2)])
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--format", "sglang-requests", "--out", out, "--k", "3")
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith("error: --k: 3 exceeds the 2 drafted"), res.stderr
    assert not out.exists()
    with pytest.raises(InputError, match="accepted 2 drafts, more than the 1"):
        estimate(path, "sglang-requests", out, min_trials=1, k=1)
    got = estimate(path, "sglang-requests", out, min_trials=1, k=2)
    assert got.drafters[0].trials.tolist() == [100, 50]
    assert got.drafters[0].successes.tolist() == [50, 20]


@pytest.mark.parametrize("text,needle", BAD_REQUESTS)
def test_bad_requests(tmp_path, text, needle):
    path = tmp_path / "r.jsonl"
    path.write_text(text + "\n")
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--format", "sglang-requests", "--out", out)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ")
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    assert not out.exists()


# ----------------------------------------------------------------- decode log


def scalar_truth(acc_by_mix, k):
    """The one acceptance a whose chain mean matches the mixture's (brute force root)."""
    mean = 0.0
    for share, acc in acc_by_mix:
        a = np.asarray(acc)[np.minimum(np.arange(k), len(acc) - 1)]
        mean += share * np.cumprod(a).sum()
    return optimize.brentq(lambda x: sum(x**j for j in range(1, k + 1)) - mean, 1e-9, 1.0)


def test_decode_log_interval_covers_the_scalar_truth(tmp_path):
    k, acc = 3, [0.8, 0.8, 0.8]
    truth = scalar_truth([(1.0, acc)], k)
    assert truth == pytest.approx(0.8)
    hits = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        lines = []
        for i in range(25):
            running = int(rng.integers(2, 12))
            c = rounds_accepted(rng, acc, 40 * running, k)
            lines.append(sglang_decode_line(1 + c.mean(), running, 40 * (i + 1)))
        path = tmp_path / f"d{seed}.log"
        path.write_text("\n".join(lines) + "\n")
        try:
            est = estimate(path, "sglang-log", tmp_path / "x.yaml", k=k)
        finally:
            path.unlink()
        lo, hi = est.drafters[0].interval
        hits.append(bool(lo[0] <= truth <= hi[0]))
    assert 0.92 <= np.mean(hits) <= 0.99, np.mean(hits)


def test_decode_log_sample_matches_its_generator():
    """problems/measurements/sglang-decode.log: the interval holds the scalar acceptance of
    the generator's chat/code mixture (truth.json), computed here by root finding."""
    from pathlib import Path

    here = Path(__file__).resolve().parents[3] / "problems" / "measurements"
    truth = json.loads((here / "truth.json").read_text())["sglang-decode.log"]
    total = sum(truth["mix"].values())
    mix = [(n / total, truth["by_workload"][w]) for w, n in truth["mix"].items()]
    a = scalar_truth(mix, 3)
    est = estimate(here / "sglang-decode.log", "sglang-log", "x.yaml", k=3)
    lo, hi = est.drafters[0].interval
    assert lo[0] <= a <= hi[0]
    assert est.drafters[0].acceptance[0] == pytest.approx(a, abs=0.01)


@pytest.mark.parametrize(
    "lines,args,needle",
    [
        ([sglang_decode_line(2.5, 4, 40)] * 3, [], "--k: sglang-log needs the draft length"),
        ([sglang_decode_line(2.5, 4, 40)], ["--k", "3"], "1 'Decode batch ... accept len' line"),
        ([sglang_decode_line(5.5, 4, 40)] * 3, ["--k", "3"], "outside [1, k + 1 = 4]"),
        (["nothing here"], ["--k", "3"], "0 'Decode batch"),
    ],
)
def test_bad_decode_logs(tmp_path, lines, args, needle):
    path = tmp_path / "d.log"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--format", "sglang-log", "--out", out, *args)
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    assert not out.exists()


def test_k_option_only_for_sglang(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text("round,position,a\n0,1,1\n")
    res = run("estimate", path, "--out", tmp_path / "p.yaml", "--k", "3")
    assert res.exit_code == 2 and "--k: applies to --format sglang-requests or" in res.stderr


def test_outputs_never_overwrite_an_input(tmp_path):
    """--out or --json naming the input or the --costs file (or each other) is refused
    before any work; every file is left as it was."""
    log = tmp_path / "r.jsonl"
    write_jsonl(log, [sglang_response([50, 30, 20], k=2)])
    costs = tmp_path / "costs.yaml"
    costs.write_text("unit_cost: {draft: 0.05}\n")
    before = {p: p.read_text() for p in (log, costs)}
    out = tmp_path / "p.yaml"
    base = ["--format", "sglang-requests", "--costs", costs]
    for args, option in [
        (["--out", costs], "--out"),
        (["--out", out, "--json", log], "--json"),
        (["--out", out, "--json", out], "--json"),
    ]:
        res = run("estimate", log, *base, *args)
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().splitlines() == [res.stderr.strip()]
        assert res.stderr.startswith(f"error: {option}: "), res.stderr
        assert {p: p.read_text() for p in before} == before
        assert not out.exists()
