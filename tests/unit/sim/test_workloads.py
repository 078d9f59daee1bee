"""Workloads as benchmarks generate them (:mod:`allocator.sim.workloads`), each against a
reference that is not the code under test:

- vLLM's random dataset: the bounds and draws re-implemented here from vLLM 0.33.0's
  source (``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params``, lines 64-97:
  ``floor(real * (1 - r))``, ``ceil(real * (1 + r))``, output low and high at least 1,
  ``rng.integers(low, high + 1)`` inputs then outputs from ``default_rng(seed)``), and,
  where vLLM 0.33.0 is installed (in this interpreter or in ``/work/venv-vllm``), vLLM's
  own ``RandomDataset.sample`` with a one-token-per-word tokenizer;
- staged arrivals: counts per stage against the Poisson distribution (mean and variance
  ``rate * seconds``, within sampling error over seeded repetitions), a gamma renewal
  process against its asymptotic count variance ``rate * seconds / shape``, constant gaps
  counted by hand, times given their count uniform over the window (Kolmogorov-Smirnov);
- lengths from a trace: the draws' distribution against the trace's empirical one
  (Kolmogorov-Smirnov distance and quantiles), every drawn pair a row of the trace.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from allocator.analysis.request_source import lengths_seed, request_source, run_rate
from allocator.exceptions import ParameterError
from allocator.io.trace import read_trace
from allocator.sim import workloads
from allocator.sim.requests import MAX_TOKENS
from allocator.sim.workloads import (
    lengths_from,
    lengths_from_chunks,
    parse_stages,
    random_bounds,
    random_lengths,
    range_ratios,
    staged_arrivals,
)

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
VLLM_PYTHON = Path("/work/venv-vllm/bin/python")


# ------------------------------------------------------------------ vLLM's random dataset
def vllm_bounds(input_len, output_len, r_in, r_out, num_special=0):
    """get_sampling_params' intervals, written from vLLM 0.33.0's utils.py lines 69-77."""
    real = max(0, int(input_len) - num_special)
    in_lo = math.floor(real * (1 - r_in))
    in_hi = math.ceil(real * (1 + r_in))
    out_lo = max(math.floor(output_len * (1 - r_out)), 1)
    out_hi = max(math.ceil(output_len * (1 + r_out)), 1)
    return (in_lo, in_hi), (out_lo, out_hi)


CASES = [
    # input_len, output_len, (r_in, r_out), prefix_len, num_special
    (1024, 128, (0.0, 0.0), 0, 0),
    (1024, 128, (0.5, 0.5), 0, 0),
    (100, 20, (0.3, 0.9), 0, 1),
    (7, 3, (0.25, 0.5), 5, 0),
    (333, 0, (0.1, 0.1), 0, 0),  # output 0: vLLM clamps both ends to 1
    (1000, 1, (0.99, 0.999), 0, 2),
    (2, 2, (0.0, 0.0), 3, 2),  # input minus special tokens is 0: the prefix alone
]


@pytest.mark.parametrize(("n_in", "n_out", "ratios", "prefix", "special"), CASES)
def test_random_lengths_are_vllms_draws_from_the_cited_formula(
    n_in, n_out, ratios, prefix, special
):
    (lo_in, hi_in), (lo_out, hi_out) = vllm_bounds(n_in, n_out, *ratios, special)
    assert random_bounds(n_in, n_out, ratios, prefix_len=prefix, num_special=special) == (
        (lo_in, hi_in),
        (lo_out, hi_out),
    )
    for seed in (0, 1, 12345):
        prompts, outputs = random_lengths(
            500, n_in, n_out, ratios, prefix_len=prefix, num_special=special, seed=seed
        )
        rng = np.random.default_rng(seed)  # RandomDataset's own generator
        want_in = rng.integers(lo_in, hi_in + 1, size=500)
        want_out = rng.integers(lo_out, hi_out + 1, size=500)
        np.testing.assert_array_equal(prompts, want_in + prefix)
        np.testing.assert_array_equal(outputs, want_out)
        assert prompts.dtype == np.int64 and outputs.dtype == np.int64


def test_random_lengths_cover_their_range_uniformly():
    """Every integer of a short range is drawn, at the uniform frequency (chi-square)."""
    prompts, outputs = random_lengths(40_000, 10, 8, (0.5, 0.25), seed=4)
    assert prompts.min() == 5 and prompts.max() == 15  # floor(5), ceil(15)
    assert outputs.min() == 6 and outputs.max() == 10
    for values, lo, hi in ((prompts, 5, 15), (outputs, 6, 10)):
        counts = np.bincount(values - lo, minlength=hi - lo + 1)
        expected = values.size / (hi - lo + 1)
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        # 99.9% quantile of chi-square with 10 degrees of freedom is 29.6
        assert chi2 < 29.6, chi2


def test_range_ratio_of_zero_is_the_fixed_lengths():
    """The documented relation: fixed lengths are the random dataset at ratio 0."""
    fixed = request_source(50, input_len=300, output_len=40)
    drawn = request_source(50, random_input_len=300, random_output_len=40)
    np.testing.assert_array_equal(fixed.prompt_tokens, drawn.prompt_tokens)
    np.testing.assert_array_equal(fixed.output_tokens, drawn.output_tokens)
    assert fixed.fixed_lengths and not drawn.fixed_lengths


def test_random_dataset_defaults_are_vllms():
    """Any --random-* option alone takes vLLM's defaults for the others: 1024 and 128."""
    src = request_source(2000, random_range_ratio=0.5, seed=9)
    (lo_in, hi_in), (lo_out, hi_out) = vllm_bounds(1024, 128, 0.5, 0.5)
    assert src.prompt_tokens.min() >= lo_in and src.prompt_tokens.max() <= hi_in
    assert src.output_tokens.min() >= lo_out and src.output_tokens.max() <= hi_out
    assert abs(src.prompt_tokens.mean() - 1024) < 4 * 296 / math.sqrt(2000)
    rng = np.random.default_rng(9)
    np.testing.assert_array_equal(src.prompt_tokens, rng.integers(lo_in, hi_in + 1, 2000))


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (0.25, (0.25, 0.25)),
        ("0.25", (0.25, 0.25)),
        ('{"input": 0.3, "output": 0.5}', (0.3, 0.5)),
        ({"input": 0, "output": 0.9}, (0.0, 0.9)),
    ],
)
def test_range_ratios_are_read_as_vllm_reads_them(value, want):
    assert range_ratios(value) == want


@pytest.mark.parametrize(
    "value", [1.0, -0.1, "abc", '{"input": 0.3}', '{"input": 0.3, "output": 1}', float("nan")]
)
def test_bad_range_ratios_are_refused(value):
    with pytest.raises(ParameterError) as e:
        range_ratios(value)
    assert e.value.field == "random_range_ratio"


def test_too_short_and_too_long_random_prompts_are_refused():
    with pytest.raises(ParameterError, match="as short as 0") as e:
        random_bounds(1, 5, (0.5, 0.0))  # floor(0.5) = 0 tokens: vLLM refuses it too
    assert e.value.field == "random_input_len"
    assert random_bounds(1, 5, (0.5, 0.0), prefix_len=1)[0] == (0, 2)  # a prefix makes it 1
    with pytest.raises(ParameterError) as e:
        random_bounds(MAX_TOKENS, 5, (0.5, 0.0))
    assert e.value.field == "random_input_len"
    with pytest.raises(ParameterError) as e:
        random_bounds(5, MAX_TOKENS, (0.0, 0.5))
    assert e.value.field == "random_output_len"


VLLM_SCRIPT = """
import json, sys
from vllm.benchmarks.datasets.datasets import RandomDataset

class Tokenizer:  # one token per word, so prompts are never re-encoded off their length
    vocab_size = 5000
    all_special_ids = [0]
    def __init__(self, special):
        self.special = special
    def num_special_tokens_to_add(self):
        return self.special
    def decode(self, ids):
        return " ".join(map(str, ids))
    def encode(self, text, add_special_tokens=False):
        return [int(t) for t in text.split()]

out = []
for seed, n_in, n_out, r_in, r_out, prefix, special in json.loads(sys.argv[1]):
    reqs = RandomDataset(random_seed=seed).sample(
        tokenizer=Tokenizer(special), num_requests=300, input_len=n_in, output_len=n_out,
        range_ratio={"input": r_in, "output": r_out}, prefix_len=prefix,
    )
    out.append([[r.prompt_len for r in reqs], [r.expected_output_len for r in reqs]])
print(json.dumps(out))
"""


def _vllm_python() -> list[str] | None:
    """How to run vLLM 0.33.0: this interpreter if it imports vllm, else /work/venv-vllm's
    when its setup finished; ``None`` when neither has it."""
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable]
    log = Path("/work/venv-vllm-setup.log")
    if VLLM_PYTHON.exists() and log.exists() and "done" in log.read_text()[-2000:]:
        return [str(VLLM_PYTHON)]
    return None


@pytest.mark.slow
def test_random_lengths_are_vllms_own_random_dataset():
    """vLLM 0.33.0's RandomDataset.sample, seeded, draws the same prompt and output lengths
    (prompt = prefix + sampled input, after its decode/encode round trip)."""
    python = _vllm_python()
    if python is None:
        pytest.skip("vLLM 0.33.0 is not importable here nor in /work/venv-vllm")
    cases = [[seed, *c[:2], *c[2], *c[3:]] for seed in (0, 7) for c in CASES]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    done = subprocess.run(
        [*python, "-c", VLLM_SCRIPT, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 and "No module named 'vllm'" in done.stderr:
        pytest.skip("vLLM is not importable: " + done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for (seed, n_in, n_out, r_in, r_out, prefix, special), (prompts, outputs) in zip(
        cases, got, strict=True
    ):
        mine = random_lengths(
            300, n_in, n_out, (r_in, r_out), prefix_len=prefix, num_special=special, seed=seed
        )
        np.testing.assert_array_equal(mine[0], prompts)
        np.testing.assert_array_equal(mine[1], outputs)


# ------------------------------------------------------------------------- staged loads
STAGES = ((3.0, 20.0), (10.0, 5.0), (0.5, 40.0))


def stage_counts(stages, burstiness, reps):
    counts = np.empty((reps, len(stages)), dtype=np.int64)
    for seed in range(reps):
        _, stage = staged_arrivals(stages, burstiness, seed)
        counts[seed] = np.bincount(stage, minlength=len(stages))
    return counts


def test_stage_counts_are_poisson():
    """Per stage, the count's mean and variance are both rate * seconds (Poisson), within
    five standard errors over 2,000 seeded runs."""
    reps = 2000
    counts = stage_counts(STAGES, 1.0, reps)
    for j, (r, s) in enumerate(STAGES):
        lam = r * s
        mean, var = counts[:, j].mean(), counts[:, j].var(ddof=1)
        assert abs(mean - lam) < 5 * math.sqrt(lam / reps), (j, mean, lam)
        # variance of the sample variance of a Poisson: (lam + 2 lam^2) / reps
        assert abs(var - lam) < 5 * math.sqrt((lam + 2 * lam**2) / reps), (j, var, lam)


def test_gamma_stage_counts_have_the_renewal_variance():
    """Gamma gaps of shape b: a renewal process whose count over a long window has mean
    rate * seconds and variance rate * seconds / b (the gaps' squared coefficient of
    variation 1/b), here within 15% over 1,500 runs of 400 expected arrivals."""
    b, stages = 4.0, ((20.0, 20.0),)
    counts = stage_counts(stages, b, 1500)[:, 0]
    lam = 400.0
    assert abs(counts.mean() - lam) < 1.0
    assert abs(counts.var(ddof=1) / (lam / b) - 1) < 0.15, counts.var(ddof=1)


def test_constant_gaps_are_counted_by_hand():
    """A constant-rate stage sends inference-perf's int(rate x seconds) requests (its
    LoadGenerator.run_stage): 4/s for 2.5 s is 10, at 0.25, 0.5, ..., 2.5 s, the last at
    the stage's end; 2/s for 1 s is 2, at 0.5 and 1.0 s into the second stage."""
    times, stage = staged_arrivals(((4.0, 2.5), (2.0, 1.0)), math.inf)
    by_hand = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5]
    np.testing.assert_allclose(times, by_hand)
    np.testing.assert_array_equal(stage, [0] * 10 + [1] * 2)


@pytest.mark.parametrize(
    ("stages", "by_hand"),
    [
        ("2:5", [10]),  # a whole rate x seconds: all of them, the last at 5 s
        ("2.5:1", [2]),  # 2.5 truncated to 2, at 0.4 and 0.8 s
        ("3:2,0.5:4,10:0.3", [6, 2, 3]),
        ("1.5:3,1:1", [4, 1]),  # 4.5 truncated to 4
    ],
)
def test_constant_stage_counts_are_inference_perfs(stages, by_hand):
    _, stage = staged_arrivals(stages, math.inf)
    np.testing.assert_array_equal(np.bincount(stage, minlength=len(by_hand)), by_hand)


def test_stage_times_lie_in_their_windows_uniformly():
    """Times are sorted, inside each stage's window, and (Poisson) uniform over it given
    the count: Kolmogorov-Smirnov on the pooled positions within the window."""
    pos = []
    for seed in range(200):
        times, stage = staged_arrivals(STAGES, 1.0, seed)
        assert np.all(np.diff(times) >= 0)
        start = np.array([0.0, 20.0, 25.0])[stage]
        secs = np.array([s for _, s in STAGES])[stage]
        assert np.all(times >= start) and np.all(times < start + secs)
        pos.append((times - start) / secs)
    u = np.sort(np.concatenate(pos))
    n = u.size
    ks = max(np.max(np.arange(1, n + 1) / n - u), np.max(u - np.arange(n) / n))
    assert ks < 1.63 / math.sqrt(n), ks  # 1% critical value


def test_stages_are_seeded():
    a = staged_arrivals(STAGES, 1.0, 5)
    b = staged_arrivals(STAGES, 1.0, 5)
    c = staged_arrivals(STAGES, 1.0, 6)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[0].size != c[0].size or not np.array_equal(a[0], c[0])


@pytest.mark.parametrize(
    ("text", "contains"),
    [
        ("2:0", "stage 1 seconds"),
        ("2:10,3:-1", "stage 2 seconds"),
        ("0:5", "stage 1 rate"),
        ("-1:5", "stage 1 rate"),
        ("inf:5", "stage 1 rate"),
        ("nan:5", "stage 1 rate"),
        ("2:inf", "stage 1 seconds"),
        ("2", "RATE:SECONDS"),
        ("a:b", "RATE:SECONDS"),
        ("", "RATE:SECONDS"),
        ("2:10,", "stage 2"),
        ("1:1e8,1:1e8", "more than"),
    ],
)
def test_bad_stages_are_refused(text, contains):
    with pytest.raises(ParameterError) as e:
        parse_stages(text)
    assert e.value.field.startswith("stages") and contains in str(e.value), str(e.value)


def test_stage_limits():
    with pytest.raises(ParameterError, match="expect 1,000 requests"):
        staged_arrivals(((10.0, 100.0),), 1.0, 0, max_requests=999)
    # expected exactly the limit: about half the draws pass it, refused after the draw
    refused = 0
    for seed in range(20):
        try:
            staged_arrivals(((10.0, 100.0),), 1.0, seed, max_requests=1000)
        except ParameterError as e:
            assert "drew" in str(e) and e.field == "stages"
            refused += 1
    assert 0 < refused < 20
    with pytest.raises(ParameterError, match="no request arrived"):
        staged_arrivals(((1e-6, 1.0),), 1.0, 0)
    with pytest.raises(ParameterError, match="no request arrived"):
        staged_arrivals(((0.5, 1.0),), math.inf, 0)  # the first at 2 s, past the stage


def test_stages_set_the_count_and_the_rate():
    src = request_source(stages="2:30,4:30", input_len=10, output_len=5, seed=3)
    assert len(src) == src.stage_s.size == src.stage_of.size
    assert run_rate(src, None, None) == pytest.approx(len(src) / 60.0)
    reqs = src.at(run_rate(src, None, None))
    np.testing.assert_array_equal(reqs.arrival_s, src.stage_s)
    for kwargs, field in (
        ({"request_rate": 3.0, "trace_speedup": None}, "request_rate"),
        ({"request_rate": None, "trace_speedup": 2.0}, "trace_speedup"),
    ):
        with pytest.raises(ParameterError) as e:
            run_rate(src, **kwargs)
        assert e.value.field == field
    with pytest.raises(ParameterError) as e:
        src.at(1.0)
    assert e.value.field == "request_rate"
    with pytest.raises(ParameterError) as e:
        request_source(100, stages="2:30", input_len=10, output_len=5)
    assert e.value.field == "num_prompts"
    with pytest.raises(ParameterError) as e:
        request_source(stages="2:30", trace=TRACE)
    assert e.value.field == "stages"


# ---------------------------------------------------------------------- lengths from a trace
def test_lengths_from_follow_the_traces_distribution():
    rows = read_trace(TRACE)
    n = 20_000
    prompts, outputs = lengths_from(rows.prompt_tokens, rows.output_tokens, n, seed=11)
    pairs = set(zip(rows.prompt_tokens.tolist(), rows.output_tokens.tolist(), strict=True))
    assert all(p in pairs for p in zip(prompts.tolist(), outputs.tolist(), strict=True))
    for drawn, pop in ((prompts, rows.prompt_tokens), (outputs, rows.output_tokens)):
        grid = np.unique(pop)
        f_pop = np.searchsorted(np.sort(pop), grid, side="right") / pop.size
        f_draw = np.searchsorted(np.sort(drawn), grid, side="right") / n
        ks = float(np.max(np.abs(f_draw - f_pop)))
        assert ks < 1.63 / math.sqrt(n), ks  # 1% critical value against a known law
        for q in (0.1, 0.5, 0.9, 0.99):
            lo, hi = np.quantile(pop, [max(q - 0.01, 0), min(q + 0.01, 1)])
            assert lo <= np.quantile(drawn, q) <= hi, q


def test_lengths_from_through_the_request_source():
    a = request_source(300, lengths_from=TRACE, seed=2)
    b = request_source(300, lengths_from=TRACE, seed=2)
    c = request_source(300, lengths_from=TRACE, seed=3)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)
    assert a.trace is None and a.native_rate is None  # generated arrivals, not the trace's
    assert a.lengths == ("--lengths-from", str(TRACE))
    with pytest.raises(ParameterError) as e:
        lengths_from(np.array([]), np.array([]), 3)
    assert e.value.field == "lengths_from"


def test_lengths_from_a_bad_trace_names_the_option(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,5\n")
    with pytest.raises(ParameterError) as e:
        request_source(10, lengths_from=bad)
    assert e.value.field == "lengths_from"


def test_lengths_from_a_file_without_timestamps(tmp_path):
    """--lengths-from needs only the lengths: a CSV of ContextTokens and GeneratedTokens
    alone is taken, and every request is one of its rows."""
    f = tmp_path / "lengths.csv"
    f.write_text("GeneratedTokens,ContextTokens\n5,100\n\n7,300\n")
    src = request_source(50, lengths_from=f, seed=1)
    pairs = set(zip(src.prompt_tokens.tolist(), src.output_tokens.tolist(), strict=True))
    assert pairs == {(100, 5), (300, 7)}


@pytest.mark.parametrize("keep", [workloads.KEEP_ROWS, 100_000])
def test_lengths_from_draw_over_every_row_of_a_long_file(tmp_path, monkeypatch, keep):
    """Rows past the simulator's 200,000 requests are drawn too: a file of 250,000 rows
    whose last 50,000 differ gives the same requests as the in-memory draw over all its
    rows (lengths_from, built here from what the file holds), and about a fifth of them
    from its tail (binomial, within five standard deviations); kept whole or, past
    ``keep`` rows, read twice."""
    monkeypatch.setattr(workloads, "KEEP_ROWS", keep)
    head, tail, n = 200_000, 50_000, 3_000
    prompts = np.concatenate([np.arange(head) % 997 + 1, np.full(tail, 5_000)])
    outputs = np.concatenate([np.arange(head) % 89 + 1, np.full(tail, 77)])
    f = tmp_path / "long.csv"
    body = "\n".join(f"{p},{o}" for p, o in zip(prompts.tolist(), outputs.tolist(), strict=True))
    f.write_text("ContextTokens,GeneratedTokens\n" + body + "\n")
    src = request_source(n, lengths_from=f, seed=4)
    want = lengths_from(prompts, outputs, n, lengths_seed(4))
    np.testing.assert_array_equal(src.prompt_tokens, want[0])
    np.testing.assert_array_equal(src.output_tokens, want[1])
    from_tail = int(np.count_nonzero(src.prompt_tokens == 5_000))
    p = tail / (head + tail)
    assert abs(from_tail - n * p) < 5 * math.sqrt(n * p * (1 - p)), from_tail


@pytest.mark.parametrize("keep", [workloads.KEEP_ROWS, 4, 0])
@pytest.mark.parametrize("sizes", [[7], [1, 1, 1, 4], [3, 4], [2, 0, 5]])
def test_lengths_from_chunks_are_lengths_from(sizes, keep, monkeypatch):
    """Read in chunks of any sizes, the draws are the in-memory draws over all the rows,
    whether the rows are kept (up to ``keep``) or read again."""
    monkeypatch.setattr(workloads, "KEEP_ROWS", keep)
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(1, 1000, 7), rng.integers(1, 100, 7)
    cuts = np.cumsum([0, *sizes])

    def chunks():
        return [(prompts[a:b], outputs[a:b]) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    got = lengths_from_chunks(chunks, 500, seed=9)
    want = lengths_from(prompts, outputs, 500, seed=9)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_lengths_from_chunks_refuse_a_file_that_changed_or_is_empty(monkeypatch):
    monkeypatch.setattr(workloads, "KEEP_ROWS", 1)  # read again: the second read is shorter
    calls = iter([[(np.array([1, 2]), np.array([3, 4]))], [(np.array([1]), np.array([3]))]])
    with pytest.raises(ParameterError, match="changed while read") as e:
        lengths_from_chunks(lambda: next(calls), 5)
    assert e.value.field == "lengths_from"
    with pytest.raises(ParameterError) as e:
        lengths_from_chunks(lambda: [], 5)
    assert e.value.field == "lengths_from"


@pytest.mark.parametrize(
    ("text", "contains"),
    [
        ("ContextTokens\n5\n", "missing column GeneratedTokens"),
        ("ContextTokens,GeneratedTokens\n", "no data rows"),
        ("", "empty"),
        ("ContextTokens,GeneratedTokens\n5,6\n5\n", "row 2: 1 fields"),
        ("ContextTokens,GeneratedTokens\n5,6\n\n5,x\n", "row 2: GeneratedTokens"),
    ],
)
def test_a_bad_lengths_file_is_refused_naming_the_row(tmp_path, text, contains):
    f = tmp_path / "lengths.csv"
    f.write_text(text)
    with pytest.raises(ParameterError) as e:
        request_source(10, lengths_from=f)
    assert e.value.field == "lengths_from" and contains in str(e.value), str(e.value)


@pytest.mark.parametrize(
    ("kwargs", "field", "other"),
    [
        ({"input_len": 5, "output_len": 5, "random_input_len": 5}, "random_input_len", "input_len"),
        ({"output_len": 5, "random_range_ratio": 0.1}, "random_range_ratio", "output_len"),
        ({"random_output_len": 5, "lengths_from": TRACE}, "lengths_from", "random_output_len"),
        ({"lengths_from": TRACE, "trace": TRACE}, "trace", "lengths_from"),
        ({"input_len": 5, "trace": TRACE}, "trace", "input_len"),
    ],
)
def test_two_sources_of_lengths_are_refused_naming_both(kwargs, field, other):
    with pytest.raises(ParameterError) as e:
        request_source(10, **kwargs)
    assert e.value.field == field and f"({other})" in e.value.message
