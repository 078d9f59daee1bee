"""The documentation as the tests read it: README.md and the site's pages under docs/.

Pages are Markdown files; the commands they show are the ``allocator …`` lines of their
fenced ``bash`` and ``console`` blocks (a ``console`` block's commands start with ``$ ``,
and the lines after a command, up to the next one, are what it prints).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: docs/design.md is the maintainers' document, checked by test_design_*.py
SITE_PAGES = sorted(
    p
    for p in DOCS.rglob("*.md")
    if p.name != "design.md" and "notebooks" not in p.relative_to(DOCS).parts
)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def text(path: Path | str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def all_pages() -> list[Path]:
    return [README, *SITE_PAGES]


def blocks(page_text: str, *languages: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block of one of ``languages``, in order."""
    found = re.findall(r"^```(\w*)\n(.*?)^```", page_text, re.S | re.M)
    return [(lang, body) for lang, body in found if lang in languages]


def commands(block: str) -> list[list[str]]:
    """Shell words of each command in a bash block (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


@dataclass
class Shown:
    """One command a page shows, with what the page says it prints (console blocks)."""

    page: str
    words: list[str]
    printed: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        return " ".join(self.words)


def console(block: str) -> list[tuple[list[str], list[str]]]:
    """(words, printed lines) of each ``$ `` command of a console block."""
    out: list[tuple[list[str], list[str]]] = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("$ "):
            out.append((shlex.split(line[2:], comments=True), []))
        elif out:
            out[-1][1].append(line)
    return out


def shown_commands(page: Path) -> list[Shown]:
    """Every ``allocator`` command of a page's bash and console blocks, in order."""
    out = []
    for lang, body in blocks(text(page), "bash", "console"):
        pairs = console(body) if lang == "console" else [(w, []) for w in commands(body)]
        for words, printed in pairs:
            if words and words[0] == "allocator":
                out.append(Shown(rel(page), words, printed))
    return out


def section(title: str, pages: list[Path] | None = None) -> str:
    """The text under the heading ``title`` (any level) up to the next heading of the same
    or a higher level, from the one page that has it."""
    found = []
    for page in pages or all_pages():
        body = text(page)
        m = re.search(rf"^(#{{1,4}}) {re.escape(title)}\n", body, re.M)
        if m:
            level = len(m.group(1))
            rest = body[m.end() :]
            nxt = re.search(rf"^#{{1,{level}}} ", _unfenced(rest), re.M)
            found.append(rest[: nxt.start()] if nxt else rest)
    assert len(found) == 1, f"heading {title!r} found {len(found)} times"
    return found[0]


def _unfenced(body: str) -> str:
    """``body`` with every line inside a fenced block blanked (same length), so that a
    comment line ``# ...`` in a code block is not read as a heading."""
    out, fence = [], False
    for line in body.splitlines(keepends=True):
        if line.startswith("```"):
            fence = not fence
            out.append(line)
        else:
            out.append(" " * (len(line) - 1) + "\n" if fence and line.endswith("\n") else line)
    return "".join(out)


def everything() -> str:
    """README and every site page, one text (for a phrase that may live on any page)."""
    return "\n".join(text(p) for p in all_pages())
