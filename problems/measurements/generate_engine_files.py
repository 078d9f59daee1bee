"""Write the sample engine outputs of the newer readers, from stated truths, seeded.

Every number in these files is drawn from the truths below (also written to
``truth-engine-files.json``) with one seeded generator; none is a measurement. The
formats are those the readers in ``allocator/estimate/`` read, as the engines write them
(vLLM 0.33.0, SGLang 0.5.23; the source files are named in each reader's docstring):

- ``vllm-requests.jsonl``: vLLM chat completions with ``metrics.speculative_decoding``
  (server option ``--per-request-spec-decode-metrics detailed``), an EAGLE-3 head with
  ``num_speculative_tokens = 4`` under a per-batch-size schedule that drafts 2 tokens in
  some steps, and a ``json`` workload with structured output under asynchronous
  scheduling, whose drafts the grammar sometimes cuts short or rejects whole (recorded
  with 0 drafted tokens). A top-level ``workload`` (chat or json) on each line.
- ``sglang-tree-requests.jsonl``: SGLang ``/generate`` responses of an EAGLE-3 token tree
  ``(steps, topk, num_draft_tokens) = (3, 4, 8)``: 7 proposed nodes per round, the
  histogram counting the accepted path's depth.
- ``sglang-adaptive-requests.jsonl``: an ``--speculative-adaptive`` EAGLE-3 chain
  starting at 3 steps, each round drafting one of SGLang's default candidate steps (0,
  1, 3, 5, 7) as its batch size allows.
- ``sglang-openai.jsonl``: SGLang ``/v1/chat/completions`` responses with
  ``"return_spec_tokens_details": true`` (``sglext.spec_tokens_details``), an EAGLE-3
  chain of 3.
- ``vllm-bench-c{C}-k{K}.json`` and ``sglang-bench.jsonl``: ``vllm bench serve
  --save-result`` files and SGLang ``bench_serving --output-file`` lines of closed-loop
  runs (concurrency 1, 4 and 16; speculation off and k = 3), from a simulated engine of
  known step time (``Roofline`` of ``tests/support/synthetic_bench.py``, with the
  parameters below). A top-level ``note`` (vLLM's ``--metadata``) and SGLang's ``tag``
  say the files are synthetic.

Truth: every draft token is accepted independently with the probability of its position
(a chain's conditional acceptance; a tree's acceptance by depth), so every estimate can
be checked against it. Run from anywhere: ``python
problems/measurements/generate_engine_files.py [OUT_DIR]`` (default: beside this file).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

SEED = 20261215
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVED = "meta-llama/Llama-3.1-8B-Instruct"
NOTE = "synthetic: problems/measurements/generate_engine_files.py, truth-engine-files.json"

VLLM_EAGLE3 = {"chat": [0.82, 0.74, 0.66, 0.6], "json": [0.9, 0.85, 0.8, 0.75]}  # K = 4
VLLM_REQUESTS = {"chat": 300, "json": 100}
VLLM_SHORT_STEP = 0.2  # share of steps the per-batch-size schedule drafts 2 tokens
GRAMMAR_REJECTS = 0.15  # share of json steps whose draft the grammar rejects whole
GRAMMAR_CUTS = 0.25  # share of json steps the grammar cuts to 1 … 3 tokens
TREE_DEPTH = [0.86, 0.73, 0.61]  # (3, 4, 8): acceptance by depth
TREE_NODES = 7
TREE_REQUESTS = 400
ADAPTIVE = [0.8, 0.74, 0.68, 0.62, 0.56, 0.5, 0.45]  # positions 1 … 7
ADAPTIVE_STEPS = {"small batch": [1, 3, 5, 7], "batch 8-31": [0, 1, 3]}
ADAPTIVE_SMALL_SHARE = 0.7
ADAPTIVE_START = 3
ADAPTIVE_REQUESTS = 400
OPENAI_CHAIN = [0.78, 0.7, 0.62]  # k = 3
OPENAI_REQUESTS = 200
BENCH = {
    "concurrency": [1, 4, 16],
    "k": [0, 3],
    "input_len": 512,
    "output_len": 128,
    "prompts_per_slot": 16,
    "acceptance": [0.8, 0.7, 0.6],
    "step_ms": {
        "weights": 6.0,
        "kv": 2e-6,
        "flop": 2e-3,
        "draft0": 0.35,
        "draft1": 0.01,
        "overhead": 0.4,
    },
}


def accepted_chain(rng: np.random.Generator, acc: list[float], n: int, k: int) -> np.ndarray:
    """Accepted drafts of ``n`` rounds of a chain of ``k``: the first rejection."""
    a = np.asarray(acc)[np.minimum(np.arange(k), len(acc) - 1)]
    ok = rng.random((n, k)) < a
    return np.cumprod(ok, axis=1).sum(axis=1)


def vllm_requests(rng: np.random.Generator) -> list[str]:
    k = 4
    out = []
    for workload, count in VLLM_REQUESTS.items():
        for i in range(count):
            steps = int(rng.integers(20, 90))
            drafted = np.where(rng.random(steps) < VLLM_SHORT_STEP, 2, k)
            if workload == "json":
                cut = rng.random(steps) < GRAMMAR_CUTS
                drafted = np.where(cut, np.minimum(drafted, rng.integers(1, k, steps)), drafted)
                drafted = np.where(rng.random(steps) < GRAMMAR_REJECTS, 0, drafted)
            accepted = np.minimum(accepted_chain(rng, VLLM_EAGLE3[workload], steps, k), drafted)
            acc, tokens = int(accepted.sum()), int(drafted.sum())
            completion = 1 + acc + steps
            spec = {
                "mean_acceptance_length": 1.0 + acc / steps,
                "draft_acceptance_rate": acc / tokens if tokens else 0.0,
                "acceptance_histogram": np.bincount(accepted, minlength=k + 1).tolist(),
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": acc,
                "num_draft_tokens": tokens,
                "num_spec_tokens": k,
                "per_step_accepted": accepted.tolist(),
                "per_step_drafted": drafted.tolist(),
            }
            prompt = int(rng.integers(40, 900))
            response = {
                "id": f"chatcmpl-{rng.integers(16**15):015x}",
                "object": "chat.completion",
                "created": 1796083200 + i,
                "model": SERVED,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "…"},
                        "logprobs": None,
                        "finish_reason": "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "total_tokens": prompt + completion,
                    "completion_tokens": completion,
                },
                "metrics": {
                    "time_to_first_token_ms": None,
                    "generation_time_ms": None,
                    "queue_time_ms": None,
                    "mean_itl_ms": None,
                    "tokens_per_second": None,
                    "speculative_decoding": spec,
                },
                "workload": workload,
            }
            out.append(json.dumps(response))
    return [out[i] for i in rng.permutation(len(out))]


def sglang_meta(rng: np.random.Generator, accepted: np.ndarray, per_round: int) -> dict:
    rounds = accepted.size
    correct = int(accepted.sum())
    completion = 1 + correct + rounds
    hist = np.bincount(accepted).tolist()
    return {
        "id": f"{rng.integers(16**12):012x}",
        "finish_reason": {"type": "length", "length": completion},
        "prompt_tokens": int(rng.integers(40, 900)),
        "weight_version": "default",
        "completion_tokens": completion,
        "cached_tokens": 0,
        "spec_accept_rate": correct / (rounds * per_round),
        "spec_accept_length": completion / rounds,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": rounds * per_round,
        "spec_verify_ct": rounds,
        "spec_correct_drafts_histogram": hist,
        "e2e_latency": round(float(rng.uniform(0.4, 4.0)), 4),
    }


def sglang_tree(rng: np.random.Generator) -> list[str]:
    out = []
    for _ in range(TREE_REQUESTS):
        rounds = int(rng.integers(20, 160))
        depth = accepted_chain(rng, TREE_DEPTH, rounds, len(TREE_DEPTH))
        out.append(json.dumps({"text": "…", "meta_info": sglang_meta(rng, depth, TREE_NODES)}))
    return out


def sglang_adaptive(rng: np.random.Generator) -> list[str]:
    out = []
    top = max(max(s) for s in ADAPTIVE_STEPS.values())
    for _ in range(ADAPTIVE_REQUESTS):
        rounds = int(rng.integers(20, 160))
        small = rng.random(rounds) < ADAPTIVE_SMALL_SHARE
        steps = np.where(
            small,
            rng.choice(ADAPTIVE_STEPS["small batch"], rounds),
            rng.choice(ADAPTIVE_STEPS["batch 8-31"], rounds),
        )
        accepted = np.minimum(accepted_chain(rng, ADAPTIVE, rounds, top), steps)
        meta = sglang_meta(rng, accepted, ADAPTIVE_START)
        out.append(json.dumps({"text": "…", "meta_info": meta}))
    return out


def sglang_openai(rng: np.random.Generator) -> list[str]:
    k = len(OPENAI_CHAIN)
    out = []
    for i in range(OPENAI_REQUESTS):
        rounds = int(rng.integers(20, 160))
        m = sglang_meta(rng, accepted_chain(rng, OPENAI_CHAIN, rounds, k), k)
        details = {
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
        completion = m["completion_tokens"]
        response = {
            "id": f"{rng.integers(16**15):015x}{rng.integers(16**15):015x}",
            "object": "chat.completion",
            "created": 1796083200 + i,
            "model": SERVED,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "…"},
                    "logprobs": None,
                    "finish_reason": "length",
                    "matched_stop": None,
                }
            ],
            "usage": {
                "prompt_tokens": m["prompt_tokens"],
                "total_tokens": m["prompt_tokens"] + completion,
                "completion_tokens": completion,
            },
            "metadata": {"weight_version": "default"},
            "sglext": {"spec_tokens_details": details},
        }
        out.append(json.dumps(response))
    return out


def _synthetic_bench():
    path = ROOT / "tests" / "support" / "synthetic_bench.py"
    spec = importlib.util.spec_from_file_location("synthetic_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["synthetic_bench"] = module
    spec.loader.exec_module(module)
    return module


def bench_files(seed: int) -> dict[str, str]:
    sb = _synthetic_bench()
    step = sb.Roofline(**BENCH["step_ms"])
    files: dict[str, str] = {}
    sglang_lines = []
    for k in BENCH["k"]:
        for c in BENCH["concurrency"]:
            n = BENCH["prompts_per_slot"] * c
            sim = sb.simulate(
                step,
                concurrency=c,
                num_prompts=n,
                input_len=BENCH["input_len"],
                output_len=BENCH["output_len"],
                k=k,
                acceptance=BENCH["acceptance"],
                seed=seed + 10 * k + c,
            )
            kw = {
                "model": SERVED,
                "concurrency": c,
                "input_len": BENCH["input_len"],
                "output_len": BENCH["output_len"],
                "k": k,
            }
            res = sb.vllm_result(sim, num_prompts=n, metadata={"note": NOTE}, **kw)
            files[f"vllm-bench-c{c}-k{k}.json"] = json.dumps(res)
            draft = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
            sglang_lines.append(
                json.dumps(sb.sglang_result(sim, draft_model=draft, tag=NOTE, **kw))
            )
    files["sglang-bench.jsonl"] = "".join(line + "\n" for line in sglang_lines)
    return files


def truth() -> dict:
    return {
        "vllm-requests.jsonl": {
            "num_speculative_tokens": 4,
            **VLLM_EAGLE3,
            "short_step_share": VLLM_SHORT_STEP,
            "json_grammar_rejects": GRAMMAR_REJECTS,
            "json_grammar_cuts": GRAMMAR_CUTS,
        },
        "sglang-tree-requests.jsonl": {"tree": [3, 4, 8], "by_depth": TREE_DEPTH},
        "sglang-adaptive-requests.jsonl": {
            "start_steps": ADAPTIVE_START,
            "candidate_steps": ADAPTIVE_STEPS,
            "small_batch_share": ADAPTIVE_SMALL_SHARE,
            "acceptance": ADAPTIVE,
        },
        "sglang-openai.jsonl": {"k": len(OPENAI_CHAIN), "acceptance": OPENAI_CHAIN},
        "bench": {**BENCH, "model": SERVED},
    }


def write_all(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    texts = {
        "vllm-requests.jsonl": vllm_requests(rng),
        "sglang-tree-requests.jsonl": sglang_tree(rng),
        "sglang-adaptive-requests.jsonl": sglang_adaptive(rng),
        "sglang-openai.jsonl": sglang_openai(rng),
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in texts.items():
        (out / name).write_text("\n".join(lines) + "\n")
    for name, text in bench_files(SEED).items():
        (out / name).write_text(text)
    (out / "truth-engine-files.json").write_text(json.dumps(truth(), indent=1) + "\n")


if __name__ == "__main__":
    write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
