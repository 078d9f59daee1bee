"""Every command the README and the site's guides show runs, and prints what they quote.

One test per command (parametrized, so pytest-xdist spreads them), each in a scratch copy
of ``problems/`` and ``docs/`` (outputs land there), in-process through the command line's
own entry point. A command that reads a file an earlier command of the same page writes
(``scratch/eagle3.yaml``, a study's database) runs after that command, in the same test.

What a page says a command prints is checked against what it prints:

- a ``console`` block's lines after ``$ allocator …`` appear, in order, in the output
  (whitespace and table rules ignored; a line ending in ``…`` is a prefix);
- ``QUOTES`` below pairs each number a guide's prose quotes with the text of the output
  it comes from: the page must say the one and the command must print the other.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, Shown, all_pages, shown_commands, text

SLOW = (
    # each simulates many candidate fleets request by request (several seconds)
    "allocator capacity problems/requests-70b.yaml --request-rate",
    # the greedy search over 135 candidate runs
    "allocator profile-plan",
    # 68 simulated deployments on the roofline, asked at every step
    "allocator front problems/roofline-llama31-8b.yaml",
)
OUTPUT_OPTIONS = ("--plot", "--json", "--csv", "--out", "--per-request")


def items() -> list[tuple[str, list[Shown], Shown]]:
    """(id, the commands run before it, the command) for every command shown."""
    out = []
    for page in all_pages():
        shown = shown_commands(page)
        seen: dict[str, int] = {}
        for i, cmd in enumerate(shown):
            seen[cmd.line] = seen.get(cmd.line, 0) + 1
            ident = f"{cmd.page}: {cmd.line}" + (
                f" #{seen[cmd.line]}" if seen[cmd.line] > 1 else ""
            )
            out.append((ident, prerequisites(shown[:i], cmd), cmd))
    return out


def _written(cmd: Shown) -> set[str]:
    words = cmd.words
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUT_OPTIONS}


def _storage(cmd: Shown) -> str | None:
    words = cmd.words
    return words[words.index("--storage") + 1] if "--storage" in words else None


def prerequisites(before: list[Shown], cmd: Shown) -> list[Shown]:
    """The earlier commands of the page whose files ``cmd`` reads (and theirs)."""
    reads = {w for w in cmd.words[1:] if w.startswith("scratch/")} - _written(cmd)
    needed = [
        b
        for b in before
        if (_written(b) & reads) or (_storage(cmd) and _storage(b) == _storage(cmd))
    ]
    chain: list[Shown] = []
    for b in needed:
        for p in prerequisites(before[: before.index(b)], b) + [b]:
            if p not in chain:
                chain.append(p)
    return chain


ITEMS = items()


def params():
    for ident, pre, cmd in ITEMS:
        marks = [pytest.mark.slow] if cmd.line.startswith(SLOW) else []
        yield pytest.param(pre, cmd, ident.split(": ", 1)[1], id=ident, marks=marks)


_RULES = re.compile(r"[│┃┏┓┗┛━─┡┩╇┳┻┼┬┴├┤└┘┌┐╭╮╰╯╿╽]")


def flat(s: str) -> str:
    """Text with table rules dropped and every run of whitespace (line breaks too) one space."""
    return " ".join(_RULES.sub(" ", s).split())


def run(words: list[str]):
    from tests.support.cli_runner import run as invoke

    return invoke(*words[1:])


def output_of(cmd: Shown, result, cwd: Path) -> str:
    """What the command printed, stdout then stderr, and the JSON documents it wrote."""
    parts = [result.stdout, result.stderr or ""]
    for target in _written(cmd):
        path = cwd / target
        if target.endswith(".json") and path.exists():
            parts.append(json.dumps(json.loads(path.read_text())))
    return "\n".join(parts)


@pytest.mark.parametrize(("before", "cmd", "key"), list(params()))
def test_shown_command_runs_and_prints_what_the_page_says(before, cmd, key, tmp_path, monkeypatch):
    """``key``: the command, with `` #2`` for its second showing on a page."""
    for folder in ("problems", "docs"):
        shutil.copytree(ROOT / folder, tmp_path / folder, symlinks=True)
    (tmp_path / "scratch").mkdir()  # the tour's `mkdir -p scratch`
    monkeypatch.chdir(tmp_path)
    for b in before:
        r = run(b.words)
        assert r.exit_code == 0, f"{b.line}\n{r.output[-2000:]}"
    r = run(cmd.words)
    assert r.exit_code == 0, f"{cmd.line}\n{r.output[-2000:]}"
    for target in _written(cmd):
        if target != "-":
            assert (tmp_path / target).stat().st_size > 0, target
            # every file a command writes goes to scratch/ (or is the tour's picture)
            assert target.startswith("scratch/") or target == "docs/front.png", cmd.line
    printed = flat(output_of(cmd, r, tmp_path))
    # a console block's printed lines, in order
    at = 0
    for line in cmd.printed:
        want = flat(line)
        if not want:
            continue
        if want.endswith("…"):
            want = want[:-1].rstrip()
        found = printed.find(want, at)
        assert found >= 0, f"{cmd.page} shows a line `{cmd.line}` does not print:\n{line}"
        at = found + len(want)
    for page, said, prints in QUOTES.get(key, []):
        assert flat(said) in flat(text(page)), f"{page} no longer says: {said}"
        assert flat(prints) in printed, f"{cmd.line} no longer prints: {prints}"


def test_every_quote_belongs_to_a_command_shown():
    keys = {ident.split(": ", 1)[1] for ident, _, _ in ITEMS}
    assert set(QUOTES) <= keys, set(QUOTES) - keys


def test_commands_are_shown_and_some_are_slow():
    """The collection itself: every guide shows commands, and the slow marks still match."""
    pages = {cmd.page for _, _, cmd in ITEMS}
    guides = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "guides").glob("*.md")}
    assert guides - {"docs/guides/engines.md"} <= pages, guides - pages
    for prefix in SLOW:
        assert any(cmd.line.startswith(prefix) for _, _, cmd in ITEMS), prefix


# ------------------------------------------------------------------ the numbers quoted
# command -> (page, what the page says, what the command prints)
G = "docs/guides/"
QUOTES: dict[str, list[tuple[str, str, str]]] = {
    "allocator solve docs/tour.yaml --plot docs/front.png": [
        ("README.md", "the top pools three drafters up to `k = 10`", "ngram, head, tiny-68m 3 10"),
        ("README.md", "Four drafters", "15 subsets"),
    ],
    "allocator breakeven problems/paper-r2.yaml --ensemble weak-a,weak-b --baseline weak-a": [
        (
            G + "correlated-errors.md",
            "13.3% gain vanishes at latent correlation 0.476651, an error correlation of 0.316299",
            "The gain vanishes at latent correlation 0.476651, an error correlation of 0.316299",
        ),
        (G + "correlated-errors.md", "13.3% gain", "gain +13.3147% with independent errors"),
    ],
    "allocator breakeven problems/paper-r2-correlated.yaml --ensemble weak-a,weak-b "
    "--baseline weak-a --plot scratch/gain.png": [
        (
            G + "correlated-errors.md",
            "error correlation 0.2 (latent 0.309017) leaves a gain of 4.54%",
            "(exchangeable, latent correlation 0.309017 between the first two): gain +4.5365%",
        ),
    ],
    "allocator paper": [
        (
            G + "correlated-errors.md",
            "`0.936^4 = 0.767544169216` should be `0.767544201216`",
            "alpha_3^4 0.7675442012 0.767544169216 differs",
        ),
        (
            G + "correlated-errors.md",
            "`E_4[A] = 3.632122356` is really `3.632121856`",
            "E_4[A] ensemble 3.632121856 3.632122356 differs",
        ),
        (
            G + "correlated-errors.md",
            "`S_ens = 2.27007616` (printed `2.270076473`)",
            "S_ens (k=4) 2.27007616 2.270076473 differs",
        ),
        (
            G + "correlated-errors.md",
            "`S_rel = 1.251880` (printed `1.251877`)",
            "S_rel (k=4, as printed) 1.251880235 1.251877 differs",
        ),
        (
            G + "correlated-errors.md",
            "R3's three drafters gain 65.7% over one, not 25.2%",
            "R3 3.3 S_rel (own optimal k, as §3.3 defines) 1.6573983",
        ),
    ],
}
QUOTES.update(
    {
        "allocator solve problems/paper-r2.yaml --strategy optuna --storage sqlite:///study.db "
        "--study r2 --trials 30 #2": [
            (G + "fronts.md", "The second run reports `66 finished in the study`", "66 finished"),
        ],
        "allocator plan problems/mixed-traffic.yaml": [
            (
                G + "fronts.md",
                "hosts EAGLE-2 and prompt\nlookup (hosting cost 0.5",
                "host eagle2, pld (hosting cost 0.5)",
            ),
            (G + "fronts.md", "overall throughput of 2.788828", "overall throughput 2.788828"),
            (G + "fronts.md", "3.00% above the best single", "routing gains +3.00%"),
            (G + "fronts.md", "(EAGLE-2 at `k = 7`: 2.707694)", "(eagle2, k=7): 2.707694"),
            (G + "fronts.md", "chat (`k = 8`)", "chat 0.5 eagle2 8"),
            (G + "fronts.md", "code (`k = 10`)", "code 0.3 eagle2 10"),
            (G + "fronts.md", "prompt lookup (`k = 6`)", "summarisation 0.2 pld 6"),
        ],
        "allocator plan problems/mixed-traffic.yaml --pooled": [
            (G + "fronts.md", "(0.64 GB)", "host eagle2, sps-68m, pld (hosting cost 0.64)"),
            (G + "fronts.md", "4.17% above the best single", "routing gains +4.17%"),
            (G + "fronts.md", "chat\npools all three", "chat 0.5 eagle2, sps-68m, pld"),
            (G + "fronts.md", "code runs EAGLE-2 with prompt lookup", "code 0.3 eagle2, pld"),
            (G + "fronts.md", "(3.520383 against 3.053056", "sps-68m, pld 9 3.520383 3.053056"),
        ],
        "allocator schedule problems/serving-eagle.yaml": [
            (
                G + "serving.md",
                "`k = 4` at batch 1 (1.88×",
                "1 eagle 4 273.751 273.751 3.653 1.8807",
            ),
            (
                G + "serving.md",
                "`k = 3` up to 64 (1.64×)",
                "64 eagle 3 12318.5 192.477 5.195 1.6418",
            ),
            (
                G + "serving.md",
                "speculation still pays at 64",
                "speculation still pays at the largest batch size planned",
            ),
        ],
        "allocator evaluate problems/serving-eagle.yaml --drafters eagle --k 7 --batch 64": [
            (G + "serving.md", "the table's\n120.57 ms, runs at 0.22×", "step_ms 120.57"),
            (G + "serving.md", "runs at 0.22× of plain decoding", "speedup 0.222229479"),
        ],
        "allocator evaluate problems/serving-eagle.yaml -d eagle -k 3 --batch 16 --context 8192": [
            (G + "serving.md", "gives the same 10.30 ms step", "step_ms 10.3028571"),
            (
                G + "serving.md",
                "context 8192 tokens: the measured step_ms tables and verify_ms hold at the "
                "context they were measured at and do not change with it (give serving.hardware "
                "and serving.model for a step time that reads the context)",
                "context 8192 tokens: the measured step_ms tables and verify_ms hold at the "
                "context they were measured at and do not change with it (give serving.hardware "
                "and serving.model for a step time that reads the context)",
            ),
        ],
        "allocator solve scratch/eagle3.yaml --export vllm": [
            (
                G + "measurements.md",
                '{"method": "eagle3", "model": ..., "num_speculative_tokens": 4}',
                '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
                '"num_speculative_tokens": 4}',
            ),
        ],
        "allocator solve scratch/eagle3.yaml --export sglang": [
            (
                G + "measurements.md",
                "--speculative-algorithm EAGLE3",
                "--speculative-algorithm EAGLE3",
            ),
        ],
        "allocator solve scratch/ngram.yaml --export vllm": [
            (
                G + "measurements.md",
                '{"method": "ngram", "num_speculative_tokens": 3}',
                '{"method": "ngram", "num_speculative_tokens": 3}',
            ),
        ],
        "allocator bench problems/requests-70b.yaml --drafters eagle3 --k 3 --max-num-seqs 10 "
        "--request-rate 1 --trace problems/traces/azure-llm-inference-2023/"
        "AzureLLMInferenceTrace_conv.csv --num-prompts 1000 --json scratch/bench.json "
        "--per-request scratch/requests.csv --plot scratch/bench.png": [
            (G + "requests.md", "a mean TPOT of 10.89 ms", "Mean TPOT (ms) 10.89"),
            (G + "requests.md", "median ITL of 31.93 ms", "Median ITL (ms) 31.93"),
            (G + "requests.md", "the default gives 194.38 ms", "Mean TTFT (ms) 194.38"),
        ],
        "allocator bench problems/requests-70b.yaml --drafters eagle3 --k 3 --max-num-seqs 10 "
        "--request-rate 1 --trace problems/traces/azure-llm-inference-2023/"
        "AzureLLMInferenceTrace_conv.csv --num-prompts 1000 --no-async-scheduling": [
            (G + "requests.md", "a mean TTFT of 162.39 ms", "Mean TTFT (ms) 162.39"),
        ],
        "allocator calibrate problems/measured/vllm-issue20780-bs1.csv --problem "
        "problems/measured/llama31-8b-eagle.yaml --out scratch/llama-calibrated.yaml": [
            (
                G + "calibration.md",
                f"| `{name}` | {value} | {interval} |",
                f"{name} {value} {interval}",
            )
            for name, value, interval in (
                ("verify_fixed_ms", "7.07", "6.814 .. 7.326"),
                ("overhead_ms", "0.856892", "0.4512 .. 1.263"),
                ("drafters.eagle1.fixed_ms", "0.690039", "0.6152 .. 0.7649"),
                ("drafters.eagle3.fixed_ms", "1.10509", "1.026 .. 1.184"),
            )
        ]
        + [
            (
                G + "calibration.md",
                f"| `{name}` | {value} | not separately determined; determined: `{combo}` |",
                f"{name} {value} not separately determined; determined: {combo}",
            )
            for name, value, combo in (
                ("verify_per_seq_ms", "0 (written)", "verify_fixed_ms + verify_per_seq_ms = 7.07"),
                (
                    "drafters.eagle1.per_seq_ms",
                    "0 (written)",
                    "drafters.eagle1.fixed_ms + drafters.eagle1.per_seq_ms = 0.690039",
                ),
                (
                    "drafters.eagle3.per_seq_ms",
                    "0 (written)",
                    "drafters.eagle3.fixed_ms + drafters.eagle3.per_seq_ms = 1.10509",
                ),
            )
        ]
        + [
            (
                G + "calibration.md",
                "| `compute_ms_per_token` | … (written) | not separately determined |",
                # its value is arbitrary (no row moves it): only the mark and the reason
                "(written) not separately determined overhead_ms",
            ),
            (
                G + "calibration.md",
                'the note "one batch size measured\n(1)"',
                "one batch size measured (1): the batch slopes are not fitted",
            ),
        ],
        "allocator calibrate problems/measured/vllm-issue20780-bs1.csv --problem "
        "problems/measured/llama31-8b-eagle.yaml --out scratch/llama-by-k.yaml --holdout by-k": [
            (
                G + "calibration.md",
                "`by-k` predicts 12 of the 13 rows (median 0.98%, largest 4.67%)",
                "held-out rows: median |error| 0.98%, largest 4.67%",
            ),
            (G + "calibration.md", "12 of the 13 rows", "1 of 7 group(s) not predictable"),
            (G + "calibration.md", "the\n`k = 0` group cannot be", "from the others (k = 0)"),
        ],
        "allocator calibrate problems/measured/sglang-specforge339-2xh100.csv --problem "
        "problems/measured/qwen3-30b-a3b-eagle3.yaml --out scratch/qwen-calibrated.yaml "
        "--json scratch/qwen-calibration.json": [
            (G + "calibration.md", "(3.78643 ms,", "verify_fixed_ms 3.78643"),
            (G + "calibration.md", "0.799657 ms per sequence", "verify_per_seq_ms 0.799657"),
            (
                G + "calibration.md",
                "`overhead_ms +\n3·drafters.eagle3.fixed_ms = 6.19796`",
                "overhead_ms (determined: overhead_ms + 3·drafters.eagle3.fixed_ms = 6.19796)",
            ),
            (G + "calibration.md", "(1e-10 and 2.06599 ms)", "overhead_ms 1e-10 (written)"),
            (G + "calibration.md", "2.06599 ms", "drafters.eagle3.fixed_ms 2.06599 (written)"),
            (
                G + "calibration.md",
                "(0.285653 ms per sequence",
                "drafters.eagle3.per_seq_ms 0.285653",
            ),
            (
                G + "calibration.md",
                "(`compute_ms_per_token` 1e-10, not separately determined)",
                "compute_ms_per_token 1e-10 (written) not separately determined",
            ),
            (G + "calibration.md", "(447.90\nagainst 566.21", "eagle3 3 4 1.860 447.90"),
            (G + "calibration.md", "566.21 tokens/s at batch 4", "- 0 4 1.000 566.21"),
        ],
        "allocator schedule scratch/qwen-calibrated.yaml": [
            (G + "calibration.md", "keeps speculation off at batch 1", "1 (none) 0 218.051"),
            (
                G + "calibration.md",
                "(speedup\n1.0241, 1.0471, 1.0673)",
                "4 eagle3 1 586.45 146.613 6.821 1.0241",
            ),
            (G + "calibration.md", "1.0471", "8 eagle3 1 822.582 102.823 9.725 1.0471"),
            (G + "calibration.md", "1.0673", "16 eagle3 1 1029.93 64.3707 15.54 1.0673"),
            (
                G + "calibration.md",
                "speculative step times at batch 8..16\nextrapolate the fitted form: speculation "
                "was measured at batch 1..4 only",
                "speculative step times at batch 8..16 extrapolate the fitted form: speculation "
                "was measured at batch 1..4 only",
            ),
            (
                G + "calibration.md",
                "k = 1 lies\noutside the speculative k measured "
                "(3, serving.calibrated_from.speculative_k)",
                "k = 1 lies outside the speculative k measured (3, "
                "serving.calibrated_from.speculative_k)",
            ),
            (
                G + "calibration.md",
                '"(extrapolated: see the notes)"',
                "(extrapolated: see the notes)",
            ),
        ],
        "allocator calibrate problems/measurements/sglang-bench.jsonl --problem "
        "problems/serving-eagle.yaml --out scratch/bench-calibrated.yaml": [
            (G + "calibration.md", "all within 0.01% of the fit", "largest 0.01%"),
            (G + "calibration.md", "`v0` = 5.99996 ms", "verify_fixed_ms 5.99996"),
            (
                G + "calibration.md",
                "0.00117895 ms per sequence",
                "verify_per_seq_ms 0.00117895 0.001068 .. 0.00129",
            ),
            (G + "calibration.md", "interval 0.001068 .. 0.00129", "0.001068 .. 0.00129"),
            (G + "calibration.md", "slope 0.0101039 ms", "drafters.eagle.per_seq_ms 0.0101039"),
            (
                G + "calibration.md",
                "written at batch 1, 3, 4, 15 and 16, the whole batch sizes either side of each "
                "run's",
                "the calibrated tables are written at the whole batch sizes either side of each "
                "(1, 3, 4, 15, 16)",
            ),
            (
                G + "calibration.md",
                "`overhead_ms + 3·drafters.eagle.fixed_ms = 1.45077`",
                "overhead_ms 1e-10 (written) not separately determined; determined: overhead_ms "
                "+ 3·drafters.eagle.fixed_ms = 1.45077",
            ),
            (
                G + "calibration.md",
                "which the fit splits as 10⁻¹⁰ and 0.483589 ms",
                "drafters.eagle.fixed_ms 0.483589 (written) not separately determined",
            ),
            (G + "calibration.md", "0.9793, 3.836 and 15.43", "at batch 0.9793, 3.836, 15.43"),
        ],
        "allocator profile-plan problems/roofline-llama31-8b.yaml --json scratch/plan.json": [
            (
                G + "calibration.md",
                "The plan takes 10 runs out of 135 candidates",
                '"candidates": 135',
            ),
            (
                G + "calibration.md",
                "speculation off at concurrency 1 and 256 (context 1024) and 32 (context 8192)",
                "run01-off-k0-c1-ctx1024.json",
            ),
            (G + "calibration.md", "at concurrency 1 and 256", "run02-off-k0-c256-ctx1024.json"),
            (G + "calibration.md", "and 32 (context 8192)", "run03-off-k0-c32-ctx8192.json"),
            (G + "calibration.md", "`k = 2` (concurrency 1)", "run10-eagle3-k2-c1-ctx1024.json"),
            (
                G + "calibration.md",
                "# roofline-llama31-8b: 10 benchmark run(s) on vllm",
                "# roofline-llama31-8b: 10 benchmark run(s) on vllm",
            ),
            (
                G + "calibration.md",
                "vllm bench serve --model MODEL --dataset-name random --random-input-len 896 "
                "--random-output-len 256 --max-concurrency 1 --num-prompts 8 --percentile-metrics "
                "ttft,tpot,itl,e2el --save-result --result-filename run01-off-k0-c1-ctx1024.json "
                "--metadata hardware=h100-sxm tensor_parallel_size=1",
                "vllm bench serve --model MODEL --dataset-name random --random-input-len 896 "
                "--random-output-len 256 --max-concurrency 1 --num-prompts 8 --percentile-metrics "
                "ttft,tpot,itl,e2el --save-result --result-filename run01-off-k0-c1-ctx1024.json "
                "--metadata hardware=h100-sxm tensor_parallel_size=1",
            ),
        ],
        "allocator tree docs/tree.yaml -d eagle --nodes 32 --depth 8": [
            (
                G + "trees.md",
                "the best tree of 32 nodes and depth ≤ 8 carries E = 4.422346",
                "optimal tree of 32 nodes (at most 32), depth 8: E = 4.422346",
            ),
        ],
        "allocator tree docs/tree.yaml -d eagle": [
            (
                G + "trees.md",
                "most throughput is at 42 nodes (depth 6)",
                "42 4.4262 6 1.4080 3.14359 4.6762 <- best throughput",
            ),
            (
                G + "trees.md",
                "at batch 64 of the\n`serving` section 3 nodes serve best",
                "batch 64: 3 nodes",
            ),
        ],
        "allocator tree docs/tree.yaml -d eagle --engine sglang --nodes 64": [
            (
                G + "trees.md",
                "`--speculative-num-steps 6 --speculative-eagle-topk 6 "
                "--speculative-num-draft-tokens 42`\n(E 4.4136)",
                "--speculative-num-steps 6 --speculative-eagle-topk 6 "
                "--speculative-num-draft-tokens 42: E 4.4136",
            ),
        ],
        "allocator tree docs/tree.yaml -d eagle --nodes 16 --rounds 100000": [
            (
                G + "trees.md",
                "4.02301 over 100,000 steps, holds the\nmodel's 4.03456",
                "simulated 100,000 steps (seed 0): mean 4.02301, 99% interval 4.00249 - "
                "4.04353; model 4.03456",
            ),
        ],
    }
)
