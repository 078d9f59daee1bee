"""Bad input, family by family: one ``error: <field>: ...`` line on stderr, exit status 2,
nothing on stdout, no output file, inputs untouched. Or, where the input is fine but
unusual (markup in names, a BOM), the command works and prints it literally."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from allocator.io import inputs
from tests.support.cli_runner import run

GOOD = """\
name: bad-inputs
drafters:
  - {name: weak-a, acceptance: 0.5, unit_cost: 0.1}
  - {name: weak-b, acceptance: [0.8, 0.6], unit_cost: 0.1, hosting_cost: 2}
search: {k: {max: 8}}
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def refused(args, field: str, *, outputs=(), inputs_=(), contains: str = ""):
    """Run; check the one-line refusal naming ``field`` and that nothing was written."""
    before = {Path(p): Path(p).read_bytes() for p in inputs_}
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    assert contains in lines[0], lines[0]
    assert "Traceback" not in r.output and "np.str_" not in r.output
    assert r.stdout == ""
    for o in outputs:
        assert not Path(o).exists(), o
    for p, b in before.items():
        assert p.read_bytes() == b, p
    return lines[0]


@pytest.fixture
def good(tmp_path):
    return write(tmp_path, GOOD)


# ------------------------------------------------------------ nesting, numbers, size


@pytest.mark.parametrize("levels", [100, 5000])
def test_deeply_nested_yaml(tmp_path, levels):
    p = write(tmp_path, "name: x\ndrafters: " + "[" * levels + "]" * levels + "\n")
    field = "drafters" if levels < 1000 else "problem"  # libyaml stops at 1000 levels itself
    refused(["solve", p, "--json", tmp_path / "o.json"], field, outputs=[tmp_path / "o.json"])


def test_deeply_nested_json(tmp_path):
    p = write(tmp_path, '{"name": "x", "drafters": ' + "[" * 5000 + "]" * 5000 + "}", "p.json")
    refused(["solve", p], "problem", contains="nested deeper than 64 levels", inputs_=[p])


def test_integer_of_thousands_of_digits(tmp_path):
    p = write(tmp_path, GOOD.replace("max: 8", "max: " + "9" * 5000))
    refused(["solve", p], "search.k.max", contains="5,000 characters")


def test_integer_of_thousands_of_digits_in_json(tmp_path):
    doc = yaml.safe_load(GOOD)
    text = json.dumps(doc).replace('"max": 8', '"max": ' + "9" * 5000)
    p = write(tmp_path, text, "p.json")
    refused(["solve", p], "problem", contains="5,000 characters")


def test_k_beyond_2_63(tmp_path):
    p = write(tmp_path, GOOD.replace("max: 8", "max: 99999999999999999999"))
    refused(["solve", p], "search.k.max", contains="out of range")


def test_k_max_of_a_billion_is_refused_at_once(tmp_path):
    p = write(tmp_path, GOOD.replace("max: 8", "max: 1000000000"))
    t0 = time.perf_counter()
    refused(["solve", p], "search.k.max", contains="100000")
    assert time.perf_counter() - t0 < 30  # refused before any allocation, not by OOM


@pytest.mark.parametrize(
    "args,field",
    [
        (["--seed", str(2**64)], "--seed"),
        (["--seed", "-1"], "--seed"),
        (["--samples", "1000000"], "--samples"),
    ],
)
def test_seeds_and_samples_out_of_range(good, tmp_path, args, field):
    out = tmp_path / "o.json"
    refused(["solve", good, "--json", out, *args], field, outputs=[out])


def test_evaluate_k_beyond_2_63(good):
    refused(["evaluate", good, "-d", "weak-a", "-k", str(2**64)], "--k")


def test_file_over_the_size_limit(tmp_path):
    p = tmp_path / "huge.yaml"
    with open(p, "wb") as f:
        f.truncate(inputs.MAX_DOCUMENT_BYTES + 1)  # sparse: costs no disk
    refused(["solve", p], "problem", contains="limited to 16 MiB")


# ------------------------------------------------------------ not regular files


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    refused(["solve", fifo], "problem", contains="not a regular file")


def test_dev_urandom_is_refused(tmp_path):
    refused(["solve", "/dev/urandom"], "problem", contains="not a regular file")


def test_fifo_as_estimate_input(tmp_path):
    fifo = tmp_path / "log.csv"
    os.mkfifo(fifo)
    out = tmp_path / "p.yaml"
    refused(["estimate", fifo, "--out", out], "INPUT", outputs=[out])


# ------------------------------------------------------------ values accepted silently before


def test_boolean_acceptance(tmp_path):
    p = write(tmp_path, GOOD.replace("acceptance: 0.5", "acceptance: true"))
    refused(["solve", p], "drafters[weak-a].acceptance", contains="true is a boolean")


def test_text_number(tmp_path):
    p = write(tmp_path, GOOD.replace("unit_cost: 0.1}", "unit_cost: '0.1'}", 1))
    refused(["solve", p], "drafters[weak-a].unit_cost", contains="is text, not a number")


def test_exponent_without_a_dot_is_a_number(tmp_path):
    p = write(tmp_path, GOOD.replace("unit_cost: 0.1}", "unit_cost: 1e-1}", 1))
    assert run("solve", p).exit_code == 0


@pytest.mark.parametrize(
    "text,field",
    [
        ("name: x\nname: y\n" + GOOD.split("\n", 1)[1], "name"),
        (GOOD + "verifier: {pass_cost: 1, pass_cost: 2}\n", "verifier.pass_cost"),
    ],
)
def test_duplicate_yaml_keys(tmp_path, text, field):
    refused(["solve", write(tmp_path, text)], field, contains="duplicate key")


def test_duplicate_json_keys(tmp_path):
    p = write(tmp_path, '{"name": "x", "name": "y", "drafters": []}', "p.json")
    refused(["solve", p], "problem", contains="duplicate key 'name'")


def test_duplicate_workload_names(tmp_path):
    p = write(tmp_path, GOOD + "workloads:\n  - {name: w, weight: 1}\n  - {name: w, weight: 2}\n")
    refused(["solve", p], "workloads[w].name", contains="duplicate workload name")


def test_misspelt_field_is_named_under_its_drafter(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: weak-a, acceptance:", "{name: weak-a, acceptence:"))
    refused(["solve", p], "drafters[weak-a].acceptence", contains="unknown field")


def test_fractional_drafter_budget(good):
    refused(["plan", good, "--budget", "drafters=1.5"], "--budget", contains="whole number")


def test_tiny_pass_cost_with_free_drafters(tmp_path):
    p = write(
        tmp_path,
        "name: x\nverifier: {pass_cost: 1.0e-320}\n"
        "drafters:\n  - {name: a, acceptance: 0.5, unit_cost: 0}\n",
    )
    refused(["solve", p], "verifier.pass_cost", contains="too small")


def test_workload_label_is_shown_as_text_not_numpy(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("a,position,workload\n1,1,1\n1,2,1\n0,3,1\n1,1,2\n0,3,2\n")
    p = write(
        tmp_path,
        "name: x\ndrafters:\n  - {name: a, acceptance: 0.6, unit_cost: 0.1}\n"
        "errors: {model: empirical, outcomes: log.csv}\n"
        "workloads:\n  - {name: '1', weight: 1}\n  - {name: '2', weight: 1}\n",
    )
    refused(["solve", p], "errors.outcomes", contains="workload '2' skips a position")


# ------------------------------------------------------------ outputs


def test_output_onto_the_problem_file(good):
    refused(["solve", good, "--json", good], "--json", inputs_=[good], contains="an input")


def test_estimate_out_onto_its_log(tmp_path):
    log = tmp_path / "log.yaml"  # a CSV log under a .yaml name, so --out accepts the name
    log.write_text("a,b,position\n" + "1,0,1\n0,1,1\n1,1,1\n" * 20)
    refused(
        ["estimate", log, "--out", log, "--errors", "independent"],
        "--out",
        inputs_=[log],
        contains="an input",
    )


def test_second_output_failing_leaves_no_first_output(good, tmp_path):
    csv_path = tmp_path / "front.csv"
    refused(
        ["solve", good, "--csv", csv_path, "--json", "/dev/full"],
        "--json",
        outputs=[csv_path],
        contains="No space left",
    )
    assert not list(tmp_path.glob(".front.csv.*"))  # no temporary file left either


def test_two_outputs_onto_one_path(good, tmp_path):
    out = tmp_path / "out.txt"
    refused(["solve", good, "--json", out, "--csv", out], "--csv", outputs=[out])


def test_unwritable_destination(good, tmp_path):
    refused(["solve", good, "--csv", "/proc/front.csv"], "--csv", contains="cannot write")
    refused(["solve", good, "--json", good / "x.json"], "--json")


def test_csv_dash_is_stdout(good, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("solve", good, "--csv", "-")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].startswith("drafters,m,k,throughput")
    assert not (tmp_path / "-").exists()
    refused(["solve", good, "--csv", "-", "--json", "-"], "--csv")


# ------------------------------------------------------------ the command line itself


@pytest.mark.parametrize(
    "args,field",
    [
        (["solve", "{good}", "--bogus"], "--bogus"),
        (["evaluate", "{good}", "-d", "weak-a", "-k", "x"], "--k"),
        (["evaluate", "{good}", "-d", "weak-a"], "--k"),
        (["nosuchcommand"], "usage"),
    ],
)
def test_usage_errors_are_one_line(good, args, field):
    refused([a.replace("{good}", str(good)) for a in args], field)


def test_usage_error_from_the_installed_entry_point(good):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "allocator", "solve", str(good), "--bogus"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --bogus: no such option (did you mean --robust?) (see --help)"
    ]


def test_memory_error_message_is_only_for_memory_errors():
    import typer

    from allocator.cli.common import handles_input_errors

    @handles_input_errors
    def out_of_memory() -> None:
        raise MemoryError

    @handles_input_errors
    def other() -> None:
        raise RuntimeError("not memory")

    with pytest.raises(typer.Exit):
        out_of_memory()
    with pytest.raises(RuntimeError):
        other()


# ------------------------------------------------------------ unusual but fine


def test_markup_and_mathtext_in_names_print_literally(tmp_path):
    p = write(
        tmp_path,
        'name: "[bold]x"\ndrafters:\n'
        '  - {name: "[bold]a", acceptance: 0.5, unit_cost: 0.1, model: "[red]m"}\n'
        '  - {name: "$x^$", acceptance: 0.6, unit_cost: 0.1}\n'
        "search: {k: {max: 4}}\n",
    )
    svg = tmp_path / "front.svg"
    r = run("solve", p, "--plot", svg)
    assert r.exit_code == 0, r.output
    assert "[bold]a" in r.stdout and "$x^$" in r.stdout and "[bold]x" in r.stdout
    text = svg.read_text()
    assert "[bold]a" in text and "$x^$" in text


def test_error_message_with_brackets_is_not_eaten_as_markup(tmp_path):
    p = write(tmp_path, GOOD.replace("unit_cost: 0.1}", "unit_cost: -1}", 1))
    line = refused(["solve", p], "drafters[weak-a].unit_cost")
    assert "[weak-a]" in line


def test_bom_on_the_first_csv_column(tmp_path, problems_dir):
    src = problems_dir / "outcome-log"
    shutil.copy(src / "problem.yaml", tmp_path / "problem.yaml")
    raw = (src / "outcomes.csv").read_bytes()
    (tmp_path / "outcomes.csv").write_bytes(b"\xef\xbb\xbf" + raw)
    r = run("solve", tmp_path / "problem.yaml", "--json", "-")
    assert r.exit_code == 0, r.output
    out = tmp_path / "est.yaml"
    r = run("estimate", tmp_path / "outcomes.csv", "--out", out)
    assert r.exit_code == 0, r.output
    assert "distil-1b" in yaml.safe_load(out.read_text())["drafters"][0]["name"]


def test_evaluate_ignores_an_unsatisfiable_search_section(tmp_path):
    p = write(tmp_path, GOOD.replace("search: {k: {max: 8}}", "search: {m: {min: 3}}"))
    r = run("evaluate", p, "-d", "weak-a", "-k", "2")
    assert r.exit_code == 0, r.output
    assert run("solve", p).exit_code == 2  # solve searches it, and says why it cannot


def test_yaml_uses_the_c_safe_loader_when_available():
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML built without libyaml")
    assert issubclass(inputs._Loader, yaml.CSafeLoader)
    assert inputs.parse_yaml("a: [1e-3, 2]", "x") == {"a": [0.001, 2]}


# ------------------------------------------------------------ found by an adversarial pass


def test_newline_in_a_name_keeps_the_error_on_one_line(tmp_path):
    p = write(
        tmp_path,
        'name: x\ndrafters:\n  - {name: "a\\nb", acceptance: 0.5, unit_cost: -1}\n',
    )
    refused(["solve", p], "drafters.0.name", contains="a name is one line")


def test_nan_acceptance(tmp_path):
    p = write(tmp_path, GOOD.replace("acceptance: 0.5", "acceptance: .nan"))
    refused(["solve", p], "drafters[weak-a].acceptance", contains="nan is not a number")


def test_log_position_beyond_int64(tmp_path):
    log = write(tmp_path, "a,b,position,round\n1,0,99999999999999999999999,1\n", "log.csv")
    out = tmp_path / "p.yaml"
    refused(["estimate", log, "--out", out], "log.csv line 2", outputs=[out], contains="18 digits")


def test_metrics_counts_beyond_exact_floats(tmp_path):
    text = (
        "vllm:spec_decode_num_drafts_total 1e30\n"
        "vllm:spec_decode_num_draft_tokens_total 3e30\n"
        "vllm:spec_decode_num_accepted_tokens_total 5e29\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3e29\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2e29\n'
    )
    m = write(tmp_path, text, "metrics.txt")
    out = tmp_path / "p.yaml"
    refused(
        ["estimate", m, "--format", "vllm-metrics", "--out", out],
        "metrics.txt",
        outputs=[out],
        contains="2**53",
    )
