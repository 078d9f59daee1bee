"""Pydantic's validation errors as the one :class:`~allocator.exceptions.InputError` a
user sees: the dotted field path (a drafter or workload named by its ``name``), what was
given and what was expected, in the problem file's words. The models are in
:mod:`allocator.io.spec`; their validators raise :class:`FieldError` to name a field
other than the one they validate.
"""

from __future__ import annotations

from pydantic import ValidationError

from ..core.problem import MAX_K
from ..exceptions import InputError
from .inputs import excerpt
from .quoting import LINE_BREAKS


def number_text(v: float) -> str:
    """A number as a problem file would write it (``1.2``, ``-0.5``, ``1e-12``)."""
    return repr(v) if v != v or abs(v) == float("inf") else f"{v:g}"


class FieldError(ValueError):
    """Raised inside validators to report a field other than the one validated."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


#: Parts of a pydantic location that name a union branch or a validator, not a field.
_BRANCH_PREFIXES = ("function-", "list[", "dict[", "constrained-", "json-or-python")
_BRANCH_NAMES = frozenset({"float", "int", "str", "bool", "constrained-float", "none"})


def _is_branch(part: object) -> bool:
    return isinstance(part, str) and (part.startswith(_BRANCH_PREFIXES) or part in _BRANCH_NAMES)


def _loc_to_field(loc: tuple, data: object = None) -> str:
    """A pydantic location as the dotted field path users see; a drafter or workload is
    named by its ``name`` when it has one (``drafters[weak-a].unit_cost``)."""
    # pydantic puts union branch names ("float", "list[...]") into loc; drop them
    parts = [p for p in loc if not _is_branch(p)]
    out: list[str] = []
    for i, p in enumerate(parts):
        named = _item_name(data, parts[:i], p) if i == 1 and isinstance(p, int) else None
        if named is not None:
            out[-1] += f"[{named}]"
        else:
            out.append(str(p))
    return ".".join(out) or "problem"


def _item_name(data: object, parents: list, index: int) -> str | None:
    """The ``name`` of ``data[section][index]`` for the named lists, when it is a string
    of one line (a name with a line break is refused, and named by its index)."""
    if not isinstance(data, dict) or parents[0] not in ("drafters", "workloads"):
        return None
    items = data.get(parents[0])
    if not isinstance(items, list) or not 0 <= index < len(items):
        return None
    item = items[index]
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) and name and not LINE_BREAKS.search(name) else None


def _shown(value: object) -> str:
    """A user's value as YAML shows it, cut short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, str):  # quoted, escaped, KEY=VALUE masked (io.quoting.excerpt)
        return excerpt(value, 38)
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    kinds = {
        bool: "a boolean",
        str: "text",
        list: "a list",
        dict: "a mapping",
        int: "a number",
        float: "a number",
    }
    return kinds.get(type(value), type(value).__name__)


_TYPE_ERRORS = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "bool_type": "true or false",
}

#: Bound errors of pydantic, as a rule on the value.
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "greater than or equal to"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "less than or equal to"),
}


def _branch_kind(loc: tuple) -> str | None:
    """What a union branch in ``loc`` takes: ``"list"``, ``"dict"``, ``"scalar"`` or
    ``None`` (no branch in ``loc``). A branch with a validator is named
    ``function-after[<validator>, <type>]``: its type decides."""
    for part in loc:
        if _is_branch(part):
            text = str(part)
            if text.startswith("function-"):
                text = text.rsplit(", ", 1)[-1]
            if text.startswith("list["):
                return "list"
            return "dict" if text.startswith("dict[") else "scalar"
    return None


def _union_prefix(loc: tuple) -> tuple:
    """``loc`` up to its first union branch (the field the union is for)."""
    for i, part in enumerate(loc):
        if _is_branch(part):
            return tuple(loc[:i])
    return tuple(loc)


def _at(data: object, loc: tuple) -> object:
    """The raw value at a (branch-free) location, or ``None``."""
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _pick(errors: list, data: object) -> dict:
    """The error to report: a misspelt field first (the "field required" pydantic adds for
    the intended spelling follows from it); else, when the first error is one branch of a
    union (``acceptance``: a number or a list), the branch that takes what the user gave
    (a list's element out of range, not "a list is not a number"), the deepest first."""
    unknown = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if unknown is not None:
        return unknown
    first = errors[0]
    if _branch_kind(first["loc"]) is None:
        return first
    prefix = _union_prefix(first["loc"])
    given = _at(data, tuple(p for p in prefix if not _is_branch(p)))
    want = "list" if isinstance(given, list) else "dict" if isinstance(given, dict) else "scalar"
    same = [e for e in errors if _union_prefix(e["loc"]) == prefix]
    matching = [e for e in same if _branch_kind(e["loc"]) == want] or same
    depth = _list_depth(given)
    nested = [e for e in matching if _branch_depth(e["loc"]) == depth] or matching
    return max(nested, key=lambda e: len(e["loc"]))


def _list_depth(value: object) -> int:
    """How deep lists nest in ``value``, by first elements (``[[0.1, 0.2]]``: 2)."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


def _branch_depth(loc: tuple) -> int:
    """How deep the lists of the union branch in ``loc`` nest (``list[list[float]]``: 2)."""
    for part in loc:
        if _is_branch(part):
            return str(part).count("list[")
    return 0


def _element_note(loc: tuple, data: object) -> str:
    """`` (value 2 of the list)`` when ``loc`` ends at an element of a list the user
    wrote (not a mapping's key, not a drafter of ``drafters``), else ``""``."""
    parts = [p for p in loc if not _is_branch(p)]
    if len(parts) < 2 or not isinstance(parts[-1], int):
        return ""
    if len(parts) == 2 and parts[0] in ("drafters", "workloads"):
        return ""
    if not isinstance(_at(data, tuple(parts[:-1])), list):
        return ""
    return f" (value {parts[-1] + 1:,} of the list)"


def validation_error_to_input_error(err: ValidationError, data: object = None) -> InputError:
    """One error of a pydantic ``ValidationError`` as one ``InputError``.

    An unknown (misspelt) field is reported before anything else; a value that one
    branch of a union takes (``acceptance`` is a number or a list of numbers) is judged
    by that branch, so a list's element out of range is named with its bound. ``data``,
    the raw mapping validated, lets drafters and workloads be named by their names.
    """
    errors = err.errors(include_url=False)
    first = _pick(errors, data)
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, FieldError):
        return InputError(inner.field, inner.message)
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    field = _loc_to_field(first["loc"], data)
    got = first.get("input")
    kind = first["type"]
    note = _element_note(first["loc"], data)
    if "[key]" in first["loc"]:
        field = field.removesuffix(".[key]")
        want = _TYPE_ERRORS.get(kind.replace("_parsing", "_type"), "valid")
        msg = f"the key {_shown(got)} is not {want}"
    elif kind == "extra_forbidden":
        msg = "unknown field (check its spelling against `allocator schema`)"
    elif isinstance(got, float) and got != got:
        msg = "nan is not a number a problem file may hold"
    elif kind == "finite_number":
        msg = f"{_shown(got)} is not a finite number{note}"
    elif kind in _BOUNDS:
        key, rule = _BOUNDS[kind]
        msg = f"{_shown(got)} must be {rule} {_shown(ctx.get(key))}{note}"
    elif kind == "too_long" and isinstance(got, list | dict):
        most = ctx.get("max_length")
        msg = f"holds {len(got):,} values; at most {most:,}" if most else msg
        if isinstance(got, list) and field.endswith(("acceptance", "acceptance_interval")):
            msg += f" (k is at most {MAX_K:,}, so a later position is never used)"
    elif kind == "too_short" and isinstance(got, list | dict):
        least = ctx.get("min_length", 1)
        n = len(got)
        msg = "is empty" if not n else f"holds {n:,} value{'s' if n != 1 else ''}"
        msg += f"; give at least {least:,}"
    elif kind.endswith("_type"):
        want = _TYPE_ERRORS.get(kind, kind.removesuffix("_type"))
        if _branch_kind(first["loc"]) == "scalar" and isinstance(got, list | dict):
            want += " or a list of numbers" if want == "a number" else ""
        msg = (
            f"has no value (null); give {want}"
            if got is None
            else f"{_shown(got)} is {_kind(got)}, not {want}{note}"
        )
    elif kind == "value_error" and note:
        msg += note
    return InputError(field, msg[0].lower() + msg[1:] if msg else "invalid")


__all__ = ["FieldError", "number_text", "validation_error_to_input_error"]
