"""What the answers of bench and capacity say and write: bench's JSON as vLLM writes it,
read back by calibrate; the files each command wrote, named."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[2]
REQUESTS_70B = ROOT / "problems" / "requests-70b.yaml"
CLOSED = ["--max-num-seqs", 10, "--max-concurrency", 4, "--input-len", 1000, "--output-len",
          200, "--num-prompts", 40]  # fmt: skip

#: Every key ``vllm bench serve --save-result`` writes without ``--save-detailed`` for a
#: text-generation run (vLLM 0.33.0, vllm/benchmarks/serve.py): the header of
#: ``main_async`` (lines 2306-2330), ``benchmark()``'s result (lines 1318-1341, with the
#: per-request lists ``--save-detailed`` keeps removed at lines 2428-2443), the
#: speculative-decoding keys when the server drafted (lines 1376-1387), and the statistics
#: ``process_one_metric`` writes (lines 1426-1432; here for ttft, tpot, itl, e2el at 99).
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p99")
      for m in ("ttft", "tpot", "itl", "e2el")),
}  # fmt: skip
SPEC_KEYS = {
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
}  # fmt: skip


def test_bench_json_has_every_vllm_key_and_calibrate_reads_it(tmp_path):
    off, spec = tmp_path / "off.json", tmp_path / "spec.json"
    r = run("bench", REQUESTS_70B, *CLOSED, "--json", off)
    assert r.exit_code == 0, r.output
    assert f"wrote {off}" in r.stdout
    r = run("bench", REQUESTS_70B, "--drafters", "eagle3", "--k", 2, *CLOSED, "--json", spec,
            "--slo", "p99_ttft_ms=2000")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc_off, doc_spec = json.loads(off.read_text()), json.loads(spec.read_text())
    assert VLLM_KEYS <= set(doc_off) and not SPEC_KEYS & set(doc_off)
    assert VLLM_KEYS | SPEC_KEYS <= set(doc_spec)
    assert doc_off["request_goodput"] is None and doc_spec["request_goodput"] > 0
    assert len(doc_spec["spec_decode_per_position_acceptance_rates"]) == 2
    cal = tmp_path / "cal.yaml"
    r = run("calibrate", off, spec, "--problem", REQUESTS_70B, "--out", cal)
    assert r.exit_code == 0, r.output
    assert cal.exists()
