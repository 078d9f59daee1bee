"""vLLM's per-request speculative metrics (``--per-request-spec-decode-metrics``):
hand-counted small inputs, the bounds of summary-level requests against the per-step
truth, the response forms vLLM 0.33.0 writes, and bad inputs refused in one line."""

import json

import numpy as np
import pytest

from allocator.estimate.vllm_requests import estimate_vllm_requests, summary_counts
from allocator.exceptions import InputError


def metrics(accepted, drafted, k, detailed=True, **override):
    """``metrics.speculative_decoding`` of one request, as ``RequestSpecDecodeMetrics.to_dict``
    builds it from its per-step (accepted, drafted) pairs."""
    hist = np.bincount(np.asarray(accepted, int), minlength=k + 1).tolist()
    steps = len(accepted)
    acc = int(sum(accepted))
    tokens = int(sum(drafted))
    m = {
        "mean_acceptance_length": 1.0 + acc / steps if steps else 1.0,
        "draft_acceptance_rate": acc / tokens if tokens else 0.0,
        "acceptance_histogram": hist,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": acc,
        "num_draft_tokens": tokens,
        "num_spec_tokens": k,
    }
    if detailed and steps:
        m["per_step_accepted"] = [int(a) for a in accepted]
        m["per_step_drafted"] = [int(d) for d in drafted]
    m.update(override)
    return m


def chat(m, model="meta-llama/Llama-3.1-8B-Instruct", **top):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
        "metrics": None if m is None else {"speculative_decoding": m},
        **top,
    }


def write(path, values):
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


def test_detailed_steps_counted_by_hand(tmp_path):
    """Steps (accepted, drafted), K = 3. Request 1: (0,0) a draft the grammar rejected
    whole, (2,3), (0,1) a one-token draft. Request 2: (3,3), (1,2), (1,3).
    Position 1 is reached by every step with a drafted token: 5; accepted by a >= 1: 4.
    Position 2: d >= 2 and a >= 1: (2,3), (3,3), (1,2), (1,3) = 4; a >= 2: 2.
    Position 3: d >= 3 and a >= 2: (2,3), (3,3) = 2; a >= 3: 1."""
    path = write(
        tmp_path / "r.jsonl",
        [chat(metrics([0, 2, 0], [0, 3, 1], 3)), chat(metrics([3, 1, 1], [3, 2, 3], 3))],
    )
    est = estimate_vllm_requests(path, min_trials=1)
    d = est.drafters[0]
    assert d.successes.tolist() == [4, 2, 1]
    assert d.trials.tolist() == [5, 4, 2]
    assert d.trials_low is None and not d.bounded
    assert est.k_max == 3 and est.convention == "bonus"
    assert est.report["detailed_requests"] == 2 and est.report["steps"] == 6


def test_full_summary_requests_are_exact(tmp_path):
    """Histogram [2, 1, 0, 1] (4 steps of 3 tokens, 12 drafted): cumulative per_pos
    [2, 1, 1]; position 1 reached by 4, position 2 by 2, position 3 by 1."""
    m = metrics([0, 0, 1, 3], [3, 3, 3, 3], 3, detailed=False)
    est = estimate_vllm_requests(write(tmp_path / "r.jsonl", [chat(m)]), min_trials=1)
    d = est.drafters[0]
    assert d.successes.tolist() == [2, 1, 1]
    assert d.trials.tolist() == [4, 2, 1]
    assert not d.bounded


def test_short_summary_requests_are_bounded_from_position_1(tmp_path):
    """Histogram [2, 1, 0, 1], K = 3, 7 drafted of 12: deficit 5. Bounds of the steps
    reaching j: position 1 loses at most min(5 // 3, 4 - 2) = 1 (a wholly rejected
    draft), position 2 min(5 // 2, 2 - 1) = 1, position 3 min(5 // 1, 1 - 1) = 0."""
    m = metrics([0, 0, 1, 3], [0, 1, 3, 3], 3, detailed=False)
    assert m["num_draft_tokens"] == 7
    est = estimate_vllm_requests(write(tmp_path / "r.jsonl", [chat(m)]), min_trials=1)
    d = est.drafters[0]
    assert d.successes.tolist() == [2, 1, 1]
    assert d.trials.tolist() == [4, 2, 1]
    assert d.trials_low.tolist() == [3, 1, 1]
    # the true steps (from the same draws, detailed) lie inside the bounds
    exact = estimate_vllm_requests(
        write(tmp_path / "d.jsonl", [chat(metrics([0, 0, 1, 3], [0, 1, 3, 3], 3))]),
        min_trials=1,
    ).drafters[0]
    assert exact.trials.tolist() == [3, 2, 1]
    assert np.all(d.trials_low <= exact.trials) and np.all(exact.trials <= d.trials)
    assert any("position 1 included" in n for n in est.notes)


def test_summary_bounds_always_hold_the_per_step_truth():
    """Random steps of random draft lengths (0 … K): the summary bounds of every request
    contain the exact counts of its steps."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        k = int(rng.integers(1, 6))
        n = int(rng.integers(1, 30))
        d = rng.integers(0, k + 1, size=n)
        if rng.random() < 0.3:
            d[:] = k
        a = np.array([rng.integers(0, di + 1) for di in d])
        hist = np.bincount(a, minlength=k + 1)
        s, hi, lo = summary_counts(hist, int(d.sum()))
        j = np.arange(1, k + 1)[:, None]
        true_n = ((d >= j) & (a >= j - 1)).sum(axis=1)
        true_s = (a >= j).sum(axis=1)
        assert np.array_equal(s, true_s)
        assert np.all(lo <= true_n) and np.all(true_n <= hi), (a, d, k)
        if d.sum() == k * n:
            assert np.array_equal(lo, hi)


def test_grammar_rejected_drafts_leave_position_1_exact_with_per_step_arrays(tmp_path):
    """Under async scheduling with structured output, drafts the grammar rejected whole
    are recorded with 0 drafted and 0 accepted. Truth 0.8 at position 1, a third of the
    steps rejected whole: the per-step arrays give 0.8; the histogram alone, whose
    cumulative reading would give about 0.53, gives an interval holding 0.8."""
    rng = np.random.default_rng(11)
    lines_detailed, lines_summary = [], []
    for _ in range(200):
        n = 30
        rejected = rng.random(n) < 1 / 3
        ok = rng.random((n, 2)) < [0.8, 0.7]
        a = np.cumprod(ok, axis=1).sum(axis=1)
        d = np.full(n, 2)
        a[rejected], d[rejected] = 0, 0
        lines_detailed.append(chat(metrics(a, d, 2)))
        lines_summary.append(chat(metrics(a, d, 2, detailed=False)))
    det = estimate_vllm_requests(write(tmp_path / "d.jsonl", lines_detailed)).drafters[0]
    summ = estimate_vllm_requests(write(tmp_path / "s.jsonl", lines_summary)).drafters[0]
    assert det.acceptance[0] == pytest.approx(0.8, abs=0.02)
    assert summ.successes[0] / summ.trials[0] < 0.6  # what a cumulative reading gives
    lo, hi = summ.interval
    assert lo[0] <= 0.8 <= hi[0]
    assert np.array_equal(det.successes, summ.successes)


def test_response_forms(tmp_path):
    """A chat completion, a bare metrics object (offline ``to_dict()``), a saved stream
    (chunks without metrics, the final usage chunk with them, ``data: [DONE]``), a list
    per line; null metrics (n > 1, or metrics off) and a text completion without any
    are skipped."""
    m1 = metrics([1, 2], [2, 2], 2)
    m2 = metrics([0, 2], [2, 2], 2)
    m3 = metrics([1], [2], 2)
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "x", "choices": []}
    lines = [
        json.dumps(chat(m1, model="x")),
        json.dumps(m2),
        "data: " + json.dumps(chunk),
        "data: " + json.dumps({**chunk, "usage": {}, "metrics": {"speculative_decoding": m3}}),
        "data: [DONE]",
        json.dumps([chat(None, model="x"), {"object": "text_completion", "choices": []}]),
        json.dumps(chat({}, model="x") | {"metrics": {"speculative_decoding": None}}),
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    est = estimate_vllm_requests(path, "eagle3", min_trials=1)
    d = est.drafters[0]
    # steps (a, d): (1,2) (2,2) (0,2) (2,2) (1,2): position 1: 5 reached, 4 accepted;
    # position 2: a >= 1 and d >= 2: 4 reached, 2 accepted
    assert d.name == "eagle3"
    assert d.successes.tolist() == [4, 2] and d.trials.tolist() == [5, 4]
    assert est.report["requests"] == 3 and est.report["skipped"] == 4
    assert est.report["model"] == "x"


def test_workloads_weighted_by_tokens(tmp_path):
    lines = [
        chat(metrics([2, 2, 1], [2, 2, 2], 2), workload="code"),
        chat(metrics([0, 1], [2, 2], 2), workload="chat"),
    ]
    est = estimate_vllm_requests(write(tmp_path / "r.jsonl", lines), min_trials=1)
    w = {x.name: x for x in est.workloads}
    # tokens: code 3 + 3 + 2 = 8, chat 1 + 2 = 3
    assert w["code"].weight == pytest.approx(8 / 11)
    assert w["chat"].drafters[0].trials.tolist() == [2, 1]
    with pytest.raises(InputError, match="some responses have a workload and others none"):
        estimate_vllm_requests(
            write(tmp_path / "m.jsonl", [lines[0], chat(metrics([1], [2], 2))]), min_trials=1
        )


def good(**override):
    return json.dumps(chat(metrics([1, 2, 0], [2, 2, 2], 2, **override)))


def bare(**override):
    m = metrics([1, 2, 0], [2, 2, 2], 2)
    m.update(override)
    return json.dumps(chat(m))


def without(key):
    m = metrics([1, 2, 0], [2, 2, 2], 2)
    del m[key]
    return json.dumps(chat(m))


BAD = [
    ('{"metrics": {"speculative_decoding": {', "line 1: not JSON"),
    (without("num_draft_tokens"), "speculative_decoding: missing num_draft_tokens"),
    (
        bare(acceptance_histogram=[1, -1, 1]),
        "acceptance_histogram[1]: must be an integer in 0..2**53, got -1",
    ),
    (
        good().replace('"num_draft_tokens": 6', '"num_draft_tokens": NaN'),
        "num_draft_tokens: must be an integer in 0..2**53, got nan",
    ),
    (bare(num_spec_tokens="2"), "num_spec_tokens: must be an integer in 0..2**53, got '2'"),
    (bare(acceptance_histogram="[1, 1, 1]"), "acceptance_histogram: must be a list"),
    (bare(acceptance_histogram=[1, 1, 1, 0]), "4 entries; vLLM writes num_spec_tokens + 1"),
    (bare(num_spec_steps=4), "num_spec_steps: 4, but the histogram counts 3"),
    (bare(num_accepted_draft_tokens=4), "num_accepted_draft_tokens: 4, but the histogram"),
    (bare(num_draft_tokens=7), "num_draft_tokens: 7 exceeds 3 steps x 2 tokens"),
    (bare(num_draft_tokens=2), "num_draft_tokens: 2 is fewer than the 3 accepted"),
    (bare(mean_acceptance_length=2.5), "mean_acceptance_length: 2.5, but the counts give 2"),
    (bare(per_step_drafted=None), "per_step_accepted: given without per_step_drafted"),
    (bare(per_step_accepted=[1, 2]), "per_step_accepted: 2 entries for 3 steps"),
    (bare(per_step_accepted=[1, 1, 0]), "per_step_accepted: disagrees with"),
    (bare(per_step_drafted=[2, 1, 3]), "per_step_drafted[2]: 3 exceeds K = 2"),
    (
        bare(per_step_accepted=[1, 2, 0], per_step_drafted=[2, 1, 2]),
        "per_step_accepted[1]: 2 accepted of 1 drafted",
    ),
    (bare(per_step_drafted=[2, 2, 1]), "per_step_drafted: sums to 5, not num_draft_tokens"),
    (good() + "\n" + json.dumps(chat(metrics([1], [3], 3))), "line 2: num_spec_tokens 3 where"),
    (good() + "\n" + json.dumps(chat(metrics([1], [2], 2), model="other")), "line 2: model"),
    (json.dumps(chat(None)), "no response with speculative steps"),
    (json.dumps({"text": "hi"}), "expected a vLLM response with metrics.speculative_decoding"),
    (json.dumps(chat(metrics([1], [2], 2), workload=3)), "workload: 3 is not a string"),
    (json.dumps({"metrics": []}), "metrics: must be an object"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    (good().replace('"num_draft_tokens": 6', '"num_draft_tokens": ' + "9" * 5000), "5,000 char"),
    (
        bare(num_draft_tokens=2**60),
        f"num_draft_tokens: must be an integer in 0..2**53, got {2**60}",
    ),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_inputs_one_line(tmp_path, text, needle):
    path = tmp_path / "r.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as info:
        estimate_vllm_requests(path, min_trials=1)
    message = str(info.value)
    assert "\n" not in message and needle in message, message
    assert message.startswith("r.jsonl"), message
