"""Reading a problem for the API's commands: a file, its data, or a built problem."""

from __future__ import annotations

from pathlib import Path

from ..analysis.limits import header_notes
from ..core.problem import Problem
from ..io.build import problem_from_file, problem_from_spec
from ..io.spec import parse_problem, read_problem_data


def load(
    problem: str | Path | dict,
    *,
    check_search: bool = True,
    base_dir: str | Path | None = None,
) -> Problem:
    """Read, validate and build a problem file, or build the problem from its data (a
    dict as :func:`load_data` returns, perhaps edited). ``check_search=False``: do not
    require the search section to be satisfiable, as for evaluating one configuration.
    ``base_dir``: for data, the folder its relative paths (an outcome log) are read from
    (default: the working directory)."""
    if isinstance(problem, dict):
        return problem_from_spec(parse_problem(problem), base_dir, check_search=check_search)
    return problem_from_file(problem, check_search=check_search)


def load_data(path: str | Path) -> dict:
    """The problem file at ``path`` as plain data (a dict, as written), validated: for
    callers that edit a problem and build it again with :func:`load`."""
    data = read_problem_data(path)
    parse_problem(data)
    return data


def file_notes(problem: object) -> list[str]:
    """What the header of a problem file given by path says its numbers assume."""
    return header_notes(problem) if isinstance(problem, str | Path) else []


def as_problem(problem: Problem | str | Path | dict) -> Problem:
    return problem if isinstance(problem, Problem) else load(problem)


__all__ = ["as_problem", "file_notes", "load", "load_data"]
