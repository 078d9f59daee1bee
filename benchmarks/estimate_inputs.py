"""Time `allocator estimate` on each engine input: ``python benchmarks/estimate_inputs.py``.

For each input format it prints the median wall time of ``--repeats`` whole
``allocator estimate`` processes (start-up included) on the bundled sample in
``problems/measurements/`` and on a seeded large input written here (vLLM: 10,000 log
lines; SGLang: 100,000 responses and 10,000 decode lines), beside the start-up floor
(``allocator schema``, a whole process doing no estimation) timed in the same run,
and the ratio of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
from processes import timed_runs

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "problems" / "measurements"


def chain(rng: np.random.Generator, acc: list[float], rounds: int, k: int) -> np.ndarray:
    a = np.asarray(acc)[np.minimum(np.arange(k), len(acc) - 1)]
    return np.cumprod(rng.random((rounds, k)) < a, axis=1).sum(axis=1)


def large_inputs(folder: Path, seed: int = 0) -> dict[str, Path]:
    """Seeded large inputs in the engines' formats (as problems/measurements/generate.py)."""
    rng = np.random.default_rng(seed)
    log = []
    for _ in range(10_000):
        n = int(rng.integers(100, 400))
        acc = chain(rng, [0.7, 0.6, 0.5], n, 3)
        pos = [int((acc > i).sum()) for i in range(3)]
        a = int(acc.sum())
        log.append(
            "INFO 12-01 05:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: "
            f"{1 + a / n:.2f}, Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 "
            f"tokens/s, Accepted: {a} tokens, Drafted: {3 * n} tokens, Per-position "
            f"acceptance rate: {', '.join(f'{c / n:.3f}' for c in pos)}, Avg Draft acceptance "
            f"rate: {100 * a / (3 * n):.1f}%"
        )
    paths = {"vllm-log": folder / "large.log"}
    paths["vllm-log"].write_text("\n".join(log) + "\n")
    lines = []
    for i in range(100_000):
        acc = chain(rng, [0.8, 0.7, 0.6], int(rng.integers(10, 80)), 3)
        hist = np.bincount(acc).tolist()
        meta = {
            "spec_verify_ct": int(acc.size),
            "spec_num_correct_drafts": int(acc.sum()),
            "spec_num_proposed_drafts": int(acc.size) * 3,
            "spec_correct_drafts_histogram": hist,
            "spec_accept_histogram": hist,
        }
        lines.append(json.dumps({"text": "", "meta_info": meta, "workload": f"w{i % 3}"}))
    paths["sglang-requests"] = folder / "large.jsonl"
    paths["sglang-requests"].write_text("\n".join(lines) + "\n")
    decode = []
    for i in range(10_000):
        acc = chain(rng, [0.8], 400, 3)
        decode.append(
            f"[2026-12-01 05:00:00] Decode batch [{40 * (i + 1)}], #running-req: 10, "
            f"#token: 5000, token usage: 0.03, accept len: {1 + acc.mean():.2f}, "
            "accept rate: 0.60, cuda graph: True, gen throughput (token/s): 900.00, "
            "#queue-req: 0, "
        )
    paths["sglang-log"] = folder / "large-decode.log"
    paths["sglang-log"].write_text("\n".join(decode) + "\n")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="whole runs per row (median)")
    args = ap.parse_args()
    py = [sys.executable, "-m", "allocator"]
    floor = timed_runs([*py, "schema"], args.repeats, ROOT).median
    samples = {
        "vllm-metrics": (SAMPLES / "vllm-metrics.prom", []),
        "vllm-log": (SAMPLES / "vllm-ngram.log", []),
        "sglang-requests": (SAMPLES / "sglang-requests.jsonl", []),
        "sglang-log": (SAMPLES / "sglang-decode.log", ["--k", "3"]),
        "outcomes": (SAMPLES / "outcomes.csv", []),
    }
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, repeats {args.repeats}; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print("| input | format | median s, whole process | start-up floor s | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = [(f"sample {p.name}", fmt, p, extra) for fmt, (p, extra) in samples.items()]
        large = large_inputs(folder)
        for fmt, p in large.items():
            extra = ["--k", "3"] if fmt == "sglang-log" else []
            rows.append((f"large {p.name}", fmt, p, extra))
        for label, fmt, path, extra in rows:
            out = folder / "out.yaml"
            cmd = [*py, "estimate", str(path), "--format", fmt, "--out", str(out), *extra]
            t = timed_runs(cmd, args.repeats, ROOT).median
            print(f"| {label} | {fmt} | {t:.2f} | {floor:.2f} | {t / floor:.2f} |")


if __name__ == "__main__":
    main()
