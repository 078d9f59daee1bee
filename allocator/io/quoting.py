r"""Text from input files on its way out: to a terminal, a picture or a shell script.

A name, model or line of an input file is whatever its author wrote, control
characters included. Nothing here lets one act on its way out:

* :func:`escape_text`: for tables, plots, messages and comments: every control
  character (C0, DEL, C1), the line and paragraph separators U+2028/U+2029, the
  bidirectional overrides (text shown in another order than it is read) and lone
  surrogates are written as visible escapes (``\x1b``, ``\n``, ``\u202e``), so that an
  ANSI escape sequence is shown, never obeyed, and one name stays on one line;
* :func:`shell_word` / :func:`shell_join`: a word of a generated shell command, quoted
  (:func:`shlex.quote`) after :func:`escape_text`, so that it is one word to the shell
  and holds no newline that could start another command;
* :func:`file_slug`: a name made safe to be part of a file name (no ``/``, no ``..``);
* :func:`one_line`: the check refusing line breaks in a name (a name is one line);
  :func:`plain_text`: the check refusing any of them in a model's name or path;
* :func:`excerpt`: a short, escaped prefix of unparsable input for an error message,
  anything shaped like ``KEY=VALUE`` (an environment, a credential) masked;
  :func:`mask_secrets`: the same masking of a message that quotes an input;
* :func:`mask_userinfo`: an address with its ``user:password@`` masked.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

#: Characters never written raw: C0 but space, DEL, C1, the line and paragraph
#: separators, the bidirectional embeddings, overrides and isolates, and lone surrogates.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
#: Line breaks a name may not hold: what a terminal, ``str.splitlines`` or a shell reads
#: as the end of a line.
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape_text(text: str, keep: str = "") -> str:
    r"""``text`` with every character of :data:`UNSAFE` but those in ``keep`` written as
    a visible escape (``\n``, ``\t``, ``\x1b``, ``\u202e``); a backslash already in
    ``text`` is kept as it is (the escapes are for reading, not for decoding back).
    ``keep="\n"``: for a table or a picture whose own layout breaks lines (the names in it
    hold no line break: :func:`one_line`)."""
    if keep:
        return UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), str(text))
    return UNSAFE.sub(_escape, str(text))


def shell_word(word: str) -> str:
    """``word`` as one shell word: :func:`escape_text`, then :func:`shlex.quote`. No
    control character or line break of ``word`` reaches the script."""
    return shlex.quote(escape_text(word))


def shell_join(words: Iterable[str]) -> str:
    """``words`` as one shell command line (each a :func:`shell_word`)."""
    return " ".join(shell_word(w) for w in words)


_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def file_slug(name: str) -> str:
    """``name`` as part of a file name: every run of characters but letters, digits and
    ``._+-`` becomes ``_`` (no ``/``, so never another folder), and no leading dot."""
    slug = _SLUG_UNSAFE.sub("_", name).lstrip(".")
    return slug or "_"


def one_line(value: str) -> str:
    """``value`` when it holds no line break (:data:`LINE_BREAKS`); a ``ValueError``
    naming the first one otherwise. Names are shown in tables, one per line, and written
    into scripts' comments."""
    m = LINE_BREAKS.search(value)
    if m is not None:
        raise ValueError(
            f"holds a line break ({escape_text(m.group())} at character {m.start() + 1}); "
            "a name is one line"
        )
    return value


def plain_text(value: str) -> str:
    """``value`` when it holds no character of :data:`UNSAFE`; a ``ValueError`` naming
    the first one otherwise. A model's name or path is passed to an engine as it is, so it
    is refused rather than changed."""
    m = UNSAFE.search(value)
    if m is not None:
        raise ValueError(
            f"holds a control character ({escape_text(m.group())} at character "
            f"{m.start() + 1}); a model's name or path has none"
        )
    return value


#: Characters of an input shown in an error message, at most.
EXCERPT_CHARS = 40
#: ``KEY=VALUE`` (an environment variable, a setting, a credential): the value is masked.
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*[^\s\x00,;&'\"]*")
#: ``user:password@`` (or ``token@``) after a URL's scheme, anywhere in a text.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+@")
#: ``user:password@`` (or ``token@``) in an address.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<user>[^/\s]*)@")


def mask_secrets(text: str, limit: int = 200) -> str:
    """``text`` (a message that may quote an input) with the value of anything shaped like
    ``KEY=VALUE`` masked (``KEY=***``) and the ``user:password@`` of a URL masked
    (``https://***@host``), control characters escaped, at most ``limit`` characters
    (``…`` when cut)."""
    text = str(text)
    head = _URL_USERINFO.sub(r"\g<scheme>***@", text[:limit])
    head = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}=***", head)
    return escape_text(head) + ("…" if len(text) > limit else "")


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A short quoted prefix of ``text`` for an error message: the value of anything
    shaped like ``KEY=VALUE`` masked (``KEY=***``), at most ``limit`` characters of the
    input (``…`` when cut), control characters escaped (:func:`escape_text`). An input that
    is not what it should be may hold anything (``/proc/self/environ``: every secret of
    the environment); a message shows only enough to recognise it."""
    return "'" + mask_secrets(text, limit) + "'"


def mask_userinfo(address: str) -> str:
    """``address`` with any ``user:password@`` (or ``token@``) before the host masked as
    ``***@``, and escaped (:func:`escape_text`): ``ray://u:p@host:10001`` is shown as
    ``ray://***@host:10001``."""
    return escape_text(
        _USERINFO.sub(lambda m: f"{m.group('scheme') or ''}***@", str(address), count=1)
    )


__all__ = [
    "EXCERPT_CHARS",
    "LINE_BREAKS",
    "UNSAFE",
    "escape_text",
    "excerpt",
    "file_slug",
    "mask_secrets",
    "mask_userinfo",
    "one_line",
    "plain_text",
    "shell_join",
    "shell_word",
]
