"""Accuracy of the request-level simulator against public measured serving runs:
``python benchmarks/accuracy.py [--quick] [--families a,b] [--json PATH] [--seed S]
[--grid-cache PATH]``.

**The runs.** ``problems/measured/serving-runs/runs.yaml`` (145 runs in 29 families; every
run's source, licence, hardware and conversions there). A family is replayed when its model,
GPU, tensor-parallel size and workload can be stated from the file and the bundled sources;
otherwise it is skipped and the reason printed (:func:`setup`): a ShareGPT workload (its
length distribution is not bundled, and a run at a request rate whose lengths vary cannot be
replayed at their means), no dataset or prompt count, a tensor-parallel size not stated, a
speculative configuration, or no metric of the targets measured.

**The problem of a family** (:func:`problem`): ``serving.hardware`` from the run's GPU
(:data:`GPU_KEYS`, keys of ``allocator/core/hardware.py``) and TP; ``serving.model`` the
bundled ``config.json`` of its Hugging Face model (``problems/measured/serving-runs/configs/``,
sources in the README there); ``serving.scheduler`` (:func:`scheduler`):

* vLLM 0.10.1.1 on an A100 80GB (the ``dl-*`` families): ``max_num_seqs`` 256 and
  ``max_num_batched_tokens`` 2048, the defaults of ``vllm serve`` on an A100 in that release
  (``vllm/engine/arg_utils.py`` lines 1634-1657, ``EngineArgs._set_default_args_v1``: GPUs
  of 70 GiB or more take 8192 / 1024 *except* the A100, "Setting large
  `max_num_batched_tokens` for A100 reduces throughput, see PR #17885"); the family notes
  quote the server log's ``max_num_batched_tokens=2048``, which agrees; ``kv_cache_tokens``
  the server log's ``GPU KV cache size`` quoted in the family notes (or, where only the KV
  memory is quoted, that memory over the model's KV bytes per token); ``block_size`` 16
  (``vllm/platforms/cuda.py`` line 138); ``async_scheduling`` false, that release's default
  (``vllm/config/scheduler.py`` line 155);
* SGLang 0.4.1 (its ``server_args.py`` and ``tp_worker.py``, the release the ``sglang041-*``
  titles name and the ``dc-*`` Docker images of December 2024 carried): the simulator plays
  vLLM's scheduler, so SGLang's settings are mapped onto it: ``max_num_batched_tokens`` =
  ``chunked_prefill_size`` 8192 (``server_args.py`` lines 183-187, GPUs of 25 GB or more),
  halved with ``--enable-dp-attention`` (line 223); ``max_num_seqs`` 2048 (the lower bound
  of ``max_running_requests = min(max_total_num_tokens // 2, req_to_token_pool.size)``,
  ``tp_worker.py`` lines 92-99, the pool at least 2048 requests: ``model_runner.py`` lines
  526-533); ``kv_cache_tokens`` DERIVED as an upper bound, ``(count · memory ·
  mem_fraction_static − weights) / KV bytes per token``, with ``--mem-fraction-static`` where
  the server command gives it, else the release's default by TP (``server_args.py`` lines
  169-180: 0.85 at TP 4, 0.81 at TP 8, 0.79 at TP 16); ``async_scheduling`` false: SGLang's
  overlap scheduler (on by default, ``server_args.py`` line 133) is not vLLM's asynchronous
  scheduler, which is the one the simulator plays, so the steps are replayed synchronous.

**Servers with prefix caching on** (the vLLM ``dl-*`` families whose notes say so, at
range ratio 0): ``vllm bench serve`` sends the run's first prompt once before the run
(``vllm/benchmarks/serve.py`` lines 360-398 of 0.10.1.1) and its random dataset makes
prompt ``i`` from the seed and ``i`` alone (``vllm/benchmarks/datasets.py`` lines
344-374), so a server's runs hit what its earlier runs left cached. Each such server (a
family, or the family its notes call the same server) is replayed as one sweep
(:func:`replay_server`, :func:`allocator.analysis.validation.replay_sweep`): its runs in
the README's line order (the order run, as the ``dl-qwen2-7b-a100x2-tp2-kv12gib`` notes
say), each after its warm-up request, prompt ``i`` of every run one token string.
``--no-sweep`` replays every run alone, without prompt identities (no hits). Not
modelled: SGLang's own scheduling rules, DP attention or cross-node links. The families
where they matter are named in the report's notes.

**The replay** of a run (:func:`replay_run`): its rate (``inf``: all at once),
``max_concurrency`` and completed requests, through :func:`allocator.analysis.validation.replay`
(what ``allocator validate``, :func:`allocator.api.validate_runs`, runs for each file). Lengths:
vLLM's random dataset at its default ``--random-range-ratio`` 0 is fixed lengths
(``vllm/benchmarks/datasets.py`` lines 317, 352-367 of 0.10.1.1), so every request gets the
run's mean input and output (recorded totals over completed requests, rounded: EOS was not
ignored, so a few answers ended early); SGLang's random dataset draws uniform integers in
``[max(1, int(len · ratio)), len]`` (``sglang/bench_serving.py`` lines 622-631 of 0.4.1:
``range_ratio`` 1 is fixed lengths), seeded, then scaled so their means equal the run's
recorded means where it records totals (a conversion stated in the run's notes).

**Compared**: ``mean_e2el_ms``, ``mean_ttft_ms``, ``median_ttft_ms``, ``mean_itl_ms``,
``mean_tpot_ms`` and ``p99_ttft_ms`` where measured (and, for the families that publish only
medians, ``median_e2el_ms``, ``median_itl_ms``, ``median_tpot_ms``, reported apart);
``error = 100 · (predicted / measured − 1)``.

**Two modes.** (a) *specs only*: ``serving.roofline`` and ``serving.ttft_overhead_ms``
at the default factors of the GPU (``allocator/core/defaults.py``), each family's own
defaults refitted without its (model, GPU, TP) group (leave-one-group-out,
:func:`loo_defaults`), so no reported specs-only error used its own runs; every share is
written into the replayed problem (``comm_eff`` at FALLBACK's 1), so no default enters
unseen. (b) *calibrated*: the group's lowest-load run written as the file ``vllm bench
serve --save-result --save-detailed`` writes (:func:`bench_file`) and given to the
library's own ``calibrate`` (:func:`allocator.api.calibrate`, what ``allocator calibrate
RUN.json --problem P --out C`` runs) with ``P`` the family's problem at its specs-only
factors; the written file ``C`` is loaded and the group's other runs replayed on it
(:func:`calibrate_group`). A run at a request rate is fitted through the simulator
(``mem_eff``, ``compute_eff``, ``prefill_eff``, ``ttft_overhead_ms``); a run that sent
all its requests at once (the vLLM A100 families) is closed-loop, and ``calibrate`` keeps
the steady-state relation for it, which fits the step's factors and not time to first
token: those groups' ``ttft_overhead_ms`` (and, where the row does not determine it,
``prefill_eff``) stay at the specs-only defaults ``P`` gives.

**Defaults**: per GPU, the least squares of the squared log ratios of the compared
metrics over the lowest-load run of every group on that GPU outside the stress cases (TP
across nodes, or saturated at the lowest load: :func:`_saturated`), all groups weighted
alike: on a grid of ``mem_eff`` x ``compute_eff`` x ``prefill_eff`` x
``ttft_overhead_ms`` (:func:`grid`; the overhead shifts TTFT and E2E and replays
nothing), refined by a parabola per axis (:func:`grid_fit`); printed every run, and what
``allocator/core/defaults.py`` holds. ``--grid-cache PATH`` keeps the fits' grids between
runs (only for the same code and seed). Prints the runtime. Output: a markdown table per run
and the summary (all, core, TP = 1, TP > 1, stress), both modes.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator.analysis.bench import plain_metrics  # noqa: E402
from allocator.analysis.rate_fit import RateCalibrationReport  # noqa: E402
from allocator.analysis.validation import MeasuredRun, compare, replay, replay_sweep  # noqa: E402
from allocator.api import calibrate, load, load_data  # noqa: E402
from allocator.core.defaults import FALLBACK, default_factors  # noqa: E402
from allocator.core.hardware import GPUS  # noqa: E402
from allocator.core.model_spec import ModelSpec  # noqa: E402
from allocator.core.problem import Problem  # noqa: E402
from benchmarks.accuracy_report import markdown, summary, summary_md  # noqa: E402

RUNS = ROOT / "problems/measured/serving-runs/runs.yaml"
CONFIGS = ROOT / "problems/measured/serving-runs/configs"

#: runs.yaml ``gpu`` → allocator/core/hardware.py GPUS key.
GPU_KEYS = {
    "NVIDIA H200 141GB": "h200",
    "NVIDIA H200": "h200",
    "NVIDIA A100 80GB": "a100-80g",
    "NVIDIA H100 80GB": "h100-sxm",
    "AMD Instinct MI300X 192GB": "mi300x",
}
#: runs.yaml ``hf_id`` (or ``model`` where no hf_id is stated) → bundled config.json.
CONFIG_FILES = {
    "Qwen/Qwen2-7B-Instruct": "qwen2-7b-instruct.config.json",
    "Qwen2.5-32B": "qwen2.5-32b.config.json",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b-instruct.config.json",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b-instruct.config.json",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3.config.json",
    "gpt-oss-120b": "gpt-oss-120b.config.json",
}
#: The metrics of the targets (issue 24: E2E, TTFT mean, ITL/TPOT mean, P99 TTFT).
TARGET_KEYS = (
    "mean_e2el_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_itl_ms",
    "mean_tpot_ms",
    "p99_ttft_ms",
)
#: Compared too where a family publishes only medians (reported apart).
MEDIAN_KEYS = ("median_e2el_ms", "median_itl_ms", "median_tpot_ms")
#: The metrics the fits match (log errors), where the run measures them.
FIT_KEYS = (*TARGET_KEYS[:5], *MEDIAN_KEYS)
#: The shares of peak ``serving.roofline`` takes (each written in every replayed problem).
SHARES = ("mem_eff", "compute_eff", "prefill_eff", "comm_eff")
AXES_NAMES = (*SHARES, "ttft_overhead_ms")
#: The fit's grid: ``mem_eff``, ``compute_eff`` and ``prefill_eff`` geometric,
#: ``ttft_overhead_ms`` (ms) linear; ``comm_eff`` is not fitted (FALLBACK's 1: these runs
#: cannot tell the all-reduce's share from ``mem_eff``).
MEM_GRID = np.geomspace(0.3, 1.0, 9)
COMPUTE_GRID = np.geomspace(0.25, 1.0, 4)
PREFILL_GRID = np.geomspace(0.2, 1.0, 6)
OVERHEAD_GRID = np.linspace(0.0, 300.0, 301)
QUICK = (
    "dl-qwen2-7b-a100-tp1-kv5gib",
    "dl-qwen2-7b-a100x2-tp2-kv12gib",
    "dc-sglang-llama33-70b-h200x4-tp4-random",
)


# ---------------------------------------------------------------- families
@dataclass
class Family:
    """One runs.yaml family made replayable: the problem's parts and its runs."""

    id: str
    group: str
    gpu: str
    tp: int
    engine: str
    config: Path
    dtype: str | None
    kv_dtype: str | None
    scheduler: dict
    runs: list[dict]
    notes: list[str] = field(default_factory=list)
    #: why the family is left out of the default factors' fit ("": it is in)
    stress: str = ""
    #: the server its runs ran on, replayed as one sweep (:func:`replay_server`; "": each
    #: run replayed alone)
    server: str = ""


def _kv_bytes(config: Path, dtype: str | None, kv_dtype: str | None) -> float:
    return ModelSpec.from_hf_config(config, dtype=dtype, kv_dtype=kv_dtype).kv_bytes_per_token


def scheduler(fam: dict, gpu: str, tp: int, config: Path, dtype, kv_dtype) -> tuple[dict, str]:
    """The family's ``serving.scheduler`` and where each number comes from (module
    docstring)."""
    notes = fam.get("notes") or ""
    same = re.match(r"^.*?Same server as (\S+?);", notes, re.S)
    if same:  # the family states it ran on another family's server: that server's log
        notes += " " + next(x for x in _RAW if x["id"] == same.group(1))["notes"]
    if fam["engine"] == "vllm":
        m = re.search(r"GPU KV cache size ([\d,]+) tokens", notes)
        if m:
            kv = int(m.group(1).replace(",", ""))
            why = f"kv_cache_tokens {kv}: the server log quoted in the family notes"
        else:
            g = re.search(r"([\d.]+) GiB KV", notes)
            if g is None:
                raise LookupError("no KV cache size in the family notes")
            gib = float(g.group(1))
            kv = int(gib * 2**30 * tp / _kv_bytes(config, dtype, kv_dtype))
            why = f"kv_cache_tokens {kv}: {gib} GiB KV per GPU (family notes) x {tp} / KV bytes"
        sched = {
            "max_num_seqs": 256, "max_num_batched_tokens": 2048, "kv_cache_tokens": kv,
            "async_scheduling": False,
        }  # fmt: skip
        return sched, "vLLM 0.10.1.1 A100 defaults 256 / 2048; " + why
    frac_m = re.search(r"--mem-fraction-static ([\d.]+)", notes)
    frac = float(frac_m.group(1)) if frac_m else {4: 0.85, 8: 0.81, 16: 0.79}.get(tp, 0.88)
    spec = ModelSpec.from_hf_config(config, dtype=dtype, kv_dtype=kv_dtype)
    room = tp * GPUS[gpu].memory_gb * 1e9 * frac - spec.weight_bytes
    kv = int(room / spec.kv_bytes_per_token)
    chunk = 4096 if "--enable-dp-attention" in notes else 8192
    sched = {
        "max_num_seqs": 2048, "max_num_batched_tokens": chunk, "kv_cache_tokens": kv,
        "async_scheduling": False,
    }  # fmt: skip
    return sched, (
        f"SGLang 0.4.1 mapped: chunked_prefill_size {chunk}, max_running_requests 2048, "
        f"kv_cache_tokens {kv} (mem_fraction_static {frac}, an upper bound)"
    )


def setup(fam: dict) -> Family | str:
    """The family made replayable, or the reason it is skipped."""
    w = fam.get("workload") or {}
    if fam.get("speculative"):
        return "speculative: the drafter's acceptance on this workload is not bundled"
    if w.get("dataset") == "sharegpt":
        return "ShareGPT lengths: their distribution is not bundled (rate runs need it)"
    if w.get("dataset") is None or fam["runs"][0].get("num_prompts") is None:
        return "no dataset or prompt count stated"
    if fam.get("tp") is None:
        return "tensor-parallel size not stated"
    measured = {k for r in fam["runs"] for k in r["metrics"]}
    if not measured & set(TARGET_KEYS + MEDIAN_KEYS):
        return "no latency measured (throughputs only)"
    gpu = GPU_KEYS.get(fam["gpu"])
    if gpu is None:
        return f"GPU {fam['gpu']!r} not in allocator/core/hardware.py"
    name = fam.get("hf_id") or fam["model"]
    name = re.sub(r" \(.*\)$", "", name)
    if name not in CONFIG_FILES:
        return f"no bundled config.json for {name!r}"
    config = CONFIGS / CONFIG_FILES[name]
    label = str(fam.get("dtype") or "")
    kv_dtype = "fp8" if "fp8_e5m2" in label or "fp8_e4m3" in label else None
    dtype = None
    tp = int(fam["tp"])
    try:
        sched, why = scheduler(fam, gpu, tp, config, dtype, kv_dtype)
    except LookupError as exc:
        return str(exc)
    group = f"{name} / {gpu} x{tp} / {fam['engine']} / {label.split(' ')[0] or 'default'}"
    notes = [why]
    if "--enable-dp-attention" in (fam.get("notes") or ""):
        notes.append("DP attention not modelled (attention as TP)")
    if "DIFFERENT nodes" in (fam.get("notes") or "") or "Two nodes" in (fam.get("notes") or ""):
        notes.append("TP across nodes: the all-reduce runs over the network, not the GPU's link")
    server = ""
    if "prefix caching on" in (fam.get("notes") or ""):
        if fam["engine"] == "vllm" and not w.get("range_ratio"):
            same = re.search(r"Same server as ([\w.-]+)", fam.get("notes") or "")
            server = same.group(1) if same else fam["id"]
            notes.append(
                f"prefix caching on in the server: replayed as server {server}'s sweep, runs "
                "in README line order, each after its warm-up request, prompt i of every run "
                "one token string"
            )
        else:
            notes.append("prefix caching on in the server: the replay has no prompt identities")
    runs = [r for r in fam["runs"] if (r.get("workload") or {}).get("dataset") != "sharegpt"]
    if len(runs) < len(fam["runs"]):
        notes.append(f"{len(fam['runs']) - len(runs)} ShareGPT run(s) left out (lengths)")
    if "DIFFERENT nodes" in (fam.get("notes") or "") or "Two nodes" in (fam.get("notes") or ""):
        stress = "TP across nodes (a stress family of the runs.yaml README)"
    else:
        stress = _saturated(min(runs, key=load_key), fam["workload"])
    return Family(
        fam["id"], group, gpu, tp, fam["engine"], config, dtype, kv_dtype, sched,
        runs, notes, stress, server if SWEEP else "",
    )  # fmt: skip


def _saturated(run: dict, workload: dict) -> str:
    """Why the lowest-load run cannot stand for the step time (``""``: it can): at a
    request rate, less than 90% of the offered output tokens/s delivered (the engine was
    saturated at its lowest load, so the run measures queueing)."""
    rate = _rate(run)
    m = run["metrics"]
    out_len = (run.get("workload") or {}).get("output_len", workload.get("output_len"))
    if not math.isfinite(rate) or "output_throughput" not in m:
        return ""
    n = m.get("successful_requests") or run["num_prompts"]
    mean_out = m["total_generated_tokens"] / n if m.get("total_generated_tokens") else out_len
    offered = rate * float(mean_out)
    if m["output_throughput"] < 0.9 * offered:
        return (
            f"saturated at its lowest load ({m['output_throughput']:.0f} of {offered:.0f} "
            "output tokens/s offered)"
        )
    return ""


def problem(f: Family, factors: Mapping[str, float]) -> dict:
    """The family's problem file, as data, with ``serving.roofline`` and
    ``serving.ttft_overhead_ms`` at ``factors`` (every share written, so no default of
    allocator/core/defaults.py enters a replay unseen: a share ``factors`` omits is
    FALLBACK's, the peak)."""
    model: dict = {"config": str(f.config)}
    if f.kv_dtype:
        model["kv_dtype"] = f.kv_dtype
    spec = {
        "name": f.id,
        # the file format asks for a drafter; every run is replayed with speculation off
        "drafters": [{"name": "unused", "method": "eagle", "acceptance": [0.5], "unit_cost": 0.1}],
        "serving": {
            "batch_sizes": [1],
            "hardware": {"gpu": f.gpu, "count": f.tp},
            "model": model,
            "roofline": {k: float(factors.get(k, FALLBACK[k])) for k in SHARES},
            "ttft_overhead_ms": float(factors.get("ttft_overhead_ms", 0.0)),
            "scheduler": {**f.scheduler, "block_size": 16},
        },
    }
    return spec


# ---------------------------------------------------------------- replays
def _lengths(f: Family, run: dict, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The run's per-request lengths (module docstring) and the conversions applied."""
    w = run.get("workload") or {}
    fam_w = next(x for x in _RAW if x["id"] == f.id)["workload"]
    in_len = w.get("input_len", fam_w.get("input_len"))
    out_len = w.get("output_len", fam_w.get("output_len"))
    ratio = w.get("range_ratio", fam_w.get("range_ratio"))
    m = run["metrics"]
    n = int(m.get("successful_requests") or run["num_prompts"])
    tin, tout = m.get("total_input_tokens"), m.get("total_generated_tokens")
    notes: list[str] = []
    if f.engine == "vllm":
        i = round(tin / n) if tin else int(in_len)
        o = round(tout / n) if tout else int(out_len)
        notes.append(f"fixed lengths {i}/{o} (vLLM random dataset, range ratio 0)")
        return np.full(n, i, np.int64), np.full(n, max(o, 1), np.int64), notes
    ratio = 0.0 if ratio is None else float(ratio)
    if ratio >= 1.0:
        return np.full(n, int(in_len), np.int64), np.full(n, int(out_len), np.int64), notes
    rng = np.random.default_rng(seed)
    ins = rng.integers(max(int(in_len * ratio), 1), int(in_len) + 1, n).astype(float)
    outs = rng.integers(max(int(out_len * ratio), 1), int(out_len) + 1, n).astype(float)
    if tin:
        ins *= tin / n / ins.mean()
    if tout:
        outs *= tout / n / outs.mean()
    notes.append("SGLang random lengths drawn uniform, scaled to the recorded means")
    ins_i = np.maximum(1, np.round(ins)).astype(np.int64)
    outs_i = np.maximum(1, np.round(outs)).astype(np.int64)
    return ins_i, outs_i, notes


def _rate(run: dict) -> float:
    r = run.get("request_rate")
    return math.inf if r in (None, "inf") else float(r)


def load_key(run: dict) -> tuple[float, float]:
    """Order of load within a family: the rate, then the requests offered at once."""
    r = _rate(run)
    return (r if math.isfinite(r) else 1e12, float(run.get("num_prompts") or 0))


def _measured(f: Family, run: dict, seed: int) -> MeasuredRun:
    prompt, output, _ = _lengths(f, run, seed)
    metrics = {
        k: float(v)
        for k, v in run["metrics"].items()
        if k in TARGET_KEYS + MEDIAN_KEYS and v is not None
    }
    return MeasuredRun(
        source=f.id, engine="sglang" if f.engine == "sglang" else "vllm", model=None,
        hardware=None, tensor_parallel=None, k=0, request_rate=_rate(run),
        max_concurrency=run.get("max_concurrency"), burstiness=1.0, prompt_tokens=prompt,
        output_tokens=output, metrics=metrics,
    )  # fmt: skip


def _errors(measured: MeasuredRun, predicted: Mapping) -> dict:
    out = compare(measured.metrics, plain_metrics(predicted))
    return {k: (e.measured, e.predicted, e.error_pct) for k, e in out.items()}


def replay_run(f: Family, run: dict, at: Mapping[str, float] | Problem, seed: int) -> dict:
    """``{key: (measured, predicted, error_pct)}`` of one run on the family's problem with
    the factors ``at``, or on the problem ``at`` itself (a calibrated file, loaded); on a
    server replayed as a sweep (``f.server``), in its place (:func:`replay_server`)."""
    prob = at if isinstance(at, Problem) else load(problem(f, at))
    if f.server:
        return replay_server(f, run, prob, at, seed)
    measured = _measured(f, run, seed)
    result, _ = replay(prob, measured, seed=seed)
    return _errors(measured, result.metrics)


_LINE = re.compile(r"line (\d+)")  # where a run is in the source: README.md line N
#: (server, factors or calibrated problem, runs replayed) -> each run's errors, by id(run)
_SWEEPS: dict[tuple, dict[int, dict]] = {}


def replay_server(
    f: Family, run: dict, prob: Problem, at: Mapping[str, float] | Problem, seed: int
) -> dict:
    """The errors of ``run`` in its place in its server's sweep (:func:`replay_sweep`):
    the server's runs (every family on it) in the source's line order (the README lists
    each run's command and result as run; the ``dl-qwen2-7b-a100x2-tp2-kv12gib`` notes say
    so), up to ``run`` when it is the first (later runs change nothing before them), else
    all; one simulation per factors, kept."""
    runs = [(g, r) for g in _FAMILIES if g.server == f.server for r in g.runs]
    line = [_LINE.search(r.get("where") or "") for _, r in runs]
    runs = [runs[i] for i in sorted(range(len(runs)), key=lambda i: (int(line[i][1]), i))]
    upto = len(runs) if isinstance(at, Problem) or runs[0][1] is not run else 1
    fac = id(at) if isinstance(at, Problem) else tuple(at.get(k) for k in AXES_NAMES)
    key = (f.server, fac, upto)
    if key not in _SWEEPS:
        measured = [_measured(g, r, seed) for g, r in runs[:upto]]
        out = replay_sweep(prob, measured, seed=seed)
        _SWEEPS[key] = {
            id(r): _errors(m, res.metrics)
            for (_, r), m, (res, _) in zip(runs[:upto], measured, out, strict=True)
        }
    return _SWEEPS[key][id(run)]


# ---------------------------------------------------------------- fits
def _shifted(key: str) -> bool:
    """Whether ``ttft_overhead_ms`` adds to the metric ``key`` (TTFT and E2E do)."""
    return "_ttft_" in key or "_e2el_" in key


def grid(f: Family, run: dict, seed: int) -> np.ndarray:
    """The loss of ``run`` (squared log ratios predicted / measured summed over the
    :data:`FIT_KEYS` it measures; a metric the replay does not give counts as a factor 10
    off) over :data:`MEM_GRID` x :data:`COMPUTE_GRID` x :data:`PREFILL_GRID` x
    :data:`OVERHEAD_GRID`, shape (9, 4, 6, 301). The overhead only shifts TTFT and E2E
    (``allocator.analysis.replica.outside_engine``), so it replays nothing: each replay
    at ``ttft_overhead_ms`` 0 gives the loss at every overhead."""
    shape = (MEM_GRID.size, COMPUTE_GRID.size, PREFILL_GRID.size)
    out = np.full((*shape, OVERHEAD_GRID.size), np.inf)
    for i, j, p in np.ndindex(*shape):
        fac = {"mem_eff": MEM_GRID[i], "compute_eff": COMPUTE_GRID[j],
               "prefill_eff": PREFILL_GRID[p]}  # fmt: skip
        errs = replay_run(f, run, fac, seed)
        total = np.zeros(OVERHEAD_GRID.size)
        for k in FIT_KEYS:
            if k not in errs:
                continue
            meas, pred = errs[k][0], errs[k][1]
            if pred is None or not pred > 0:
                total += math.log(10.0) ** 2
                continue
            shifted = pred + (OVERHEAD_GRID if _shifted(k) else 0.0)
            total += np.log(shifted / meas) ** 2
        out[i, j, p] = total
    return out


@dataclass
class Group:
    """A (model, GPU, TP, engine, dtype) group: its families and its lowest-load run."""

    name: str
    gpu: str
    tp: int
    families: list[Family]
    calib: tuple[Family, dict]

    @property
    def stress(self) -> str:
        """Why the group is left out of the default factors' fit (``""``: it is in)."""
        return self.calib[0].stress


def groups(families: Sequence[Family]) -> list[Group]:
    out: dict[str, Group] = {}
    for f in families:
        low = min(f.runs, key=load_key)
        g = out.get(f.group)
        if g is None:
            out[f.group] = Group(f.group, f.gpu, f.tp, [f], (f, low))
        else:
            g.families.append(f)
            if load_key(low) < load_key(g.calib[1]):
                g.calib = (f, low)
    return list(out.values())


#: The fitted factors in the order of :func:`grid`'s axes, each axis and whether it is
#: geometric (the parabola of :func:`grid_fit` in log space) or linear.
AXES = (
    ("mem_eff", MEM_GRID, True),
    ("compute_eff", COMPUTE_GRID, True),
    ("prefill_eff", PREFILL_GRID, True),
    ("ttft_overhead_ms", OVERHEAD_GRID, False),
)


def grid_fit(total: np.ndarray) -> dict:
    """The minimum of a loss on the grid of :func:`grid`, refined along each axis by a
    parabola through the grid point and its neighbours (in log space for the shares; no
    new replays). Where the loss is flat along ``compute_eff`` (decode memory-bound in
    every step of the runs, so they say nothing of its compute share) the largest value
    of the flat stretch is taken: the peak, not the lowest share the runs allow."""
    flipped = total[:, ::-1]  # ties to the largest compute_eff (np.argmin takes the first)
    at = list(np.unravel_index(int(np.argmin(flipped)), total.shape))
    at[1] = COMPUTE_GRID.size - 1 - at[1]
    out = {}
    for d, (name, axis, geometric) in enumerate(AXES):
        idx = list(at)
        idx[d] = slice(None)
        line = total[tuple(idx)]
        x = np.log(axis) if geometric else axis.astype(float)
        value = float(x[at[d]])
        if 0 < at[d] < axis.size - 1:
            y0, y1, y2 = line[at[d] - 1], line[at[d]], line[at[d] + 1]
            curve = y0 - 2 * y1 + y2
            if np.isfinite(curve) and curve > 0:
                shift = 0.5 * (y0 - y2) / curve  # in grid steps, within (-1, 1)
                value += shift * (x[at[d] + 1] - x[at[d]])
        out[name] = min(float(np.exp(value)), 1.0) if geometric else max(value, 0.0)
    out["loss"] = float(total[tuple(at)])
    return out


def fit_gpu(groups_: Sequence[Group], grids: Mapping[str, np.ndarray]) -> dict:
    """Defaults of one GPU: :func:`grid_fit` of the summed losses of ``groups_``'
    lowest-load runs, all groups weighted alike."""
    fit = grid_fit(sum(grids[g.name] for g in groups_))
    fit["groups"] = [g.name for g in groups_]
    fit["runs"] = [f"{g.calib[0].id} run {g.calib[0].runs.index(g.calib[1])}" for g in groups_]
    return fit


def loo_defaults(
    all_groups: Sequence[Group], grids: Mapping[str, np.ndarray]
) -> dict[str, dict | None]:
    """For each group: the defaults of its GPU fitted without it (:func:`fit_gpu` over the
    other groups on that GPU outside the stress cases); ``None``: no such group, the
    FALLBACK of allocator/core/defaults.py is used."""
    out: dict[str, dict | None] = {}
    for g in all_groups:
        others = [h for h in all_groups if h.gpu == g.gpu and h.name != g.name and not h.stress]
        out[g.name] = fit_gpu(others, grids) if others else None
    return out


# ---------------------------------------------------------------- calibrated mode
def bench_file(f: Family, run: dict, seed: int, path: Path) -> None:
    """``run`` as the file ``vllm bench serve --save-result --save-detailed`` writes: its
    statistics under vLLM's keys, the per-request lengths :func:`_lengths` replays (the
    recorded ones are not published; for the SGLang runs the same keys, which is the
    file ``calibrate`` reads either way), throughputs from the duration the run records
    (or, where it records none, from its request or output throughput). A run that sent all its
    ``n`` requests at once is written with ``max_concurrency`` ``n``: the same run (no
    request waits for a slot), in the form ``calibrate`` takes as closed-loop."""
    prompt, output, _ = _lengths(f, run, seed)
    m = run["metrics"]
    n = prompt.size
    # all requests at once is the same run as at most that many at once
    closed = None if math.isfinite(_rate(run)) else n
    duration = m.get("benchmark_duration_s") or (
        n / float(m["request_throughput"])
        if m.get("request_throughput")
        else float(output.sum()) / float(m["output_throughput"])
    )
    doc: dict = {
        "date": "20260101-000000", "backend": "vllm", "endpoint_type": "vllm",
        "model_id": f.id, "tokenizer_id": f.id, "num_prompts": n,
        "request_rate": "inf" if not math.isfinite(_rate(run)) else _rate(run),
        "burstiness": 1.0, "max_concurrency": run.get("max_concurrency") or closed,
        "duration": duration, "completed": n, "failed": 0,
        "total_input_tokens": int(prompt.sum()), "total_output_tokens": int(output.sum()),
        "request_throughput": n / duration,
        "output_throughput": float(output.sum()) / duration,
        "total_token_throughput": float(prompt.sum() + output.sum()) / duration,
        "input_lens": [int(x) for x in prompt], "output_lens": [int(x) for x in output],
    }  # fmt: skip
    for k, v in m.items():
        if re.match(r"^(mean|median|std|p\d+)_(ttft|tpot|itl|e2el)_ms$", k) and v is not None:
            doc[k] = float(v)
    path.write_text(json.dumps(doc), encoding="utf-8")


def calibrate_group(g: Group, start: Mapping[str, float], seed: int) -> tuple[Problem, dict]:
    """The group's calibrated problem as ``allocator calibrate RUN.json --problem P --out
    C`` writes it, loaded: ``P`` the family's problem at the specs-only factors ``start``
    (where the fit starts, and what it holds where the run determines nothing), ``RUN``
    the group's lowest-load run (:func:`bench_file`). A run at a request rate is fitted
    through the simulator (``mem_eff``, ``compute_eff``, ``prefill_eff``,
    ``ttft_overhead_ms``: :func:`allocator.analysis.rate_fit.rate_calibration`); a
    closed-loop run (all requests at once) keeps the steady-state relation, which fits
    the step's factors and not time to first token. Also the fitted values as written."""
    f, run = g.calib
    with tempfile.TemporaryDirectory(prefix="accuracy-") as tmp:
        folder = Path(tmp)
        bench_file(f, run, seed, folder / "run.json")
        (folder / "problem.yaml").write_text(yaml.safe_dump(problem(f, start)), encoding="utf-8")
        out = folder / "calibrated.yaml"
        rep = calibrate([folder / "run.json"], folder / "problem.yaml", out, seed=seed)
        out.write_text(rep.text(), encoding="utf-8")
        prob = load(out)
        data = load_data(out)["serving"]
    fitted = {k: v for k, v in (data.get("roofline") or {}).items() if k in SHARES}
    fitted["ttft_overhead_ms"] = data.get("ttft_overhead_ms", 0.0)
    fitted["form"] = "request-rate" if isinstance(rep, RateCalibrationReport) else "steady-state"
    return prob, fitted


_RAW: list[dict] = []
_FAMILIES: list[Family] = []
#: Whether the servers with prefix caching on are replayed as sweeps (``--no-sweep``: each
#: run alone, without prompt identities, as before).
SWEEP = True


def _factors(fit: Mapping) -> str:
    return ", ".join(f"{k} {float(fit[k]):.4g}" for k in (*SHARES, "ttft_overhead_ms") if k in fit)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--families", help="comma-separated family ids (default: all replayable)")
    ap.add_argument("--json", type=Path, help="write the full report here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--grid-cache", type=Path, help="keep the fits' grids in this .npz (reused when present)"
    )
    ap.add_argument("--no-sweep", action="store_true", help="replay every run alone (no hits)")
    args = ap.parse_args(argv)
    global SWEEP
    SWEEP = not args.no_sweep
    t0 = time.perf_counter()
    _RAW[:] = yaml.safe_load(RUNS.read_text(encoding="utf-8"))
    wanted = None
    if args.families:
        wanted = set(args.families.split(","))
        unknown = wanted - {f["id"] for f in _RAW}
        if unknown:
            print(f"--families: unknown {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    families, skipped = [], {}
    for fam in _RAW:
        made = setup(fam)
        if isinstance(made, str):
            skipped[fam["id"]] = made
        else:
            families.append(made)
    _FAMILIES[:] = families
    all_groups = groups(families)
    print(f"{len(families)} families replayable in {len(all_groups)} groups; skipped:")
    for fid, why in skipped.items():
        print(f"  {fid}: {why}")
    chosen = wanted or (set(QUICK) if args.quick else {f.id for f in families})
    shown = [g for g in all_groups if any(f.id in chosen for f in g.families)]
    gpus = {g.gpu for g in shown}
    # the groups shown, and those the defaults of their GPUs are fitted to (a grid each:
    # the stress groups' are not needed, they are in no default's fit)
    needed = [g for g in all_groups if g in shown or (g.gpu in gpus and not g.stress)]
    grids: dict[str, np.ndarray] = {}
    if args.grid_cache and args.grid_cache.exists():
        with np.load(args.grid_cache) as z:
            grids = {str(k): z[k] for k in z.files if str(k).endswith(f"#{args.seed}")}
        grids = {k.rsplit("#", 1)[0]: v for k, v in grids.items()}
    for g in needed:
        if g.stress:
            print(f"  not in the defaults' fit: {g.name}: {g.stress}")
        if g.name in grids or g.stress:
            continue
        grids[g.name] = grid(*g.calib, args.seed)
        print(f"  grid {g.name}: {time.perf_counter() - t0:.0f} s", flush=True)
        if args.grid_cache:
            np.savez(args.grid_cache, **{f"{k}#{args.seed}": v for k, v in grids.items()})
    gpu_fits = {}
    for gpu in sorted({g.gpu for g in needed if not g.stress}):
        in_fit = [g for g in needed if g.gpu == gpu and not g.stress]
        gpu_fits[gpu] = fit_gpu(in_fit, grids)
        print(f"  default fit {gpu}: {_factors(gpu_fits[gpu])}", flush=True)
    loo = loo_defaults(needed, grids)
    rows: list[dict] = []
    calib_fits = {}
    for g in shown:
        fams = [f for f in g.families if f.id in chosen]
        if not fams:
            continue
        spec_f = loo[g.name] or dict(default_factors(g.gpu))
        calibrated, calib_fits[g.name] = calibrate_group(g, spec_f, args.seed)
        print(f"  calibrated {g.name}: {_factors(calib_fits[g.name])}", flush=True)
        for f in fams:
            for i, run in enumerate(f.runs):
                is_calib = run is g.calib[1]
                load_s = (
                    f"rate {run['request_rate']}"
                    if math.isfinite(_rate(run))
                    else f"{run['num_prompts']} at once"
                )
                w = run.get("workload") or {}
                if w:
                    load_s += f" ({w.get('input_len')}/{w.get('output_len')})"
                base = {
                    "family": f.id, "group": g.name, "tp": f.tp, "run": i, "load": load_s,
                    "stress": g.stress,
                }  # fmt: skip
                rows.append(
                    {**base, "mode": "specs", "errors": replay_run(f, run, spec_f, args.seed)}
                )
                if not is_calib:
                    rows.append(
                        {
                            **base,
                            "mode": "calibrated",
                            "errors": replay_run(f, run, calibrated, args.seed),
                        }
                    )
        print(f"  {g.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    keys = list(TARGET_KEYS)
    med = list(MEDIAN_KEYS)
    summaries: dict[str, dict] = {}
    for mode in ("specs", "calibrated"):
        sel = [r for r in rows if r["mode"] == mode]
        core = [r for r in sel if not r["stress"]]
        summaries[f"{mode}:all"] = summary(sel, keys + med)
        summaries[f"{mode}:core"] = summary(core, keys + med)
        summaries[f"{mode}:core, TP=1"] = summary([r for r in core if r["tp"] == 1], keys + med)
        summaries[f"{mode}:core, TP>1"] = summary([r for r in core if r["tp"] > 1], keys + med)
        summaries[f"{mode}:stress"] = summary([r for r in sel if r["stress"]], keys + med)
    runtime = time.perf_counter() - t0
    print()
    print(markdown([r for r in rows if r["mode"] == "specs"], keys + med, "(a) specs only"))
    print()
    print(markdown([r for r in rows if r["mode"] == "calibrated"], keys + med, "(b) calibrated"))
    print()
    print("### Summary: mean / median |error| % (runs)")
    print()
    print(summary_md(summaries, keys + med))
    print()
    print("Calibrated factors (allocator calibrate on the lowest-load run of each group):")
    for name, fit in calib_fits.items():
        print(f"  {name}: {_factors(fit)} ({fit['form']})")
    print("Default factors per GPU (all groups outside the stress cases):")
    for gpu, fit in gpu_fits.items():
        print(f"  {gpu}: {_factors(fit)}, loss {fit['loss']:.4g}; runs {', '.join(fit['runs'])}")
    print("Leave-one-group-out defaults used for specs only:")
    for name, fit in loo.items():
        if name not in {g.name for g in shown}:
            continue
        print(f"  {name}: {'FALLBACK' if fit is None else _factors(fit)}")
    for f in families:
        if f.id in chosen:
            print(f"  note {f.id}: {'; '.join(f.notes)}")
    print(f"runtime {runtime:.0f} s (seed {args.seed})")
    if args.json:
        doc = {
            "seed": args.seed,
            "runtime_s": runtime,
            "skipped": skipped,
            "rows": rows,
            "summary": summaries,
            "calibrated_factors": calib_fits,
            "defaults_fit": gpu_fits,
            "leave_one_group_out_defaults": loo,
            "notes": {f.id: f.notes for f in families},
        }
        args.json.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
