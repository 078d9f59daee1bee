"""Issue 27: names that reach scripts, secrets in messages, Ray addresses, signals,
config.json fields and messages. Each case runs the real command in a subprocess (a
traceback is a second line on stderr, a hang a timeout)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from allocator.io.quoting import UNSAFE

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"
SERVING = PROBLEMS / "serving-eagle.yaml"
ROOFLINE = PROBLEMS / "roofline-llama31-8b.yaml"
CAPACITY = PROBLEMS / "capacity-70b.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args, timeout=120, **kw):
    kw.setdefault("capture_output", True)
    return subprocess.run(
        [sys.executable, "-m", "allocator", *map(str, args)],
        text=True,
        timeout=timeout,
        env=ENV,
        **kw,
    )


def one_error_line(r, start: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {start}"), lines[0]
    return lines[0]


def _serving(tmp_path: Path, name: str, model: str = "org/head", top: str | None = None) -> Path:
    data = yaml.safe_load(SERVING.read_text())
    data["name"] = top if top is not None else data["name"]
    data["drafters"][0]["name"] = name
    data["drafters"][0]["model"] = model
    data["serving"]["step_ms"][0]["drafters"] = [name]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


def _roofline(tmp_path: Path, prefix: str) -> Path:
    """The roofline problem with every drafter renamed ``prefix + name``."""
    data = yaml.safe_load(ROOFLINE.read_text())
    names = {d["name"]: prefix + d["name"] for d in data["drafters"]}

    def rename(o):
        if isinstance(o, dict):
            return {names.get(k, k): rename(v) for k, v in o.items()}
        if isinstance(o, list):
            return [rename(v) for v in o]
        return names.get(o, o) if isinstance(o, str) else o

    data = rename(data)
    for d in data["drafters"]:
        d["method"] = "eagle3" if "eagle3" in d["name"] else "eagle"
    data["name"] = prefix + data["name"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    return path


# ------------------------------------------------------------------ item 3: injection
LINE_BREAK_NAMES = [
    ("problem name", dict(name="eagle", top="x\ntouch PWNED"), "name:"),
    ("drafter name", dict(name="x\ntouch PWNED"), "drafters.0.name:"),
    ("drafter name, CR", dict(name="x\rtouch PWNED"), "drafters.0.name:"),
    ("model", dict(name="eagle", model="m\ntouch PWNED"), "drafters[eagle].model:"),
    ("model, ESC", dict(name="eagle", model="m\x1b[2J"), "drafters[eagle].model:"),
]


@pytest.mark.parametrize(
    ("what", "fields", "field"), LINE_BREAK_NAMES, ids=[c[0] for c in LINE_BREAK_NAMES]
)
def test_a_name_or_model_with_a_line_break_is_refused(tmp_path, what, fields, field):
    """`name: "x\\ntouch PWNED"` went into tables, scripts and command lines as two lines."""
    r = run("solve", _serving(tmp_path, **fields), "--export", "sglang")
    line = one_error_line(r, field)
    assert "touch PWNED" not in r.stdout and not UNSAFE.search(line)


EXPORTS = [
    ["solve", "{p}", "--export", "vllm"],
    ["schedule", "{p}", "--export", "vllm"],
]


@pytest.mark.parametrize("args", EXPORTS, ids=[" ".join(a[::2]) for a in EXPORTS])
def test_an_exported_model_is_one_quoted_word(tmp_path, args):
    """A model with a quote broke the single quotes vLLM's JSON is passed in (SGLang's
    words: tests/unit/io/test_quoting.py)."""
    model = "it's/$(touch PWNED)`id`"
    p = _serving(tmp_path, "e\x1b[2J'$(x)", model=model)
    r = run(*[a.format(p=p) for a in args])
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert "\n" not in out and not UNSAFE.search(out + r.stderr.replace("\n", ""))
    (word,) = shlex.split(f"'{out}'")  # one word between single quotes, the model unchanged
    assert json.loads(word)["model"] == model


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_profile_plan_script_escapes_names(tmp_path):
    """Names went raw into the script's comments (a newline: a line of its own) and into
    --result-filename (a '/' in a name: a file in another folder)."""
    p = _roofline(tmp_path, "../\x1b]0;t\x07'$(touch PWNED)")
    r = run("profile-plan", p, "--engine", "sglang", timeout=600)
    assert r.returncode == 0, r.stderr
    script = r.stdout
    assert not UNSAFE.search((script + r.stderr).replace("\n", ""))
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    for line in script.splitlines():
        words = shlex.split(line, comments=True)
        if "--output-file" in words:
            assert "/" not in words[words.index("--output-file") + 1]
    assert "\\x1b]0;t\\x07" in script


def test_profile_plan_refuses_a_model_with_a_control_character(tmp_path):
    r = run("profile-plan", ROOFLINE, "--model", "m\ntouch PWNED")
    one_error_line(r, "--model:")


def test_a_plot_shows_control_characters_escaped(tmp_path):
    """matplotlib's missing-glyph warning printed the name's ESC raw, with a line of
    the package's source."""
    p = _serving(tmp_path, "e\x1b[2J\x07")
    r = run("solve", p, "--batch", "4", "--plot", tmp_path / "f.svg")
    assert r.returncode == 0, r.stderr
    assert "Glyph" not in r.stderr and not UNSAFE.search(r.stderr.replace("\n", ""))
    svg = (tmp_path / "f.svg").read_text()
    assert "e\\x1b[2J\\x07" in svg and "\x1b" not in svg
