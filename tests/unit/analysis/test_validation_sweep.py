"""``replay_sweep``: measured runs replayed as consecutive runs of one server with
prefix caching (:mod:`allocator.analysis.validation_sweep`).

Two independent references. Time to first token of one request alone on
:mod:`requests_problem` (blocks of 256 tokens) worked out by hand: a cold prompt of ``P``
tokens is one prefill step of ``P`` tokens; a prompt whose blocks an earlier request left
cached is a prefill of the rest only, ``P − 256 · floor((P − 1) / 256)`` tokens (vLLM
recomputes at least the last token). And the prompt-identity rule against the token ids
of vLLM 0.10.1.1's random dataset (:mod:`tests.support.vllm_random_dataset`, a copy of
its lines)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from allocator.analysis import validation
from allocator.analysis.validation import MeasuredRun, replay, replay_sweep, validate
from allocator.analysis.validation_sweep import sweep_requests
from allocator.exceptions import InputError
from tests.support.vllm_random_dataset import random_prompts
from tests.unit.analysis import requests_problem as rp

BLOCK = 256


def problem():
    d = rp.data()
    d["serving"]["scheduler"]["block_size"] = BLOCK
    return rp.build(d)


def measured(name: str, prompts, outputs, **kw) -> MeasuredRun:
    base = dict(
        source=name, engine="vllm", model=None, hardware=None, tensor_parallel=None, k=0,
        request_rate=math.inf, max_concurrency=None, burstiness=1.0,
        prompt_tokens=np.array(prompts), output_tokens=np.array(outputs), metrics={},
    )  # fmt: skip
    base.update(kw)
    return MeasuredRun(**base)


def uncached(p: int) -> int:
    """Tokens prefilled when every full block of the prompt is cached (by hand)."""
    return p - BLOCK * ((p - 1) // BLOCK)


def ttfts(out) -> list[float]:
    return [r.metrics["mean_ttft_ms"] for r, _ in out]


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("p", [1000, 1024, 300])
def test_second_identical_run_prefills_only_the_uncached_remainder(p):
    runs = [measured("a", [p], [20]), measured("b", [p], [20])]
    cold, warm = rp.prefill_ms(p), rp.prefill_ms(uncached(p))
    assert warm < cold
    no_warmup = replay_sweep(problem(), runs, warmup=False)
    assert ttfts(no_warmup) == pytest.approx([cold, warm], rel=1e-6)
    # the warm-up request (prompt 0, alone) caches the first run's prompt too
    assert ttfts(replay_sweep(problem(), runs)) == pytest.approx([warm, warm], rel=1e-6)
    # decode is not touched: every later token one 10 ms step at batch 1
    for r, _ in no_warmup:
        assert r.metrics["mean_tpot_ms"] == pytest.approx(rp.step_ms(None, 1, 0), rel=1e-6)
        assert r.metrics["duration"] == pytest.approx(
            (r.metrics["mean_ttft_ms"] + 19 * rp.step_ms(None, 1, 0)) / 1e3, rel=1e-6
        )
    # a run replayed alone has no prompt identities: cold
    alone, _ = replay(problem(), runs[1])
    assert alone.metrics["mean_ttft_ms"] == pytest.approx(cold, rel=1e-6)


def test_only_the_prompts_of_the_same_index_are_shared():
    # run b: request 0 is prompt 0 (cached by run a), request 1 is prompt 1, new; both
    # sent at once, so request 1 waits for nothing but shares the step: closed form by
    # one mixed prefill step of uncached(1000) + 1000 tokens
    runs = [measured("a", [1000], [5]), measured("b", [1000, 1000], [5, 5])]
    out = replay_sweep(problem(), runs, warmup=False)
    first = out[1][0].result.ttft_s * 1e3
    both = rp.prefill_ms(uncached(1000) + 1000)
    assert first == pytest.approx([both, both], rel=1e-6)


def test_a_run_longer_than_the_gap_widens_it(monkeypatch):
    runs = [measured("a", [1000] * 3, [40] * 3), measured("b", [1000] * 3, [40] * 3)]
    wide = replay_sweep(problem(), runs, warmup=True)
    monkeypatch.setattr(validation, "FIRST_GAP_S", 1e-3)  # shorter than any run
    narrow = replay_sweep(problem(), runs, warmup=True)
    for (a, _), (b, _) in zip(wide, narrow, strict=True):
        for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "duration"):
            assert b.metrics[key] == pytest.approx(a.metrics[key], rel=1e-6)


def test_runs_of_different_concurrency_limits_are_refused():
    runs = [measured("a", [100], [5], max_concurrency=1), measured("b", [100], [5])]
    with pytest.raises(InputError, match="one server"):
        replay_sweep(problem(), runs)


def test_validate_sweep_reads_the_files_in_order(tmp_path: Path):
    doc = {
        "model_id": "example/verifier", "num_prompts": 1, "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": None, "duration": 1.0, "completed": 1,
        "failed": 0, "total_input_tokens": 1000, "total_output_tokens": 20,
        "request_throughput": 1.0, "output_throughput": 20.0, "mean_ttft_ms": 10.0,
    }  # fmt: skip
    files = []
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(doc))
        files.append(tmp_path / name)
    rep = validate(problem(), files, sweep=True)
    predicted = [r.metrics["mean_ttft_ms"].predicted for r in rep.runs]
    assert predicted == pytest.approx([rp.prefill_ms(uncached(1000))] * 2, rel=1e-6)
    plain = validate(problem(), files)
    assert [r.metrics["mean_ttft_ms"].predicted for r in plain.runs] == pytest.approx(
        [rp.prefill_ms(1000)] * 2, rel=1e-6
    )


# ---------------------------------------------------------------- the identity rule
def shared_by_model(n: int, m: int, pn: int, pm: int) -> np.ndarray:
    """Tokens request i of a run of ``n`` prompts of ``pn`` tokens shares with request j
    of the next run (``m`` of ``pm``), as the sweep's content says: ``(n, m)``."""
    req, _, _ = sweep_requests(
        [np.zeros(n), np.zeros(m)], [np.full(n, pn), np.full(m, pm)],
        [np.ones(n, np.int64), np.ones(m, np.int64)], warmup=False, gap_s=1.0,
    )  # fmt: skip
    c = req.content
    assert c is not None
    out = np.zeros((n, m), np.int64)
    for i in range(n):
        for j in range(m):
            (ia, *_), (la, *_) = c.segments(i)
            (ib, *_), (lb, *_) = c.segments(n + j)
            out[i, j] = min(la, lb) if ia == ib else 0
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@pytest.mark.parametrize(
    ("n", "m", "len_n", "len_m", "seed"),
    [(3, 5, 40, 40, 0), (5, 2, 40, 40, 7), (4, 4, 40, 24, 0), (1, 6, 24, 40, 3)],
)
def test_prompt_identity_matches_vllm_random_dataset(n, m, len_n, len_m, seed):
    a = random_prompts(n, seed=seed, input_len=len_n, output_len=16)
    b = random_prompts(m, seed=seed, input_len=len_m, output_len=32)
    reference = np.array([[common_prefix(x, y) for y in b] for x in a])
    assert (reference == shared_by_model(n, m, len_n, len_m)).all()


def test_at_a_range_ratio_above_zero_the_prompts_differ_between_runs():
    # what the rule does not cover (the module docstring): the lengths are drawn first,
    # so the offsets of runs of different sizes differ
    a = random_prompts(3, input_len=40, range_ratio=0.5)
    b = random_prompts(5, input_len=40, range_ratio=0.5)
    assert all(common_prefix(a[i], b[i]) == 0 for i in range(3))
