"""``allocator front``: the serving Pareto front, output tokens/s per GPU against tokens/s
per user over simulated deployments, speculation inside (:mod:`allocator.analysis.front`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .. import api
from .._lazy import lazy_module
from ..core.serving import MAX_NUM_SEQS
from ..exceptions import InputError
from ..io.staged import check_writable, write_atomic
from .common import (
    MAX_SEED,
    AsyncSchedulingOption,
    BurstinessOption,
    InputLenOption,
    JsonOption,
    LengthsFromOption,
    NoAsyncSchedulingOption,
    NoPrefixCachingOption,
    OutputLenOption,
    ProblemArg,
    RandomInputLenOption,
    RandomOutputLenOption,
    RandomRangeRatioOption,
    SharedPrefixLenOption,
    SloOption,
    StagesOption,
    ThinkTimeOption,
    TraceOption,
    TurnsOption,
    async_choice,
    emit_json,
    handles_input_errors,
    note,
    out,
    precheck_outputs,
    to_json,
)
from .group import app
from .progress import total_progress
from .render import narrow_table

if TYPE_CHECKING:
    from .. import plots
    from ..analysis.front import FrontResult
else:  # only --plot draws
    plots = lazy_module("allocator.plots")

#: ``--gpu-cost GPU=$/h`` (repeatable), read by :func:`gpu_costs`.
GpuCostOption = typer.Option(
    None,
    "--gpu-cost",
    help="GPU=$/h: the price of one GPU-hour (repeatable; default: the problem's "
    "serving.gpu_cost_per_hour over its GPUs, for its own GPU).",
    metavar="GPU=$/h",
)


def int_list(text: str | None, flag: str, hi: int) -> list[int] | None:
    """``A[,B...]`` as integers in ``1..hi``; :class:`InputError` naming ``flag``."""
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(flag, f"expected integers N[,N...], got {text!r}") from None
    if not values or min(values) < 1 or max(values) > hi:
        raise InputError(flag, f"expected integers in 1..{hi:,}, got {text!r}")
    return values


def pd_list(text: str | None) -> list[tuple[int, int]] | None:
    """``--pd-ratios P:D[,P:D...]``, each count an integer ``>= 1``; :class:`InputError`
    naming ``--pd-ratios``."""
    if text is None:
        return None
    pairs = []
    for item in text.split(","):
        p, sep, d = item.strip().partition(":")
        if not (sep and p.strip().isdigit() and d.strip().isdigit()):
            raise InputError("--pd-ratios", f"expected P:D[,P:D...], got {text!r}")
        pair = (int(p), int(d))
        if min(pair) < 1:
            raise InputError("--pd-ratios", f"replica counts are integers >= 1, got {item!r}")
        pairs.append(pair)
    return pairs


def name_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]


def gpu_costs(items: list[str] | None) -> dict[str, float] | None:
    """``--gpu-cost GPU=$/h`` items; :class:`InputError` naming ``--gpu-cost``."""
    if not items:
        return None
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not name.strip() or not (math.isfinite(price) and price > 0):
            raise InputError("--gpu-cost", f"expected GPU=$/h with a positive price, got {item!r}")
        out[name.strip()] = price
    return out


def _fmt(x: float | None, spec: str = ",.1f") -> str:
    return "—" if x is None else format(x, spec)


def front_table(result: FrontResult) -> object:
    """The non-dominated points, by per-user throughput (a ``P:D`` column when some
    point is disaggregated)."""
    pd = any(p.disaggregated for p in result.points)
    t = narrow_table(
        f"{result.problem}: the serving front, {len(result.front)} of "
        f"{len(result.points)} points non-dominated",
        ["GPU", "TP", *(["P:D"] if pd else []), "configuration", "max num seqs", "conc.",
         "tok/s per GPU", "tok/s per user", "$/Mtok", "SLO"],
        left=["GPU", "configuration"],
    )  # fmt: skip
    for p in result.front:
        t.add_row(
            p.gpu or "—",
            str(p.tp),
            *([p.deployment if p.pd else "—"] if pd else []),
            p.candidate.config.label(),
            str(p.candidate.max_num_seqs),
            "—" if p.max_concurrency is None else str(p.max_concurrency),
            _fmt(p.per_gpu),
            _fmt(p.per_user),
            _fmt(p.cost_per_mtok, ",.4g"),
            ("met" if p.meets_slo else "missed") if result.slos else "—",
        )
    return t


@app.command("front")
@handles_input_errors
def front_command(
    problem: Path = ProblemArg,
    input_len: int = InputLenOption,
    output_len: int = OutputLenOption,
    random_input_len: int = RandomInputLenOption,
    random_output_len: int = RandomOutputLenOption,
    random_range_ratio: str = RandomRangeRatioOption,
    lengths_from: str = LengthsFromOption,
    stages: str = StagesOption,
    shared_prefix_len: int = SharedPrefixLenOption,
    turns: int = TurnsOption,
    think_time: float = ThinkTimeOption,
    no_prefix_caching: bool = NoPrefixCachingOption,
    trace: str = TraceOption,
    trace_speedup: float = typer.Option(
        None, "--trace-speedup", help="Run the trace F times faster.", metavar="F"
    ),
    request_rate: float = typer.Option(
        None,
        "--request-rate",
        help="Requests per second sent to each deployment (default inf: all at once, the "
        "replica at saturation; with --trace: its times scaled to R; not with --stages).",
        metavar="R",
    ),
    burstiness: float = BurstinessOption,
    max_concurrency: str = typer.Option(
        None,
        "--max-concurrency",
        help="Client concurrencies, C[,C...]: each a point (each configuration at its "
        "largest max_num_seqs unless --max-num-seqs).",
        metavar="C[,C...]",
    ),
    slo: list[str] = SloOption,
    gpus: str = typer.Option(
        None,
        "--gpus",
        help="GPUs of the bundled table, G[,G...] (default: the problem's own).",
        metavar="G[,G...]",
    ),
    tp: str = typer.Option(
        None,
        "--tp",
        help="Tensor-parallel degrees, N[,N...] (default: the problem's own).",
        metavar="N[,N...]",
    ),
    max_num_seqs: str = typer.Option(
        None,
        "--max-num-seqs",
        help="max_num_seqs values, S[,S...] (default: powers of two up to the largest).",
        metavar="S[,S...]",
    ),
    gpu_cost: list[str] = GpuCostOption,
    num_prompts: int = typer.Option(
        None,
        "--num-prompts",
        help="Requests per simulated run (default: enough for the highest percentile of "
        "--slo, 1000 without).",
        metavar="N",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Seed of every draw."),
    disaggregated: bool = typer.Option(
        False,
        "--disaggregated",
        help="Also each candidate as prefill/decode disaggregated serving, both pools on "
        "the deployment's GPU and TP, at each split of --pd-ratios.",
    ),
    pd_ratios: str = typer.Option(
        None,
        "--pd-ratios",
        help="Prefill:decode replica counts, P:D[,P:D...] (default 1:1,1:2,1:3,2:1; with "
        "--disaggregated).",
        metavar="P:D[,P:D...]",
    ),
    kv_link: str = typer.Option(
        None,
        "--kv-link",
        help="The inter-node link the KV crosses (default ib-ndr; with --disaggregated).",
        metavar="LINK",
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        help="Local processes the simulations run on (default: the CPUs available).",
        metavar="N",
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        help="Run the simulations on the Ray cluster at ADDRESS ('local': start one here).",
        metavar="ADDRESS",
    ),
    problems_dir: str = typer.Option(
        None,
        "--problems-dir",
        help="Write the problem file of each other GPU and TP there (the points' bench "
        "commands name them).",
        metavar="DIR",
    ),
    json_path: str = JsonOption,
    csv_path: str = typer.Option(
        None, "--csv", help="Write every point as a CSV row.", metavar="PATH"
    ),
    plot_path: str = typer.Option(
        None,
        "--plot",
        help="Draw tokens/s per GPU against tokens/s per user, speculation on and off, to "
        "PATH (.png or .svg).",
        metavar="PATH",
    ),
    async_on: bool = AsyncSchedulingOption,
    async_off: bool = NoAsyncSchedulingOption,
) -> None:
    """The serving Pareto front: output tokens/s per GPU against output tokens/s per user
    (1000 / mean TPOT), each point a simulated deployment (GPU, TP, max_num_seqs or client
    concurrency, drafter and k, k by batch size or speculation off), speculation inside
    the simulation.

    The requests and the scheduler's options are bench's, the same for every point. Every
    point carries the allocator bench command reproducing it and its vllm serve flags;
    points missing an --slo are kept and flagged; a front where none meets them all is
    refused, naming the closest SLO.
    """
    precheck_outputs(json=json_path, csv=csv_path, plot=plot_path)
    ratios = pd_list(pd_ratios)
    for value, flag in ((ratios, "--pd-ratios"), (kv_link, "--kv-link")):
        if value is not None and not disaggregated:
            raise InputError(flag, "only with --disaggregated")
    if plot_path:
        plots.check_plot_path(plot_path, "--plot")
    if problems_dir is not None:
        if not Path(problems_dir).is_dir():
            raise InputError("--problems-dir", f"{problems_dir} is not a folder")
    label = "simulating the front"
    why = (
        "each point is one simulated run (after one job per deployment listing its "
        "candidates); the time left assumes the rest take as long"
    )
    with total_progress(label, "jobs done", enabled=json_path != "-", why=why) as progress:
        result = api.front(
            problem,
            input_len=input_len,
            output_len=output_len,
            trace=trace,
            trace_speedup=trace_speedup,
            request_rate=request_rate,
            burstiness=burstiness,
            max_concurrency=int_list(max_concurrency, "--max-concurrency", 10**9),
            slo=slo or None,
            gpus=name_list(gpus),
            tp=int_list(tp, "--tp", 10**6),
            max_num_seqs=int_list(max_num_seqs, "--max-num-seqs", MAX_NUM_SEQS),
            gpu_cost=gpu_costs(gpu_cost),
            num_prompts=num_prompts,
            seed=seed,
            disaggregated=disaggregated,
            pd_ratios=ratios,
            kv_link=kv_link,
            workers=workers,
            ray=ray,
            problems_dir=problems_dir,
            progress=progress,
            random_input_len=random_input_len,
            random_output_len=random_output_len,
            random_range_ratio=random_range_ratio,
            lengths_from=lengths_from,
            stages=stages,
            shared_prefix_len=shared_prefix_len,
            turns=turns,
            think_time=think_time,
            prefix_caching=not no_prefix_caching,
            async_scheduling=async_choice(async_on, async_off),
        )
    doc = result.to_dict()
    written: list[str] = []
    if problems_dir is not None:
        for name, data in result.problem_files.items():
            path = str(Path(problems_dir) / name)
            check_writable(path, "--problems-dir")
            write_atomic(path, to_json(data), "--problems-dir")
            written.append(path)
    if csv_path:
        write_atomic(csv_path, result.csv(), "--csv")
        written.append(csv_path)
    if plot_path:
        arrays = result.arrays()
        plots.plot_serving_front(
            arrays["per_user"],
            arrays["per_gpu"],
            arrays["speculative"],
            arrays["dominated"],
            arrays["meets_slo"],
            arrays["front_on"],
            arrays["front_off"],
            plot_path,
            disaggregated=arrays["disaggregated"],
            title=f"{result.problem}: {len(result.points)} simulated deployments",
            slos=", ".join(s.text() + " ms" for s in result.slos),
            option="--plot",
        )
        written.append(plot_path)
    if json_path == "-":
        emit_json(doc, "-")
        for path in written:
            note(f"wrote {path}")
        return
    emit_json(doc, json_path)
    if json_path:
        written.insert(0, json_path)
    for message in doc["notes"]:
        note(message)
    if result.problem_files and problems_dir is None:
        note(
            "the bench commands of points on another GPU or TP name problem files not "
            "written: give --problems-dir DIR to write them"
        )
    out.print(front_table(result))
    for path in written:
        out.print(f"wrote {path}", markup=False, highlight=False)


__all__ = [
    "GpuCostOption",
    "front_command",
    "front_table",
    "gpu_costs",
    "int_list",
    "name_list",
    "pd_list",
]
