"""Write ``vllm-structured-output.prom`` beside this file: a vLLM 0.33.0 ``/metrics`` scrape
of a server whose requests use structured output (a JSON grammar), from a stated truth,
seeded. Not a measurement.

What vLLM 0.33.0 counts (``vllm/v1/core/sched/scheduler.py``: ``update_draft_token_ids_in_output``
lines 2883-2918 and ``make_spec_decoding_stats`` lines 3305-3322; ``vllm/v1/spec_decode/
metrics.py`` ``observe_draft``): under asynchronous scheduling, the default, a draft is
checked against the grammar after it was scheduled; the tokens the grammar rejects are
taken off ``num_draft_tokens`` but the step still counts as a draft. So a draft the
grammar rejects whole is a draft of 0 tokens that accepted nothing, and
``per_pos[0] / num_drafts`` reads below the truth at position 1 (here about 0.8 × 0.7 =
0.56 for a true 0.8).

Truth (``truth-structured-output.json``): an EAGLE-3 head, ``num_speculative_tokens = 4``,
every draft token accepted with the probability of its position (``ACCEPTANCE``); the
grammar rejects a draft whole with probability ``REJECT_WHOLE`` and otherwise keeps its
first ``1..4`` tokens (uniformly) with probability ``CUT``. Run from anywhere:
``python problems/measurements/generate_structured_output.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, generate_latest

SEED = 20261202
HERE = Path(__file__).resolve().parent
SERVED = "meta-llama/Llama-3.1-8B-Instruct"
ACCEPTANCE = [0.80, 0.72, 0.65, 0.58]
DRAFTS = 40000
REJECT_WHOLE = 0.30
CUT = 0.10


def write(out: Path = HERE) -> None:
    rng = np.random.default_rng(SEED)
    k = len(ACCEPTANCE)
    ok = rng.random((DRAFTS, k)) < np.asarray(ACCEPTANCE)
    accepted = np.cumprod(ok, axis=1).sum(axis=1)
    valid = np.full(DRAFTS, k)
    whole = rng.random(DRAFTS) < REJECT_WHOLE
    cut = ~whole & (rng.random(DRAFTS) < CUT)
    valid[whole] = 0
    valid[cut] = rng.integers(1, k, size=int(cut.sum()))
    accepted = np.minimum(accepted, valid)  # a grammar-invalid token is always rejected
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels,
                     registry=reg)  # fmt: skip
    tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels,
                     registry=reg)  # fmt: skip
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels,
                  registry=reg)  # fmt: skip
    per_pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        [*labels, "position"],
        registry=reg,
    )
    drafts.labels(SERVED, "0").inc(DRAFTS)
    tokens.labels(SERVED, "0").inc(int(valid.sum()))
    acc.labels(SERVED, "0").inc(int(accepted.sum()))
    for i in range(k):
        per_pos.labels(SERVED, "0", str(i)).inc(int((accepted > i).sum()))
    (out / "vllm-structured-output.prom").write_bytes(generate_latest(reg))
    truth = {
        "vllm-structured-output.prom": {
            "model_name": SERVED,
            "num_speculative_tokens": k,
            "acceptance": ACCEPTANCE,
            "reject_whole": REJECT_WHOLE,
            "cut": CUT,
            "seed": SEED,
        }
    }
    (out / "truth-structured-output.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    import sys

    write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
