"""``allocator bench``: a simulated ``vllm bench serve`` of one replica, its metrics under
vLLM's names (:mod:`allocator.analysis.bench`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis.capacity.slo import clock_ms, parse_slos
from ..io.staged import write_atomic
from ..sim import metric
from .common import (
    MAX_SEED,
    AsyncSchedulingOption,
    BurstinessOption,
    EngineOption,
    InputLenOption,
    JsonOption,
    LengthsFromOption,
    NoAsyncSchedulingOption,
    NoPrefixCachingOption,
    OutputLenOption,
    PooledOption,
    ProblemArg,
    RandomInputLenOption,
    RandomOutputLenOption,
    RandomRangeRatioOption,
    RouterOption,
    SharedPrefixLenOption,
    ThinkTimeOption,
    TraceOption,
    TurnsOption,
    async_choice,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
)
from .group import app

if TYPE_CHECKING:
    from .. import plots
    from ..analysis.bench import BenchResult
    from ..analysis.capacity.slo import SLO
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

#: ``--slo KEY=MS`` (repeatable): drawn and checked, never a change to the run.
SloOption = typer.Option(
    None,
    "--slo",
    help="KEY=MS: a latency ceiling as capacity takes it, mean|median|pN of "
    "ttft|tpot|itl|e2el, e.g. p99_ttft_ms=500: drawn on --plot and noted as met or missed; "
    "the run is the same without it (repeatable).",
    metavar="KEY=MS",
)


def drafter_list(text: str | None) -> list[str] | None:
    """``--drafters a,b`` as names (``None`` for none)."""
    if text is None:
        return None
    return [n.strip() for n in text.split(",") if n.strip()]


def _fmt(x, spec: str = ",.2f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return format(x, spec)


def bench_table(doc: dict) -> Table:
    """The run as ``vllm bench serve`` prints it: one metric per row."""
    t = Table(title=doc["label"], title_justify="left", show_header=False)
    t.add_column("metric", justify="left")
    t.add_column("value", justify="right")
    rows = [
        ("Successful requests", _fmt(doc["completed"], ",d")),
        ("Benchmark duration (s)", _fmt(doc["duration"])),
        ("Total input tokens", _fmt(doc["total_input_tokens"], ",d")),
        ("Total generated tokens", _fmt(doc["total_output_tokens"], ",d")),
        ("Request throughput (req/s)", _fmt(doc["request_throughput"])),
        ("Output token throughput (tok/s)", _fmt(doc["output_throughput"])),
        ("Total token throughput (tok/s)", _fmt(doc["total_token_throughput"])),
        ("Max concurrent requests", _fmt(doc["max_concurrent_requests"], ",d")),
    ]
    for name, title in (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token (excl. 1st token)"),
        ("itl", "Inter-token Latency (gap between chunks)"),
        ("e2el", "End-to-end Latency"),
    ):
        rows.append((f"— {title} —", ""))
        for stat in ("mean", "median", "p99"):
            label = "P99" if stat == "p99" else stat.capitalize()
            value = doc[f"{stat}_{name}_ms"]  # None: undefined (one output token each)
            rows.append((f"{label} {name.upper()} (ms)", "n/a" if value is None else _fmt(value)))
    accepted = doc.get("spec_decode_acceptance_length", 1.0)  # absent: no step drafted
    rows += [
        ("— Simulated replica —", ""),
        ("Acceptance length (tokens per step)", _fmt(accepted, ".3f")),
        ("Mean queue (ms)", _fmt(doc["mean_queue_ms"])),
        ("Preemptions", _fmt(doc["preemptions"], ",d")),
        ("Max running sequences", _fmt(doc["max_running_seqs"], ",d")),
        ("Mean requests in the server", _fmt(doc["mean_concurrency"])),
        ("KV cache peak (fraction)", _fmt(doc["kv_cache_peak_fraction"], ".3f")),
    ]  # fmt: skip
    rows += disagg_rows(doc)
    for name, value in rows:
        t.add_row(name, value)
    return t


def disagg_rows(doc: dict) -> list[tuple[str, str]]:
    """A disaggregated run's parts of TTFT, mean and P99 (ms), and each pool's replicas."""
    dis = doc.get("disaggregated")
    if dis is None:
        return []
    rows = [("— Disaggregated: TTFT parts, mean / P99 (ms) —", "")]
    for part, stats in dis["ttft_parts_ms"].items():
        rows.append(
            (part.replace("_", " ").capitalize(), f"{_fmt(stats['mean'])} / {_fmt(stats['p99'])}")
        )
    rows.append(
        ("Prefill + decode replicas", f"{dis['prefill_replicas']} + {dis['decode_replicas']}")
    )
    return rows


def slo_notes(result: BenchResult, slos: Sequence[SLO]) -> list[str]:
    """One line per SLO: met or missed by the run, and the run's value (ms), computed as
    capacity computes it."""
    lines = []
    clock = clock_ms(result.result)
    for s in slos:
        value = metric(result.result, s.key)
        verdict = "met" if s.met(value, clock) else "missed"
        lines.append(f"SLO {s.text()} ms: {verdict}, {s.key} = {value:,.6g} ms")
    return lines


@app.command("bench")
@handles_input_errors
def bench_command(
    problem: Path = ProblemArg,
    drafters: str = typer.Option(
        None,
        "--drafters",
        "-d",
        help="Drafter(s) to run, NAME[,NAME] (several only with --pooled). None: speculation off.",
        metavar="NAME[,NAME]",
    ),
    k: int = typer.Option(
        None, "--k", "-k", help="Draft length (0: speculation off).", metavar="K"
    ),
    schedule: bool = typer.Option(
        False,
        "--schedule",
        help="k by decode batch size, from the problem's schedule (vLLM's "
        "num_speculative_tokens_per_batch_size), instead of one --k.",
    ),
    request_rate: float = typer.Option(
        None,
        "--request-rate",
        help="Requests per second (inf: all at once; the default, as vLLM's). With --trace: "
        "the trace's times scaled to this rate (default: its own).",
        metavar="R",
    ),
    burstiness: float = BurstinessOption,
    max_concurrency: int = typer.Option(
        None,
        "--max-concurrency",
        help="Requests the client keeps in flight at most (default: no limit).",
        metavar="C",
    ),
    num_prompts: int = typer.Option(
        None,
        "--num-prompts",
        help="Requests to send (default 1000, as vLLM's); with --trace its first rows.",
        metavar="N",
    ),
    input_len: int = InputLenOption,
    output_len: int = OutputLenOption,
    random_input_len: int = RandomInputLenOption,
    random_output_len: int = RandomOutputLenOption,
    random_range_ratio: str = RandomRangeRatioOption,
    lengths_from: str = LengthsFromOption,
    stages: str = typer.Option(
        None,
        "--stages",
        help="Staged load RATE:SECONDS[,RATE:SECONDS...] (as inference-perf's load stages): "
        "each stage Poisson arrivals (gamma with --burstiness) at RATE requests/s for SECONDS, "
        "one after another; the arrivals drawn set the number of requests (no --num-prompts, "
        "no --request-rate).",
        metavar="R:S,...",
    ),
    shared_prefix_len: int = SharedPrefixLenOption,
    turns: int = TurnsOption,
    think_time: float = ThinkTimeOption,
    no_prefix_caching: bool = NoPrefixCachingOption,
    trace: str = TraceOption,
    trace_speedup: float = typer.Option(
        None, "--trace-speedup", help="Run the trace F times faster.", metavar="F"
    ),
    max_num_seqs: int = typer.Option(
        None,
        "--max-num-seqs",
        help="The server's max_num_seqs (default: serving.scheduler.max_num_seqs).",
        metavar="S",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Seed of every draw."),
    engine: str = EngineOption,
    pooled: bool = PooledOption,
    replicas: int = typer.Option(
        1,
        "--replicas",
        help="Identical replicas behind --router, on one clock (1: the single replica). "
        "The JSON's metrics are then the fleet's, each replica's under replicas.",
        metavar="N",
    ),
    router: str = RouterOption,
    prefill_replicas: int = typer.Option(
        None,
        "--prefill-replicas",
        help="Prefill/decode disaggregation: P prefill replicas (with --decode-replicas), "
        "each pool behind --router; TTFT runs to the decode replica's first token and the "
        "JSON's disaggregated splits it (queue, prefill, KV transfer, decode queue, first "
        "decode step).",
        metavar="P",
    ),
    decode_replicas: int = typer.Option(
        None,
        "--decode-replicas",
        help="Decode replicas of a disaggregated run (with --prefill-replicas); speculation "
        "runs there only.",
        metavar="D",
    ),
    kv_link: str = typer.Option(
        None,
        "--kv-link",
        help="The inter-node link a prompt's KV crosses from prefill to decode (the bundled "
        "table's: ib-ndr, ib-hdr, roce-400g, roce-200g; default ib-ndr).",
        metavar="NAME",
    ),
    prefill_max_num_seqs: int = typer.Option(
        None,
        "--prefill-max-num-seqs",
        help="max_num_seqs of the prefill pool (default: --max-num-seqs, else the file's).",
        metavar="S",
    ),
    decode_max_num_seqs: int = typer.Option(
        None,
        "--decode-max-num-seqs",
        help="max_num_seqs of the decode pool (default: --max-num-seqs, else the file's).",
        metavar="S",
    ),
    json_path: str = JsonOption,
    per_request: str = typer.Option(
        None,
        "--per-request",
        help="Write one CSV row per request (times in s from the start, latencies in ms).",
        metavar="PATH.csv",
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw the TTFT, TPOT and ITL distributions to PATH (.png or .svg).",
        metavar="PATH",
    ),
    slo: list[str] = SloOption,
    async_on: bool = AsyncSchedulingOption,
    async_off: bool = NoAsyncSchedulingOption,
) -> None:
    """Simulate `vllm bench serve` on one replica: requests arrive, are scheduled step by
    step as vLLM's V1 scheduler does (continuous batching, chunked prefill, KV blocks,
    preemption), each decoding sequence's tokens drawn from the configuration's acceptance;
    the JSON has vLLM's --save-result keys, so a measurement can be diffed against it.

    Every request runs to its output length, as vllm bench serve --ignore-eos (no stop token
    is simulated)."""
    precheck_outputs(json=json_path, per_request=per_request, plot=plot_path)
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    slos: tuple[SLO, ...] = ()
    if slo:
        slos = parse_slos(slo)
    result = api.bench(
        problem,
        drafters=drafter_list(drafters),
        k=k,
        schedule=schedule,
        request_rate=request_rate,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        trace=trace,
        trace_speedup=trace_speedup,
        seed=seed,
        max_num_seqs=max_num_seqs,
        engine=engine,
        pooled=pooled,
        random_input_len=random_input_len,
        random_output_len=random_output_len,
        random_range_ratio=random_range_ratio,
        lengths_from=lengths_from,
        stages=stages,
        replicas=replicas,
        router=router,
        async_scheduling=async_choice(async_on, async_off),
        shared_prefix_len=shared_prefix_len,
        turns=turns,
        think_time=think_time,
        prefix_caching=not no_prefix_caching,
        prefill_replicas=prefill_replicas,
        decode_replicas=decode_replicas,
        kv_link=kv_link,
        prefill_max_num_seqs=prefill_max_num_seqs,
        decode_max_num_seqs=decode_max_num_seqs,
    )
    doc = result.to_dict(slos)
    if per_request:
        write_atomic(per_request, result.per_request_csv(), "--per-request")
    if plot_path:
        cols = result.result.columns()
        plots.plot_bench(
            cols["ttft_ms"],
            cols["tpot_ms"],
            result.result.itl_s * 1000.0,
            plot_path,
            slos=slos,
            title=f"{result.problem}: {doc['label']}",
            option="--plot",
        )
    written = [p for p in (json_path, per_request, plot_path) if p and p != "-"]
    if json_path == "-":
        emit_json(doc, "-")
        for path in written:
            note(f"wrote {path}")
        return
    emit_json(doc, json_path)
    for message in doc["notes"]:
        note(message)
    for message in slo_notes(result, slos):
        note(message)
    out.print(bench_table(doc))
    for path in written:
        out.print(f"wrote {path}", markup=False, highlight=False)


__all__ = [
    "SloOption",
    "bench_command",
    "bench_table",
    "disagg_rows",
    "drafter_list",
    "slo_notes",
]
