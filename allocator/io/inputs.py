"""Reading input files safely: size, kind of file, nesting, numbers and duplicate keys.

Every file the package reads (problem files, cost files, logs, metrics, outcome
CSVs) goes through :func:`read_input_text`, and every YAML or JSON document through
:func:`parse_document`. The limits are stated here once and in the README's
"Limits" section:

* an input must be a regular file (not a FIFO, a device such as ``/dev/urandom``
  or a directory) of at most :data:`MAX_DOCUMENT_BYTES` (YAML/JSON) or
  :data:`MAX_LOG_BYTES` (logs, metrics, outcome CSVs);
* a YAML/JSON document nests at most :data:`MAX_DEPTH` levels, holds at most
  :data:`MAX_VALUES` values (anchors and aliases counted as expanded), writes every
  number in at most :data:`MAX_NUMBER_CHARS` characters, every integer within
  ``|n| < 2**63``, and never repeats a key in one mapping.

YAML is parsed with libyaml's C safe loader when PyYAML was built with it
(``yaml.CSafeLoader``), else with the pure-Python safe loader; both build only plain
Python data (no object tags). ``1e-3`` is a number (as in YAML 1.2).

A message about an input that cannot be parsed quotes at most a short prefix of it,
escaped, with anything shaped like ``KEY=VALUE`` masked (:func:`excerpt`,
:func:`mask_secrets`, from :mod:`allocator.io.quoting`): every reader of an input file
calls them (``/proc/self/environ`` given as a file holds every secret of the
environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml

from ..exceptions import InputError
from .quoting import excerpt, mask_secrets

#: Largest YAML or JSON document read (problem files, cost files), bytes.
MAX_DOCUMENT_BYTES = 16 * 2**20
#: Largest log, metrics dump or outcome CSV read, bytes.
MAX_LOG_BYTES = 512 * 2**20
#: Deepest nesting of lists and mappings in a YAML/JSON document.
MAX_DEPTH = 64
#: Most values (scalars, lists, mappings; aliases expanded) in one document.
MAX_VALUES = 10_000_000
#: Longest number literal, characters.
MAX_NUMBER_CHARS = 64
#: Integers must satisfy ``|n| < INT_LIMIT``.
INT_LIMIT = 2**63


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, reading ``1e-3`` as a number as YAML 1.2 does (YAML 1.1 needs a
    dot in the mantissa and would read it as text)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


#: (device, inode) of every input file read inside :func:`recording_inputs`.
_READ: ContextVar[set[tuple[int, int]] | None] = ContextVar("allocator_inputs_read", default=None)


@contextlib.contextmanager
def recording_inputs() -> Iterator[set[tuple[int, int]]]:
    """Within: every file checked by :func:`check_regular_file` is recorded, so that an
    output about to replace one of them can be refused (:func:`is_input`)."""
    seen: set[tuple[int, int]] = set()
    token = _READ.set(seen)
    try:
        yield seen
    finally:
        _READ.reset(token)


def is_input(path: str | Path) -> bool:
    """Whether ``path`` is a file read as input inside the current :func:`recording_inputs`."""
    seen = _READ.get()
    if not seen:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in seen


def _size_text(n: int) -> str:
    return f"{n // 2**20} MiB"


def check_regular_file(path: str | Path, field: str, limit: int = MAX_DOCUMENT_BYTES) -> Path:
    """``path`` as a ``Path`` when it names a readable regular file within ``limit`` bytes.

    Refuses missing files, directories, FIFOs, sockets and devices (reading them could
    block forever or never end) without opening them.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(field, f"file not found: {p}") from None
    except OSError as exc:
        raise InputError(field, f"cannot read {p}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(field, f"is a directory, not a file: {p}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(field, f"not a regular file (a pipe, socket or device): {p}")
    if st.st_size > limit:
        raise InputError(
            field, f"{p} is {st.st_size:,} bytes; input files are limited to {_size_text(limit)}"
        )
    seen = _READ.get()
    if seen is not None:
        seen.add((st.st_dev, st.st_ino))
    return p


def read_input_text(path: str | Path, field: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (a leading BOM dropped).

    Every failure is an :class:`InputError` naming ``field``.
    """
    p = check_regular_file(path, field, limit)
    try:
        with open(p, "rb") as f:
            raw = f.read(limit + 1)  # the file may have grown since stat
    except OSError as exc:
        raise InputError(field, f"cannot read {p}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(field, f"{p} exceeds the input limit of {_size_text(limit)}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            field, f"{p} is not UTF-8 text (byte {exc.start:,} cannot be decoded)"
        ) from None


class _DocumentError(Exception):
    """A problem found while parsing, before field paths are known."""


def _json_number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _DocumentError(
                f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})"
            )
        return kind(text)

    return parse


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DocumentError(f"duplicate key {excerpt(key)}")
        out[key] = value
    return out


def _json_constant(name: str) -> Any:
    raise _DocumentError(f"{name} is not a number a problem file may hold")


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _check_nodes(loader: Any, node: yaml.Node, field: str) -> None:
    """Depth, size, numbers and duplicate keys of a composed YAML tree.

    Recursion is bounded by :data:`MAX_DEPTH`; shared (aliased) collections are walked
    once and their expanded size counted each time they are used. The path of a node
    (``drafters.0.name``) is only spelled out for an error.
    """
    sizes: dict[int, int] = {}
    trail: list[object] = []

    def where() -> str:
        return ".".join(str(k) for k in trail) or field

    def scalar(n: yaml.ScalarNode) -> None:
        if n.tag == _INT_TAG and len(n.value) > 18:
            if len(n.value) > MAX_NUMBER_CHARS:
                raise InputError(
                    where(),
                    f"a number of {len(n.value):,} characters (numbers are limited to "
                    f"{MAX_NUMBER_CHARS})",
                )
            value = loader.construct_yaml_int(n)
            if abs(value) >= INT_LIMIT:
                raise InputError(where(), f"integer out of range (|n| < 2**63): {value:.3g}")
        elif n.tag == _FLOAT_TAG and len(n.value) > MAX_NUMBER_CHARS:
            raise InputError(
                where(),
                f"a number of {len(n.value):,} characters (numbers are limited to "
                f"{MAX_NUMBER_CHARS})",
            )

    def walk(n: yaml.Node, depth: int) -> int:
        if isinstance(n, yaml.ScalarNode):
            scalar(n)
            return 1
        if depth >= MAX_DEPTH:
            raise InputError(
                str(trail[0]) if trail else field, f"nested deeper than {MAX_DEPTH} levels"
            )
        known = sizes.get(id(n))
        if known is not None:
            return known
        size = 1
        if isinstance(n, yaml.SequenceNode):
            for i, child in enumerate(n.value):
                trail.append(i)
                size += walk(child, depth + 1)
                trail.pop()
        elif isinstance(n, yaml.MappingNode):
            seen: set[object] = set()
            for key, value in n.value:
                label: object = key.value if isinstance(key, yaml.ScalarNode) else "<key>"
                trail.append(label)
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    if label in seen:
                        raise InputError(
                            where(),
                            f"duplicate key (line {key.start_mark.line + 1}); each key may "
                            "appear once",
                        )
                    seen.add(label)
                size += walk(key, depth + 1) + walk(value, depth + 1)
                trail.pop()
        if size > MAX_VALUES:
            raise InputError(field, f"holds more than {MAX_VALUES:,} values (aliases expanded)")
        sizes[id(n)] = size
        return size

    walk(node, 0)


def _check_data(data: object, field: str) -> None:
    """Depth and integer range of parsed JSON (bounded recursion)."""

    def walk(v: object, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            top = path.split(".")[0] or field
            raise InputError(top, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, dict):
            for key, value in v.items():
                walk(value, _join(path, key), depth + 1)
        elif isinstance(v, list):
            for i, value in enumerate(v):
                walk(value, _join(path, i), depth + 1)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= INT_LIMIT:
            raise InputError(path or field, f"integer out of range (|n| < 2**63): {v:.3g}")

    walk(data, "", 0)


def parse_yaml(text: str, field: str, source: str = "input") -> object:
    """Parse one YAML document safely (module docstring); errors name ``field``."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            problem = getattr(exc, "problem", None) or ""
            if "nesting depth" in problem or "nesting depth" in str(exc):
                raise InputError(field, f"nested deeper than {MAX_DEPTH} levels") from None
            raise InputError(field, f"{source} is not valid YAML{line}") from None
        except RecursionError:
            raise InputError(field, f"nested deeper than {MAX_DEPTH} levels") from None
        if node is None:
            return None
        _check_nodes(loader, node, field)
        try:
            data = loader.construct_document(node)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            raise InputError(field, f"{source} is not valid YAML{line}") from None
        except ValueError as exc:  # e.g. a malformed timestamp or base-60 number
            raise InputError(field, f"{source}: {mask_secrets(str(exc))}") from None
    finally:
        loader.dispose()
    return data


def parse_json(text: str, field: str, source: str = "input") -> object:
    """Parse one JSON document safely (module docstring); errors name ``field``."""
    try:
        data = json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_int=_json_number(int),
            parse_float=_json_number(float),
            parse_constant=_json_constant,
        )
    except _DocumentError as exc:
        raise InputError(field, f"{source}: {exc}") from None
    except RecursionError:
        raise InputError(field, f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise InputError(field, f"{source} is not valid JSON (line {exc.lineno})") from None
    _check_data(data, field)
    return data


def parse_document(text: str, field: str, source: str, *, json_format: bool) -> object:
    """:func:`parse_json` or :func:`parse_yaml`."""
    if json_format:
        return parse_json(text, field, source)
    return parse_yaml(text, field, source)


def shown_paths(paths: Sequence[str | Path]) -> list[str]:
    """How a message names each of ``paths``: its file name, unless another of them (a
    different file) has the same name; then its path relative to the working directory
    when it lies under it, else its absolute path (``a/run.json`` and ``b/run.json``,
    never ``run.json`` twice)."""
    full = [os.path.abspath(p) for p in paths]
    files: dict[str, set[str]] = {}
    for f in full:
        files.setdefault(os.path.basename(f), set()).add(f)
    cwd = os.getcwd()
    out = []
    for f in full:
        name = os.path.basename(f)
        if len(files[name]) == 1:
            out.append(name)
        else:
            inside = os.path.commonpath([cwd, f]) == cwd
            out.append(os.path.relpath(f, cwd) if inside else f)
    return out


__all__ = [
    "excerpt",
    "mask_secrets",
    "INT_LIMIT",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_LOG_BYTES",
    "MAX_NUMBER_CHARS",
    "MAX_VALUES",
    "check_regular_file",
    "is_input",
    "parse_document",
    "parse_json",
    "parse_yaml",
    "read_input_text",
    "recording_inputs",
    "shown_paths",
]
