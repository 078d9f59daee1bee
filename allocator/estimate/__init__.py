"""From measurements to problem files: one module per input format, one reader each.

Every input format is a :class:`~.base.Reader` (the contract: :mod:`.base`) registered
in :data:`READERS` under its ``--format`` name; :func:`estimate` looks the format up there.

- :mod:`.outcomes`: joint outcome logs (CSV or JSONL), one 0/1 column per drafter.
- :mod:`.vllm_metrics`: vLLM's Prometheus metrics (``/metrics`` text).
- :mod:`.vllm_log`: vLLM's ``SpecDecoding metrics:`` log lines.
- :mod:`.vllm_requests`: vLLM's per-request speculative metrics
  (``--per-request-spec-decode-metrics``, JSONL of responses).
- :mod:`.sglang_requests`: SGLang responses (JSONL) with per-request acceptance histograms.
- :mod:`.sglang_log`: SGLang's ``accept len`` decode log lines (one scalar acceptance).
- :mod:`.bench_files`: the engines' own benchmark result files (``vllm bench serve
  --save-result``, SGLang's ``bench_serving``), for calibration (:mod:`allocator.calibration`).

Each yields an :class:`~.counts.Estimate` (per-drafter per-position counts with
95% intervals); :mod:`.problem_file` writes it as a problem file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.methods import METHODS
from ..exceptions import ParameterError
from ..model.acceptance import CONVENTIONS
from ..validate import whole
from .base import FORMAT_SPECIFIC, Reader, ReadOptions
from .counts import (
    LEVEL,
    MIN_TRIALS,
    DrafterCounts,
    Estimate,
    RankCounts,
    bounded_positions,
    jeffreys_interval,
    position_ranges,
)
from .outcomes import OutcomesReader
from .problem_file import build_problem, check_problem, parse_assignments, read_costs, render
from .sglang_log import SGLangLogReader
from .sglang_requests import SGLangRequestsReader
from .vllm_log import VLLMLogReader
from .vllm_metrics import VLLMMetricsReader
from .vllm_requests import VLLMRequestsReader

#: Every reader by its ``--format`` name, in the order help and messages list them.
READERS: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    """Add ``reader`` to :data:`READERS` under its ``name``; refuses (``ValueError``) a
    name another reader holds and options outside :data:`~.base.FORMAT_SPECIFIC`."""
    name = reader.name
    if name in READERS and READERS[name] is not reader:
        raise ValueError(f"a reader named {name!r} is already registered")
    unknown = [o for o in reader.options if o not in FORMAT_SPECIFIC]
    if unknown:
        raise ValueError(f"reader {name!r}: unknown option(s) {', '.join(unknown)}")
    READERS[name] = reader
    return reader


for _reader in (
    OutcomesReader(),
    VLLMMetricsReader(),
    VLLMLogReader(),
    VLLMRequestsReader(),
    SGLangRequestsReader(),
    SGLangLogReader(),
):
    register(_reader)
del _reader


def get_reader(fmt: str) -> Reader:
    """The reader of format ``fmt``; a :class:`ParameterError` naming ``format`` otherwise."""
    if fmt not in READERS:
        raise ParameterError("format", f"{fmt!r} is not one of {', '.join(READERS)}")
    return READERS[fmt]


def format_options() -> dict[str, tuple[str, ...]]:
    """Option name -> the formats it applies to, for the options that only some formats
    take (:data:`~.base.FORMAT_SPECIFIC`), from the readers registered."""
    return {o: tuple(n for n, r in READERS.items() if o in r.options) for o in FORMAT_SPECIFIC}


#: The ``--format`` names of the readers registered with the package.
FORMATS = tuple(READERS)
#: Formats whose input names its drafters (outcome columns, vLLM's ``model_name``); the
#: others read one drafter, named ``draft`` unless ``drafter`` says otherwise.
NAMED_FORMATS = tuple(n for n, r in READERS.items() if r.names_drafters)
#: Most positions an estimate keeps: past them the last kept value repeats (an input
#: counting more, e.g. an SGLang histogram of 100,001 entries, is cut there with a note,
#: and ``search.k.max`` with it), so the problem file stays small.
MAX_POSITIONS = 1024


def estimate(
    path: str | Path,
    fmt: str,
    out_path: str | Path,
    *,
    errors: str = "empirical",
    min_trials: int = MIN_TRIALS,
    drafter_name: str | None = None,
    convention: str = "bonus",
    k: int | None = None,
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
    rename: Mapping[str, str] | None = None,
) -> Estimate:
    """Read ``path`` in format ``fmt`` (a reader of :data:`READERS`) into an :class:`Estimate`.

    ``k``: the draft length, for the SGLang formats (their inputs may not say it); for an
    SGLang tree, its depth. ``topk``, ``adaptive``, ``adaptive_steps``: ``sglang-requests``
    only, the run's ``--speculative-eagle-topk``, whether it ran
    ``--speculative-adaptive`` (``None``: tell from the responses) and its candidate steps.
    ``drafter_name``: the drafter's name (formats of one drafter; for
    :data:`NAMED_FORMATS`, the new name of the input's one drafter); ``rename``: old name
    → new name, any format (:func:`rename_drafters`). At most :data:`MAX_POSITIONS`
    positions are kept; the notes say which positions the counts only bound.
    """
    whole(min_trials, "min_count", lo=1)
    if drafter_name is not None and rename:
        raise ParameterError("drafter", "names the one drafter; give --drafter or --rename")
    reader = get_reader(fmt)
    name = "draft" if drafter_name is None or reader.names_drafters else drafter_name
    options = ReadOptions(
        out=out_path,
        drafter=name,
        min_trials=min_trials,
        errors=errors,
        convention=convention,
        k=k,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=adaptive_steps,
    )
    est = reader.read(Path(path), options)
    if reader.names_drafters and drafter_name is not None:
        if len(est.drafters) != 1:
            raise ParameterError(
                "drafter",
                f"the input names {len(est.drafters)} drafters "
                f"({', '.join(d.name for d in est.drafters)}): rename them with "
                "--rename OLD=NEW",
            )
        rename = {est.drafters[0].name: drafter_name}
    if rename:
        rename_drafters(est, rename)
    cap_positions(est)
    est.notes.extend(bounded_notes(est, fmt))
    return est


def rename_drafters(est: Estimate, rename: Mapping[str, str]) -> None:
    """Rename drafters in place (their counts, workloads and factor loadings): ``rename``
    maps a name the input gave to the one to write. Refuses (``ParameterError`` naming
    ``rename``) an unknown name, an empty one, two drafters given one name, and any rename
    under the empirical error model, whose log is read by drafter name."""
    known = [d.name for d in est.drafters]
    for old, new in rename.items():
        if old not in known:
            raise ParameterError(
                "rename", f"unknown drafter {old!r} (the input names {', '.join(known)})"
            )
        if not str(new).strip():
            raise ParameterError("rename", f"{old}: the new name is empty")
    final = [rename.get(n, n) for n in known]
    if len(set(final)) != len(final):
        twice = next(n for n in final if final.count(n) > 1)
        raise ParameterError("rename", f"two drafters would be named {twice!r}")
    if (
        est.errors
        and est.errors.get("model") == "empirical"
        and any(rename.get(n, n) != n for n in known)
    ):
        raise ParameterError(
            "rename",
            "the empirical error model reads the log's columns by drafter name: rename the "
            "columns in the log, or choose --errors factor or independent",
        )
    for d in est.drafters:
        d.name = rename.get(d.name, d.name)
    for w in est.workloads:
        for d in w.drafters:
            d.name = rename.get(d.name, d.name)
    if est.errors and isinstance(est.errors.get("loadings"), dict):
        est.errors["loadings"] = {rename.get(n, n): v for n, v in est.errors["loadings"].items()}
    moved = [f"{o} -> {n}" for o, n in rename.items() if o != n]
    if moved:
        est.notes.append(f"drafters renamed: {', '.join(moved)}")


def _cut(c: DrafterCounts, j: int) -> DrafterCounts:
    if c.positions <= j:
        return c
    if c.summary is not None:
        return c
    ranks = c.ranks
    if ranks is not None and ranks.trials.shape[0] > j:
        ranks = RankCounts(ranks.successes[:j], ranks.trials[:j])
    low = None if c.trials_low is None else c.trials_low[:j]
    return DrafterCounts(c.name, c.successes[:j], c.trials[:j], c.model, low, ranks=ranks)


def cap_positions(est: Estimate) -> None:
    """Keep at most :data:`MAX_POSITIONS` positions of every drafter (and workload), and
    ``k_max`` with them, with a note."""
    longest = max([d.positions for d in est.drafters] + [0])
    if longest <= MAX_POSITIONS:
        return
    est.drafters = [_cut(d, MAX_POSITIONS) for d in est.drafters]
    for w in est.workloads:
        w.drafters = [_cut(d, MAX_POSITIONS) for d in w.drafters]
    if est.k_max is not None:
        est.k_max = min(est.k_max, MAX_POSITIONS)
    est.notes.append(
        f"the input counts {longest:,} positions; the estimate keeps the first "
        f"{MAX_POSITIONS:,} (past them the last value repeats) and search.k.max at most "
        f"{MAX_POSITIONS:,}"
    )


def bounded_notes(est: Estimate, fmt: str) -> list[str]:
    """Per drafter, the positions whose acceptance the counts only bound (drafts shorter
    than ``k``, adaptive steps), and what would count them exactly."""
    notes = []
    for d in est.drafters:
        positions = bounded_positions(d)
        if not positions:
            continue
        exact = READERS[fmt].counts_exactly if fmt in READERS else ""
        notes.append(
            f"positions {position_ranges(positions)} of {d.name} are only bounded (the "
            "rounds reaching them are known to a range): the value written is the middle of "
            f"the range, and a point estimate there is no measurement{exact}"
        )
    return notes


def problem_text(
    est: Estimate,
    name: str,
    costs: dict,
    models: dict[str, str],
    methods: dict[str, str] | None = None,
) -> tuple[str, dict, list[str]]:
    """The problem file's text, its data, and the drafters still lacking a cost."""
    data, header, missing = build_problem(est, name, costs, models, methods)
    check_problem(data)
    return render(data, header), data, missing


#: Options that apply to some formats only: option name -> the formats it applies to
#: (``drafter`` and ``rename`` apply to every format), as registered with the package
#: (:func:`format_options` reads the registry as it is).
FORMAT_OPTIONS = format_options()


@dataclass(frozen=True)
class EstimateOptions:
    """The options of one estimate, checked, with their defaults filled in."""

    fmt: str
    errors: str
    convention: str
    drafter: str | None
    k: int | None


def check_options(
    fmt: str,
    out: str | Path,
    *,
    errors: str | None = None,
    convention: str | None = None,
    drafter: str | None = None,
    k: int | None = None,
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
) -> EstimateOptions:
    """Refuse a format no reader reads (:data:`READERS`), an option given for a format
    whose reader does not take it (:func:`format_options`), an unknown convention, an
    empty drafter name and an output that is not ``.yaml``/``.yml``; fill in the defaults
    (``empirical``, ``bonus``). Raises :class:`~allocator.exceptions.ParameterError`
    naming the parameter."""
    get_reader(fmt)
    given = {
        "errors": errors,
        "convention": convention,
        "k": k,
        "topk": topk,
        "adaptive": adaptive,
        "adaptive_steps": adaptive_steps,
    }
    for option, applies in format_options().items():
        if given[option] is not None and fmt not in applies:
            raise ParameterError(option, f"applies to --format {' or '.join(applies)} only")
    convention = convention or "bonus"
    if convention not in CONVENTIONS:
        raise ParameterError("convention", f"{convention!r} is not one of {', '.join(CONVENTIONS)}")
    if drafter is not None and not drafter.strip():
        raise ParameterError("drafter", "is empty: give the drafter's name")
    if Path(out).suffix.lower() not in (".yaml", ".yml"):
        raise ParameterError("out", "write the problem as .yaml or .yml")
    return EstimateOptions(fmt, errors or "empirical", convention, drafter, k)


def _assignments(items: Mapping[str, object] | Sequence[str] | None, option: str) -> dict:
    """``NAME=VALUE`` strings (as the command line gives them) or a mapping, as a dict of
    strings."""
    if isinstance(items, Mapping):
        return {str(n): str(v) for n, v in items.items()}
    return parse_assignments(list(items or []), option)


@dataclass
class EstimateReport:
    """``allocator estimate``: what was read and the problem file made of it.

    estimate : the :class:`Estimate`; data : the problem file as plain data; text : the
    file to write (YAML, with comments); missing : drafters whose ``unit_cost`` is still
    to be filled in; fmt, out : the input format and the output path.
    """

    estimate: Estimate
    data: dict
    text: str
    missing: list[str]
    fmt: str
    out: str

    def to_dict(self) -> dict:
        """The ``estimate --json`` document."""
        data, est = self.data, self.estimate
        return {
            "problem": data["name"],
            "out": self.out,
            "format": self.fmt,
            "drafters": [
                {
                    "name": d["name"],
                    "acceptance": d["acceptance"],
                    "acceptance_interval": d["acceptance_interval"],
                    "positions": c.positions,
                    "trials": c.trials.tolist(),
                    # drafts shorter than k: the rounds reaching each position lie in
                    # [trials_low, trials] (null when known exactly)
                    "trials_low": None if c.trials_low is None else c.trials_low.tolist(),
                    # the positions whose acceptance the counts only bound
                    "bounded_positions": bounded_positions(c),
                    "successes": c.successes.tolist(),
                    **(
                        {}
                        if c.ranks is None
                        else {
                            "acceptance_by_rank": d["acceptance_by_rank"],
                            "acceptance_by_rank_interval": d["acceptance_by_rank_interval"],
                            "rank_trials": c.ranks.trials.tolist(),
                            "rank_successes": c.ranks.successes.tolist(),
                        }
                    ),
                }
                for d, c in zip(data["drafters"], est.drafters, strict=True)
            ],
            "errors": data.get("errors"),
            "workloads": data.get("workloads", []),
            "missing_costs": self.missing,
            "notes": list(est.notes),
            "report": est.report,
        }


def estimate_problem(
    path: str | Path,
    out: str | Path,
    fmt: str = "outcomes",
    *,
    unit_cost: Mapping[str, float] | Sequence[str] | None = None,
    costs: str | Path | None = None,
    models: Mapping[str, str] | Sequence[str] | None = None,
    methods: Mapping[str, str] | Sequence[str] | None = None,
    errors: str | None = None,
    name: str | None = None,
    drafter: str | None = None,
    k: int | None = None,
    min_count: int = MIN_TRIALS,
    convention: str | None = None,
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
    rename: Mapping[str, str] | Sequence[str] | None = None,
) -> EstimateReport:
    """Read ``path`` in format ``fmt`` and make the problem file for ``out`` (not written).

    Costs (in no log) come from the YAML file ``costs`` and ``unit_cost`` (which wins);
    ``models`` and ``methods`` give drafters' serving model and method; each a mapping
    or ``NAME=VALUE`` strings (``models``, ``methods`` and ``unit_cost`` name the drafters
    as written, after ``drafter``/``rename``). ``name``: the problem's (default: the stem
    of ``out``). ``rename``: ``OLD=NEW`` strings or a mapping. The other options are
    :func:`check_options`'s and :func:`estimate`'s.
    """
    opts = check_options(
        fmt,
        out,
        errors=errors,
        convention=convention,
        drafter=drafter,
        k=k,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=adaptive_steps,
    )
    renames = _assignments(rename, "rename")
    unit = (
        [f"{n}={v}" for n, v in unit_cost.items()]
        if isinstance(unit_cost, Mapping)
        else list(unit_cost or [])
    )
    cost_data = read_costs(costs, unit)
    model_map = _assignments(models, "model")
    method_map = _assignments(methods, "method")
    for n, m in method_map.items():
        if m not in METHODS:
            raise ParameterError("method", f"{n}: {m!r} is not one of {', '.join(METHODS)}")
    est = estimate(
        path,
        opts.fmt,
        out,
        errors=opts.errors,
        min_trials=min_count,
        drafter_name=opts.drafter,
        convention=opts.convention,
        k=opts.k,
        topk=topk,
        adaptive=adaptive,
        adaptive_steps=adaptive_steps,
        rename=renames,
    )
    text, data, missing = problem_text(
        est, name or Path(out).stem, cost_data, model_map, method_map
    )
    return EstimateReport(est, data, text, missing, opts.fmt, str(out))


__all__ = [
    "FORMATS",
    "FORMAT_OPTIONS",
    "LEVEL",
    "MAX_POSITIONS",
    "MIN_TRIALS",
    "NAMED_FORMATS",
    "READERS",
    "DrafterCounts",
    "Estimate",
    "EstimateOptions",
    "EstimateReport",
    "ReadOptions",
    "Reader",
    "bounded_notes",
    "cap_positions",
    "check_options",
    "estimate",
    "estimate_problem",
    "format_options",
    "get_reader",
    "jeffreys_interval",
    "problem_text",
    "read_costs",
    "register",
    "rename_drafters",
]
