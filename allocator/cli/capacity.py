"""``allocator capacity``: the cheapest fleet for a load.

Two questions, one command:

* ``--request-rate R --slo KEY=MS ...``: replicas, drafter, ``k`` (or a schedule) and
  ``max_num_seqs`` serving ``R`` requests/s with every SLO percentile met, each replica
  simulated request by request (:mod:`allocator.analysis.capacity.by_rate`);
* ``--tokens-per-s X [--tpot-ms Y]``: replicas, batch size, drafters and ``k`` carrying ``X``
  generated tokens/s with every sequence's mean time per output token at most ``Y``, every
  sequence decoding at every step (:mod:`allocator.analysis.capacity.by_load`,
  docs/design.md §8.11).

``--itl-ms`` is kept as the old name of ``--tpot-ms``, with a note saying what it bounds:
the mean time per output token of one sequence (``step_ms / E``), which is vLLM's TPOT and
not its ITL (the gap between streamed chunks, the whole step). Kept rather than refused:
the number it bounds and the answer are unchanged, so scripts keep working, and the note
points at ``--slo p99_itl_ms=...`` for the gap a client sees. (``plan --sweep`` is about
hosting.)"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from .. import api
from .._lazy import lazy_module
from ..analysis.capacity.by_load import CapacityResult, LoadSweep
from ..analysis.capacity.slo import default_num_prompts, parse_slos
from ..analysis.disagg_bench import kv_link as check_kv_link
from ..core.serving import MAX_NUM_SEQS
from ..exceptions import InputError
from ..io.ranges import parse_load_range
from .common import (
    MAX_SEED,
    ROUTER_NAMES,
    AsyncSchedulingOption,
    BudgetOption,
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
    SharedPrefixLenOption,
    ThinkTimeOption,
    TraceOption,
    TurnsOption,
    async_choice,
    emit_json,
    handles_input_errors,
    note,
    out,
    parse_budget,
    precheck_outputs,
)
from .group import app
from .progress import total_progress
from .render import narrow_table

if TYPE_CHECKING:
    from .. import plots
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

#: ``--slo KEY=MS`` (repeatable).
SloOption = typer.Option(
    None,
    "--slo",
    help="KEY=MS: a latency key of bench's JSON and its ceiling, mean|median|pN of "
    "ttft|tpot|itl|e2el, e.g. p99_ttft_ms=500 (repeatable).",
    metavar="KEY=MS",
)

#: What ``--itl-ms`` is, said when it is used.
ITL_ALIAS = (
    "--itl-ms is the old name of --tpot-ms: it bounds the mean time per output token of one "
    "sequence (step_ms / E, vLLM's TPOT), not vLLM's ITL (the gap between streamed chunks, "
    "a whole step); for that gap, size for a request rate: --request-rate R --slo "
    "p99_itl_ms=MS"
)


def _fmt(x: float | None, spec: str = ".4g") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _row(t: Table, label: str, f: dict | None) -> None:
    if f is None:
        t.add_row(label, *["—"] * 9)
        return
    t.add_row(
        label,
        str(f["replicas"]),
        str(f["gpus"]),
        str(f["batch"]),
        ", ".join(f["drafters"]) or "—",
        str(f["k"]),
        _fmt(f["tpot_ms"]),
        _fmt(f["tokens_per_s_per_replica"], ",.1f"),
        _fmt(f["cost_per_hour"], ",.2f"),
        _fmt(f["cost_per_mtok"]),
    )


def capacity_table(result: CapacityResult, doc: dict) -> Table:
    target = result.tpot_target_ms
    saving = doc["saving"]
    title = (
        f"{result.problem}: {result.tokens_per_s:,.6g} tokens/s"
        + (f", tpot_ms <= {target:g}" if math.isfinite(target) else ", no TPOT target")
        + (f"; speculation saves {saving:.2%} of $/h" if saving is not None else "")
    )
    cols = ("fleet", "replicas", "GPUs", "batch", "drafters", "k", "TPOT ms",
            "tokens/s per replica", "$/h", "$/Mtok")  # fmt: skip
    t = narrow_table(title, cols, left=("fleet", "drafters"))
    _row(t, "cheapest", doc)
    _row(t, "without speculation", doc["without_speculation"])
    return t


def sweep_table(sweep: LoadSweep) -> Table:
    t = Table(
        title="$/h against load",
        title_justify="left",
        caption="fleet: replicas × b = batch size, k = draft length",
        caption_justify="left",
    )
    for col in ("tokens/s", "with speculation $/h", "its fleet", "without $/h", "its fleet"):
        t.add_column(col, justify="right")
    for x, (a, b) in zip(sweep.loads, sweep.fleets, strict=True):
        t.add_row(
            f"{x:,.6g}",
            _fmt(None if a is None else a.cost_per_hour, ",.2f"),
            "" if a is None else f"{a.replicas}× b={a.batch} k={a.k}",
            _fmt(None if b is None else b.cost_per_hour, ",.2f"),
            "" if b is None else f"{b.replicas}× b={b.batch}",
        )
    return t


def _k_text(k) -> str:
    if isinstance(k, list):
        return "by batch " + ", ".join(f"{s}-{e}:{v}" if e > s else f"{s}:{v}" for s, e, v in k)
    return str(k)


def rate_table(doc: dict, request_rate: float, slos: str) -> Table:
    saving = doc["saving"]
    title = f"{request_rate:,.6g} requests/s under {slos}" + (
        f"; speculation saves {saving:.2%} of $/h" if saving is not None else ""
    )
    cols = ("fleet", "replicas", "GPUs", "drafters", "k", "max_num_seqs", "req/s per replica",
            "max req/s per replica", "$/h", "$/Mtok")  # fmt: skip
    t = narrow_table(title, cols, left=("fleet", "drafters", "k"))
    for label, f in (("cheapest", doc), ("without speculation", doc["baseline"])):
        if f is None:
            t.add_row(label, *["—"] * (len(cols) - 1))
            continue
        t.add_row(
            label,
            str(f["replicas"]),
            str(f["gpus"]),
            ", ".join(f["drafters"]) or "—",
            _k_text(f["k"]),
            str(f["max_num_seqs"]),
            _fmt(f["per_replica_request_rate"]),
            _fmt(f["max_request_rate_per_replica"]),
            _fmt(f["cost_per_hour"], ",.2f"),
            _fmt(f["cost_per_mtok"]),
        )
    return t


def check_disaggregated(kv_link: str | None, workload: dict):
    """Refuse what the disaggregated search cannot run before any simulation."""
    check_kv_link(kv_link)
    if workload.get("turns", 1) != 1:
        raise InputError("--turns", "sessions are not modelled with --disaggregated")


def disaggregated_document(
    problem, result, slo, kv_link, router, async_scheduling, run: dict
) -> dict:  # fmt: skip
    """``disaggregated`` of the JSON: the P:D split for the answer's configuration
    (:func:`allocator.api.size_disaggregated_for_rate`)."""
    cand = result.best.candidate
    config = cand.config
    run = {k: v for k, v in run.items() if k not in ("turns", "think_time")}
    found = api.size_disaggregated_for_rate(
        problem, result.request_rate, slo, drafters=config.drafters or None,
        k=config.k if config.speculative and config.k is not None else None,
        schedule=config.speculative and config.k is None, pooled=config.pooled,
        decode_max_num_seqs=cand.max_num_seqs, kv_link=kv_link, router=router,
        async_scheduling=async_scheduling, **run,
    )  # fmt: skip
    doc = found.document()
    doc["notes"].append(
        "disaggregated: the decode pool runs the answer's configuration at its "
        "max_num_seqs, the prefill pool the file's max_num_seqs with speculation off; "
        "another configuration may need fewer replicas disaggregated"
    )
    return doc


def metrics_table(doc: dict, keys: list[str]) -> Table:
    t = Table(title="one replica at its share of the load (ms)", title_justify="left")
    t.add_column("metric", justify="left")
    t.add_column("cheapest", justify="right")
    t.add_column("without speculation", justify="right")
    base = doc["baseline"]
    shown = list(dict.fromkeys([*keys, "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                                "p99_tpot_ms", "median_itl_ms", "p99_itl_ms"]))  # fmt: skip
    for key in shown:
        a = doc["metrics"].get(key)
        b = None if base is None else base["metrics"].get(key)
        t.add_row(key, _fmt(a, ",.2f"), _fmt(b, ",.2f"))
    return t


def rate_sweep_table(sweep: dict) -> Table:
    t = Table(
        title="$/h against request rate",
        title_justify="left",
        caption="fleet: replicas × k = draft length (or by batch size), S = max_num_seqs",
        caption_justify="left",
    )
    for col in ("req/s", "with speculation $/h", "its fleet", "without $/h", "its fleet"):
        t.add_column(col, justify="right")
    for p in sweep["points"]:
        a, b = p["with_speculation"], p["without_speculation"]
        t.add_row(
            f"{p['request_rate']:,.6g}",
            _fmt(None if a is None else a["cost_per_hour"], ",.2f"),
            "" if a is None else f"{a['replicas']}× k={_k_text(a['k'])} S={a['max_num_seqs']}",
            _fmt(None if b is None else b["cost_per_hour"], ",.2f"),
            "" if b is None else f"{b['replicas']}× S={b['max_num_seqs']}",
        )
    return t


def _sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError("--max-num-seqs", f"expected integers S[,S...], got {text!r}") from None
    if not values or min(values) < 1 or max(values) > MAX_NUM_SEQS:
        raise InputError(
            "--max-num-seqs", f"expected integers in 1..{MAX_NUM_SEQS:,}, got {text!r}"
        )
    return values


@app.command("capacity")
@handles_input_errors
def capacity_command(
    problem: Path = ProblemArg,
    request_rate: float = typer.Option(
        None,
        "--request-rate",
        help="Size for a request rate: requests/s over the whole fleet (needs --slo).",
        metavar="R",
    ),
    slo: list[str] = SloOption,
    burstiness: float = BurstinessOption,
    input_len: int = InputLenOption,
    output_len: int = OutputLenOption,
    random_input_len: int = RandomInputLenOption,
    random_output_len: int = RandomOutputLenOption,
    random_range_ratio: str = RandomRangeRatioOption,
    lengths_from: str = LengthsFromOption,
    shared_prefix_len: int = SharedPrefixLenOption,
    turns: int = TurnsOption,
    think_time: float = ThinkTimeOption,
    no_prefix_caching: bool = NoPrefixCachingOption,
    trace: str = TraceOption,
    trace_speedup: float = typer.Option(
        None,
        "--trace-speedup",
        help="With --trace and no --request-rate: the trace's own rate times F.",
        metavar="F",
    ),
    num_prompts: int = typer.Option(
        None,
        "--num-prompts",
        help="Requests per simulated run (default: enough for the highest percentile asked).",
        metavar="N",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Seed of every draw."),
    sweep_rate: str = typer.Option(
        None,
        "--sweep-rate",
        help="LO:HI:STEPS: also $/h at STEPS request rates, with and without speculation.",
        metavar="LO:HI:STEPS",
    ),
    max_num_seqs: str = typer.Option(
        None,
        "--max-num-seqs",
        help="max_num_seqs values to try, S[,S...] (default: powers of two up to the largest).",
        metavar="S[,S...]",
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        help="Local processes the simulations run on (default: the CPUs available; 1: "
        "this process). The answer is the same either way.",
        metavar="N",
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        help="Run the simulations on the Ray cluster at ADDRESS ('local': start one here); "
        "needs the extra, pip install 'allocator\\[ray]'.",
        metavar="ADDRESS",
    ),
    router: str = typer.Option(
        None,
        "--router",
        help="With --request-rate: count replicas by simulating the fleet behind this router "
        "(" + ", ".join(ROUTER_NAMES) + ") at the whole rate, instead of splitting the "
        "rate evenly (the default).",
        metavar="NAME",
    ),
    tokens_per_s: float = typer.Option(
        None,
        "--tokens-per-s",
        help="Size for a token load instead: generated tokens per second over the fleet.",
        metavar="X",
    ),
    tpot_ms: float = typer.Option(
        None,
        "--tpot-ms",
        help="With --tokens-per-s: mean time per output token of one sequence, ms (TPOT).",
        metavar="Y",
    ),
    itl_ms: float = typer.Option(
        None,
        "--itl-ms",
        help="Old name of --tpot-ms: the mean time per output token (TPOT), not the gap "
        "between streamed chunks (for that: --slo p99_itl_ms=MS).",
        metavar="Y",
    ),
    sweep: str = typer.Option(
        None,
        "--sweep-load",
        help="With --tokens-per-s, LO:HI:STEPS: also $/h at STEPS loads from LO to HI "
        "tokens/s, with and without speculation, and where the cheaper side changes.",
        metavar="LO:HI:STEPS",
    ),
    engine: str = EngineOption,
    pooled: bool = PooledOption,
    budget: list[str] = BudgetOption,
    json_path: str = JsonOption,
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw $/h against the load, with and without speculation, to PATH (.png or "
        ".svg); needs --sweep-rate or --sweep-load.",
        metavar="PATH",
    ),
    async_on: bool = AsyncSchedulingOption,
    async_off: bool = NoAsyncSchedulingOption,
    disaggregated: bool = typer.Option(
        False,
        "--disaggregated",
        help="With --request-rate: also the fewest prefill + decode replicas (P:D searched "
        "by simulation, every split up to 16 replicas) serving the rate with the answer's "
        "configuration in the decode pool; the JSON's disaggregated.",
    ),
    kv_link: str = typer.Option(
        None,
        "--kv-link",
        help="With --disaggregated: the inter-node link a prompt's KV crosses (default ib-ndr).",
        metavar="NAME",
    ),
) -> None:
    """Size a fleet: the cheapest replicas and configuration for a load, beside the cheapest
    without speculation.

    For a request rate (--request-rate R --slo KEY=MS ...): each candidate (drafter, k or
    schedule, speculation off, max_num_seqs) is simulated request by request at its share
    R / replicas; the fewest replicas meeting every SLO, $/h = replicas x
    serving.gpu_cost_per_hour. For a token load (--tokens-per-s X [--tpot-ms Y]): every
    integer batch size the step times reach, all sequences decoding at every step.
    """
    precheck_outputs(json=json_path, plot=plot_path)
    caps = parse_budget(budget)
    rate_mode = request_rate is not None or trace_speedup is not None
    if rate_mode and tokens_per_s is not None:
        raise InputError(
            "--tokens-per-s", "give a request rate (--request-rate) or a token load, not both"
        )
    if not rate_mode and tokens_per_s is None:
        raise InputError(
            "--request-rate",
            "missing: the load, requests/s (with --slo), or --tokens-per-s X",
        )
    if rate_mode:
        token_flags = {"--tpot-ms": tpot_ms, "--itl-ms": itl_ms, "--sweep-load": sweep}
        for flag, value in token_flags.items():
            if value is not None:
                raise InputError(flag, "belongs to --tokens-per-s; for a request rate use --slo")
        _rate_mode(
            problem, request_rate, slo, burstiness, input_len, output_len, trace,
            trace_speedup, num_prompts, seed, sweep_rate, _sizes(max_num_seqs), workers,
            ray, engine, pooled, caps, json_path, plot_path,
            {"random_input_len": random_input_len, "random_output_len": random_output_len,
             "random_range_ratio": random_range_ratio, "lengths_from": lengths_from,
             "shared_prefix_len": shared_prefix_len, "turns": turns,
             "think_time": think_time, "prefix_caching": not no_prefix_caching},
            router,
            async_scheduling=async_choice(async_on, async_off),
            disaggregated=(disaggregated, kv_link),
        )  # fmt: skip
        return
    rate_flags = {
        "--slo": slo or None, "--input-len": input_len, "--output-len": output_len,
        "--trace": trace, "--num-prompts": num_prompts, "--sweep-rate": sweep_rate,
        "--max-num-seqs": max_num_seqs, "--workers": workers, "--ray": ray,
        "--random-input-len": random_input_len, "--random-output-len": random_output_len,
        "--random-range-ratio": random_range_ratio, "--lengths-from": lengths_from,
        "--router": router,
        "--async-scheduling": async_on or None, "--no-async-scheduling": async_off or None,
        "--shared-prefix-len": shared_prefix_len or None, "--turns": None if turns == 1
        else turns, "--think-time": think_time or None,
        "--no-prefix-caching": no_prefix_caching or None,
        "--disaggregated": disaggregated or None, "--kv-link": kv_link,
    }  # fmt: skip
    for flag, value in rate_flags.items():
        if value is not None:
            raise InputError(flag, "belongs to sizing for a request rate: give --request-rate")
    if itl_ms is not None:
        if tpot_ms is not None:
            raise InputError("--itl-ms", "is the old name of --tpot-ms: give one of them")
        note(ITL_ALIAS)
        tpot_ms = itl_ms
    loads = parse_load_range(sweep) if sweep is not None else None
    if plot_path:
        if loads is None:
            raise InputError("--plot", "draws the load sweep: give --sweep-load LO:HI:STEPS")
        plots.check_plot_path(plot_path, "--plot")
    try:
        result = api.size_fleet(
            problem,
            tokens_per_s,
            tpot_ms,
            sweep_load=loads,
            engine=engine,
            pooled=pooled,
            budget=caps,
        )
    except InputError as exc:
        if itl_ms is None or exc.field != "tpot_ms":
            raise
        # name the flag given, and what it bounds
        raise type(exc)(
            "--itl-ms", f"{exc.message} (--itl-ms is --tpot-ms: the mean TPOT)"
        ) from None
    doc = result.to_dict()
    swept = result.sweep
    if swept is not None and plot_path:
        plots.plot_capacity_sweep(
            swept.loads,
            swept.with_speculation,
            swept.without_speculation,
            plot_path,
            crossings=swept.crossings,
            tpot_ms=result.tpot_target_ms,
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in doc["notes"]:
        note(message)
    out.print(capacity_table(result, doc))
    if swept is not None:
        out.print(sweep_table(swept))
        for c in swept.crossings:
            out.print(
                f"between {c['from_tokens_per_s']:,.6g} and {c['to_tokens_per_s']:,.6g} tokens/s "
                f"the cheaper side becomes: {c['cheaper']}"
            )


def _rate_mode(
    problem, request_rate, slo, burstiness, input_len, output_len, trace, trace_speedup,
    num_prompts, seed, sweep_rate, sizes, workers, ray, engine, pooled, caps, json_path,
    plot_path, workload, router=None,
    async_scheduling=None, disaggregated=(False, None),
) -> None:  # fmt: skip
    split, kv_link = disaggregated
    if kv_link is not None and not split:
        raise InputError("--kv-link", "only with --disaggregated")
    if split:
        check_disaggregated(kv_link, workload)
    if plot_path:
        if sweep_rate is None:
            raise InputError("--plot", "draws the rate sweep: give --sweep-rate LO:HI:STEPS")
        plots.check_plot_path(plot_path, "--plot")
    if not slo:
        raise InputError("--slo", "missing: at least one SLO, KEY=MS (e.g. p99_ttft_ms=500)")
    label = f"sizing for {request_rate:g} requests/s" if request_rate else "sizing for the trace"
    n, why_n = default_num_prompts(parse_slos(slo))
    if num_prompts is not None:
        n, why_n = num_prompts, "as asked"
    why = (
        f"each simulated run plays {n:,} requests ({why_n}); a candidate search takes a few "
        "runs, and the time left below assumes the searches left take as long as those done"
    )
    with total_progress(
        label, "candidate searches done", enabled=json_path != "-", why=why
    ) as progress:
        result = api.size_fleet_for_rate(
            problem,
            request_rate,
            slo,
            burstiness=burstiness,
            input_len=input_len,
            output_len=output_len,
            trace=trace,
            trace_speedup=trace_speedup,
            num_prompts=num_prompts,
            seed=seed,
            **workload,
            sweep_rate=sweep_rate,
            max_num_seqs=sizes,
            workers=workers,
            ray=ray,
            engine=engine,
            pooled=pooled,
            budget=caps,
            progress=progress,
            router=router,
            async_scheduling=async_scheduling,
        )
    doc = result.to_dict()
    if split:
        doc["disaggregated"] = disaggregated_document(
            problem, result, slo, kv_link, router, async_scheduling,
            dict(burstiness=burstiness, input_len=input_len, output_len=output_len,
                 trace=trace, trace_speedup=trace_speedup, num_prompts=num_prompts,
                 seed=seed, engine=engine, **workload),
        )  # fmt: skip
    slos = ", ".join(s.text() + " ms" for s in result.slos)
    if result.sweep is not None and plot_path:
        sw = result.sweep
        plots.plot_rate_sweep(
            sw.rates,
            sw.with_speculation,
            sw.without_speculation,
            plot_path,
            crossings=sw.crossings,
            slos=slos,
            option="--plot",
        )
    if json_path == "-":
        emit_json(doc, "-")
        return
    emit_json(doc, json_path)
    for message in doc["notes"]:
        note(message)
    out.print(rate_table(doc, result.request_rate, slos))
    out.print(metrics_table(doc, [s.key for s in result.slos]))
    if split:
        dis = doc["disaggregated"]
        for message in dis["notes"]:
            note(message)
        out.print(
            f"disaggregated: {dis['prefill_replicas']} prefill + {dis['decode_replicas']} "
            f"decode replicas ({dis['gpus']} GPUs); {dis['bench_command']}",
            markup=False,
            highlight=False,
        )
    if result.sweep is not None:
        out.print(rate_sweep_table(doc["sweep"]))
        for c in doc["sweep"]["crossings"]:
            out.print(
                f"between {c['from_request_rate']:,.6g} and {c['to_request_rate']:,.6g} req/s "
                f"the cheaper side becomes: {c['cheaper']}"
            )


__all__ = [
    "ITL_ALIAS",
    "SloOption",
    "capacity_command",
    "capacity_table",
    "check_disaggregated",
    "disaggregated_document",
    "metrics_table",
    "rate_sweep_table",
    "rate_table",
    "sweep_table",
]
