"""SGLang per-request histograms as SGLang 0.5.23 writes them: token trees counted by
depth, ``--speculative-adaptive`` runs counted by their candidate steps, OpenAI-style
``sglext.spec_tokens_details`` read like ``meta_info``. Each test here fails on the reader
before these fixes (it read a tree's node count as k, refused adaptive runs and
OpenAI-style responses, and raised tracebacks on deep nesting and long numbers)."""

import json

import numpy as np
import pytest

from allocator.estimate import estimate
from allocator.estimate import sglang_requests as reader
from allocator.exceptions import InputError

#: SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG candidate steps, all batch sizes together
DEFAULT_ADAPTIVE_STEPS = (0, 1, 3, 5, 7)


def estimate_sglang_requests(*args, **kw):
    return reader.estimate_sglang_requests(*args, **kw)


def test_default_candidate_steps_are_sglangs():
    assert reader.DEFAULT_ADAPTIVE_STEPS == DEFAULT_ADAPTIVE_STEPS


def meta(hist, per_round):
    """``meta_info`` of one request: ``spec_num_proposed_drafts = verify_ct · per_round``
    (``speculative_num_draft_tokens − 1``, from the starting settings)."""
    hist = [int(v) for v in hist]
    rounds = sum(hist)
    correct = sum(n * c for n, c in enumerate(hist))
    return {
        "id": "0" * 12,
        "completion_tokens": 1 + correct + rounds,
        "spec_verify_ct": rounds,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": rounds * per_round,
        "spec_accept_rate": correct / (rounds * per_round) if per_round else 0.0,
        "spec_accept_length": (1 + correct + rounds) / rounds,
        "spec_correct_drafts_histogram": hist,
    }


def native(hist, per_round, **top):
    return {"text": "...", "meta_info": meta(hist, per_round), **top}


def write(path, values):
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


# ------------------------------------------------------------------ token trees

#: (steps, topk, num_draft_tokens) = (3, 4, 8): 7 nodes per round, depth 3
TREE = [[40, 30, 20, 10], [20, 15, 10, 5]]


def test_tree_node_count_is_not_read_as_k(tmp_path):
    """Before: k = 7 (the nodes) and positions 4 … 7 reached by the rounds whose path
    went 3 deep, never accepted: an acceptance of 0.000 written for position 4."""
    path = write(tmp_path / "t.jsonl", [native(h, 7) for h in TREE])
    with pytest.raises(InputError, match="token tree") as info:
        estimate(path, "sglang-requests", tmp_path / "p.yaml")
    assert "\n" not in str(info.value)
    assert "no round accepted more than 3 of the 7" in str(info.value)


def test_tree_counted_by_depth(tmp_path):
    """Summed histogram [60, 45, 30, 15] (150 rounds): depth 1 reached by 150, accepted
    by 90; depth 2: 90 and 45; depth 3: 45 and 15. Nothing past depth 3."""
    path = write(tmp_path / "t.jsonl", [native(h, 7) for h in TREE])
    for kw in ({"topk": 4}, {"topk": 4, "k": 3}):
        est = estimate_sglang_requests(path, min_trials=1, **kw)
        d = est.drafters[0]
        assert est.k_max == 3, kw
        assert d.trials.tolist() == [150, 90, 45]
        assert d.successes.tolist() == [90, 45, 15]
        assert not d.bounded
        assert any("token tree (top-k 4, 7 nodes per round, depth 3)" in n for n in est.notes)
        assert est.report["mode"] == "tree"
    # a depth past the node count is refused as before; a chain reading is still possible
    with pytest.raises(InputError, match="k: 8 exceeds the 7 drafted"):
        estimate_sglang_requests(path, min_trials=1, topk=4, k=8)
    chain = estimate_sglang_requests(path, min_trials=1, topk=1)
    assert chain.k_max == 7 and chain.drafters[0].successes[3] == 0


# ------------------------------------------------------------------ adaptive runs


def test_adaptive_run_is_read_not_refused(tmp_path):
    """Starting steps 3 (3 proposed per round), rounds drafting 0, 1, 3, 5 or 7 tokens
    (SGLang's default candidates). Summed histogram [20, 10, 8, 6, 5, 4, 3, 2] (58 rounds):
    tail = [58, 38, 28, 20, 14, 9, 5, 2]. Position j accepted by tail[j], reached by at
    most tail[j − 1]; when j − 1 is a candidate (0, 1, 3, 5) the rounds that accepted
    exactly j − 1 may have stopped there, so at least tail[j]. Before: refused, "a round
    accepted 7 drafts, more than the 3 drafted"."""
    hists = [[12, 6, 5, 3, 3, 2, 2, 1], [8, 4, 3, 3, 2, 2, 1, 1]]
    path = write(tmp_path / "a.jsonl", [native(h, 3) for h in hists])
    est = estimate(path, "sglang-requests", tmp_path / "p.yaml", min_trials=1)
    d = est.drafters[0]
    assert est.k_max == 7 and est.report["mode"] == "adaptive"
    assert est.report["candidate_steps"] == list(DEFAULT_ADAPTIVE_STEPS)
    assert d.successes.tolist() == [38, 28, 20, 14, 9, 5, 2]
    assert d.trials.tolist() == [58, 38, 28, 20, 14, 9, 5]
    assert d.trials_low.tolist() == [38, 28, 28, 14, 14, 5, 5]
    # exact where j − 1 is no candidate: positions 3, 5 and 7
    assert (d.trials == d.trials_low).tolist() == [False, False, True, False, True, False, True]
    assert any("adaptive run" in n for n in est.notes)


def test_adaptive_candidate_steps_given(tmp_path):
    """Candidates 1, 3, 7 (no 0: every round drafted): position 1 is exact."""
    path = write(tmp_path / "a.jsonl", [native([20, 10, 8, 6, 5, 4, 3, 2], 3)])
    est = estimate_sglang_requests(path, min_trials=1, adaptive_steps=[7, 1, 3])
    d = est.drafters[0]
    assert est.report["candidate_steps"] == [1, 3, 7]
    assert d.trials_low.tolist() == [58, 28, 28, 14, 14, 9, 5]
    assert d.trials.tolist() == [58, 38, 28, 20, 14, 9, 5]
    with pytest.raises(InputError, match="not among the candidate steps 1, 5"):
        estimate_sglang_requests(path, min_trials=1, adaptive_steps=[1, 5])
    with pytest.raises(InputError, match="more than the largest candidate step 5"):
        estimate_sglang_requests(path, min_trials=1, adaptive_steps=[3, 5])
    with pytest.raises(InputError, match="top-k 1 only"):
        estimate_sglang_requests(path, min_trials=1, adaptive=True, topk=2)
    with pytest.raises(InputError, match="declared not adaptive"):
        estimate_sglang_requests(path, min_trials=1, adaptive=False)
    with pytest.raises(InputError, match="adaptive_steps: must be an integer >= 0, got -1"):
        estimate_sglang_requests(path, min_trials=1, adaptive_steps=[-1, 3])


def test_adaptive_bounds_hold_the_simulated_truth(tmp_path):
    """Rounds drawing their steps from the default candidates, a chain of known
    acceptance: the true rounds reaching every position lie within the bounds, and the
    exact positions' intervals hold the truth."""
    rng = np.random.default_rng(5)
    truth = np.array([0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5])
    lines, reached, accepted = [], np.zeros(7, int), np.zeros(7, int)
    for _ in range(150):
        steps = rng.choice(DEFAULT_ADAPTIVE_STEPS, size=40)
        ok = rng.random((40, 7)) < truth
        a = np.minimum(np.cumprod(ok, axis=1).sum(axis=1), steps)
        for j in range(1, 8):
            reached[j - 1] += int(((steps >= j) & (a >= j - 1)).sum())
            accepted[j - 1] += int((a >= j).sum())
        lines.append(native(np.bincount(a), 3))
    est = estimate_sglang_requests(write(tmp_path / "a.jsonl", lines), min_trials=1)
    d = est.drafters[0]
    assert d.successes.tolist() == accepted.tolist()
    assert np.all(d.trials_low <= reached) and np.all(reached <= d.trials)
    lo, hi = d.interval
    exact = d.trials == d.trials_low
    assert exact.tolist() == [False, False, True, False, True, False, True]
    assert np.all((lo <= truth) & (truth <= hi))


# ------------------------------------------------------------------ OpenAI-style


def chat_completion(details, **top):
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "default",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12},
        **({"sglext": {"spec_tokens_details": details}} if details is not None else {}),
        **top,
    }


def spec_details(hist, per_round):
    """``SpecTokensDetails`` (every field, defaults filled) of one request."""
    m = meta(hist, per_round)
    return {
        "spec_accept_rate": m["spec_accept_rate"],
        "spec_accept_length": m["spec_accept_length"],
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": m["spec_num_correct_drafts"],
        "spec_num_proposed_drafts": m["spec_num_proposed_drafts"],
        "spec_verify_ct": m["spec_verify_ct"],
        "spec_correct_drafts_histogram": m["spec_correct_drafts_histogram"],
        "spec_cap_lens_histogram": [],
    }


def test_openai_style_responses_read_like_native(tmp_path):
    """A chat completion, a completion with n = 2 (a list of details), a saved stream
    whose last chunk carries sglext, a response without details (skipped), and a request
    without rounds (defaults: verify_ct 0, empty histogram; skipped). Before: refused,
    "expected an SGLang response object with meta_info"."""
    hists = [[5, 3, 2, 1], [4, 4, 1, 2], [6, 2, 2, 2], [3, 3, 3, 3]]
    chunk = {"id": "s", "object": "chat.completion.chunk", "model": "default", "choices": []}
    lines = [
        json.dumps(chat_completion(spec_details(hists[0], 3))),
        json.dumps(
            {
                "id": "c",
                "object": "text_completion",
                "model": "default",
                "choices": [],
                "sglext": {"spec_tokens_details": [spec_details(h, 3) for h in hists[1:3]]},
            }
        ),
        "data: " + json.dumps(chunk),
        "data: "
        + json.dumps({**chunk, "sglext": {"spec_tokens_details": spec_details(hists[3], 3)}}),
        "data: [DONE]",
        json.dumps(chat_completion(None)),
        json.dumps(
            chat_completion(
                {**spec_details([1], 3), "spec_verify_ct": 0, "spec_correct_drafts_histogram": []}
            )
        ),
    ]
    oai = tmp_path / "oai.jsonl"
    oai.write_text("\n".join(lines) + "\n")
    ref = write(tmp_path / "native.jsonl", [native(h, 3) for h in hists])
    a = estimate(oai, "sglang-requests", tmp_path / "p.yaml", min_trials=1)
    b = estimate(ref, "sglang-requests", tmp_path / "p.yaml", min_trials=1)
    assert a.drafters[0].successes.tolist() == b.drafters[0].successes.tolist()
    # summed histogram [18, 12, 8, 8]: reached 46, 28, 16; accepted 28, 16, 8
    assert a.drafters[0].trials.tolist() == b.drafters[0].trials.tolist() == [46, 28, 16]
    assert a.drafters[0].successes.tolist() == [28, 16, 8]
    assert a.report["requests"] == 4 and a.report["skipped"] == 3


def test_openai_style_errors_name_the_sglext_field(tmp_path):
    bad = spec_details([5, 3, 2, 1], 3) | {"spec_verify_ct": 12}
    path = write(tmp_path / "r.jsonl", [chat_completion(bad)])
    with pytest.raises(InputError, match=r"sglext\.spec_tokens_details\.spec_verify_ct: 12"):
        estimate_sglang_requests(path, min_trials=1)
    path = write(tmp_path / "r.jsonl", [chat_completion("x")])
    with pytest.raises(InputError, match="must be an object or a list of objects"):
        estimate_sglang_requests(path, min_trials=1)


# ------------------------------------------------------------------ hostile lines


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        (
            json.dumps(native([5, 3], 1)).replace(
                '"spec_verify_ct": 8', '"spec_verify_ct": ' + "7" * 5000
            ),
            "a number of 5,000 characters",
        ),
        ('{"meta_info": {}, "meta_info": {}}', "duplicate key 'meta_info'"),
    ],
)
def test_hostile_lines_one_error_line(tmp_path, text, needle):
    """Before: RecursionError and ValueError tracebacks (Python's int limit)."""
    path = tmp_path / "r.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as info:
        estimate(path, "sglang-requests", tmp_path / "p.yaml")
    assert "\n" not in str(info.value) and needle in str(info.value), str(info.value)
