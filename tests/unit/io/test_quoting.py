"""Names, models and input text on their way to a script, a table or a message
(allocator.io.quoting): nothing in them acts there (issue 27, items 3 and 4)."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.analysis.profile_plan import ProfilePlan, Run
from allocator.cli.common import escape_controls
from allocator.engines.sglang import SGLang
from allocator.engines.vllm import config_text
from allocator.io.quoting import (
    UNSAFE,
    escape_text,
    excerpt,
    file_slug,
    mask_userinfo,
    one_line,
    plain_text,
    shell_word,
)

#: Names from random bytes: every byte as one character (C0, DEL and C1 included), and
#: any text at all (separators, bidirectional overrides, surrogates).
NAMES = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: b.decode("latin-1")),
    st.text(min_size=1, max_size=40),
)
BASH = shutil.which("bash")


def _plan(name: str) -> ProfilePlan:
    run = Run(
        f"run01-{file_slug(name)}-k1",
        name,
        1,
        1,
        1024.0,
        896,
        256,
        8,
        1.5,
        server=["vllm", "serve", name, "--speculative-config", config_text({"model": name})],
        env={"NAME": name},
        client=["vllm", "bench", "serve", "--model", name, "--result-filename", f"{name}.json"],
    )
    return ProfilePlan(name, "vllm", name, [], {}, [run], 1)


def _bash_words(script: str) -> list[str]:
    """What bash makes of each line's words (``printf``'d, NUL-separated)."""
    out = subprocess.run(
        [BASH, "-c", 'printf "%s\\0" ' + script],
        capture_output=True,
        timeout=10,
        check=True,
    ).stdout
    return out.decode("utf-8", "surrogateescape").split("\0")[:-1]


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_no_name_reaches_a_script_unescaped(name):
    """A problem's or drafter's name ('x\\ntouch PWNED', ESC sequences) wrote a runnable
    line into profile-plan's script and a raw newline into an SGLang command line."""
    script = _plan(name).commands()
    for text in (script, SGLang().text(["--speculative-draft-model-path", name])):
        assert not UNSAFE.search(text.replace("\n", "")), repr(text)
    lines = script.splitlines()
    assert len(lines) == 5  # the header, a blank line, the server's comment and two commands
    assert all(line.startswith("#") for line in (lines[0], lines[2]))
    parsed = subprocess.run([BASH, "-n"], input=script.encode(), capture_output=True, timeout=10)
    assert parsed.returncode == 0, parsed.stderr
    server = shlex.split(lines[3])
    assert server[:4] == ["NAME=" + escape_text(name), "vllm", "serve", escape_text(name)]
    assert shlex.split(lines[4])[4] == escape_text(name)  # --model NAME: one word
    assert _bash_words(lines[4])[4] == escape_text(name)  # and so it is to bash
    assert _bash_words(shell_word(name)) == [escape_text(name)]


@settings(max_examples=100, deadline=None)
@given(NAMES)
def test_no_name_reaches_a_drawn_table_unescaped(name):
    """A name is refused when it holds a line break, else drawn escaped: the table keeps
    its rows, one line each, and no control character reaches the terminal."""
    import io

    from rich.table import Table

    from allocator.cli.common import SafeConsole

    try:
        one_line(name)
    except ValueError:
        return  # refused when the problem file is read
    buf = io.StringIO()
    console = SafeConsole(file=buf, width=2000, markup=False, highlight=False)
    table = Table()
    table.add_column("drafters")
    table.add_column("k")
    table.add_row(name, "3")
    console.print(table)
    text = buf.getvalue()
    assert not UNSAFE.search(text.replace("\n", ""))
    assert len(text.splitlines()) == 5  # three rules, a header and one row


@settings(max_examples=200, deadline=None)
@given(NAMES)
def test_no_name_reaches_a_table_or_message_unescaped(name):
    """Tables keep only their own line breaks; an ESC is shown as \\x1b."""
    shown = escape_controls(name)
    assert not UNSAFE.search(shown.replace("\n", ""))
    assert not UNSAFE.search(escape_text(name))
    assert not UNSAFE.search(excerpt(name))
    assert "/" not in file_slug(name) and not file_slug(name).startswith(".")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[31mred", "\\x1b[31mred"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x9b2J\x7f", "\\x9b2J\\x7f"),
        ("abc\u202edcba", "abc\\u202edcba"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain é 名前", "plain é 名前"),
    ],
)
def test_escape_text_shows_controls_as_escapes(text, shown):
    assert escape_text(text) == shown


def test_vllm_json_is_one_word_between_single_quotes():
    """A model with ' or a newline broke `vllm serve --speculative-config '<JSON>'`."""
    text = config_text({"model": "it's\n$(touch PWNED)\x1b"})
    assert "'" not in text and text.count("\n") == 1 and not UNSAFE.search(text[:-1])
    assert shlex.split(f"--speculative-config '{text.strip()}'")[1] == text.strip()


@pytest.mark.parametrize("name", ["x\ntouch PWNED", "a\rb", "a\x85b", "a\u2028b", "a\x0bb"])
def test_a_name_with_a_line_break_is_refused(name):
    with pytest.raises(ValueError, match="line break"):
        one_line(name)


def test_a_model_with_a_control_character_is_refused():
    assert plain_text("org/model-7B") == "org/model-7B"
    with pytest.raises(ValueError, match="control character"):
        plain_text("org/\x1b[2Jmodel")


# ------------------------------------------------------------------ secrets in messages
def test_an_excerpt_masks_assignments_and_is_short():
    """`--trace /proc/self/environ` printed the whole environment in its message."""
    environ = "PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=abcd1234\0TOKEN=hunter2\0" * 50
    shown = excerpt(environ)
    assert "abcd1234" not in shown and "hunter2" not in shown and "/usr/bin" not in shown
    assert shown.startswith("'PATH=***\\x00") and len(shown) < 80


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("ray://user:p@ss@head:10001", "ray://***@head:10001"),
        ("admin:secret@10.0.0.1:6379", "***@10.0.0.1:6379"),
        ("10.0.0.1:6379", "10.0.0.1:6379"),
        ("local", "local"),
    ],
)
def test_mask_userinfo(address, shown):
    assert mask_userinfo(address) == shown


def test_a_urls_password_is_masked_wherever_a_message_quotes_an_input():
    """A trace cell, a model id or a drafter name holding ``https://user:pw@host`` was
    quoted whole in error lines; only ``KEY=VALUE`` was masked."""
    from allocator.io.quoting import excerpt, mask_secrets

    shown = mask_secrets("TIMESTAMP https://user:hunter2@127.0.0.1/x and HF_TOKEN=hf_abc")
    assert "hunter2" not in shown and "hf_abc" not in shown
    assert "https://***@127.0.0.1/x" in shown
    assert "hunter2" not in excerpt("postgresql://u:hunter2@db:5432/x")
