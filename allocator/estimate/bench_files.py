"""The engines' own benchmark results → plain rows for calibration, and the steady-state step.

Two formats, each as its release writes it:

**vLLM** 0.33.0, ``vllm bench serve --save-result`` (vllm/benchmarks/serve.py: the
``result_json`` of ``main_async`` merged with ``benchmark()``'s ``result``; one JSON object
per file, or one per line with ``--append-result``). Keys read: ``model_id``,
``num_prompts``, ``request_rate`` (a number, or ``"inf"``: every request at once, the
pace then set by ``max_concurrency``), ``max_concurrency`` (``null`` without
``--max-concurrency``), ``ramp_up_strategy`` (present only with a ramp-up), ``duration``
(s), ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens`` (over
completed requests), ``request_throughput`` (``completed / duration``),
``output_throughput`` (``total_output_tokens / duration``, tokens/s), the statistics
``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` of the metrics chosen by
``--percentile-metrics`` (default ``ttft,tpot,itl``; percentiles ``--metric-percentiles``,
default 99). TPOT is each request's ``(latency − ttft) / (output_len − 1)`` averaged over
requests, ITL the gap between streamed chunks (``calculate_metrics``). Where the server
ran speculation and drafted during the run, ``spec_decode_acceptance_length`` (``1 +
accepted / num_drafts``), ``spec_decode_num_drafts``, ``spec_decode_draft_tokens``,
``spec_decode_accepted_tokens``, ``spec_decode_acceptance_rate`` (%) and
``spec_decode_per_position_acceptance_rates`` (cumulative, one per position: ``k`` is its
length), the difference of the server's ``vllm:spec_decode_*`` counters before and after
the run (``fetch_spec_decode_metrics``: every series of the ``/metrics`` page summed, so
other traffic during the run is counted too); without them speculation was off (or never
drafted). With ``--save-detailed`` the per-request ``input_lens`` and ``output_lens`` tell
whether the lengths were fixed. vLLM records no hardware; a top-level ``hardware`` key (as
``--metadata hardware=h100-sxm`` writes one) and ``tensor_parallel_size`` are read when
present. ``--metadata`` writes its values as strings, so ``tensor_parallel_size`` may be
``"2"``. ``backend`` names the client protocol, not the server.

**SGLang** 0.5.23, ``python -m sglang.benchmark.serving --output-file F`` (the old
``sglang.bench_serving``; python/sglang/benchmark/serving.py, ``run_benchmark``: one JSON
object per line, appended per run). Keys read: ``server_info`` (the server's
``/server_info``: ``model_path``, ``tp_size``, ``speculative_algorithm``,
``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``,
``speculative_adaptive``, ``speculative_draft_model_path``; ``build_server_info``,
python/sglang/srt/utils/common.py), ``request_rate`` (a number, ``Infinity`` as Python's
``json`` writes it, or ``"trace"``), ``max_concurrency``, ``dataset_name``,
``random_input_len``, ``random_output_len``, ``random_range_ratio`` (the random dataset's
lengths are drawn from ``[len · ratio, len]``, so 1 fixes them; ``compute_random_lens``,
python/sglang/benchmark/datasets/common.py), ``duration``, ``completed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``output_throughput``, ``concurrency`` (``Σ latency / duration``: requests in flight on
average), ``{mean,median,std,p90,p95,p99}_{ttft,tpot,itl}_ms`` and
``{…}_e2e_latency_ms``, and ``accept_length``: the server's ``avg_spec_accept_length``
(accepted tokens per verify round, bonus included), over the server's life since start
or the last ``/flush_cache`` (``reset_metrics``; the benchmark's ``--flush-cache`` resets
it after warm-up), so earlier runs on the same server are averaged in without it. SGLang
records no model id outside ``server_info`` and no prompt count (``num_prompts`` is then
``len(input_lens)`` with ``--output-details``, else unknown).

Every run becomes a :class:`BenchRun`. It is **steady-state** when it ran a closed loop —
``max_concurrency`` set, ``request_rate`` infinite, no ramp-up — with lengths that are not
known to vary (fixed by the per-request lengths or SGLang's random dataset at ratio 1, or
not recorded: vLLM's summary file does not say); every other run is **rate** and needs
the serving simulator (calibration's ``steady_state`` turns a steady-state run into one
measured step: batch, step time, tokens per step). :func:`read_bench_files` refuses files
of different engines, models, hardware or tensor-parallel sizes in one read, naming both.

The fields derived from the counts — both formats' ``output_throughput`` and
``request_throughput`` (over ``duration``), vLLM's ``spec_decode_acceptance_length``,
``spec_decode_acceptance_rate`` and the sum of the per-position rates — must agree with
them to a relative :data:`TOLERANCE` of 1e-3 (:data:`TOLERANCE_FLOOR` absolute near 0);
past it the run is refused in one line naming the field, its value and the derived one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..exceptions import InputError
from ..io.inputs import shown_paths
from ..validate import finite, probability, rate, whole
from .base import quote
from .jsonl import finite_number, parse_json_text, read_text, whole_count

ENGINES = ("vllm", "sglang")
STEADY, RATE = "steady-state", "rate"
FIXED, VARIED, UNKNOWN = "fixed", "varied", "unknown"
#: The latency metrics read, by the name used here (SGLang's ``e2e_latency`` is ``e2el``).
METRICS = ("ttft", "tpot", "itl", "e2el")
_STAT = re.compile(r"^(mean|median|std|max|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")
#: Relative tolerance of a derived field's agreement with the counts it is derived from
#: (:func:`_agree`): the engines compute these fields from the counts in the same file,
#: but a file may carry them rounded (a ``duration`` to 4 decimals, an acceptance length
#: to 4 digits), so only a disagreement past 0.1% means the counts are not the run's.
TOLERANCE = 1e-3
#: Absolute floor of that tolerance, in the field's own unit, for a derived value at or
#: near 0 (no token accepted: an acceptance rate of 0), where a relative bound is none.
#: Far below any value a rounded field can take, so it only absorbs float noise.
TOLERANCE_FLOOR = 1e-9
#: Float slack of the one-sided bounds (a rate that may not rise, an acceptance length
#: at most ``k + 1``, a batch at most the concurrency): not an agreement of two values.
BOUND_SLACK = 1e-6


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run, as read (module docstring). Times in ms unless named ``_s``.

    ``k``: drafted tokens per round (vLLM: the number of per-position rates; SGLang:
    ``speculative_num_steps``, a tree's depth); 0 with speculation off. ``topk``: SGLang's
    ``speculative_eagle_topk`` (> 1: a token tree). ``verified_tokens``: tokens each
    sequence verifies per step, ``1 +`` drafted per round (vLLM: ``1 + draft_tokens /
    num_drafts``, below ``k + 1`` under dynamic k or short drafts; SGLang: ``k + 1``, a
    tree's ``num_draft_tokens``; ``None`` for an adaptive run). ``request_rate``:
    requests/s, ``math.inf`` for "all at once" (a closed loop with ``max_concurrency``),
    ``math.nan`` for SGLang's trace replay.
    ``mean_input`` / ``mean_output``: tokens per completed request. ``context``: for a
    steady-state run, the mean tokens in a decoding sequence's KV cache, ``mean_input +
    mean_output / 2``; ``None`` for a rate run. ``tokens_per_s``: ``output_throughput``.
    ``mean_accepted``: tokens per sequence per verify round, bonus included (the
    engines' acceptance length); 1 with speculation off; ``None`` when not recorded.
    ``per_position``: vLLM's cumulative per-position acceptance rates. ``ttft_ms`` etc.:
    ``{statistic: value}`` (``mean``, ``median``, ``std``, ``p99``, …). ``drafter``:
    ``None`` — neither file names the drafter the problem knows; the caller supplies it
    (the problem's only drafter, or a name). ``method`` / ``draft_model``: what SGLang's
    ``server_info`` records (``speculative_algorithm``, ``speculative_draft_model_path``).
    """

    source: str
    engine: str
    model: str
    hardware: str | None
    tensor_parallel: int | None
    drafter: str | None
    method: str | None
    draft_model: str | None
    k: int
    topk: int | None
    verified_tokens: float | None
    adaptive: bool
    max_concurrency: int | None
    request_rate: float
    num_prompts: int | None
    completed: int
    failed: int | None
    duration_s: float
    mean_input: float
    mean_output: float
    lengths: str
    kind: str
    context: float | None
    tokens_per_s: float
    request_throughput: float
    mean_accepted: float | None
    per_position: tuple[float, ...] | None
    concurrency: float | None
    ttft_ms: Mapping[str, float]
    tpot_ms: Mapping[str, float]
    itl_ms: Mapping[str, float]
    e2el_ms: Mapping[str, float]
    notes: tuple[str, ...] = ()

    def as_row(self) -> dict:
        """The run as a plain ``dict`` (JSON-ready; ``request_rate`` ``inf`` as ``"inf"``)."""
        row = asdict(self)
        rate = self.request_rate
        row["request_rate"] = "inf" if math.isinf(rate) else "trace" if math.isnan(rate) else rate
        row["per_position"] = None if self.per_position is None else list(self.per_position)
        row["notes"] = list(self.notes)
        for m in METRICS:
            row[f"{m}_ms"] = dict(getattr(self, f"{m}_ms"))
        return row


# ------------------------------------------------------------------------- fields


def _need(obj: Mapping, key: str, where: str) -> object:
    if key not in obj:
        raise InputError(f"{where}: {key}", "missing")
    return obj[key]


def _count(obj: Mapping, key: str, where: str, *, optional: bool = False) -> int | None:
    if optional and obj.get(key) is None:
        return None
    return whole_count(_need(obj, key, where), f"{where}: {key}")


def _number(obj: Mapping, key: str, where: str, *, positive: bool = False) -> float:
    v, field_name = _need(obj, key, where), f"{where}: {key}"
    if positive:
        return rate(v, field_name, error=InputError)
    return finite(v, field_name, lo=0, error=InputError)


def _text(obj: Mapping, key: str, where: str) -> str:
    v = _need(obj, key, where)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: {key}", f"{quote(v)} is not a name")
    return v


def _optional_text(obj: Mapping, key: str, where: str) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: {key}", f"{quote(v)} is not a name")
    return v


def _rate(value: object, where: str) -> float:
    """``request_rate``: a positive number, or infinity (``"inf"``, ``Infinity``)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return rate(value, where, inf=True, unit="requests/s", error=InputError)


def _concurrency(obj: Mapping, where: str) -> int | None:
    c = _count(obj, "max_concurrency", where, optional=True)
    return None if c is None else whole(c, f"{where}: max_concurrency", lo=1, error=InputError)


def _statistics(obj: Mapping, where: str) -> dict[str, dict[str, float]]:
    """``{metric: {statistic: ms}}`` of every ``<stat>_<metric>_ms`` key present."""
    out: dict[str, dict[str, float]] = {m: {} for m in METRICS}
    for key, value in obj.items():
        m = _STAT.match(key)
        if not m:
            continue
        metric = "e2el" if m.group(2) == "e2e_latency" else m.group(2)
        out[metric][m.group(1)] = finite(value, f"{where}: {key}", lo=0, error=InputError)
    return out


def _agree(given: float, derived: float, where: str, how: str, *, of: str = "") -> None:
    """Refuse a derived field ``given`` that is not ``derived`` (``how`` says from what)
    to :data:`TOLERANCE` relative, :data:`TOLERANCE_FLOOR` absolute near 0; the one
    line names the field and both values (``of``: what of the field ``given`` is)."""
    if abs(given - derived) > max(TOLERANCE * abs(derived), TOLERANCE_FLOOR):
        raise InputError(
            where,
            f"{of}{given:.9g} given, but {how} gives {derived:.9g} "
            f"(more than {TOLERANCE:.1%} apart)",
        )


def _lengths(obj: Mapping, where: str) -> str | None:
    """``fixed``/``varied`` from per-request ``input_lens``/``output_lens`` (completed
    requests: a failed one has output length 0), ``None`` when not saved."""
    ins, outs = obj.get("input_lens"), obj.get("output_lens")
    if ins is None or outs is None:
        return None
    for key, v in (("input_lens", ins), ("output_lens", outs)):
        if not isinstance(v, list):
            raise InputError(f"{where}: {key}", "must be a list of token counts")
    if len(ins) != len(outs):
        raise InputError(f"{where}: output_lens", f"{len(outs)} entries for {len(ins)} inputs")
    pairs = [
        (whole_count(i, f"{where}: input_lens[{n}]"), whole_count(o, f"{where}: output_lens[{n}]"))
        for n, (i, o) in enumerate(zip(ins, outs, strict=True))
    ]
    done = [(i, o) for i, o in pairs if o > 0]
    return FIXED if len(set(done)) <= 1 else VARIED


def _kind(concurrency: int | None, rate: float, ramp: bool, lengths: str) -> str:
    closed = concurrency is not None and math.isinf(rate) and not ramp
    return STEADY if closed and lengths != VARIED else RATE


# ------------------------------------------------------------------------- vLLM


def _vllm_run(obj: Mapping, where: str) -> BenchRun:
    notes: list[str] = []
    model = _text(obj, "model_id", where)
    num_prompts = _count(obj, "num_prompts", where)
    rate = _rate(_need(obj, "request_rate", where), f"{where}: request_rate")
    concurrency = _concurrency(obj, where)
    ramp = obj.get("ramp_up_strategy") is not None
    duration = _number(obj, "duration", where, positive=True)
    completed = _count(obj, "completed", where)
    assert completed is not None and num_prompts is not None
    if completed == 0:
        raise InputError(f"{where}: completed", "0: no request completed")
    failed = _count(obj, "failed", where, optional=True)
    total_in = _count(obj, "total_input_tokens", where)
    total_out = _count(obj, "total_output_tokens", where)
    assert total_in is not None and total_out is not None
    out_tps = _number(obj, "output_throughput", where)
    req_tps = _number(obj, "request_throughput", where)
    _agree(out_tps, total_out / duration, f"{where}: output_throughput", "total_output/duration")
    _agree(req_tps, completed / duration, f"{where}: request_throughput", "completed/duration")
    stats = _statistics(obj, where)
    per_position: tuple[float, ...] | None = None
    mean_accepted: float | None = 1.0
    k = 0
    verified: float | None = 1.0
    spec_keys = [key for key in obj if key.startswith("spec_decode_")]
    if spec_keys:
        rates = _need(obj, "spec_decode_per_position_acceptance_rates", where)
        key_rates = f"{where}: spec_decode_per_position_acceptance_rates"
        if not isinstance(rates, list) or not rates:
            raise InputError(key_rates, "must be a non-empty list of rates")
        per_position = tuple(
            probability(r, f"{key_rates}[{i}]", error=InputError) for i, r in enumerate(rates)
        )
        for i, r in enumerate(per_position):
            if i and r > per_position[i - 1] + BOUND_SLACK:
                raise InputError(
                    f"{key_rates}[{i}]",
                    f"{r!r} exceeds position {i - 1}'s {per_position[i - 1]!r} (the rates are "
                    "cumulative and cannot increase)",
                )
        k = len(per_position)
        drafts = _count(obj, "spec_decode_num_drafts", where)
        tokens = _count(obj, "spec_decode_draft_tokens", where)
        accepted = _count(obj, "spec_decode_accepted_tokens", where)
        assert drafts is not None and tokens is not None and accepted is not None
        if drafts == 0:
            raise InputError(f"{where}: spec_decode_num_drafts", "0 drafts with speculation on")
        if not accepted <= tokens <= k * drafts:
            raise InputError(
                f"{where}: spec_decode_draft_tokens",
                f"{tokens} is not between the {accepted} accepted and {drafts} drafts x {k}",
            )
        mean_accepted = _number(obj, "spec_decode_acceptance_length", where)
        _agree(
            mean_accepted,
            1.0 + accepted / drafts,
            f"{where}: spec_decode_acceptance_length",
            "1 + accepted/num_drafts",
        )
        _agree(
            sum(per_position),
            accepted / drafts,
            f"{where}: spec_decode_per_position_acceptance_rates",
            "accepted/num_drafts",
            of="sum ",
        )
        if "spec_decode_acceptance_rate" in obj:
            _agree(
                _number(obj, "spec_decode_acceptance_rate", where),
                100.0 * accepted / tokens,
                f"{where}: spec_decode_acceptance_rate",
                "100 x accepted/draft_tokens",
            )
        verified = 1.0 + tokens / drafts
        if tokens < k * drafts:
            notes.append(
                f"drafts averaged {tokens / drafts:.4g} of the {k} positions (dynamic k or "
                "short drafts)"
            )
    saved = _lengths(obj, where)
    lengths = saved if saved is not None else UNKNOWN
    kind = _kind(concurrency, rate, ramp, lengths)
    if kind == STEADY and lengths == UNKNOWN:
        notes.append("lengths taken as fixed: the file does not record them (--save-detailed does)")
    if failed:
        notes.append(f"{failed} request(s) failed; the rates count completed ones only")
    hardware = _optional_text(obj, "hardware", where)
    tp_raw = obj.get("tensor_parallel_size")
    if isinstance(tp_raw, str) and tp_raw.strip().isdigit() and len(tp_raw.strip()) < 6:
        tp_raw = int(tp_raw)  # --metadata KEY=VALUE writes every value as a string
    tp = None if tp_raw is None else whole_count(tp_raw, f"{where}: tensor_parallel_size")
    mean_in, mean_out = total_in / completed, total_out / completed
    return BenchRun(
        source=where,
        engine="vllm",
        model=model,
        hardware=hardware,
        tensor_parallel=tp,
        drafter=None,
        method=None,
        draft_model=None,
        k=k,
        topk=None,
        verified_tokens=verified,
        adaptive=False,
        max_concurrency=concurrency,
        request_rate=rate,
        num_prompts=num_prompts,
        completed=completed,
        failed=failed,
        duration_s=duration,
        mean_input=mean_in,
        mean_output=mean_out,
        lengths=lengths,
        kind=kind,
        context=mean_in + mean_out / 2.0 if kind == STEADY else None,
        tokens_per_s=out_tps,
        request_throughput=req_tps,
        mean_accepted=mean_accepted,
        per_position=per_position,
        concurrency=None,
        ttft_ms=stats["ttft"],
        tpot_ms=stats["tpot"],
        itl_ms=stats["itl"],
        e2el_ms=stats["e2el"],
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------- SGLang


def _sglang_run(obj: Mapping, where: str) -> BenchRun:
    notes: list[str] = []
    info = _need(obj, "server_info", where)
    if not isinstance(info, dict):
        raise InputError(
            f"{where}: server_info",
            "is not an object (the server answered no /server_info: not an SGLang server?); "
            "the model and speculative settings are unknown",
        )
    wi = f"{where}: server_info"
    model = _text(info, "model_path", wi)
    tp = _count(info, "tp_size", wi, optional=True)
    algorithm = _optional_text(info, "speculative_algorithm", wi)
    rate_raw = _need(obj, "request_rate", where)
    if rate_raw == "trace":
        rate = math.nan
    else:
        rate = _rate(rate_raw, f"{where}: request_rate")
    concurrency = _concurrency(obj, where)
    duration = _number(obj, "duration", where, positive=True)
    completed = _count(obj, "completed", where)
    assert completed is not None
    if completed == 0:
        raise InputError(f"{where}: completed", "0: no request completed")
    total_in = _count(obj, "total_input_tokens", where)
    total_out = _count(obj, "total_output_tokens", where)
    assert total_in is not None and total_out is not None
    out_tps = _number(obj, "output_throughput", where)
    req_tps = _number(obj, "request_throughput", where)
    _agree(out_tps, total_out / duration, f"{where}: output_throughput", "total_output/duration")
    _agree(req_tps, completed / duration, f"{where}: request_throughput", "completed/duration")
    stats = _statistics(obj, where)
    conc = obj.get("concurrency")
    concurrency_seen = None if conc is None else finite_number(conc, f"{where}: concurrency")
    k, topk, adaptive = 0, None, False
    verified: float | None = 1.0
    mean_accepted: float | None = 1.0
    draft_model = None
    if algorithm is not None:
        steps = _count(info, "speculative_num_steps", wi, optional=True)
        topk = _count(info, "speculative_eagle_topk", wi, optional=True)
        tokens = _count(info, "speculative_num_draft_tokens", wi, optional=True)
        adaptive_raw = info.get("speculative_adaptive", False)
        if not isinstance(adaptive_raw, bool):
            raise InputError(f"{wi}: speculative_adaptive", f"{quote(adaptive_raw)} is not a bool")
        adaptive = adaptive_raw
        draft_model = _optional_text(info, "speculative_draft_model_path", wi)
        if steps is None and tokens is None:
            raise InputError(
                wi,
                f"speculative_algorithm {quote(algorithm)} without speculative_num_steps or "
                "speculative_num_draft_tokens",
            )
        k = steps if steps is not None else (tokens or 1) - 1
        if k < 1 and not adaptive:
            raise InputError(f"{wi}: speculative_num_steps", f"{k}; speculation drafts >= 1")
        if adaptive:
            verified = None
            notes.append("adaptive run: k varies per round (k is the starting steps)")
        elif tokens is not None:
            verified = float(tokens)
        else:
            verified = float(k + 1)
        if topk is not None and topk > 1:
            notes.append(f"token tree: depth {k}, top-k {topk}, {tokens} verified tokens")
        acc = obj.get("accept_length")
        if acc is None:
            mean_accepted = None
            notes.append("accept_length not recorded (a backend other than sglang*?)")
        else:
            mean_accepted = finite_number(acc, f"{where}: accept_length")
            top = math.inf if adaptive else k + 1.0  # a tree's accepted path: depth + bonus
            if not 1.0 <= mean_accepted <= top + BOUND_SLACK:
                raise InputError(
                    f"{where}: accept_length",
                    f"{mean_accepted!r} is outside [1, {top:g}] tokens per round",
                )
    saved = _lengths(obj, where)
    if saved is not None:
        lengths = saved
    else:
        dataset = obj.get("dataset_name")
        ratio = obj.get("random_range_ratio")
        if isinstance(dataset, str) and dataset.startswith("random") and ratio is not None:
            ratio_v = finite_number(ratio, f"{where}: random_range_ratio")
            out_len = _count(obj, "random_output_len", where, optional=True)
            fixed = ratio_v == 1.0 and (out_len is None or out_len * completed == total_out)
            lengths = FIXED if fixed else VARIED
        elif isinstance(dataset, str):
            lengths = VARIED
        else:
            lengths = UNKNOWN
    kind = _kind(concurrency, rate, False, lengths)
    ins = obj.get("input_lens")
    num_prompts = len(ins) if isinstance(ins, list) else None
    hardware = _optional_text(obj, "hardware", where)
    mean_in, mean_out = total_in / completed, total_out / completed
    return BenchRun(
        source=where,
        engine="sglang",
        model=model,
        hardware=hardware,
        tensor_parallel=tp,
        drafter=None,
        method=algorithm,
        draft_model=draft_model,
        k=k,
        topk=topk,
        verified_tokens=verified,
        adaptive=adaptive,
        max_concurrency=concurrency,
        request_rate=rate,
        num_prompts=num_prompts,
        completed=completed,
        failed=None,
        duration_s=duration,
        mean_input=mean_in,
        mean_output=mean_out,
        lengths=lengths,
        kind=kind,
        context=mean_in + mean_out / 2.0 if kind == STEADY else None,
        tokens_per_s=out_tps,
        request_throughput=req_tps,
        mean_accepted=mean_accepted,
        per_position=None,
        concurrency=concurrency_seen,
        ttft_ms=stats["ttft"],
        tpot_ms=stats["tpot"],
        itl_ms=stats["itl"],
        e2el_ms=stats["e2el"],
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------- files


def _documents(path: Path, name: str) -> list[tuple[str, object]]:
    """The JSON objects of one file (:func:`split_documents`), named ``name``."""
    return split_documents(read_text(path), name)


def split_documents(text: str, name: str) -> list[tuple[str, object]]:
    """The JSON objects of one file's ``text``, each with where it is (``name``, or
    ``name line N``): the whole text (one run), or one per line (runs appended: SGLang's
    ``--output-file``, vLLM's ``--append-result``)."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise InputError(name, "is empty")
    one_per_line = len(lines) > 1 and all(
        line.lstrip().startswith("{") and line.rstrip().endswith("}") for _, line in lines
    )
    if not one_per_line:
        return [(name, parse_json_text(text, name))]
    return [(f"{name} line {n}", parse_json_text(line, f"{name} line {n}")) for n, line in lines]


def read_bench_run(obj: object, where: str) -> BenchRun:
    """One run from a parsed result object: SGLang's when it has ``server_info``,
    vLLM's when it has ``model_id``."""
    if not isinstance(obj, dict):
        raise InputError(where, "expected one benchmark result object")
    if "server_info" in obj:
        return _sglang_run(obj, where)
    if "model_id" in obj:
        return _vllm_run(obj, where)
    raise InputError(
        where,
        "neither a vllm bench serve result (model_id) nor SGLang bench_serving output "
        "(server_info)",
    )


def _same(runs: Sequence[BenchRun], attr: str, what: str) -> None:
    """All ``runs`` state one ``attr`` (where they state it), or an :class:`InputError`
    naming the odd file: the first whose value differs from the one most files share (the
    first file's on a tie), beside a file that has the shared value."""
    stated = [(getattr(r, attr), r.source) for r in runs if getattr(r, attr) is not None]
    counts: dict[object, int] = {}
    for v, _ in stated:
        counts[v] = counts.get(v, 0) + 1
    if len(counts) < 2:
        return
    common = max(counts, key=lambda v: counts[v])  # first seen wins a tie (dict order)
    odd_v, odd_s = next((v, s) for v, s in stated if v != common)
    ref = next(s for v, s in stated if v == common)
    others = counts[common] - 1
    shared = f"{ref} and {others} other file(s) have" if others else f"{ref} has"
    raise InputError(
        odd_s,
        f"{what} {quote(odd_v)}, but {shared} {quote(common)}: one read calibrates one deployment",
    )


def read_bench_files(paths: Sequence[str | Path], drafter: str | None = None) -> list[BenchRun]:
    """Every run in ``paths`` (vLLM ``--save-result`` JSON, SGLang ``--output-file``
    JSONL, in any mix of files), in file order.

    ``drafter``: the name each speculative run's ``drafter`` gets (the problem's drafter);
    ``None`` leaves it to the caller. Runs of different engines, models (``model_id``,
    ``server_info.model_path``), recorded hardware or tensor-parallel sizes are refused,
    naming both files.
    """
    if not paths:
        raise InputError("FILE", "no benchmark file given")
    runs = []
    for p, name in zip(paths, shown_paths(paths), strict=True):  # a/run.json, b/run.json
        path = Path(p)
        for where, obj in _documents(path, name):
            run = read_bench_run(obj, where)
            if drafter is not None and run.k > 0:
                run = replace(run, drafter=drafter)
            runs.append(run)
    _same(runs, "engine", "engine")
    _same(runs, "model", "model")
    _same(runs, "hardware", "hardware")
    _same(runs, "tensor_parallel", "tensor-parallel size")
    return runs


__all__ = [
    "BOUND_SLACK",
    "ENGINES",
    "METRICS",
    "TOLERANCE",
    "TOLERANCE_FLOOR",
    "BenchRun",
    "read_bench_files",
    "read_bench_run",
    "split_documents",
]
