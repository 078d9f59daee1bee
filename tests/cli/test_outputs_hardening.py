"""Outputs that could hang, vanish or fail with a traceback (issue 20): a FIFO nobody reads,
an empty path, a symbolic link to another file system, a closed, full or broken stdout,
and control characters from a problem file reaching the terminal.

Where the operating system is part of the case (a FIFO that could block, a closed, full
or broken stdout, a symbolic link) the real command runs in a subprocess: a hang is a
timeout, a traceback a second line on stderr. Empty paths and control characters run
in-process (:func:`cli`), where an uncaught exception is exit status 1, not 2 or 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.support.cli_runner import run as invoke

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"
SERVING = PROBLEMS / "serving-eagle.yaml"
R2 = PROBLEMS / "paper-r2.yaml"
CORRELATED = PROBLEMS / "paper-r2-correlated.yaml"


def run(*args, timeout=120, **kw):
    kw.setdefault("capture_output", True)
    return subprocess.run(
        [sys.executable, "-m", "allocator", *map(str, args)], text=True, timeout=timeout, **kw
    )


def cli(*args) -> SimpleNamespace:
    """The command run in-process, its outcome named as :func:`run`'s."""
    r = invoke(*args)
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def one_error_line(r, start: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(start), lines[0]
    return lines[0]


#: Every output option of the commands this suite owns, and one of the others'.
OUTPUTS = [
    ("--json", ["schedule", SERVING]),
    ("--json", ["solve", R2]),
    ("--csv", ["solve", R2]),
    ("--plot", ["solve", R2]),
    ("--json", ["evaluate", R2, "-d", "weak-a", "-k", "3"]),
    ("--json", ["paper"]),
    ("--json", ["breakeven", CORRELATED, "-e", "weak-a,weak-b", "--baseline", "weak-a"]),
    ("--json", ["simulate", R2, "-d", "weak-a", "-k", "3", "--rounds", "100"]),
    ("--plot", ["simulate", R2, "-d", "weak-a", "-k", "3", "--rounds", "100"]),
]


# ------------------------------------------------------------------ FIFOs
@pytest.mark.slow
@pytest.mark.parametrize(("option", "args"), OUTPUTS)
def test_a_fifo_nobody_reads_is_refused_not_waited_on(tmp_path, option, args):
    """``mkfifo o.json && allocator schedule ... --json o.json`` blocked forever."""
    fifo = tmp_path / ("o.png" if option == "--plot" else "o.out")
    os.mkfifo(fifo)
    r = run(*args, option, fifo, timeout=60)
    assert r.returncode == 2, r.stderr
    line = one_error_line(r, f"error: {option}: ")
    assert "FIFO no process is reading" in line


def test_a_fifo_with_a_reader_gets_the_whole_document(tmp_path):
    fifo = tmp_path / "o.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = run("schedule", SERVING, "--json", fifo, timeout=60)
    reader.join(timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(got[0])
    assert doc["rows"][0]["batch"] == 1


# ------------------------------------------------------------------ empty paths
@pytest.mark.parametrize(("option", "args"), OUTPUTS)
def test_an_empty_output_path_is_refused(tmp_path, monkeypatch, option, args):
    """``schedule --json ''`` exited 0 having written nothing."""
    monkeypatch.chdir(tmp_path)
    r = cli(*args, option, "")
    assert r.returncode == 2, r.stderr
    assert one_error_line(r, f"error: {option}: ") == f"error: {option}: is empty: give a file name"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_out_of_estimate_and_calibrate_is_refused(tmp_path, monkeypatch):
    log = PROBLEMS / "outcome-log" / "outcomes.csv"
    monkeypatch.chdir(tmp_path)
    r = cli("estimate", log, "--out", "")
    assert r.returncode == 2 and "error: --out: is empty" in r.stderr


# ------------------------------------------------------------------ symbolic links
def _other_file_system(tmp_path: Path) -> Path | None:
    here = os.stat(tmp_path).st_dev
    for base in ("/dev/shm", "/run/shm", "/run/user", tempfile.gettempdir(), "/var/tmp"):
        try:
            if os.stat(base).st_dev != here and os.access(base, os.W_OK):
                return Path(tempfile.mkdtemp(dir=base))
        except OSError:
            continue
    return None


def test_an_output_symlink_to_another_file_system_is_written_through(tmp_path):
    """The temporary file went beside the link and the rename crossed file systems:
    "Invalid cross-device link". The file the link names is written, the link kept."""
    other = _other_file_system(tmp_path)
    if other is None:
        pytest.skip("no writable folder on another file system")
    try:
        target = other / "front.json"
        link = tmp_path / "front.json"
        link.symlink_to(target)
        r = run("solve", R2, "--json", link)
        assert r.returncode == 0, r.stderr
        assert link.is_symlink() and json.loads(target.read_text())["problem"] == "paper-r2"
        assert [p.name for p in other.iterdir()] == ["front.json"]  # no temporary left
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_an_output_symlink_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "front.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "front.json"
    link.symlink_to(target)
    r = run("solve", R2, "--json", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and json.loads(target.read_text())["problem"] == "paper-r2"


# ------------------------------------------------------------------ stdout
def _shell(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PY": sys.executable},
    )


@pytest.mark.parametrize(
    "args", [["schema"], ["paper"], ["solve", R2], ["solve", R2, "--json", "-"]]
)
def test_a_closed_stdout_is_one_line(args):
    """``allocator schema >&-`` ended in an AttributeError traceback."""
    cmd = " ".join(f"'{a}'" for a in args)
    r = _shell(f'"$PY" -m allocator {cmd} >&-')
    assert r.returncode == 2
    assert one_error_line(r, "error: stdout: ") == (
        "error: stdout: is closed: nothing can be shown (write to a file with --json PATH)"
    )


def test_a_closed_stdout_leaves_no_output_file(tmp_path):
    out = tmp_path / "front.json"
    r = _shell(f'"$PY" -m allocator solve "{R2}" --json "{out}" >&-')
    assert r.returncode == 2 and not out.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["schema"], ["solve", R2], ["solve", R2, "--json", "-"]])
def test_a_full_stdout_is_one_line(args):
    cmd = " ".join(f"'{a}'" for a in args)
    r = _shell(f'"$PY" -m allocator {cmd} 2>&1 >/dev/full')
    assert r.returncode == 2
    assert r.stdout.strip().splitlines()[-1] == (
        "error: stdout: cannot write: No space left on device"
    )
    assert "Traceback" not in r.stdout and "Exception ignored" not in r.stdout


@pytest.mark.parametrize("args", ["schema", f"solve '{R2}'", f"solve '{R2}' --json -"])
def test_a_reader_gone_before_the_output_ends_the_command_quietly(args):
    """The pipe's reader exits at once (``| true``): the write meets a broken pipe."""
    r = subprocess.run(
        ["bash", "-c", f'"$PY" -m allocator {args} | true; echo "status ${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PY": sys.executable},
    )
    assert r.stdout.strip() == "status 1"
    assert r.stderr == ""


# ------------------------------------------------------------------ control characters
ESCAPES = "\x1b[31mred\x1b]0;title\x07\x1b[2J\x9b"


def _ansi_problem(tmp_path: Path) -> Path:
    data = yaml.safe_load(SERVING.read_text())
    data["drafters"][0]["name"] = ESCAPES
    data["serving"]["step_ms"][0]["drafters"] = [ESCAPES]
    path = tmp_path / "ansi.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["schedule", "{p}"],
        ["solve", "{p}"],
        ["solve", "{p}", "--batch", "4"],
        ["evaluate", "{p}", "-d", ESCAPES, "-k", "3"],
        ["simulate", "{p}", "-d", ESCAPES, "-k", "3", "--rounds", "100"],
    ],
)
def test_control_characters_in_names_are_shown_escaped(tmp_path, args):
    """An ESC in a drafter's name reached the terminal raw (colours, a cleared screen)."""
    p = _ansi_problem(tmp_path)
    r = cli(*[a.format(p=p) for a in args])
    assert r.returncode == 0, r.stderr
    for text in (r.stdout, r.stderr):
        assert not any(c in text for c in "\x1b\x07\x9b"), text
    assert "\\x1b[31mred" in r.stdout


def test_escaped_names_keep_tables_aligned(tmp_path):
    r = cli("schedule", _ansi_problem(tmp_path))
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    assert rows and len({len(line) for line in rows}) == 1
