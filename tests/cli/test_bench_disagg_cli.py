"""``allocator bench --prefill-replicas P --decode-replicas D [--kv-link NAME]``: the
document's parts of TTFT, pools and transfer against hand-computed values; bad input is
one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

#: Llama 3.1 8B's attention (config.json: 32 layers, 8 KV heads of 128, bf16): a token's KV
#: is 2 · 32 · 8 · 128 · 2 = 131,072 bytes.
MODEL = {
    "params_b": 8.030261248,
    "embedding_params_b": 0.525336576,
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype": "bf16",
    "kv_dtype": "bf16",
}
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2
FIXED = ["--input-len", "500", "--output-len", "30", "--num-prompts", "80"]


def problem_file(tmp_path: Path, with_model: bool = True) -> Path:
    p = tmp_path / "p.yaml"
    extra = {"model": MODEL, "hardware": {"gpu": "h100-sxm", "count": 2}} if with_model else {}
    p.write_text(yaml.safe_dump(rp.data(**extra)))
    return p


def bench_doc(*args: object) -> dict:
    r = run("bench", *args, "--json", "-")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_document(tmp_path):
    p = problem_file(tmp_path)
    doc = bench_doc(
        p, "-d", "eagle", "-k", "2", "--request-rate", "20", *FIXED,
        "--prefill-replicas", "2", "--decode-replicas", "3", "--kv-link", "ib-hdr",
        "--prefill-max-num-seqs", "4", "--decode-max-num-seqs", "12",
    )  # fmt: skip
    d = doc["disaggregated"]
    assert (d["prefill_replicas"], d["decode_replicas"]) == (2, 3)
    assert d["kv_link"] == {"name": "ib-hdr", "bandwidth_gb_s": 25.0, "latency_us": 0.6}
    # ConnectX-6: 200 Gb/s = 25e9 bytes/s, sub-600 ns: every prompt of 500 tokens
    hand_ms = (0.6e-6 + 500 * KV_PER_TOKEN / 25e9) * 1e3
    for stat in ("mean", "median", "p99"):
        assert d["ttft_parts_ms"]["transfer"][stat] == pytest.approx(hand_ms, rel=1e-12)
    assert d["kv_transfer_bytes"]["max"] == 500 * KV_PER_TOKEN
    # the parts' means add up to the mean TTFT (means are linear)
    parts = sum(v["mean"] for v in d["ttft_parts_ms"].values())
    assert parts == pytest.approx(doc["mean_ttft_ms"], rel=1e-9)
    pools = d["pools"]
    assert pools["prefill"]["max_num_seqs"] == 4 and pools["decode"]["max_num_seqs"] == 12
    assert pools["prefill"]["max_running_seqs"] <= 4
    assert pools["decode"]["max_running_seqs"] <= 12
    for name, count in (("prefill", 2), ("decode", 3)):
        pool = pools[name]
        assert len(pool["replicas"]) == count
        assert sum(e["num_prompts"] for e in pool["replicas"]) == 80 == pool["completed"]
    # prefill emits one token per request; the decode pool every output token
    assert pools["prefill"]["total_output_tokens"] == 80
    assert pools["decode"]["total_output_tokens"] == doc["total_output_tokens"] == 80 * 30
    # speculation runs in the decode pool only
    assert "spec_decode_num_drafts" not in pools["prefill"]
    assert pools["decode"]["spec_decode_num_drafts"] == doc["spec_decode_num_drafts"] > 0
    assert doc["async_scheduling"] is True  # vLLM's default, in both pools
    assert "2 prefill (max_num_seqs 4) + 3 decode replicas" in doc["label"]


def test_the_default_link_is_infiniband_ndr(tmp_path):
    p = problem_file(tmp_path)
    doc = bench_doc(p, *FIXED, "--request-rate", "10", "--prefill-replicas", "1",
                    "--decode-replicas", "1")  # fmt: skip
    link = doc["disaggregated"]["kv_link"]
    assert link["name"] == "ib-ndr" and link["latency_us"] is None
    hand_ms = 500 * KV_PER_TOKEN / 50e9 * 1e3
    assert doc["disaggregated"]["ttft_parts_ms"]["transfer"]["mean"] == pytest.approx(hand_ms)


def test_both_pools_play_the_files_scheduling(tmp_path):
    """Without a flag both pools play vLLM's default, asynchronous scheduling (its runs
    differ from synchronous ones: an arrival at a busy replica is scheduled a step later);
    ``--no-async-scheduling`` plays the synchronous scheduler. The note says which."""
    p = problem_file(tmp_path)
    args = [*FIXED, "--request-rate", "20", "--prefill-replicas", "1", "--decode-replicas", "2"]
    on = bench_doc(p, *args)
    off = bench_doc(p, *args, "--no-async-scheduling")
    assert on["async_scheduling"] is True and off["async_scheduling"] is False
    for doc, word in ((on, "asynchronous"), (off, "synchronous")):
        said = [n for n in doc["notes"] if n.startswith("prefill/decode disaggregation")]
        assert len(said) == 1 and f"Both pools play {word} scheduling" in said[0], said
        assert doc["completed"] == 80
        assert len(doc["disaggregated"]["pools"]["decode"]["replicas"]) == 2
    assert on["mean_e2el_ms"] != off["mean_e2el_ms"]


def test_a_shared_prefix_is_computed_once_in_the_prefill_pool(tmp_path):
    """80 prompts of 500 tokens share their first 256 (16 blocks) on one prefill replica:
    the first computes them, each of the 79 others hits them (vLLM caches a prompt's full
    blocks when it is scheduled), so the hit rate is 79 · 256 / (80 · 500); the decode pool
    runs without prefix caching (0)."""
    p = problem_file(tmp_path)
    doc = bench_doc(p, *FIXED, "--shared-prefix-len", "256", "--request-rate", "20",
                    "--prefill-replicas", "1", "--decode-replicas", "2")  # fmt: skip
    pools = doc["disaggregated"]["pools"]
    assert pools["prefill"]["prefix_cache_hit_rate"] == pytest.approx(79 * 256 / (80 * 500))
    assert pools["decode"]["prefix_cache_hit_rate"] == 0.0


KNOWN = "known inter-node links: ib-hdr, ib-ndr, roce-200g, roce-400g"


@pytest.mark.parametrize(
    "args, says",
    [
        (["--prefill-replicas", "0", "--decode-replicas", "1"], "--prefill-replicas: must be"),
        (["--prefill-replicas", "1", "--decode-replicas", "0"], "--decode-replicas: must be"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link", "ethernet"],
         f"--kv-link: unknown link 'ethernet' ({KNOWN})"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link", "nvlink4"],
         f"--kv-link: not an inter-node link 'nvlink4' ({KNOWN})"),
        (["--prefill-replicas", "1"], "--decode-replicas: missing"),
        (["--decode-replicas", "2"], "--prefill-replicas: missing"),
        (["--kv-link", "ib-ndr"], "--kv-link: only with disaggregation"),
        (["--decode-max-num-seqs", "4"], "--decode-max-num-seqs: only with disaggregation"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--replicas", "2"],
         "--replicas: one replica pool or disaggregation (--prefill-replicas), not both"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--max-concurrency", "4"],
         "--max-concurrency: is not modelled with disaggregation"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--turns", "2"],
         "--turns: sessions are not modelled"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--router", "session-affinity"],
         "--router: session-affinity routes on a per-request key"),
    ],
)  # fmt: skip
def test_bad_input(tmp_path, args, says):
    p = problem_file(tmp_path)
    out = tmp_path / "b.json"
    r = run("bench", p, *FIXED, *args, "--json", out)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.output
    assert not out.exists()


def test_a_file_without_the_model_is_refused(tmp_path):
    p = problem_file(tmp_path, with_model=False)
    out = tmp_path / "b.json"
    r = run("bench", p, *FIXED, "--prefill-replicas", "1", "--decode-replicas", "1", "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: serving.model: missing"), r.output
    assert not out.exists()


def test_an_overloaded_pool_is_named(tmp_path):
    """Prompts of 1,500 tokens take 4 + 56 · 1,484 / 2,032 ≈ 44.9 ms each alone on a prefill
    replica (one a step: the budget is 2,048 tokens), about 22 a second: at 60 a second its
    queue grows, the decode pool's does not."""
    p = problem_file(tmp_path)
    args = ["--input-len", "1500", "--output-len", "30", "--num-prompts", "200"]
    doc = bench_doc(p, *args, "--request-rate", "60", "--prefill-replicas", "1",
                    "--decode-replicas", "2")  # fmt: skip
    said = [n for n in doc["notes"] if "the queue grew" in n]
    assert len(said) == 1 and said[0].startswith("prefill pool: "), said
