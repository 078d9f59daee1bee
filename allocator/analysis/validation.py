"""``allocator validate``: measured benchmark runs beside the same runs simulated on the
problem's replica (docs/design.md §8.14), so that the model is checked on a deployment's
own measurements before ``capacity`` is trusted.

**Measured runs.** Every JSON object of the files given, one per file or one per line:

* ``vllm bench serve --save-result`` JSON and SGLang ``bench_serving --output-file``
  lines, read by :func:`allocator.estimate.bench_files.read_bench_run` (every key it
  checks, with its one-line refusals), and the per-request ``input_lens`` /
  ``output_lens`` of ``--save-detailed`` / ``--output-details`` where the file has them;
* ``allocator bench --json`` documents (vLLM's keys, no ``model_id``; recognised by the
  simulator's own ``kv_cache_peak_fraction``): their ``label`` names the configuration and
  ``max_num_seqs`` they ran.

A CSV of ``calibrate``'s measured rows is refused: its rows are batch sizes and tokens/s,
with no requests, rate or lengths to replay (``calibrate --holdout`` reports the step
model's error on them).

**The replay.** Each run's workload is sent again, as ``allocator bench`` sends it
(:func:`allocator.analysis.bench.bench`): its ``request_rate`` (``inf``: all at once) and
``max_concurrency``, its ``burstiness`` (1 when the file does not say), its completed
requests with their per-request lengths where the file has them, else that many requests
at the mean input and output lengths, rounded, taken as fixed (a note says so). The
configuration: speculation off when the run did not draft; else the problem's drafter
(the only one, or ``drafters``, one name) at the run's ``k`` (vLLM: the number of per-position
rates; SGLang: ``speculative_num_steps``); an ``allocator bench`` document's own label.
``max_num_seqs``: ``max_num_seqs``, else the document's label, else
``serving.scheduler.max_num_seqs``. Every run is replayed from the same ``seed``.

**A sweep** (``sweep``, ``allocator validate --sweep``, :func:`replay_sweep`): the files
as consecutive runs of one server with prefix caching, in file order, of vLLM's random
dataset at range ratio 0 and one seed, replayed in one simulation, each run after its
warm-up request, prompt ``i`` of every run the same tokens (:mod:`.validation_sweep`).

**Refused**, one line naming the file: a model, GPU or tensor-parallel size other than
the problem's where both state one (``serving.model``'s name, ``serving.hardware.gpu``,
``serving.hardware.count`` or else a ``serving.gpus_per_replica`` above 1), or than
another file's; a run at a
request rate whose lengths are known to vary but are not recorded per request; per-request
arrays of unequal length; a token tree (top-k above 1), an adaptive run or a trace replay,
which the simulator does not play.

**Compared**: every metric key both documents have, under vLLM's names:
``request_throughput``, ``output_throughput``, ``total_token_throughput``,
``{mean,median,pNN}_{ttft,tpot,itl,e2el}_ms`` and ``spec_decode_acceptance_length``
(SGLang's ``e2e_latency``, ``total_throughput`` and ``accept_length`` under those
names); ``error_pct = 100 · (predicted / measured − 1)`` (``None`` for a measured 0). The
summary gives, per key, the mean and median ``|error_pct|`` over the runs that have it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..estimate.bench_files import VARIED, read_bench_run, split_documents
from ..estimate.jsonl import finite_number, read_text, whole_count
from ..estimate.messages import quote
from ..exceptions import InputError, ParameterError
from ..io.inputs import shown_paths
from ..io.quoting import mask_secrets
from ..model.under_load import need_serving, roofline_answers
from ..sim import LATENCIES, arrival_times, summary
from ..sim.requests import MAX_TOKENS
from .bench import BenchResult, bench, model_id, plain_metrics
from .measured_run import MeasuredRun
from .replica import configuration, replica
from .replica import run as simulate_run
from .request_source import MAX_PROMPTS, RequestSource, derived_seeds

# the comparison and the answer (allocator.analysis.validation_compare), re-exported
from .validation_compare import (
    ACCEPTANCE,
    FAMILIES,
    LATENCY_KEY,
    THROUGHPUTS,
    MetricError,
    MetricSummary,
    RunComparison,
    ValidationReport,
    compare,
    error_pct,
    family,
    summarise,
)
from .validation_sweep import FIRST_GAP_S, cut, idle_before, sweep_requests, too_long

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .replica import Configuration

#: ``allocator bench``'s label: the configuration, then ``; max_num_seqs S``.
_LABEL = re.compile(r"^(?P<config>.+); max_num_seqs (?P<seqs>\d+)$")
_CHAIN = re.compile(r"^(?P<names>[^,]+), k=(?P<k>\d+)(?P<pooled> \(pooled.*\))?$")
_SCHEDULE = re.compile(r"^(?P<names>[^,]+), k by batch size .*?(?P<pooled> \(pooled.*\))?$")
#: Per-request arrays of ``--save-detailed`` / ``--output-details`` beside the lengths
#: (one entry per request, as ``input_lens``).
PER_REQUEST = ("ttfts", "itls", "errors", "generated_texts")


# ---------------------------------------------------------------- measured runs
def _documents(path: Path, name: str) -> list[tuple[str, object]]:
    """The JSON objects of one file (the whole file, or one per line), each with where it
    is (the file as ``name``: :func:`allocator.io.inputs.shown_paths`); a file that is
    not JSON (a CSV of ``calibrate``'s rows) is refused."""

    try:
        text = read_text(path)
    except InputError as exc:  # the reader names its input INPUT; here it is a FILE
        raise InputError("FILE" if exc.field == "INPUT" else exc.field, exc.message) from None
    first = next((line for line in text.splitlines() if line.strip()), None)
    if first is None:
        raise InputError(name, "is empty")
    if not first.lstrip().startswith("{"):
        raise InputError(
            name,
            "is not a benchmark result (JSON): a CSV of calibrate's rows (batch, tokens/s) "
            "records no requests to replay; calibrate --holdout reports the step model's "
            "error on such rows",
        )
    return split_documents(text, name)


def _burstiness(obj: Mapping, where: str) -> float:

    raw = obj.get("burstiness")
    if raw is None:
        return 1.0
    if isinstance(raw, str) and raw.strip().lower() in ("inf", "infinity"):
        return math.inf
    if raw == math.inf and not isinstance(raw, bool):
        return math.inf
    value = finite_number(raw, f"{where}: burstiness")
    if value <= 0:
        raise InputError(f"{where}: burstiness", f"{quote(value)} must be positive")
    return value


def _per_request(obj: Mapping, where: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The completed requests' ``input_lens`` and ``output_lens`` (a failed request has
    output length 0), or ``None`` when the file has none; unequal lengths refused."""

    ins, outs = obj.get("input_lens"), obj.get("output_lens")
    if ins is None and outs is None:
        return None
    if ins is None or outs is None:
        given, missing = (
            ("input_lens", "output_lens") if outs is None else ("output_lens", "input_lens")
        )
        raise InputError(f"{where}: {missing}", f"missing, but {given} is given")
    for key, v in (("input_lens", ins), ("output_lens", outs)):
        if not isinstance(v, list):
            raise InputError(f"{where}: {key}", "must be a list of token counts")
    if len(ins) != len(outs):
        raise InputError(
            f"{where}: output_lens", f"{len(outs)} entries for {len(ins)} input_lens entries"
        )
    for key in PER_REQUEST:  # one entry per request in every per-request array
        v = obj.get(key)
        if isinstance(v, list) and len(v) != len(ins):
            raise InputError(
                f"{where}: {key}", f"{len(v)} entries for {len(ins)} input_lens entries"
            )
    prompt = np.array([whole_count(v, f"{where}: input_lens[{i}]") for i, v in enumerate(ins)])
    output = np.array([whole_count(v, f"{where}: output_lens[{i}]") for i, v in enumerate(outs)])
    done = output > 0
    if not done.any():
        raise InputError(f"{where}: output_lens", "no request generated a token")
    if (prompt[done] < 1).any():
        i = int(np.flatnonzero(done & (prompt < 1))[0])
        raise InputError(f"{where}: input_lens[{i}]", "0 tokens: a prompt has at least one")
    return prompt[done].astype(np.int64), output[done].astype(np.int64)


def _workload(
    prompt: np.ndarray, output: np.ndarray, where: str, keys: tuple[str, str]
) -> tuple[np.ndarray, np.ndarray]:
    """Refuse a workload the simulator does not take: more requests than one run plays,
    or a request longer than :data:`allocator.sim.requests.MAX_TOKENS`."""

    if prompt.size > MAX_PROMPTS:
        raise InputError(
            f"{where}: completed", f"{prompt.size:,} requests: at most {MAX_PROMPTS:,} are replayed"
        )
    for key, a in zip(keys, (prompt, output), strict=True):
        if int(a.max()) > MAX_TOKENS:
            raise InputError(
                f"{where}: {key}", f"{int(a.max()):,} tokens: at most {MAX_TOKENS:,} per request"
            )
    return prompt, output


def _fixed(
    n: int, total_in: float, total_out: float, why: str
) -> tuple[np.ndarray, np.ndarray, str]:
    """``n`` requests at the mean lengths, rounded; the note saying so."""
    mean_in, mean_out = total_in / n, total_out / n
    i, o = max(1, round(mean_in)), max(1, round(mean_out))
    rounded = "" if (i, o) == (mean_in, mean_out) else f" (means {mean_in:.6g}, {mean_out:.6g})"
    note = (
        f"lengths taken as fixed: {n} requests of {i} input and {o} output tokens, the "
        f"run's means{rounded}; {why}"
    )
    return np.full(n, i, np.int64), np.full(n, o, np.int64), note


def _engine_run(obj: dict, where: str) -> MeasuredRun:
    """A vLLM or SGLang result object (:func:`read_bench_run`) as a measured run."""

    run = read_bench_run(obj, where)
    if math.isnan(run.request_rate):
        raise InputError(
            f"{where}: request_rate",
            "'trace': a trace replay's arrival times are not in the file, so it cannot be "
            "sent again",
        )
    if run.adaptive:
        raise InputError(where, "an adaptive run (k changes per round): the simulator plays one k")
    if (run.topk or 1) > 1:
        raise InputError(where, f"a token tree (top-k {run.topk}): the simulator plays chains only")
    notes = list(run.notes)
    arrays = _per_request(obj, where)
    if arrays is not None:
        prompt, output = arrays
        if prompt.size != run.completed:
            notes.append(
                f"{prompt.size} requests with output in input_lens/output_lens, "
                f"{run.completed} completed: the arrays' requests are replayed"
            )
    else:
        if math.isfinite(run.request_rate) and run.lengths == VARIED:
            raise InputError(
                f"{where}: input_lens",
                "missing: a run at a request rate whose lengths vary, without its per-request "
                "lengths, cannot be replayed (vLLM --save-detailed, SGLang --output-details "
                "save them)",
            )
        why = (
            "their spread is not recorded (vLLM --save-detailed, SGLang --output-details "
            "save per-request lengths)"
            if run.lengths != VARIED
            else "they vary and the spread is not recorded: percentiles may differ"
        )
        prompt, output, fixed_note = _fixed(
            run.completed,
            run.mean_input * run.completed,
            run.mean_output * run.completed,
            why,
        )
        notes.append(fixed_note)
        notes = [n for n in notes if not n.startswith("lengths taken as fixed: the file")]
    if run.failed:
        notes.append(f"only the {run.completed} completed requests are replayed")
    said = obj.get("note")
    if isinstance(said, str) and "synthetic" in said.lower():
        notes.append(
            f"the file says it is not a measurement ({mask_secrets(said, 80)}): its errors "
            "are the model's against that data, not against hardware"
        )
    if obj.get("ramp_up_strategy") is not None:
        notes.append(
            "the run ramped its rate up (ramp_up_strategy): replayed at request_rate "
            "throughout, which the simulated client does not ramp"
        )
    metrics: dict[str, float] = {
        "request_throughput": run.request_throughput,
        "output_throughput": run.tokens_per_s,
    }
    total = obj.get("total_token_throughput", obj.get("total_throughput"))
    if total is not None:
        metrics["total_token_throughput"] = finite_number(total, f"{where}: total throughput")
    for name in LATENCIES:
        for stat, value in getattr(run, f"{name}_ms").items():
            key = f"{stat}_{name}_ms"
            if LATENCY_KEY.match(key):
                metrics[key] = float(value)
    if run.k > 0 and run.mean_accepted is not None:
        metrics[ACCEPTANCE] = float(run.mean_accepted)
    keys = (
        ("input_lens", "output_lens") if arrays else ("total_input_tokens", "total_output_tokens")
    )
    prompt, output = _workload(prompt, output, where, keys)
    return MeasuredRun(
        source=where,
        engine=run.engine,
        model=run.model,
        hardware=run.hardware,
        tensor_parallel=run.tensor_parallel,
        k=run.k,
        request_rate=run.request_rate,
        max_concurrency=run.max_concurrency,
        burstiness=_burstiness(obj, where),
        prompt_tokens=prompt,
        output_tokens=output,
        metrics=metrics,
        notes=tuple(notes),
        lengths_recorded=arrays is not None,
        length_keys=keys,
    )


def _label(label: object, where: str) -> tuple[tuple[str, ...] | None, int, bool, bool, int]:
    """An ``allocator bench`` label as ``(drafters, k, schedule, pooled, max_num_seqs)``."""
    m = _LABEL.match(label) if isinstance(label, str) else None
    if m is None:
        raise InputError(
            f"{where}: label",
            f"{quote(label)} is not allocator bench's label ('CONFIGURATION; max_num_seqs S')",
        )
    config, seqs = m.group("config"), int(m.group("seqs"))
    if config == "speculation off":
        return None, 0, False, False, seqs
    chain = _CHAIN.match(config)
    if chain is not None:
        names = tuple(chain.group("names").split("+"))
        return names, int(chain.group("k")), False, bool(chain.group("pooled")), seqs
    sched = _SCHEDULE.match(config)
    if sched is not None:
        return tuple(sched.group("names").split("+")), 0, True, bool(sched.group("pooled")), seqs
    raise InputError(f"{where}: label", f"{quote(config)}: no configuration allocator bench writes")


def _number(obj: Mapping, key: str, where: str) -> float:

    if key not in obj:
        raise InputError(f"{where}: {key}", "missing")
    return finite_number(obj[key], f"{where}: {key}")


def _count(obj: Mapping, key: str, where: str) -> int:

    if key not in obj:
        raise InputError(f"{where}: {key}", "missing")
    return whole_count(obj[key], f"{where}: {key}")


def _rate(obj: Mapping, where: str) -> float:
    """``request_rate``: ``"inf"`` (all at once) or a positive number."""
    raw = obj.get("request_rate")
    if isinstance(raw, str) and raw.strip().lower() in ("inf", "infinity"):
        return math.inf
    value = _number(obj, "request_rate", where)
    if value <= 0:
        raise InputError(f"{where}: request_rate", f"{quote(value)} must be positive (or inf)")
    return value


def _allocator_run(obj: dict, where: str) -> MeasuredRun:
    """An ``allocator bench --json`` document as a measured run."""
    drafters, k, schedule, pooled, seqs = _label(obj.get("label"), where)
    completed = _count(obj, "completed", where)
    if completed == 0:
        raise InputError(f"{where}: completed", "0: no request completed")
    concurrency = obj.get("max_concurrency")
    if concurrency is not None:
        concurrency = _count(obj, "max_concurrency", where)
        if concurrency < 1:
            raise InputError(f"{where}: max_concurrency", f"{concurrency} must be at least 1")
    arrays = _per_request(obj, where)
    notes: list[str] = [
        "written by allocator bench (a simulated run): no model, GPU or tensor-parallel "
        "size to check"
    ]
    if arrays is not None:
        prompt, output = arrays
    else:
        prompt, output, fixed_note = _fixed(
            completed,
            _count(obj, "total_input_tokens", where),
            _count(obj, "total_output_tokens", where),
            "the document records no per-request lengths",
        )
        notes.append(fixed_note)
    keys = (
        ("input_lens", "output_lens") if arrays else ("total_input_tokens", "total_output_tokens")
    )
    prompt, output = _workload(prompt, output, where, keys)
    metrics: dict[str, float] = {}
    for key, value in obj.items():
        speculative = key == ACCEPTANCE and (k > 0 or schedule)  # the engines' files: so
        if (key in THROUGHPUTS or LATENCY_KEY.match(key) or speculative) and value is not None:
            metrics[key] = _number(obj, key, where)
            if metrics[key] < 0:
                raise InputError(f"{where}: {key}", f"{quote(metrics[key])} is negative")
    return MeasuredRun(
        source=where,
        engine="vllm",
        model=None,
        hardware=None,
        tensor_parallel=None,
        k=k,
        request_rate=_rate(obj, where),
        max_concurrency=concurrency,
        burstiness=_burstiness(obj, where),
        prompt_tokens=prompt,
        output_tokens=output,
        metrics=metrics,
        drafters=drafters,
        schedule=schedule,
        pooled=pooled,
        max_num_seqs=seqs,
        notes=tuple(notes),
        length_keys=keys,
    )


def measured_runs(paths: Sequence[str | Path]) -> list[MeasuredRun]:
    """Every run of the files, in file order (module docstring)."""
    if not paths:
        raise ParameterError("files", "no benchmark file given")
    runs: list[MeasuredRun] = []
    for p, name in zip(paths, shown_paths(paths), strict=True):
        for where, obj in _documents(Path(p), name):
            if not isinstance(obj, dict):
                raise InputError(where, "expected one benchmark result object")
            if "kv_cache_peak_fraction" in obj and "label" in obj:
                # allocator bench's own document (it carries vLLM's keys, model_id too)
                runs.append(_allocator_run(obj, where))
            elif "server_info" in obj or "model_id" in obj:
                runs.append(_engine_run(obj, where))
            else:
                raise InputError(
                    where,
                    "neither a vllm bench serve result (model_id), SGLang bench_serving "
                    "output (server_info) nor an allocator bench --json document",
                )
    return runs


# ---------------------------------------------------------------- the deployment
def _model_key(name: str) -> str:
    """A model name compared: its last path component, case folded
    (``meta-llama/Llama-3.1-8B-Instruct`` and ``Llama-3.1-8B-Instruct`` agree)."""
    return name.strip().rstrip("/").split("/")[-1].casefold()


def check_deployment(problem: Problem, run: MeasuredRun) -> None:
    """Refuse a run whose model, GPU or tensor-parallel size differs from the problem's,
    where both state one, naming both."""
    serving = problem.serving
    if serving is None:
        return
    named = serving.model.name if serving.model is not None else ""
    if run.model and named and _model_key(run.model) != _model_key(named):
        raise InputError(
            run.source,
            f"model {quote(run.model)}, but the problem's serving.model is {quote(named)}: "
            "validate runs of the deployment the problem describes",
        )
    if serving.hardware is not None:
        gpu = serving.hardware.gpu.name
        if run.hardware is not None and run.hardware.strip().casefold() != gpu.casefold():
            raise InputError(
                run.source,
                f"hardware {quote(run.hardware)}, but the problem's serving.hardware.gpu is "
                f"{quote(gpu)}",
            )
        count, where = serving.hardware.count, "serving.hardware.count"
    else:
        count, where = serving.gpus_per_replica, "serving.gpus_per_replica"
        if count == 1:
            return  # the default: the problem states no size
    tp = run.tensor_parallel
    if tp is not None and tp != count:
        raise InputError(
            run.source, f"tensor-parallel size {tp}, but the problem's {where} is {count}"
        )


def check_same_deployment(runs: Sequence[MeasuredRun]) -> None:
    """Refuse runs that state different models, GPUs or tensor-parallel sizes, naming both
    files: one problem describes one deployment (the problem may state none of them)."""
    for attr, what, key in (
        ("model", "model", _model_key),
        ("hardware", "hardware", str.casefold),
        ("tensor_parallel", "tensor-parallel size", lambda v: v),
    ):
        first: MeasuredRun | None = None
        for run in runs:
            value = getattr(run, attr)
            if value is None:
                continue
            if first is None:
                first = run
            elif key(value) != key(getattr(first, attr)):
                raise InputError(
                    run.source,
                    f"{what} {quote(value)}, but {first.source} has {quote(getattr(first, attr))}: "
                    "validate runs of one deployment against its problem",
                )


def _configuration(
    problem: Problem, run: MeasuredRun, drafters: str | None, max_num_seqs: int | None
) -> tuple[Configuration, list[str]]:
    """The configuration the run served (module docstring)."""

    engine = "sglang" if run.engine == "sglang" else "vllm"
    if run.drafters is not None:
        return configuration(
            problem,
            list(run.drafters),
            None if run.schedule else run.k,
            schedule=run.schedule,
            max_num_seqs=max_num_seqs,
            engine=engine,
            pooled=run.pooled,
        )
    if run.k == 0:
        return configuration(problem, None, None, engine=engine)
    if drafters is None:
        if problem.n != 1:
            raise ParameterError(
                "drafters",
                f"the problem has {problem.n} drafters ({', '.join(problem.names)}): name the "
                f"one the speculative runs served ({run.source} drafts k = {run.k})",
            )
        drafters = problem.names[0]
    return configuration(problem, [drafters], run.k, engine=engine)


def _basis(problem: Problem) -> list[str]:
    """Where the predicted numbers come from."""

    serving = need_serving(problem, "validate replays the runs on the simulated replica")
    notes = []
    if serving.calibrated_from is not None:
        rows = serving.calibrated_from.get("rows")
        notes.append(
            "step times from a calibrated file (serving.calibrated_from"
            + (f": {rows} rows" if rows is not None else "")
            + "); runs outside its measured domain extrapolate the fitted form"
        )
    elif roofline_answers(serving):
        notes.append(
            "step times from the specs-only roofline at serving.roofline's factors: "
            "uncalibrated (allocator calibrate fits them to measured runs), so errors of "
            "tens of percent are expected"
        )
    elif serving.tables:
        notes.append("step times from the measured step_ms tables of serving")
    else:
        notes.append("step times from the component model of serving (verify_ms, draft_ms)")
    notes.append(
        "tokens per step from the problem's acceptance, not the run's measured acceptance "
        f"length ({ACCEPTANCE} compares them where both have it)"
    )
    return notes


# ---------------------------------------------------------------- the replay
def replay(
    problem: Problem,
    run: MeasuredRun,
    *,
    drafters: str | None = None,
    max_num_seqs: int | None = None,
    seed: int = 0,
) -> tuple[BenchResult, dict]:
    """The run's workload sent again on the problem's replica (module docstring), and what
    was sent (``replayed``)."""

    seqs = max_num_seqs if max_num_seqs is not None else run.max_num_seqs
    config, notes = _configuration(problem, run, drafters, seqs)
    notes = [n for n in notes if "--pooled" not in n]  # the run's configuration, not a search
    arrival_seed, _ = derived_seeds(seed)
    source = RequestSource(run.prompt_tokens, run.output_tokens, run.burstiness, arrival_seed)
    try:
        result = bench(
            problem,
            source,
            config,
            run.request_rate,
            max_num_seqs=seqs,
            max_concurrency=run.max_concurrency,
            seed=seed,
            notes=notes,
        )
    except InputError as exc:
        raise too_long(problem, run, config, exc) from None
    return result, _replayed(result, run)


def _replayed(result: BenchResult, run: MeasuredRun) -> dict:
    """What was sent for ``run``."""
    rate, burst = run.request_rate, run.burstiness
    return {
        "configuration": result.config.label(),
        "max_num_seqs": result.scheduler.max_num_seqs,
        "request_rate": "inf" if math.isinf(rate) else rate,
        "burstiness": "inf" if math.isinf(burst) else burst,
        "max_concurrency": run.max_concurrency,
        "num_prompts": int(run.prompt_tokens.size),
        "mean_input_tokens": float(run.prompt_tokens.mean()),
        "mean_output_tokens": float(run.output_tokens.mean()),
    }


def replay_sweep(
    problem: Problem,
    runs: Sequence[MeasuredRun],
    *,
    drafters: str | None = None,
    max_num_seqs: int | None = None,
    seed: int = 0,
    warmup: bool = True,
) -> list[tuple[BenchResult, dict]]:
    """The runs as consecutive runs of one server (:mod:`.validation_sweep`): one
    simulation, each run's request 0 sent alone first (``warmup``), prompt ``i`` of every
    run one token string, the prefix cache carried from run to run; each run's metrics
    over its own requests. Every run is replayed at its own rate and lengths as
    :func:`replay` sends them; one configuration and ``max_concurrency`` for all."""
    if not runs:
        raise ParameterError("files", "no benchmark file given")
    seqs = max_num_seqs if max_num_seqs is not None else runs[0].max_num_seqs
    config, notes = _configuration(problem, runs[0], drafters, seqs)
    notes = [n for n in notes if "--pooled" not in n]
    for r in runs[1:]:
        other, _ = _configuration(problem, r, drafters, seqs)
        if other.label() != config.label() or r.max_concurrency != runs[0].max_concurrency:
            raise InputError(
                r.source,
                f"{other.label()}, max_concurrency {r.max_concurrency}, but {runs[0].source} "
                f"has {config.label()}, max_concurrency {runs[0].max_concurrency}: a sweep "
                "replays one server's configuration",
            )
    rep = replica(problem, config, seqs, runs[0].max_concurrency)
    arrival_seed, _ = derived_seeds(seed)
    arrivals = [
        arrival_times(r.prompt_tokens.size, r.request_rate, r.burstiness, arrival_seed)
        for r in runs
    ]
    prompts = [r.prompt_tokens for r in runs]
    outputs = [r.output_tokens for r in runs]
    gap = FIRST_GAP_S
    while True:
        requests, bounds, segments = sweep_requests(
            arrivals, prompts, outputs, warmup=warmup, gap_s=gap
        )
        try:
            result = simulate_run(problem, rep, requests, seed)
        except InputError as exc:
            raise too_long(problem, runs[0], config, exc) from None
        if idle_before(result, segments):
            break
        gap *= 10.0  # a run outlasted the gap: wider, so each run starts on an idle server
    notes += list(rep.notes)
    notes.append(
        f"replayed as one server's sweep of {len(runs)} runs in file order"
        + (", each after its warm-up request" if warmup else "")
        + ": prompt i of every run one token string, the prefix cache carried from run to run"
    )
    out: list[tuple[BenchResult, dict]] = []
    for r, (first, end, start) in zip(runs, bounds, strict=True):
        part = cut(result, first, end, start)
        bench_result = BenchResult(
            problem=problem.name, config=rep.config, scheduler=rep.scheduler,
            num_prompts=end - first, request_rate=float(r.request_rate),
            burstiness=r.burstiness, result=part, metrics=summary(part), notes=list(notes),
            model_id=model_id(problem),
        )  # fmt: skip
        out.append((bench_result, {**_replayed(bench_result, r), "sweep_position": len(out)}))
    return out


def _named(exc: ParameterError, run: MeasuredRun) -> ParameterError | InputError:
    """A refusal of the replay, named as the user gave it: this command's own parameters
    (``drafters``, unless a label named them, ``max_num_seqs``, ``seed``) as they are,
    anything else the run asked for (its rate, lengths, ``k``, an ``allocator
    bench`` label's drafters) as the file's field."""
    if exc.field in ("max_num_seqs", "seed") or (exc.field == "drafters" and not run.drafters):
        return exc
    return InputError(f"{run.source}: {exc.field}", exc.message)


def validate(
    problem: Problem,
    files: Sequence[str | Path],
    *,
    drafters: str | None = None,
    max_num_seqs: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    sweep: bool = False,
) -> ValidationReport:
    """Each measured run of ``files`` beside its replay on the problem's replica, and the
    summary over the runs (module docstring). ``progress(done, total)`` is called after
    each run. ``sweep``: the files are consecutive runs of one server, replayed as one
    (:func:`replay_sweep`)."""

    derived_seeds(seed)  # the seed checked before any file is read
    if drafters is not None and drafters not in problem.names:
        raise ParameterError(
            "drafters",
            f"{drafters!r} is not a drafter of the problem ({', '.join(problem.names)}): name "
            "the one the speculative runs served",
        )
    notes = _basis(problem)
    runs = measured_runs(files)
    for run in runs:
        check_deployment(problem, run)
    check_same_deployment(runs)
    answers = []
    swept = (
        replay_sweep(problem, runs, drafters=drafters, max_num_seqs=max_num_seqs, seed=seed)
        if sweep
        else None
    )
    for i, run in enumerate(runs):
        try:
            result, replayed = swept[i] if swept else replay(
                problem, run, drafters=drafters, max_num_seqs=max_num_seqs, seed=seed
            )  # fmt: skip
        except ParameterError as exc:
            raise _named(exc, run) from None
        metrics = compare(run.metrics, plain_metrics(result.metrics))
        # bench's own fixed-lengths note says less than the run's (what the file recorded)
        own = [n for n in result.notes if not n.startswith("lengths taken as fixed: every")]
        run_notes = list(run.notes) + [n for n in own if n not in notes]
        answers.append(RunComparison(run.source, metrics, replayed, tuple(run_notes)))
        if progress is not None:
            progress(i + 1, len(runs))
    notes.append(
        f"predicted: each run's workload sent again on the simulated replica (allocator "
        f"bench, seed {seed}); error_pct = 100 x (predicted / measured - 1)"
    )
    return ValidationReport(problem.name, seed, tuple(answers), summarise(answers), tuple(notes))


__all__ = [
    "ACCEPTANCE",
    "FAMILIES",
    "PER_REQUEST",
    "THROUGHPUTS",
    "MeasuredRun",
    "MetricError",
    "MetricSummary",
    "RunComparison",
    "ValidationReport",
    "check_deployment",
    "check_same_deployment",
    "compare",
    "error_pct",
    "family",
    "measured_runs",
    "replay",
    "replay_sweep",
    "summarise",
    "validate",
]
