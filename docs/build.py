"""The site's generated reference pages, from the code, at build time.

This file is an mkdocs hook (``hooks:`` in ``mkdocs.yml``): while the site is built, a
page holding one of these marker comments gets the generated text in its place.

- ``<!-- problem-reference -->``: the problem-file format, from the JSON Schema that
  ``allocator schema`` prints (pydantic models of :mod:`allocator.io.spec`);
- ``<!-- cli-reference -->``: every command with its arguments and options, from the
  command line's own definitions, and the text its ``--help`` prints.

Nothing is written into the repository. To read a section without building the site:

    python docs/build.py problem-reference
    python docs/build.py cli-reference

The tour's picture is not made here: ``allocator solve docs/tour.yaml --plot
docs/front.png`` draws it (README, "A tour").
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("problem-reference", "cli-reference")


# ------------------------------------------------------------------ problem file
def _code(text: str) -> str:
    """reST literals (``x``) as Markdown code (`x`), one paragraph per blank line."""
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _bounds(s: dict) -> str:
    lo = (
        ("(", s["exclusiveMinimum"])
        if "exclusiveMinimum" in s
        else ("[", s["minimum"])
        if "minimum" in s
        else None
    )
    hi = (
        (")", s["exclusiveMaximum"])
        if "exclusiveMaximum" in s
        else ("]", s["maximum"])
        if "maximum" in s
        else None
    )
    if lo and hi:
        return f" in {lo[0]}{lo[1]:g}, {hi[1]:g}{hi[0]}"
    if lo:
        return f" {'>' if lo[0] == '(' else '≥'} {lo[1]:g}"
    if hi:
        return f" {'<' if hi[0] == ')' else '≤'} {hi[1]:g}"
    return ""


def type_text(s: dict, defs: dict, path: str) -> str:
    """A short human description of a JSON Schema type."""
    if "$ref" in s:
        return f"`{path}` (below)"
    if "anyOf" in s:
        parts = [type_text(x, defs, path) for x in s["anyOf"] if x.get("type") != "null"]
        return " or ".join(parts)
    if "enum" in s:
        return " \\| ".join(f"`{v}`" for v in s["enum"])
    t = s.get("type")
    if t == "array":
        item = type_text(s.get("items", {}), defs, path + "[]")
        lo, hi = s.get("minItems"), s.get("maxItems")
        if lo is not None and lo == hi:
            return f"list of {lo} × {item}"
        return f"list of {item}" + (f" (at least {lo})" if lo else "")
    if t == "object":
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            return f"mapping of name → {type_text(extra, defs, path + '.*')}"
        return "mapping"
    if t == "string":
        return "string" + (" (non-empty)" if s.get("minLength") else "")
    if t in ("number", "integer"):
        return t + _bounds(s)
    return t or "any"


def _objects(schema: dict):
    """(path, object schema) for the root and every nested object, depth first."""
    defs = schema.get("$defs", {})

    def walk(path: str, obj: dict):
        yield path, obj
        for name, prop in obj.get("properties", {}).items():
            for ref in _refs(prop):
                sub = f"{path}.{name}" if path else name
                if _is_list_of(prop, ref):
                    sub += "[]"
                yield from walk(sub, defs[ref])

    yield from walk("", schema)


def _refs(prop: dict) -> list[str]:
    text = json.dumps({k: v for k, v in prop.items() if k != "default"})
    return list(dict.fromkeys(re.findall(r'"#/\$defs/([^"]+)"', text)))


def _is_list_of(prop: dict, ref: str) -> bool:
    options = prop.get("anyOf", [prop])
    return any(
        o.get("type") == "array" and o.get("items", {}).get("$ref", "").endswith(ref)
        for o in options
    )


def _default(prop: dict) -> str:
    if "default" not in prop:
        return ""
    d = prop["default"]
    if isinstance(d, dict) and d:
        return "see below"
    if d is None:
        return "none"
    return f"`{json.dumps(d)}`"


def problem_reference(schema: dict | None = None) -> str:
    """The problem-file reference as Markdown."""
    if schema is None:
        from allocator.io.spec import problem_json_schema

        schema = problem_json_schema()
    defs = schema.get("$defs", {})
    out = [
        "Generated from the JSON Schema (`allocator schema`) when the site is built "
        "(`docs/build.py`). Every object rejects unknown fields.",
        "",
    ]
    for path, obj in _objects(schema):
        title = f"`{path}`" if path else "the file (top level)"
        out.append(f"**{title}**" + (f" — {obj['title']}" if path else ""))
        out.append("")
        doc = obj.get("description")
        if doc and path:
            out.extend(_code(line).rstrip() for line in doc.strip().splitlines())
            out.append("")
        out.append("| field | type | default |")
        out.append("|---|---|---|")
        required = set(obj.get("required", []))
        for name, prop in obj.get("properties", {}).items():
            sub = f"{path}.{name}" if path else name
            default = "**required**" if name in required else _default(prop)
            out.append(f"| `{name}` | {type_text(prop, defs, sub)} | {default} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------ command line
def cli_reference(with_help: bool = True) -> str:
    """Every command's usage, arguments and options as Markdown."""
    import typer

    from allocator.cli import app, reflow

    group = typer.main.get_command(app)
    out = [
        "Generated from the command line's definitions when the site is built "
        "(`docs/build.py`); under each command, the text `allocator COMMAND --help` prints.",
        "",
    ]
    for name in sorted(group.commands):
        cmd = group.commands[name]
        ctx = typer.Context(cmd, info_name=f"allocator {name}")  # click's, whichever typer uses
        pieces = [
            re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), piece)
            for piece in cmd.collect_usage_pieces(ctx)
        ]
        usage = " ".join(["allocator", name, *pieces])
        out += [f"## `allocator {name}`", "", f"`{usage}`", ""]
        # every paragraph of the command's help, each as one line (as --help wraps it)
        for para in (reflow(cmd.help) or "").split("\n\n"):
            out += [_code(line) for line in para.strip().splitlines()] + [""]
        rows = []
        for p in cmd.params:
            record = None if getattr(p, "hidden", False) else p.get_help_record(ctx)
            if record is None or p.name == "help":
                continue
            flags, help_ = record
            flags = flags.replace(" <bool>", "")  # a flag takes no value
            rows.append((f"`{_cell(flags)}`", " ".join(help_.split())))
        if rows:
            out += ["| argument or option | what it does |", "|---|---|"]
            out += [f"| {a} | {_cell(b)} |" for a, b in rows]
            out.append("")
        if with_help:
            out += [f'??? note "`allocator {name} --help`"', ""]
            out += [
                "    ```text",
                *(f"    {line}" if line else "" for line in help_text(name)),
                "    ```",
                "",
            ]
    return "\n".join(out).rstrip() + "\n"


def _cell(text: str) -> str:
    return _code(text).replace("|", "\\|")


def help_text(name: str, width: int = 100) -> list[str]:
    """The lines ``allocator NAME --help`` prints at ``width`` columns, trailing spaces cut."""
    from typer.testing import CliRunner

    from allocator.cli import app

    env = {"COLUMNS": str(width), "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, [name, "--help"], env=env, prog_name="allocator")
    if result.exit_code != 0:
        raise RuntimeError(f"allocator {name} --help exited {result.exit_code}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


# ------------------------------------------------------------------ the site
GENERATORS = {"problem-reference": problem_reference, "cli-reference": cli_reference}


def generated() -> dict[str, str]:
    return {name: make() for name, make in GENERATORS.items()}


def expand(markdown: str) -> str:
    """The page with each ``<!-- name -->`` marker replaced by its generated section."""
    for name, make in GENERATORS.items():
        marker = f"<!-- {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs hook)
    return expand(markdown)


_ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj):(?=<code>)")


_CELL = re.compile(r"<td>.*?</td>", re.S)


def on_page_content(html: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs hook)
    """Docstrings name code with Sphinx roles (:func:`x`): the page shows just `x`. A table
    cell escapes its pipes (`a\\|b`), which code in a cell would otherwise print as is."""
    html = _CELL.sub(lambda m: m.group(0).replace("\\|", "|"), html)
    return _ROLE.sub("", html)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in GENERATORS:
        print(f"usage: python docs/build.py {{{'|'.join(GENERATORS)}}}", file=sys.stderr)
        return 2
    sys.stdout.write(GENERATORS[argv[0]]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
