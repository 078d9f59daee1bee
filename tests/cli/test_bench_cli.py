"""``allocator bench`` and ``allocator capacity --request-rate`` on the command line: the
JSON is the API's document, the per-request table and the plot are written, and every bad
input of issue 17's list is one ``error: <field>: ...`` line, exit 2, no output file.

The bench plot itself: its marks are the percentiles of the values, an SLO is a line at its
ceiling, and its log axes are written in plain numbers whose labels do not overlap (they
read ``3×10¹4×10¹6×10¹`` where matplotlib labelled the minor ticks of a short axis)."""

from __future__ import annotations

import csv
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.analysis.capacity.slo import parse_slos
from allocator.exceptions import ParameterError
from allocator.plots import bench as bench_plot
from allocator.plots import plot_bench
from allocator.plots.labels import boxes_overlap
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
FIXED = ["--input-len", "100", "--output-len", "20", "--num-prompts", "50"]


def problem_file(tmp_path: Path, **serving) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data(**serving)))
    return p


def test_bench_json_is_the_apis_document(tmp_path):
    p = problem_file(tmp_path)
    out, rows, png = tmp_path / "b.json", tmp_path / "r.csv", tmp_path / "b.png"
    r = run(
        "bench",
        p,
        "-d",
        "eagle",
        "-k",
        "2",
        "--request-rate",
        "10",
        *FIXED,
        "--seed",
        "3",
        "--json",
        out,
        "--per-request",
        rows,
        "--plot",
        png,
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    want = api.bench(
        p,
        drafters=["eagle"],
        k=2,
        request_rate=10.0,
        input_len=100,
        output_len=20,
        num_prompts=50,
        seed=3,
    ).to_dict()
    doc.pop("date")
    want.pop("date")
    assert doc == json.loads(json.dumps(want))
    with rows.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 50 and float(table[0]["ttft_ms"]) > 0
    assert png.stat().st_size > 0
    assert "Successful requests" in r.stdout and "eagle, k=2" in r.stdout


def test_bench_on_the_bundled_problem_and_trace():
    r = run(
        "bench",
        ROOT / "problems/requests-70b.yaml",
        "--trace",
        TRACE,
        "--num-prompts",
        "300",
        "--schedule",
        "-d",
        "eagle3",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["completed"] == 300 and doc["spec_decode_acceptance_length"] > 1
    assert doc["label"].startswith("eagle3, k by batch size")


def test_capacity_for_a_request_rate_json(tmp_path):
    p = problem_file(tmp_path)
    args = [
        "--request-rate",
        "20",
        "--slo",
        "p99_ttft_ms=400",
        "--slo",
        "p99_tpot_ms=15",
        *FIXED,
        "--max-num-seqs",
        "8,16",
        "--workers",
        "1",
    ]
    r = run("capacity", p, *args, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    keys = [
        "replicas",
        "gpus",
        "drafters",
        "k",
        "max_num_seqs",
        "per_replica_request_rate",
        "max_request_rate_per_replica",
        "cost_per_hour",
        "cost_per_mtok",
        "metrics",
        "baseline",
        "saving",
        "notes",
    ]
    assert list(doc) == keys
    assert list(doc["baseline"]) == keys[:10]
    want = api.size_fleet_for_rate(
        p,
        20.0,
        ["p99_ttft_ms=400", "p99_tpot_ms=15"],
        input_len=100,
        output_len=20,
        num_prompts=50,
        max_num_seqs=[8, 16],
        workers=1,
    ).to_dict()
    assert doc == json.loads(json.dumps(want))
    shown = run("capacity", p, *args)
    assert shown.exit_code == 0 and "requests/s under" in shown.stdout
    assert "reproduce: allocator bench" in " ".join(shown.stderr.split())


def test_capacity_rate_sweep_plot(tmp_path):
    p = problem_file(tmp_path)
    png = tmp_path / "s.png"
    r = run(
        "capacity",
        p,
        "--request-rate",
        "20",
        "--slo",
        "p99_ttft_ms=400",
        *FIXED,
        "--max-num-seqs",
        "16",
        "--workers",
        "1",
        "--sweep-rate",
        "5:60:4",
        "--plot",
        png,
    )
    assert r.exit_code == 0, r.output
    assert png.stat().st_size > 0 and "$/h against request rate" in r.stdout


def bad_cases(tmp_path: Path):
    good = problem_file(tmp_path)
    tight = tmp_path / "tight.yaml"
    tight.write_text(
        yaml.safe_dump(
            rp.data(
                scheduler={"max_num_seqs": 4, "max_num_batched_tokens": 2048, "kv_cache_tokens": 64}
            )
        )
    )
    short = tmp_path / "short.yaml"
    short.write_text(
        yaml.safe_dump(
            rp.data(
                scheduler={
                    "max_num_seqs": 16,
                    "max_num_batched_tokens": 8192,
                    "kv_cache_tokens": 10**6,
                }
            )
        )
    )
    back = tmp_path / "back.csv"
    back.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n"
        "2023-11-16 18:15:45.00,10,5\n"
    )
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n")
    negative = tmp_path / "negative.csv"
    negative.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,5\n")
    huge = tmp_path / "huge.csv"
    huge.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.68,99999999999999999999999,4\n"
    )
    batched = tmp_path / "batched.yaml"
    batched.write_text(
        yaml.safe_dump(
            rp.data(
                scheduler={
                    "max_num_seqs": 16,
                    "max_num_batched_tokens": 9223372036854775807,
                    "kv_cache_tokens": 10**6,
                }
            )
        )
    )
    slo = ["--request-rate", "5", "--workers", "1", *FIXED]
    b = ["bench", good]
    c = ["capacity", good]
    return [
        (c + slo + ["--slo", "p99_foo_ms=5"], "--slo"),
        (c + slo + ["--slo", "p100_ttft_ms=5"], "--slo"),
        (c + slo + ["--slo", "p99_ttft_ms=-5"], "--slo"),
        (c + slo + ["--slo", "p99_tpot_ms=2"], "--slo"),  # no configuration reaches it
        (c + slo, "--slo"),  # none given
        (c + ["--request-rate", "-2", "--slo", "p99_ttft_ms=5", *FIXED], "--request-rate"),
        (b + ["--request-rate", "-2", *FIXED], "--request-rate"),
        (b + ["--request-rate", "0", *FIXED], "--request-rate"),
        (b + ["--trace", back], "--trace"),
        (b + ["--trace", garbled], "--trace"),
        (b + ["--trace", negative], "--trace"),
        (c + ["--request-rate", "5", "--slo", "p99_ttft_ms=5", "--trace", back], "--trace"),
        (b + ["--input-len", "-3", "--output-len", "5"], "--input-len"),
        (b + ["--input-len", "3", "--output-len", "0"], "--output-len"),
        (["bench", short, "--input-len", "1000", "--output-len", "100"], "serving.prefill_ms"),
        (
            ["bench", tight, "--input-len", "100", "--output-len", "10"],
            "serving.scheduler.kv_cache_tokens",
        ),
        (b + ["--max-num-seqs", "40", *FIXED], "--max-num-seqs"),
        (b + ["-k", "2", *FIXED], "--k"),
        (b + ["-d", "nope", "-k", "2", *FIXED], "--drafters"),
        (b + ["-d", "eagle,ngram", "-k", "2", *FIXED], "--drafters"),
        (b + ["-d", "eagle", "-k", "2", "--schedule", *FIXED], "--schedule"),
        (b + ["-d", "eagle", "--schedule", "--engine", "sglang", *FIXED], "--engine"),
        (b + ["--trace", TRACE, "--input-len", "5"], "--trace"),
        (b + ["--trace-speedup", "2", *FIXED], "--trace-speedup"),
        (b + ["--trace", TRACE, "--trace-speedup", "2", "--request-rate", "3"], "--trace-speedup"),
        (b + ["--input-len", "10", "--output-len", "5", "--num-prompts", "0"], "--num-prompts"),
        (b + ["--burstiness", "0", *FIXED], "--burstiness"),
        (b + ["--max-concurrency", "0", *FIXED], "--max-concurrency"),
        (b + ["--plot", tmp_path / "x.txt", *FIXED], "--plot"),
        (b, "--input-len"),  # no requests
        (c + slo + ["--slo", "p99_ttft_ms=5", "--workers", "0"], "--workers"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--max-num-seqs", "a,b"], "--max-num-seqs"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--sweep-rate", "0:5:3"], "--sweep-rate"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--plot", tmp_path / "x.png"], "--plot"),
        (c + slo + ["--slo", "p99_ttft_ms=5", "--tpot-ms", "5"], "--tpot-ms"),
        (b + ["--slo", "p99_foo_ms=5", "--plot", tmp_path / "x.png", *FIXED], "--slo"),
        (b + ["--slo", "p99_ttft_ms=soon", *FIXED], "--slo"),
        # extreme values: refused before they hang, overflow or take all memory
        (b + ["--input-len", "9223372036854775807", "--output-len", "1"], "--input-len"),
        (b + ["--input-len", "10", "--output-len", "99999999999999999999"], "--output-len"),
        (b + ["--trace", huge], "--trace"),
        (b + ["--request-rate", "1e-100", *FIXED], "--request-rate"),
        (b + ["--trace", TRACE, "--trace-speedup", "1e-300"], "--trace-speedup"),
        (b + ["--max-num-seqs", "100000000000", *FIXED], "--max-num-seqs"),
        (c + slo + ["--slo", "p99_ttft_ms=2000", "--max-num-seqs", "51"], "--max-num-seqs"),
        (["bench", batched, *FIXED], "serving.scheduler.max_num_batched_tokens"),
    ]


@pytest.mark.parametrize("index", range(45))
def test_bad_input_is_one_line_and_leaves_no_file(tmp_path, index):
    cases = bad_cases(tmp_path)
    assert len(cases) == 45
    args, field = cases[index]
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run(*args, "--json", tmp_path / "o.json")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.stderr
    assert "Traceback" not in r.output and r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == before


# ---------------------------------------------------------------- the bench plot
def latencies(seed: int = 0, n: int = 400):
    """TTFT, TPOT (one-token requests NaN) and ITL samples, ms, of a made-up run."""
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(np.log(150.0), 0.9, n)
    tpot = rng.lognormal(np.log(12.0), 0.25, n)
    tpot[::17] = np.nan
    itl = np.concatenate([rng.lognormal(np.log(30.0), 0.2, 20 * n), rng.uniform(100, 400, n)])
    return ttft, tpot, itl


def drawn_figure(monkeypatch):
    """Keep the figure ``plot_bench`` draws, to read its axes after it returns."""
    kept = []
    real = bench_plot.figure

    def keep(*args, **kwargs):
        fig = real(*args, **kwargs)
        kept.append(fig)
        return fig

    monkeypatch.setattr(bench_plot, "figure", keep)
    return kept


def test_bench_plot_marks_the_percentiles_and_draws_each_slo_at_its_ceiling(tmp_path):
    ttft, tpot, itl = latencies()
    slos = parse_slos(
        ["p99_ttft_ms=600", "p95_tpot_ms=14", "mean_itl_ms=40", "median_e2el_ms=9000"]
    )
    drawn = plot_bench(ttft, tpot, itl, tmp_path / "b.png", slos=slos)
    assert (tmp_path / "b.png").stat().st_size > 0
    finite = {"ttft": ttft, "tpot": tpot[np.isfinite(tpot)], "itl": itl}
    asked = {"ttft": [], "tpot": [95.0], "itl": []}  # an SLO's percentile is marked too
    for name, values in finite.items():
        panel = drawn[name]
        np.testing.assert_array_equal(panel["x"], np.sort(values))
        np.testing.assert_allclose(panel["share"], np.arange(1, values.size + 1) / values.size)
        want = {f"p{p:g}": np.percentile(values, p) for p in [50.0, 90.0, 99.0, *asked[name]]}
        assert sorted(panel["marks"]) == sorted(want)
        for mark, value in want.items():
            assert panel["marks"][mark] == pytest.approx(value, rel=1e-12)
            # labelled with its value beside the dot, or named in the legend
            text = f"{mark} {bench_plot.ms_text(value)} ms"
            assert text in panel["labels"] + panel["legend"]
        assert panel["xscale"] == "log"
    # each SLO on its own panel, at its ceiling; the e2el one has no panel
    assert drawn["ttft"]["slos"] == {"p99_ttft_ms": 600.0}
    assert drawn["tpot"]["slos"] == {"p95_tpot_ms": 14.0}
    assert drawn["itl"]["slos"] == {"mean_itl_ms": 40.0}
    shown = drawn["ttft"]["labels"] + drawn["ttft"]["legend"]
    assert "SLO p99_ttft_ms ≤ 600 ms" in shown
    assert not any("e2el" in t for name in finite for t in drawn[name]["labels"])


def test_bench_plot_without_slos_keeps_its_contract(tmp_path):
    ttft, tpot, itl = latencies(1)
    drawn = plot_bench(ttft, tpot, itl, tmp_path / "b.svg", title="cost in $/h: $x^$")
    assert drawn["format"] == "svg" and drawn["ylabel"].startswith("share of values")
    assert [drawn[k]["slos"] for k in ("ttft", "tpot", "itl")] == [{}, {}, {}]
    assert all(sorted(drawn[k]["marks"]) == ["p50", "p90", "p99"] for k in ("ttft", "tpot"))
    text = svg_text(tmp_path / "b.svg")
    assert "cost in $/h: $x^$" in text  # a name is drawn as written, never as TeX
    empty = plot_bench([], [np.nan], [5.0], tmp_path / "e.png")
    assert empty["ttft"]["marks"] == {} and empty["ttft"]["x"].size == 0


def test_an_slo_far_off_the_values_is_named_not_drawn(tmp_path):
    ttft, tpot, itl = latencies(2)
    slos = parse_slos(["p99_ttft_ms=1e9", "p99_tpot_ms=10"])
    drawn = plot_bench(ttft, tpot, itl, tmp_path / "b.png", slos=slos)
    assert drawn["ttft"]["slos"] == {"p99_ttft_ms": None}
    assert drawn["ttft"]["legend"] == ["SLO p99_ttft_ms ≤ 1,000,000,000 ms (off the axis)"]
    # one within the values' span of them widens the axis to reach it
    assert drawn["tpot"]["slos"] == {"p99_tpot_ms": 10.0}


def svg_text(path: Path) -> str:
    """The SVG without its comments (matplotlib keeps each text's source there)."""
    return re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.S)


@pytest.mark.parametrize(
    "lo, hi",
    [(1.2, 1.9), (5.8, 28.0), (21.0, 460.0), (30.0, 2200.0), (35.0, 15000.0), (1e-3, 5e4)],
)
def test_log_axes_are_plain_numbers_whose_labels_do_not_overlap(tmp_path, monkeypatch, lo, hi):
    """Before, a log axis spanning less than a decade or two labelled its minor ticks in
    mathtext (``3×10¹``), side by side and overlapping; now major ticks are plain numbers
    and minor ticks carry no label."""
    from matplotlib.ticker import NullFormatter

    kept = drawn_figure(monkeypatch)
    values = np.geomspace(lo, hi, 300)
    svg = tmp_path / "b.svg"
    drawn = plot_bench(values, values, values, svg, slos=parse_slos(["p99_itl_ms=" + str(hi)]))
    (fig,) = kept
    renderer = fig.canvas.get_renderer()
    for ax, name in zip(fig.axes, ("ttft", "tpot", "itl"), strict=True):
        assert ax.get_xscale() == "log" == drawn[name]["xscale"]
        assert isinstance(ax.xaxis.get_minor_formatter(), NullFormatter)
        assert all(not t.get_text() for t in ax.get_xminorticklabels())
        shown = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        left, right = ax.get_xlim()
        shown = [t for t in shown if left <= t.get_position()[0] <= right]
        assert len(shown) >= 2, [t.get_text() for t in shown]
        assert [t.get_text() for t in shown] == drawn[name]["xticks"]
        for t in shown:
            value = float(t.get_text().replace(",", ""))
            assert value == pytest.approx(t.get_position()[0], rel=1e-6)  # plain number
        for t in [*ax.get_xticklabels(), *ax.get_yticklabels(), *ax.get_xminorticklabels()]:
            assert "mathdefault" not in t.get_text() and "$" not in t.get_text()
        boxes = [t.get_window_extent(renderer) for t in shown]
        for a, b in itertools.combinations(boxes, 2):
            assert not boxes_overlap(
                np.array([a.x0, a.y0, a.x1, a.y1]), np.array([[b.x0, b.y0, b.x1, b.y1]])
            )[0], (name, [t.get_text() for t in shown])
    text = svg_text(svg)
    assert "mathdefault" not in text and "×" not in text


def test_bench_slo_notes_say_met_or_missed_and_the_run_is_unchanged(tmp_path):
    p = problem_file(tmp_path)
    args = ["bench", p, "-d", "eagle", "-k", "2", "--request-rate", "10", *FIXED]
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    slos = ["--slo", "p99_ttft_ms=100000", "--slo", "p99.9_itl_ms=0.001"]
    r = run(*args, *slos, "--plot", png, "--json", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    plain = run(*args, "--json", "-")
    assert plain.exit_code == 0, plain.output
    again = json.loads(plain.stdout)
    for d in (doc, again):
        d.pop("date")
        # the SLOs' one mark on the document: vLLM's goodput (as --goodput writes it)
        d.pop("request_goodput")
        d["notes"] = [n for n in d["notes"] if not n.startswith("request_goodput")]
    assert doc == again  # --slo is drawn and checked only
    lines = [line for line in r.stderr.splitlines() if line.startswith("SLO ")]
    want_ttft = f"p99_ttft_ms = {doc['p99_ttft_ms']:,.6g} ms"
    assert lines[0] == f"SLO p99_ttft_ms <= 100000 ms: met, {want_ttft}"
    assert lines[1].startswith("SLO p99.9_itl_ms <= 0.001 ms: missed, p99.9_itl_ms = ")
    assert len(lines) == 2 and png.stat().st_size > 0


# ---------------------------------------------------------------- async scheduling
SCHED = {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "kv_cache_tokens": 200_000}


def test_async_scheduling_comes_from_the_file_unless_a_flag_says(tmp_path):
    """vLLM 0.33's default (async scheduling) unless ``serving.scheduler.async_scheduling``
    says false; ``--no-async-scheduling`` / ``--async-scheduling`` replace the file's, and
    the JSON says which ran. The two schedulers give different runs (a request sent during
    a step starts a step later under async scheduling), each the API's document."""
    default = problem_file(tmp_path)
    sync_file = tmp_path / "sync.yaml"
    sync_file.write_text(yaml.safe_dump(rp.data(scheduler={**SCHED, "async_scheduling": False})))
    args = ["-d", "eagle", "-k", "2", "--request-rate", "10", *FIXED, "--json", "-"]
    docs = {}
    for name, path, flag, want in (
        ("file default", default, [], True),
        ("flag off", default, ["--no-async-scheduling"], False),
        ("file off", sync_file, [], False),
        ("flag on", sync_file, ["--async-scheduling"], True),
    ):
        r = run("bench", path, *args, *flag)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["async_scheduling"] is want, name
        doc.pop("date")
        docs[name] = doc
    assert docs["flag off"] == docs["file off"]
    assert docs["flag on"] == docs["file default"]
    assert docs["file default"]["mean_ttft_ms"] != docs["file off"]["mean_ttft_ms"]
    want = api.bench(
        sync_file,
        drafters=["eagle"],
        k=2,
        request_rate=10.0,
        input_len=100,
        output_len=20,
        num_prompts=50,
    ).to_dict()
    want.pop("date")
    assert docs["file off"] == json.loads(json.dumps(want))


def test_async_scheduling_reaches_capacity_for_a_rate(tmp_path):
    """``capacity --request-rate --no-async-scheduling`` is the API's answer with
    ``async_scheduling=False``, and that answer's reproducing ``bench`` runs the
    synchronous scheduler; for a token load the flag is refused."""
    p = problem_file(tmp_path)
    slo = ["p99_ttft_ms=400", "p99_tpot_ms=15"]
    args = ["--request-rate", "20", "--slo", slo[0], "--slo", slo[1], *FIXED]
    args += ["--max-num-seqs", "8,16", "--workers", "1", "--json", "-"]
    r = run("capacity", p, *args, "--no-async-scheduling")
    assert r.exit_code == 0, r.output
    kw = dict(input_len=100, output_len=20, num_prompts=50, max_num_seqs=[8, 16], workers=1)
    want = api.size_fleet_for_rate(p, 20.0, slo, async_scheduling=False, **kw).to_dict()
    assert json.loads(r.stdout) == json.loads(json.dumps(want))
    refused = run("capacity", p, "--tokens-per-s", "1000", "--no-async-scheduling")
    assert refused.exit_code == 2
    assert refused.stderr.strip().startswith("error: --no-async-scheduling:"), refused.stderr


def test_async_scheduling_field_must_be_a_bool(tmp_path):
    p = problem_file(tmp_path, scheduler={**SCHED, "async_scheduling": "yes"})
    r = run("bench", p, *FIXED)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: serving.scheduler.async_scheduling:"), r.stderr
    good = rp.problem()
    with pytest.raises(ParameterError, match="async_scheduling"):
        api.bench(good, input_len=10, output_len=5, num_prompts=5, async_scheduling="no")


def test_sglang_is_refused_where_the_simulator_would_run_vllms_scheduler(tmp_path):
    """``bench`` and ``capacity --request-rate`` with ``--engine sglang``: one line on
    ``--engine``, exit 2, no file (the simulator is vLLM's scheduler, SGLang's is not
    modelled); ``capacity --tokens-per-s --engine sglang`` (no scheduler simulated) still
    answers with what SGLang serves."""
    p = problem_file(tmp_path)
    out = tmp_path / "o.json"
    slo = ["--slo", "p99_ttft_ms=400"]
    for args in (
        ["bench", p, "-d", "eagle", "-k", "2", *FIXED],
        ["bench", p, *FIXED],
        ["capacity", p, "--request-rate", "5", *slo, *FIXED],
    ):
        r = run(*args, "--engine", "sglang", "--json", out)
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --engine: sglang:"), r.stderr
        assert "vLLM's scheduler" in lines[0] and "not modelled" in lines[0]
        assert not out.exists()
    with pytest.raises(ParameterError, match="not modelled"):
        api.bench(rp.problem(), input_len=10, output_len=5, num_prompts=5, engine="sglang")
    r = run("capacity", p, "--tokens-per-s", "1000", "--engine", "sglang", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["replicas"] >= 1
