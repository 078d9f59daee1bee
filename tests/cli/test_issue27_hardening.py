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


# ------------------------------------------------------------------ item 4: secrets
SECRET_INPUTS = [
    ("YAML int", "name: x\nb: !!int PASSWORD=hunter2\n", "problem:"),
    ("YAML float", "name: x\nb: !!float TOKEN=hunter2\n", "problem:"),
    ("a value", "name: x\ndrafters:\n  - {name: a, acceptance: 'KEY=hunter2'}\n", "drafters"),
]


@pytest.mark.parametrize(
    ("what", "text", "field"), SECRET_INPUTS, ids=[c[0] for c in SECRET_INPUTS]
)
def test_a_message_masks_what_looks_like_a_secret(tmp_path, what, text, field):
    """A value the reader could not parse was printed whole: `PASSWORD=hunter2`."""
    p = tmp_path / "p.yaml"
    p.write_text(text)
    line = one_error_line(run("solve", p), field)
    assert "hunter2" not in line and "=***" in line


# ------------------------------------------------------------------ item 5: Ray
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CAPACITY_RATE = [
    "capacity", PROBLEMS / "requests-70b.yaml", "--request-rate", "1", "--slo",
    "p99_ttft_ms=500", "--num-prompts", "20", "--input-len", "100", "--output-len", "50",
]  # fmt: skip
RAY_ADDRESSES = [
    ("refused", "127.0.0.1:{port}", "connection refused"),
    ("refused, password", "admin:hunter2@127.0.0.1:{port}", "connection refused"),
    ("unresolvable", "ray://user:hunter2@nonexistent.invalid:10001", "cannot resolve host"),
    ("malformed", "127.0.0.1:port", "is not a Ray address"),
]


@pytest.mark.parametrize(
    ("what", "address", "why"), RAY_ADDRESSES, ids=[c[0] for c in RAY_ADDRESSES]
)
def test_a_ray_address_fails_fast_in_one_line(what, address, why):
    """A refused or unresolvable --ray address took over 5 minutes, or printed 22 lines of
    Ray's log; a password in it was printed back."""
    import time

    start = time.monotonic()
    r = run(*CAPACITY_RATE, "--ray", address.format(port=_closed_port()), timeout=60)
    assert time.monotonic() - start < 15
    line = one_error_line(r, "--ray:")
    assert why in line and "hunter2" not in line


def test_an_unroutable_ray_address_fails_within_the_probe_timeout(monkeypatch):
    """No answer at all (a dropped SYN): the connect times out instead of Ray retrying."""
    import socket
    import time

    from allocator.analysis.capacity.workers import Workers
    from allocator.exceptions import ParameterError

    def silent(self, where):
        time.sleep(0.3)
        raise TimeoutError

    monkeypatch.setattr(socket.socket, "connect", silent)
    start = time.monotonic()
    with pytest.raises(ParameterError, match="no answer from port 6379") as info:
        Workers(ray="u:hunter2@127.0.0.1")._connect()
    assert time.monotonic() - start < 15
    assert info.value.field == "ray" and "hunter2" not in str(info.value)


def test_ray_init_errors_are_one_line_without_the_password(monkeypatch):
    """Ray's own error (after the probe) was many lines, the address with its password."""
    import socket
    import types

    from allocator.analysis.capacity.workers import Workers
    from allocator.exceptions import ParameterError

    calls: list[dict] = []

    def init(**kw):
        calls.append(kw)
        raise ConnectionError(f"could not connect to {kw['address']}\nretrying\nlog line")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"u:hunter2@127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ParameterError) as info:
            Workers(ray=address)._connect()
    message = str(info.value)
    assert "\n" not in message and "hunter2" not in message and "could not connect" in message
    assert calls[0]["log_to_driver"] is False and calls[0]["logging_level"] >= 40


def test_the_workers_error_names_the_ray_flag():
    r = run(*CAPACITY_RATE, "--workers", "2", "--ray", "local")
    assert "(--ray)" in one_error_line(r, "--workers:")


# ------------------------------------------------------------------ item 6: signals
def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait(predicate, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


LONG_CAPACITY = [
    "capacity", PROBLEMS / "requests-70b.yaml", "--request-rate", "20", "--slo",
    "p99_ttft_ms=2000", "--num-prompts", "3000", "--input-len", "1000", "--output-len", "300",
    "--workers", "2",
    # the first candidate runs alone before the workers start: the synchronous scheduler
    # without a cache plays it fastest (the test is about the workers, not the scheduler)
    "--no-async-scheduling", "--no-prefix-caching",
]  # fmt: skip


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_no_worker_outlives_its_parent(tmp_path, sig):
    """Forked capacity workers kept running after a TERM or KILL of the command."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "allocator", *map(str, LONG_CAPACITY), "--json", tmp_path / "c"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        assert _wait(lambda: len(_children(proc.pid)) >= 2, 90), "no workers started"
        workers = _children(proc.pid)
        proc.send_signal(getattr(signal, sig))
        status = proc.wait(timeout=30)
        assert _wait(lambda: not any(_alive(w) for w in workers), 15), "orphaned workers"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig == "SIGTERM":
        assert status == 128 + signal.SIGTERM, proc.stderr.read().decode()[-3000:]
        assert "Traceback" not in proc.stderr.read().decode()
    assert list(tmp_path.iterdir()) == []


TERMINATED_COMMAND = """
import sys, time
from allocator.cli.common import handles_input_errors
from allocator.io.staged import write_atomic

@handles_input_errors
def command(out):
    write_atomic(out, "rows\\n", "--csv")  # prepared under a temporary name
    print("ready", flush=True)
    time.sleep(60)  # drawing a plot

command(sys.argv[1])
"""


@pytest.mark.parametrize("sig", ["SIGTERM"])
def test_a_signal_leaves_no_temporary_file(tmp_path, sig):
    """`.r.csv.*.tmp` survived a TERM while the command drew its plot (Ctrl-C, SIGINT,
    already raised KeyboardInterrupt)."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", TERMINATED_COMMAND, str(tmp_path / "r.csv")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert [p.name for p in tmp_path.iterdir()][0].endswith(".tmp")
        proc.send_signal(getattr(signal, sig))
        status = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert status == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ item 8: config.json
QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "torch_dtype": "bfloat16", "num_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
    "mlp_only_layers": [], "decoder_sparse_step": 1, "tie_word_embeddings": False,
}  # fmt: skip
CONFIG_FIELDS = [
    ("quantization_config not an object", {"quantization_config": "fp8"}, "quantization_config"),
    ("a count as text", {"num_experts_per_tok": "8"}, "num_experts_per_tok"),
    ("a fractional count", {"moe_intermediate_size": 768.5}, "moe_intermediate_size"),
    ("mlp_only_layers not a list", {"mlp_only_layers": 3}, "mlp_only_layers"),
    ("a fractional layer", {"mlp_only_layers": [1.5]}, "mlp_only_layers.0"),
    ("a boolean as text", {"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ("head_dim truncated", {"head_dim": None, "hidden_size": 2050}, "head_dim"),
]


@pytest.mark.parametrize(
    ("what", "change", "field"), CONFIG_FIELDS, ids=[c[0] for c in CONFIG_FIELDS]
)
def test_config_json_fields_are_checked_before_use(tmp_path, what, change, field):
    """A malformed config.json field was a traceback (quantization_config: "fp8",
    mlp_only_layers: 3), or was read as something else ("8" as 8, 768.5 as 768, "false"
    as true)."""
    config = {k: v for k, v in {**QWEN3_MOE, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    data = yaml.safe_load(ROOFLINE.read_text())
    data["serving"]["model"] = {"config": "config.json"}
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    one_error_line(run("solve", p, "--batch", "4"), f"serving.model.config.{field}:")


def test_an_error_line_escapes_c1_controls_and_bidi_overrides(tmp_path):
    """The error line escaped C0 only: a C1 CSI (\\x9b) and U+202E reached the terminal."""
    p = tmp_path / "p.yaml"
    p.write_text(
        'name: x\ndrafters:\n  - {name: "a\\u009bb\\u202ec", acceptance: 0.5, unit_cost: -1}\n'
    )
    line = one_error_line(run("solve", p), "drafters[a\\x9bb\\u202ec].unit_cost:")
    assert not UNSAFE.search(line)


def test_a_port_that_is_not_rays_ends_ray_init(monkeypatch, capfd):
    """A port that answers but is not Ray's GCS kept ray.init retrying for minutes, a log
    line per retry."""
    import socket
    import time
    import types

    from allocator.analysis.capacity import workers
    from allocator.exceptions import ParameterError

    def init(**kw):
        os.write(2, b"[W rpc_client.h] Failed to connect to GCS\n")
        time.sleep(30)

    monkeypatch.setitem(
        sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, init=init)
    )
    monkeypatch.setattr(workers, "RAY_INIT_S", 0.5)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        start = time.monotonic()
        with pytest.raises(ParameterError, match="port answers but no Ray cluster"):
            workers.Workers(ray=f"127.0.0.1:{server.getsockname()[1]}")._connect()
    assert time.monotonic() - start < 5
    assert "Failed to connect" not in capfd.readouterr().err


def test_a_term_swallowed_where_exceptions_cannot_propagate_still_ends_the_command():
    """SIGTERM arriving inside a ``__del__`` (or an ``os.fork`` hook, where it once
    arrived in logging's lock release) raised SystemExit where Python only prints
    "Exception ignored": the command ran on and exited 0. The signal is sent again and
    ends it with 143."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import gc, os, signal, sys, time
        from allocator.cli.common import terminate_as_exit

        class Trip:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs here, inside __del__

        with terminate_as_exit():
            Trip()
            gc.collect()
            for _ in range(50):
                time.sleep(0.01)
            print("ran on")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 143, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "ran on" not in r.stdout
