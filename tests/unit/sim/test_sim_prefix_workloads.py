"""Workloads that share tokens (``allocator/sim/sessions.py``) and the prefix-caching
settings from the problem file to the simulator.

* Multi-turn sessions are closed loop: turn ``t + 1`` is sent exactly ``think`` seconds after
  turn ``t``'s last token; its prompt is ``t · (input + output) + input`` tokens; once turn
  ``t`` has run, turn ``t + 1`` finds turn ``t``'s whole sequence cached but its last token,
  which vLLM never computes (the newest sampled token): ``B · ⌊(t (I + O) − 1) / B⌋``
  tokens without drafts.
* ``serving.scheduler.enable_prefix_caching`` defaults to true (vLLM 0.33.0's default) and
  reaches the simulator's ``Scheduler``; an EAGLE-family drafter hashes one lookahead token.
* Bad input is refused in one line naming the flag, exit status 2.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from allocator import api
from allocator.analysis import replica as R
from allocator.analysis.capacity import rate_search as RS
from allocator.analysis.capacity import slo as S
from allocator.analysis.replica import configuration, replica_scheduler
from allocator.analysis.request_source import request_source
from allocator.exceptions import ParameterError
from allocator.sim import Requests, Scheduler, SpecPolicy, simulate
from allocator.sim.sessions import sessions, shared_prefix
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp


def _step(b, k, ctx, prefill):
    return 1.0 + 0.01 * prefill + 0.1 * b


def test_sessions_are_closed_loop_and_hit_the_previous_turn():
    I, O, T, B, think = 100, 20, 4, 16, 0.5  # noqa: E741
    prompt, output, content, after, thinks = sessions(3 * T, T, I, O, think)
    t = np.arange(3 * T) % T
    np.testing.assert_array_equal(prompt, t * (I + O) + I)
    np.testing.assert_array_equal(after, np.where(t > 0, np.arange(3 * T) - 1, -1))
    arrival = np.repeat([0.0, 0.7, 1.4], T)
    reqs = Requests(arrival, prompt, output, content, after, thinks)
    sched = Scheduler(8, 4096, 100_000, B, enable_prefix_caching=True)
    r = simulate(reqs, SpecPolicy.off(), _step, sched)
    later = t > 0
    np.testing.assert_array_equal(r.sent_s[later], r.finish_s[after[later]] + think)
    np.testing.assert_array_equal(r.sent_s[~later], [0.0, 0.7, 1.4])
    hits = sum(B * ((u * (I + O) - 1) // B) for u in range(1, T)) * 3
    assert r.prefix_cache == (int(prompt.sum()), hits, 0, 0)


def test_sessions_through_bench_send_later_turns_after_the_answer():
    doc = api.bench(
        rp.problem(), input_len=64, output_len=8, num_prompts=12, turns=3, think_time=0.25,
        request_rate=2.0,
    )  # fmt: skip
    res = doc.result
    t = np.arange(12) % 3
    later = t > 0
    np.testing.assert_allclose(res.sent_s[later], res.finish_s[np.flatnonzero(later) - 1] + 0.25)
    assert doc.to_dict()["prefix_cache_hit_rate"] > 0
    off = api.bench(
        rp.problem(), input_len=64, output_len=8, num_prompts=12, turns=3, think_time=0.25,
        request_rate=2.0, prefix_caching=False,
    )  # fmt: skip
    assert off.to_dict()["prefix_cache_hit_rate"] == 0.0
    # later turns prefill only their new message and the answer's last block
    assert res.ttft_s[later].mean() < off.result.ttft_s[later].mean()


def test_shared_prefix_content():
    c = shared_prefix(np.array([5, 8]), np.array([2, 3]), 5)
    # request i: the prefix (id 0), then its own tokens (id 2 i + 1)
    assert c.ids.tolist() == [0, 1, 0, 3]
    assert c.lengths.tolist() == [5, 2, 5, 6]
    assert c.totals().tolist() == [7, 11]
    with pytest.raises(ParameterError) as err:
        shared_prefix(np.array([5, 4]), np.array([1, 1]), 5)
    assert err.value.field == "shared_prefix_len"


def test_the_file_turns_caching_on_by_default_and_off_when_it_says_so():
    prob = rp.problem()
    config, _ = configuration(prob, ["eagle"], 2)
    on = replica_scheduler(prob, config)
    assert on.enable_prefix_caching and on.hash_lookahead_tokens == 1  # EAGLE-3
    ngram, _ = configuration(prob, ["ngram"], 2)
    assert replica_scheduler(prob, ngram).hash_lookahead_tokens == 0
    sched = dict(rp.data()["serving"]["scheduler"], enable_prefix_caching=False)
    off = replica_scheduler(rp.problem(scheduler=sched), config)
    assert not off.enable_prefix_caching and off.hash_lookahead_tokens == 0


def test_bench_json_has_the_hit_rate_of_a_shared_prefix(tmp_path):
    """300 prompts of 200 tokens starting with the same 100, blocks of 16, sent one at a
    time: every one but the first finds 96 tokens."""
    out = tmp_path / "b.json"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(rp.data()))
    res = run(
        "bench", path, "--input-len", 200, "--output-len", 4, "--num-prompts", 30,
        "--request-rate", 0.5, "--burstiness", "inf", "--shared-prefix-len", 100,
        "--json", out,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["prefix_cache_hit_rate"] == pytest.approx(29 * 96 / (30 * 200))
    res = run(
        "bench", path, "--input-len", 200, "--output-len", 4, "--num-prompts", 30,
        "--request-rate", 0.5, "--shared-prefix-len", 100, "--no-prefix-caching", "--json", out,
    )  # fmt: skip
    assert json.loads(out.read_text())["prefix_cache_hit_rate"] == 0.0


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--shared-prefix-len", 300], "--shared-prefix-len"),
        (["--turns", 0], "--turns"),
        (["--turns", 2, "--think-time", -1], "--think-time"),
        (["--think-time", 1], "--think-time"),
    ],
)
def test_bad_workloads_are_refused_naming_the_flag(tmp_path, args, flag):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(rp.data()))
    out = tmp_path / "b.json"
    res = run("bench", path, "--input-len", 200, "--output-len", 4, *args, "--json", out)
    assert res.exit_code == 2
    assert flag in res.output and "Traceback" not in res.output
    assert not out.exists()


@pytest.mark.parametrize("size", [1, 8])
def test_capacity_bounds_hold_when_prompts_are_found_cached(size):
    """Capacity's screening bounds (rate_search.bounds) stay bounds when requests share a
    prefix: prompts of 400 tokens, 384 of them shared, are mostly found in the cache, so
    the floors and the throughput ceiling count only the prompt past the largest possible
    hit (counting whole prompts, the TTFT floor exceeds what the runs give)."""
    prob = rp.problem()
    cfg = R.Configuration.off(prob.names)
    slos = S.parse_slos(["p99_ttft_ms=1", "mean_ttft_ms=1", "p90_e2el_ms=1"])
    source = request_source(300, input_len=400, output_len=30, shared_prefix_len=384)
    bnd = RS.bounds(prob, RS.Candidate(cfg, size), source, slos)
    for rate in (0.5, 50.0, math.inf):
        r = api.bench(
            prob, max_num_seqs=size, request_rate=rate, input_len=400, output_len=30,
            num_prompts=300, shared_prefix_len=384,
        )  # fmt: skip
        for s in slos:
            assert bnd.floors[s.key] <= r.metrics[s.key] * (1 + 1e-9), (s.key, rate)
        if math.isinf(rate):
            assert r.metrics["request_throughput"] <= bnd.rate
